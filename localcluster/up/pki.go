// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package up

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/util/keyutil"

	"github.com/svcnet-io/svcnet/internal/platform/certs"
)

// pki holds the paths of the credentials `svcnet up` makes once per data
// dir and reuses on every start, so kubeconfigs handed out stay valid.
type pki struct {
	dir                     string
	caCert, caKey           string
	servingCert, servingKey string
	// kubeletClientCert and Key are the API server's credentials for the
	// nodes' kubelet API (--kubelet-client-certificate).
	kubeletClientCert, kubeletClientKey string
	saKey, saPub                        string
	tokenFile                           string
	adminToken                          string
}

func newPKI(dataDir string) *pki {
	dir := filepath.Join(dataDir, "pki")
	return &pki{
		dir:               dir,
		caCert:            filepath.Join(dir, "ca.crt"),
		caKey:             filepath.Join(dir, "ca.key"),
		servingCert:       filepath.Join(dir, "apiserver.crt"),
		servingKey:        filepath.Join(dir, "apiserver.key"),
		kubeletClientCert: filepath.Join(dir, "apiserver-kubelet-client.crt"),
		kubeletClientKey:  filepath.Join(dir, "apiserver-kubelet-client.key"),
		saKey:             filepath.Join(dir, "sa.key"),
		saPub:             filepath.Join(dir, "sa.pub"),
		tokenFile:         filepath.Join(dir, "tokens.csv"),
	}
}

// validity is how long `svcnet up`'s certificates live: its data dir is
// meant to be reused, not rotated.
const validity = 10 * 365 * 24 * time.Hour

// ensure creates whatever is missing: a CA, the apiserver's serving
// certificate (for loopback and the first Service IP), the service-account
// signing key and a static admin token.
func (p *pki) ensure(serviceIP net.IP) error {
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return err
	}
	caCert, caKey, err := p.ensureCA()
	if err != nil {
		return fmt.Errorf("certificate authority: %w", err)
	}
	if err := p.ensureServing(caCert, caKey, serviceIP); err != nil {
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
func (p *pki) ensureCA() (certPEM, keyPEM []byte, err error) {
	if exists(p.caCert) && exists(p.caKey) {
		if certPEM, err = os.ReadFile(p.caCert); err != nil {
			return nil, nil, err
		}
		if keyPEM, err = os.ReadFile(p.caKey); err != nil {
			return nil, nil, err
		}
		return certPEM, keyPEM, nil
	}
	if certPEM, keyPEM, err = certs.NewCA("svcnet-up-ca", time.Now(), validity); err != nil {
		return nil, nil, err
	}
	if err := os.WriteFile(p.caCert, certPEM, 0o644); err != nil {
		return nil, nil, err
	}
	return certPEM, keyPEM, os.WriteFile(p.caKey, keyPEM, 0o600)
}

// ensureServing keeps the API server's serving certificate, or makes one
// when there is none or it lacks one of the names clients use: the
// kubernetes Service, loopback, and the fabric address the nodes (and the
// agents of --install=manifests) dial.
func (p *pki) ensureServing(caCert, caKey []byte, serviceIP net.IP) error {
	hosts := []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local",
		"127.0.0.1", "::1", serviceIP.String(), fabricAddr.Addr().String()}
	if exists(p.servingCert) && exists(p.servingKey) && coversHosts(p.servingCert, hosts) {
		return nil
	}
	certPEM, keyPEM, err := certs.NewServing(caCert, caKey, "kube-apiserver", hosts, time.Now(), validity)
	if err != nil {
		return fmt.Errorf("%w; delete the pki folder to have new credentials made", err)
	}
	if err := os.WriteFile(p.servingCert, certPEM, 0o644); err != nil {
		return err
	}
	return os.WriteFile(p.servingKey, keyPEM, 0o600)
}

// kubeletClientUser is the API server's user on the kubelets, in the
// group that may do everything, as kubeadm's apiserver-kubelet-client.
const kubeletClientUser = "kube-apiserver-kubelet-client"

// ensureKubeletClient keeps, or makes, the API server's client
// certificate for the kubelets' API.
func (p *pki) ensureKubeletClient(caCert, caKey []byte) error {
	if exists(p.kubeletClientCert) && exists(p.kubeletClientKey) {
		return nil
	}
	certPEM, keyPEM, err := certs.NewClient(caCert, caKey, kubeletClientUser, []string{"system:masters"}, time.Now(), validity)
	if err != nil {
		return err
	}
	if err := os.WriteFile(p.kubeletClientCert, certPEM, 0o644); err != nil {
		return err
	}
	return os.WriteFile(p.kubeletClientKey, keyPEM, 0o600)
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
func (p *pki) ensureServiceAccountKey() error {
	if exists(p.saKey) && exists(p.saPub) {
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
	if err := os.WriteFile(p.saKey, keyPEM, 0o600); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	return os.WriteFile(p.saPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600)
}

// ensureAdminToken makes the static token of the system:masters user in
// the API server's token file, and reads it back.
func (p *pki) ensureAdminToken() error {
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
	p.adminToken, _, _ = strings.Cut(string(b), ",")
	if p.adminToken == "" || !strings.Contains(string(b), ",") {
		p.adminToken = ""
		return fmt.Errorf("%s holds no token; delete it to have a new one made", p.tokenFile)
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
