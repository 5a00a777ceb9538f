package up

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki holds the paths of the credentials `svcnet up` makes once per data
// dir and reuses on every start, so kubeconfigs handed out stay valid.
type pki struct {
	dir                     string
	caCert, caKey           string
	servingCert, servingKey string
	saKey, saPub            string
	tokenFile               string
	adminToken              string
}

func newPKI(dataDir string) *pki {
	dir := filepath.Join(dataDir, "pki")
	return &pki{
		dir:         dir,
		caCert:      filepath.Join(dir, "ca.crt"),
		caKey:       filepath.Join(dir, "ca.key"),
		servingCert: filepath.Join(dir, "apiserver.crt"),
		servingKey:  filepath.Join(dir, "apiserver.key"),
		saKey:       filepath.Join(dir, "sa.key"),
		saPub:       filepath.Join(dir, "sa.pub"),
		tokenFile:   filepath.Join(dir, "tokens.csv"),
	}
}

// ensure creates whatever is missing: a CA, the apiserver's serving
// certificate (for loopback and the first Service IP), the service-account
// signing key and a static admin token.
func (p *pki) ensure(serviceIP net.IP) error {
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return err
	}
	caKey, caCert, err := p.ensureCA()
	if err != nil {
		return fmt.Errorf("certificate authority: %w", err)
	}
	if !exists(p.servingCert) || !exists(p.servingKey) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			SerialNumber: serial(),
			Subject:      pkix.Name{CommonName: "kube-apiserver"},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().AddDate(10, 0, 0),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			DNSNames:     []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
			IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, serviceIP},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			return err
		}
		if err := writeCert(p.servingCert, der); err != nil {
			return err
		}
		if err := writeKey(p.servingKey, key); err != nil {
			return err
		}
	}
	if !exists(p.saKey) || !exists(p.saPub) {
		key, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			return err
		}
		if err := writeKey(p.saKey, key); err != nil {
			return err
		}
		pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
		if err != nil {
			return err
		}
		if err := os.WriteFile(p.saPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600); err != nil {
			return err
		}
	}
	if !exists(p.tokenFile) {
		b := make([]byte, 24)
		if _, err := rand.Read(b); err != nil {
			return err
		}
		line := fmt.Sprintf("%s,svcnet-admin,svcnet-admin,system:masters\n", hex.EncodeToString(b))
		if err := os.WriteFile(p.tokenFile, []byte(line), 0o600); err != nil {
			return err
		}
	}
	b, err := os.ReadFile(p.tokenFile)
	if err != nil {
		return err
	}
	for i, c := range b {
		if c == ',' {
			p.adminToken = string(b[:i])
			break
		}
	}
	if p.adminToken == "" {
		return fmt.Errorf("%s holds no token; delete it to have a new one made", p.tokenFile)
	}
	return nil
}

func (p *pki) ensureCA() (*ecdsa.PrivateKey, *x509.Certificate, error) {
	if exists(p.caCert) && exists(p.caKey) {
		certPEM, err := os.ReadFile(p.caCert)
		if err != nil {
			return nil, nil, err
		}
		keyPEM, err := os.ReadFile(p.caKey)
		if err != nil {
			return nil, nil, err
		}
		cb, _ := pem.Decode(certPEM)
		kb, _ := pem.Decode(keyPEM)
		if cb == nil || kb == nil {
			return nil, nil, errors.New("unreadable CA files; delete the pki folder to have new ones made")
		}
		cert, err := x509.ParseCertificate(cb.Bytes)
		if err != nil {
			return nil, nil, err
		}
		key, err := x509.ParseECPrivateKey(kb.Bytes)
		if err != nil {
			return nil, nil, err
		}
		return key, cert, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "svcnet-up-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	if err := writeCert(p.caCert, der); err != nil {
		return nil, nil, err
	}
	if err := writeKey(p.caKey, key); err != nil {
		return nil, nil, err
	}
	return key, cert, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}

func writeCert(path string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

func writeKey(path string, key any) error {
	var block *pem.Block
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		der, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			return err
		}
		block = &pem.Block{Type: "EC PRIVATE KEY", Bytes: der}
	case *rsa.PrivateKey:
		block = &pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}
	default:
		return fmt.Errorf("unsupported key type %T", key)
	}
	return os.WriteFile(path, pem.EncodeToMemory(block), 0o600)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
