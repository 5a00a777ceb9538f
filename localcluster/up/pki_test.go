// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package up

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"testing"
)

// TestPKI checks that svcnet up's credentials are made once, verify as
// the API server's for loopback and the first Service IP, and are reused
// on the next start.
func TestPKI(t *testing.T) {
	p := newPKI(t.TempDir())
	serviceIP := net.ParseIP("10.96.0.1")
	if err := p.ensure(serviceIP); err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	caPEM := read(t, p.caCert)
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("the CA file holds no certificate")
	}
	block, _ := pem.Decode(read(t, p.servingCert))
	if block == nil {
		t.Fatal("the serving certificate file holds no PEM block")
	}
	serving, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"127.0.0.1", "10.96.0.1", "kubernetes.default.svc", "localhost"} {
		if _, err := serving.Verify(x509.VerifyOptions{Roots: roots, DNSName: host}); err != nil {
			t.Errorf("the serving certificate does not verify for %s: %v", host, err)
		}
	}
	if p.adminToken == "" {
		t.Fatal("no admin token")
	}

	again := newPKI(filepath.Dir(p.dir))
	if err := again.ensure(serviceIP); err != nil {
		t.Fatal(err)
	}
	if again.adminToken != p.adminToken || string(read(t, again.caCert)) != string(caPEM) {
		t.Error("a second start made new credentials instead of reusing them")
	}
}

func read(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
