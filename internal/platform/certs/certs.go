// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package certs makes svcnet's certificates: NewCA and NewServing for any
// caller (`svcnet up`'s API server credentials among them), and, for the
// admission webhook, its serving certificate without cert-manager: a CA
// and a serving certificate kept in a Secret (shared by every manager
// replica), written to the webhook server's cert dir (controller-runtime
// reloads it on change), the CA patched into the
// MutatingWebhookConfiguration's caBundle, and both renewed before they
// expire.
package certs

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"time"
)

// Bundle is a CA and a serving certificate signed by it, PEM encoded.
type Bundle struct {
	CACert, CAKey   []byte
	TLSCert, TLSKey []byte
}

// Secret data keys (cert-manager's names).
const (
	KeyCACert  = "ca.crt"
	KeyCAKey   = "ca.key"
	KeyTLSCert = "tls.crt"
	KeyTLSKey  = "tls.key"
)

// FromData reads a bundle from a Secret's data.
func FromData(data map[string][]byte) Bundle {
	return Bundle{CACert: data[KeyCACert], CAKey: data[KeyCAKey], TLSCert: data[KeyTLSCert], TLSKey: data[KeyTLSKey]}
}

// Data is the bundle as a Secret's data.
func (b Bundle) Data() map[string][]byte {
	return map[string][]byte{KeyCACert: b.CACert, KeyCAKey: b.CAKey, KeyTLSCert: b.TLSCert, KeyTLSKey: b.TLSKey}
}

// Validity says how long certificates live; each is renewed once less than
// a third of its life is left.
type Validity struct {
	CA, Serving time.Duration
}

// DefaultValidity is a CA for ten years and serving certificates for one.
var DefaultValidity = Validity{CA: 10 * 365 * 24 * time.Hour, Serving: 365 * 24 * time.Hour}

// Ensure returns b if it is valid at now for hosts, or a renewed bundle and
// true: the CA is kept while it has more than a third of its life left.
func Ensure(b Bundle, hosts []string, now time.Time, v Validity) (Bundle, bool, error) {
	caCert, caKey, caErr := parsePair(b.CACert, b.CAKey)
	if caErr != nil || expiring(caCert, now, v.CA) {
		var err error
		caCert, caKey, b.CACert, b.CAKey, err = newCA(fmt.Sprintf("svcnet-webhook-ca@%d", now.Unix()), now, v.CA)
		if err != nil {
			return Bundle{}, false, err
		}
		b.TLSCert, b.TLSKey = nil, nil
	}
	if cert, _, err := parsePair(b.TLSCert, b.TLSKey); err == nil && !expiring(cert, now, v.Serving) &&
		cert.CheckSignatureFrom(caCert) == nil && sameHosts(cert, hosts) {
		return b, caErr != nil, nil
	}
	var err error
	b.TLSCert, b.TLSKey, err = newServing(caCert, caKey, hosts[0], hosts, now, v.Serving)
	return b, true, err
}

func expiring(c *x509.Certificate, now time.Time, life time.Duration) bool {
	return now.Before(c.NotBefore) || c.NotAfter.Sub(now) < life/3
}

func sameHosts(c *x509.Certificate, hosts []string) bool {
	var have []string
	have = append(have, c.DNSNames...)
	for _, ip := range c.IPAddresses {
		have = append(have, ip.String())
	}
	want := slices.Clone(hosts)
	slices.Sort(have)
	slices.Sort(want)
	return slices.Equal(slices.Compact(have), slices.Compact(want))
}

func parsePair(certPEM, keyPEM []byte) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, errors.New("missing certificate or key")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, nil, errors.New("key does not match certificate")
	}
	return cert, key, nil
}

// NewCA makes a self-signed CA valid from now for life, PEM encoded.
func NewCA(commonName string, now time.Time, life time.Duration) (certPEM, keyPEM []byte, err error) {
	_, _, certPEM, keyPEM, err = newCA(commonName, now, life)
	return certPEM, keyPEM, err
}

// NewServing makes a serving certificate for hosts (DNS names and IP
// addresses) signed by the PEM encoded CA, valid from now for life.
func NewServing(caCertPEM, caKeyPEM []byte, commonName string, hosts []string, now time.Time, life time.Duration) (certPEM, keyPEM []byte, err error) {
	ca, caKey, err := parsePair(caCertPEM, caKeyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the CA: %w", err)
	}
	return newServing(ca, caKey, commonName, hosts, now, life)
}

// NewClient makes a client certificate for the user commonName in the
// groups orgs (as Kubernetes reads them: CN and O) signed by the PEM
// encoded CA, valid from now for life.
func NewClient(caCertPEM, caKeyPEM []byte, commonName string, orgs []string, now time.Time, life time.Duration) (certPEM, keyPEM []byte, err error) {
	ca, caKey, err := parsePair(caCertPEM, caKeyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the CA: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: commonName, Organization: orgs},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(life),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err = encodeKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, err
}

func newCA(commonName string, now time.Time, life time.Duration) (*x509.Certificate, *ecdsa.PrivateKey, []byte, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(life),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	cert, _ := x509.ParseCertificate(der)
	keyPEM, err := encodeKey(key)
	return cert, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, err
}

func newServing(ca *x509.Certificate, caKey *ecdsa.PrivateKey, commonName string, hosts []string, now time.Time, life time.Duration) ([]byte, []byte, error) {
	if len(hosts) == 0 {
		return nil, nil, errors.New("a serving certificate needs at least one host name or IP")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: commonName},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(life),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err := encodeKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, err
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

// Equal reports whether two bundles hold the same bytes.
func (b Bundle) Equal(o Bundle) bool {
	return bytes.Equal(b.CACert, o.CACert) && bytes.Equal(b.CAKey, o.CAKey) &&
		bytes.Equal(b.TLSCert, o.TLSCert) && bytes.Equal(b.TLSKey, o.TLSKey)
}
