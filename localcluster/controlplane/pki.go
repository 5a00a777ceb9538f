// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package controlplane

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/util/keyutil"

	"github.com/svcnet-io/svcnet/internal/platform/certs"
)

// PKI holds the paths of the credentials `svcnet up` makes once per data
// dir and reuses on every start, so kubeconfigs handed out stay valid.
type PKI struct {
	// Dir is the folder of the files below.
	Dir string
	// CACert and CAKey are the certificate authority's.
	CACert, CAKey string
	// ServingCert and ServingKey are the API server's serving credentials.
	ServingCert, ServingKey string
	// KubeletClientCert and Key are the API server's credentials for the
	// nodes' kubelet API (--kubelet-client-certificate).
	KubeletClientCert, KubeletClientKey string
	// SAKey and SAPub sign and verify ServiceAccount tokens.
	SAKey, SAPub string
	// TokenFile is the API server's --token-auth-file.
	TokenFile string
	// AdminToken is the system:masters user's token in TokenFile, read
	// by Ensure.
	AdminToken string
}

// NewPKI is the PKI kept in the pki folder of a data dir.
func NewPKI(dataDir string) *PKI {
	dir := filepath.Join(dataDir, "pki")
	return &PKI{
		Dir:               dir,
		CACert:            filepath.Join(dir, "ca.crt"),
		CAKey:             filepath.Join(dir, "ca.key"),
		ServingCert:       filepath.Join(dir, "apiserver.crt"),
		ServingKey:        filepath.Join(dir, "apiserver.key"),
		KubeletClientCert: filepath.Join(dir, "apiserver-kubelet-client.crt"),
		KubeletClientKey:  filepath.Join(dir, "apiserver-kubelet-client.key"),
		SAKey:             filepath.Join(dir, "sa.key"),
		SAPub:             filepath.Join(dir, "sa.pub"),
		TokenFile:         filepath.Join(dir, "tokens.csv"),
	}
}

// validity is how long `svcnet up`'s certificates live: its data dir is
// meant to be reused, not rotated.
const validity = 10 * 365 * 24 * time.Hour

// Ensure creates whatever is missing: a CA, the apiserver's serving
// certificate (for loopback, the first Service IP and the fabric addresses
// fabricIPs the simulated nodes dial), the service-account signing key and
// a static admin token.
func (p *PKI) Ensure(serviceIP net.IP, fabricIPs ...netip.Addr) error {
	if err := os.MkdirAll(p.Dir, 0o700); err != nil {
		return err
	}
	caCert, caKey, err := p.ensureCA()
	if err != nil {
		return fmt.Errorf("certificate authority: %w", err)
	}
	if err := p.ensureServing(caCert, caKey, serviceIP, fabricIPs); err != nil {
		return fmt.Errorf("serving certificate: %w", err)
	}
	if err := p.ensureKubeletClient(caCert, caKey); err != nil {
		return fmt.Errorf("kubelet client certificate: %w", err)
	}
	if err := p.ensureServiceAccountKey(); err != nil {
		return fmt.Errorf("service account key: %w", err)
	}
	return p.ensureAdminToken()
}

// ensureCA reads the CA, or makes one.
func (p *PKI) ensureCA() (certPEM, keyPEM []byte, err error) {
	if exists(p.CACert) && exists(p.CAKey) {
		if certPEM, err = os.ReadFile(p.CACert); err != nil {
			return nil, nil, err
		}
		if keyPEM, err = os.ReadFile(p.CAKey); err != nil {
			return nil, nil, err
		}
		return certPEM, keyPEM, nil
	}
	if certPEM, keyPEM, err = certs.NewCA("svcnet-up-ca", time.Now(), validity); err != nil {
		return nil, nil, err
	}
	if err := os.WriteFile(p.CACert, certPEM, 0o644); err != nil {
		return nil, nil, err
	}
	return certPEM, keyPEM, os.WriteFile(p.CAKey, keyPEM, 0o600)
}

