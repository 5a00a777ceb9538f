// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/svcnet-io/svcnet/internal/platform/certs"
	"github.com/svcnet-io/svcnet/internal/platform/nodeauth"
)

// APIOptions are the agent's API's: where it listens (HTTPS), its
// serving certificate and the CA of the client certificates it accepts.
type APIOptions struct {
	BindAddress  string
	TLSCertFile  string
	TLSKeyFile   string
	ClientCAFile string
}

// The ConfigMap where kube-apiserver publishes the cluster's client CA
// (--client-ca-file), which delegated authentication reads.
const (
	authConfigMapNamespace = "kube-system"
	authConfigMap          = "extension-apiserver-authentication"
	authConfigMapKey       = "client-ca-file"
)

// clientCAWait is how long the API waits for the cluster's client CA
// before it listens.
const clientCAWait = 30 * time.Second

// selfSignedLife is how long a self-signed serving certificate lasts: the
// agent makes a new one at every start.
const selfSignedLife = 365 * 24 * time.Hour

// apiServer serves the agent's API: one Service's view at
// nodeview.ServicePath, behind the kubelet's authentication and
// authorization.
type apiServer struct {
	opts      APIOptions
	agent     *Agent
	restCfg   *rest.Config
	log       logr.Logger
	onBlocked func(error)
}

// Start implements manager.Runnable.
func (s *apiServer) Start(ctx context.Context) error {
	kc, err := kubernetes.NewForConfig(s.restCfg)
	if err != nil {
		return err
	}
	ca, err := s.clientCA(ctx, kc)
	if err != nil {
		return err
	}
	authn, authz, err := nodeauth.Delegated(kc, ca)
	if err != nil {
		return fmt.Errorf("agent API: %w", err)
	}
	pair, err := s.servingCertificate()
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /services/{namespace}/{name}", s.service)
	handler := nodeauth.Handler(nodeauth.Config{NodeName: s.agent.cfg.NodeName, Authenticator: authn, Authorizer: authz, Log: s.log.WithName("api")}, mux)
	return (&retryingServer{what: "API server", addr: s.opts.BindAddress, handler: handler, log: s.log, onBlocked: s.onBlocked,
		tls: &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequestClientCert, MinVersion: tls.VersionTLS12}}).Start(ctx)
}

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (s *apiServer) NeedLeaderElection() bool { return false }

// clientCA is --api-client-ca-file's bundle, or the cluster's client CA
// as kube-apiserver publishes it, followed as it changes.
func (s *apiServer) clientCA(ctx context.Context, kc kubernetes.Interface) (dynamiccertificates.CAContentProvider, error) {
	if s.opts.ClientCAFile != "" {
		ca, err := dynamiccertificates.NewDynamicCAContentFromFile("client-ca", s.opts.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("--api-client-ca-file: %w", err)
		}
		go ca.Run(ctx, 1)
		return ca, nil
	}
	ca, err := dynamiccertificates.NewDynamicCAFromConfigMapController("client-ca", authConfigMapNamespace, authConfigMap, authConfigMapKey, kc)
	if err != nil {
		return nil, err
	}
	go ca.Run(ctx, 1)
	// Its informer fills first: until the bundle is read, client
	// certificates are refused (tokens still work).
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, clientCAWait, true, func(context.Context) (bool, error) {
		_, ok := ca.VerifyOptions()
		return ok, nil
	})
	if err != nil && ctx.Err() == nil {
		s.log.Error(err, "The cluster's client CA is not read yet; client certificates are refused until it is, tokens are reviewed meanwhile",
			"configMap", authConfigMapNamespace+"/"+authConfigMap, "key", authConfigMapKey)
	}
	return ca, nil
}

// servingCertificate is the given pair, or a self-signed one naming the
// node.
func (s *apiServer) servingCertificate() (tls.Certificate, error) {
	if s.opts.TLSCertFile != "" {
		pair, err := tls.LoadX509KeyPair(s.opts.TLSCertFile, s.opts.TLSKeyFile)
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("--api-tls-cert-file: %w", err)
		}
		return pair, nil
	}
	now := time.Now()
	caCert, caKey, err := certs.NewCA("svcnet-agent-"+s.agent.cfg.NodeName+"-ca", now, selfSignedLife)
	if err != nil {
		return tls.Certificate{}, err
	}
	hosts := []string{s.agent.cfg.NodeName}
	if host, _, err := net.SplitHostPort(s.opts.BindAddress); err == nil && host != "" && !net.ParseIP(host).IsUnspecified() {
		hosts = append(hosts, host)
	}
	certPEM, keyPEM, err := certs.NewServing(caCert, caKey, s.agent.cfg.NodeName, hosts, now, selfSignedLife)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.X509KeyPair(append(certPEM, caCert...), keyPEM)
}

func (s *apiServer) service(w http.ResponseWriter, r *http.Request) {
	key := types.NamespacedName{Namespace: r.PathValue("namespace"), Name: r.PathValue("name")}
	v, err := s.agent.ServiceView(r.Context(), key)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(v); err != nil {
		s.log.V(4).Info("Writing the API's answer", "err", err.Error())
	}
}

var _ manager.LeaderElectionRunnable = (*apiServer)(nil)
