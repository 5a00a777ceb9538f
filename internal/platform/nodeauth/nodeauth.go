// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package nodeauth authenticates and authorizes the requests of an API a
// node serves, as the kubelet does its own: client certificates of the
// cluster's client CA or bearer tokens through TokenReview, then a
// SubjectAccessReview for nodes/<subresource> of the node. A caller thus
// needs what `kubectl get --raw /api/v1/nodes/NODE/proxy/...` needs.
package nodeauth

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
)

// The kubelet's authentication and authorization webhook cache times.
const (
	authnCacheTTL = 2 * time.Minute
	authzAllowTTL = 5 * time.Minute
	authzDenyTTL  = 30 * time.Second
)

// webhookRetryBackoff is how a TokenReview or SubjectAccessReview that
// fails is retried: kube-apiserver's default for its webhooks
// (k8s.io/apiserver's options package, not linked here: it brings the
// admission plugins and their fakes along).
func webhookRetryBackoff() *wait.Backoff {
	return &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}
}

// Delegated is the kubelet's authentication (client certificates of ca,
// bearer tokens through TokenReview; no anonymous requests) and
// authorization (SubjectAccessReview), both asked of the API server kc
// reaches.
func Delegated(kc kubernetes.Interface, ca dynamiccertificates.CAContentProvider) (authenticator.Request, authorizer.Authorizer, error) {
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                          &apiserver.AnonymousAuthConfig{Enabled: false},
		TokenAccessReviewClient:            kc.AuthenticationV1(),
		TokenAccessReviewTimeout:           10 * time.Second,
		WebhookRetryBackoff:                webhookRetryBackoff(),
		CacheTTL:                           authnCacheTTL,
		ClientCertificateCAContentProvider: ca,
	}.New()
	if err != nil {
		return nil, nil, fmt.Errorf("authentication: %w", err)
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: kc.AuthorizationV1(),
		AllowCacheTTL:             authzAllowTTL,
		DenyCacheTTL:              authzDenyTTL,
		WebhookRetryBackoff:       webhookRetryBackoff(),
	}.New()
	if err != nil {
		return nil, nil, fmt.Errorf("authorization: %w", err)
	}
	return authn, authz, nil
}

// Subresource maps the paths under Prefix to nodes/<Subresource>; with
// Fallback, a request denied it is asked again as nodes/proxy, as the
// kubelet's fine-grained authorization does.
type Subresource struct {
	Prefix, Subresource string
	Fallback            bool
}

// Config is a node API's judge.
type Config struct {
	NodeName      string
	Authenticator authenticator.Request
	// Authorizer nil allows every authenticated user (tests only).
	Authorizer authorizer.Authorizer
	// Subresources map paths to finer subresources than proxy, which is
	// every other path's.
	Subresources []Subresource
	Log          logr.Logger
}

// Handler authenticates and authorizes each request, then serves it
// with next: 401 without valid credentials, 403 with the reason when
// not allowed.
func Handler(cfg Config, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		resp, ok, err := cfg.Authenticator.AuthenticateRequest(req)
		if err != nil || !ok {
			if err != nil {
				cfg.Log.V(2).Info("Unable to authenticate the request", "err", err.Error())
			}
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		if msg, allowed := cfg.authorize(req, resp.User); !allowed {
			http.Error(w, msg, http.StatusForbidden)
			return
		}
		start := time.Now()
		next.ServeHTTP(w, req)
		cfg.Log.V(3).Info("Served", "method", req.Method, "path", req.URL.Path, "user", resp.User.GetName(), "upgrade", req.Header.Get("Upgrade"), "duration", time.Since(start))
	})
}

// authorize asks whether u may make req, as the kubelet's authorization
// filter does (verb from the method, nodes/<subresource>/<node>).
func (cfg Config) authorize(req *http.Request, u user.Info) (string, bool) {
	if cfg.Authorizer == nil {
		return "", true
	}
	attrs := authorizer.AttributesRecord{
		User: u, Verb: verb(req.Method), APIVersion: "v1", Resource: "nodes", Subresource: "proxy",
		Name: cfg.NodeName, ResourceRequest: true, Path: req.URL.Path,
	}
	fallback := false
	for _, sr := range cfg.Subresources {
		if req.URL.Path == sr.Prefix || strings.HasPrefix(req.URL.Path, sr.Prefix+"/") {
			attrs.Subresource, fallback = sr.Subresource, sr.Fallback
			break
		}
	}
	decision, reason, err := cfg.Authorizer.Authorize(req.Context(), attrs)
	if decision != authorizer.DecisionAllow && fallback {
		attrs.Subresource = "proxy"
		decision, reason, err = cfg.Authorizer.Authorize(req.Context(), attrs)
	}
	if err != nil {
		cfg.Log.Error(err, "Authorization error", "user", u.GetName(), "verb", attrs.Verb, "subresource", attrs.Subresource)
	}
	if decision == authorizer.DecisionAllow {
		return "", true
	}
	msg := fmt.Sprintf("Forbidden (user=%s, verb=%s, resource=%s, subresource(s)=[%s])", u.GetName(), attrs.Verb, attrs.Resource, attrs.Subresource)
	if reason != "" {
		msg += ": " + reason
	}
	return msg, false
}

func verb(method string) string {
	switch method {
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		return "delete"
	}
	return "get"
}