// ensureServing keeps the API server's serving certificate, or makes one
// when there is none or it lacks one of the names clients use: the
// kubernetes Service, loopback, and the fabric address the nodes (and the
// agents of --install=manifests) dial.
func (p *PKI) ensureServing(caCert, caKey []byte, serviceIP net.IP, fabricIPs []netip.Addr) error {
	hosts := []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local",
		"127.0.0.1", "::1", serviceIP.String()}
	for _, ip := range fabricIPs {
		hosts = append(hosts, ip.String())
	}
	if exists(p.ServingCert) && exists(p.ServingKey) && coversHosts(p.ServingCert, hosts) {
		return nil
	}
	certPEM, keyPEM, err := certs.NewServing(caCert, caKey, "kube-apiserver", hosts, time.Now(), validity)
	if err != nil {
		return fmt.Errorf("%w; delete the pki folder to have new credentials made", err)
	}
	if err := os.WriteFile(p.ServingCert, certPEM, 0o644); err != nil {
		return err
	}
	return os.WriteFile(p.ServingKey, keyPEM, 0o600)
}

// kubeletClientUser is the API server's user on the kubelets, in the
// group that may do everything, as kubeadm's apiserver-kubelet-client.
const kubeletClientUser = "kube-apiserver-kubelet-client"

// ensureKubeletClient keeps, or makes, the API server's client
// certificate for the kubelets' API.
func (p *PKI) ensureKubeletClient(caCert, caKey []byte) error {
	if exists(p.KubeletClientCert) && exists(p.KubeletClientKey) {
		return nil
	}
	certPEM, keyPEM, err := certs.NewClient(caCert, caKey, kubeletClientUser, []string{"system:masters"}, time.Now(), validity)
	if err != nil {
		return err
	}
	if err := os.WriteFile(p.KubeletClientCert, certPEM, 0o644); err != nil {
		return err
	}
	return os.WriteFile(p.KubeletClientKey, keyPEM, 0o600)
}

// coversHosts tells whether the certificate at path is valid for every
// host; an unreadable one covers none.
func coversHosts(path string, hosts []string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	block, _ := pem.Decode(b)
	if block == nil {
		return false
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return false
	}
	for _, h := range hosts {
		if cert.VerifyHostname(h) != nil {
			return false
		}
	}
	return true
}

// ensureServiceAccountKey makes the key pair that signs ServiceAccount
// tokens.
func (p *PKI) ensureServiceAccountKey() error {
	if exists(p.SAKey) && exists(p.SAPub) {
		return nil
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(p.SAKey, keyPEM, 0o600); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	return os.WriteFile(p.SAPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600)
}

// ensureAdminToken makes the static token of the system:masters user in
// the API server's token file, and reads it back.
func (p *PKI) ensureAdminToken() error {
	if !exists(p.TokenFile) {
		b := make([]byte, 24)
		if _, err := rand.Read(b); err != nil {
			return err
		}
		line := fmt.Sprintf("%s,svcnet-admin,svcnet-admin,system:masters\n", hex.EncodeToString(b))
		if err := os.WriteFile(p.TokenFile, []byte(line), 0o600); err != nil {
			return err
		}
	}
	b, err := os.ReadFile(p.TokenFile)
	if err != nil {
		return err
	}
	p.AdminToken, _, _ = strings.Cut(string(b), ",")
	if p.AdminToken == "" || !strings.Contains(string(b), ",") {
		p.AdminToken = ""
		return fmt.Errorf("%s holds no token; delete it to have a new one made", p.TokenFile)
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// NodeServing writes a serving certificate of the CA for a node's
// program (the agent's API) naming hosts, and returns its files: made at
// every start, as a node's own would be.
func (p *PKI) NodeServing(program, node string, hosts []string) (certFile, keyFile string, err error) {
	caCert, caKey, err := p.ensureCA()
	if err != nil {
		return "", "", err
	}
	certPEM, keyPEM, err := certs.NewServing(caCert, caKey, node, hosts, time.Now(), validity)
	if err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(p.Dir, program+"-"+node+".crt"), filepath.Join(p.Dir, program+"-"+node+".key")
	if err := os.WriteFile(certFile, certPEM, 0o644); err != nil {
		return "", "", err
	}
	return certFile, keyFile, os.WriteFile(keyFile, keyPEM, 0o600)
}
