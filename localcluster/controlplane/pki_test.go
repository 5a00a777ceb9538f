// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package controlplane

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
)

// TestPKI checks that svcnet up's credentials are made once, verify as
// the API server's for loopback and the first Service IP, and are reused
// on the next start.
func TestPKI(t *testing.T) {
	p := NewPKI(t.TempDir())
	serviceIP := net.ParseIP("10.96.0.1")
	fabricIP := netip.MustParseAddr("172.30.0.1")
	if err := p.Ensure(serviceIP, fabricIP); err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	caPEM := read(t, p.CACert)
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("the CA file holds no certificate")
	}
	block, _ := pem.Decode(read(t, p.ServingCert))
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
	if p.AdminToken == "" {
		t.Fatal("no admin token")
	}

	again := NewPKI(filepath.Dir(p.Dir))
	if err := again.Ensure(serviceIP, fabricIP); err != nil {
		t.Fatal(err)
	}
	if again.AdminToken != p.AdminToken || string(read(t, again.CACert)) != string(caPEM) {
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
