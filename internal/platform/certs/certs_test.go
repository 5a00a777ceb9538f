// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package certs

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"testing"
	"time"
)

func parse(t *testing.T, b []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(b)
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestEnsureCreatesKeepsAndRenews(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	hosts := []string{"svcnet-webhook-service.svcnet-system.svc", "127.0.0.1"}
	v := Validity{CA: 300 * 24 * time.Hour, Serving: 30 * 24 * time.Hour}

	first, changed, err := Ensure(Bundle{}, hosts, now, v)
	if err != nil || !changed {
		t.Fatalf("first Ensure: changed %v, err %v", changed, err)
	}
	cert := parse(t, first.TLSCert)
	if err := cert.VerifyHostname("127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(first.CACert)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: hosts[0], CurrentTime: now}); err != nil {
		t.Fatalf("serving certificate does not verify against the CA: %v", err)
	}

	same, changed, _ := Ensure(first, hosts, now.Add(10*24*time.Hour), v)
	if changed || !same.Equal(first) {
		t.Fatal("a valid bundle was changed")
	}

	// Less than a third of its life left: the serving certificate is
	// renewed, the CA (still young) kept, so the caBundle does not change.
	renewed, changed, _ := Ensure(first, hosts, now.Add(21*24*time.Hour), v)
	if !changed || bytes.Equal(renewed.TLSCert, first.TLSCert) || !bytes.Equal(renewed.CACert, first.CACert) {
		t.Fatal("serving certificate near expiry not renewed under the same CA")
	}

	moved, changed, _ := Ensure(first, append(hosts, "extra.example"), now, v)
	if !changed || parse(t, moved.TLSCert).VerifyHostname("extra.example") != nil {
		t.Fatal("a new host name did not renew the serving certificate")
	}

	aged, changed, _ := Ensure(first, hosts, now.Add(250*24*time.Hour), v)
	if !changed || bytes.Equal(aged.CACert, first.CACert) {
		t.Fatal("an old CA was not replaced")
	}
}
