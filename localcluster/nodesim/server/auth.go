// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package server

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// ErrPodNotFound is the Runtime's answer for a Pod the node does not run.
var ErrPodNotFound = errors.New("pod not found")

// The subresources of nodes that the kubelet's paths map to; every other
// path is nodes/proxy. A denied fine-grained subresource (pods, healthz)
// falls back to proxy, as the kubelet's fine-grained authorization does.
var subresources = []struct {
	prefix, subresource string
	fallback            bool
}{
	{"/stats", "stats", false},
	{"/metrics", "metrics", false},
	{"/logs", "log", false},
	{"/checkpoint", "checkpoint", false},
	{"/pods", "pods", true},
	{"/healthz", "healthz", true},
	{"/configz", "configz", true},
}

// authorize asks whether u may make req, as the kubelet's authorization
// filter does (verb from the method, nodes/<subresource>/<node>).
func (s *Server) authorize(req *http.Request, u user.Info) (string, bool) {
	if s.cfg.Authorizer == nil {
		return "", true
	}
	attrs := authorizer.AttributesRecord{
		User: u, Verb: verb(req.Method), APIVersion: "v1", Resource: "nodes", Subresource: "proxy",
		Name: s.cfg.NodeName, ResourceRequest: true, Path: req.URL.Path,
	}
	fallback := false
	for _, sr := range subresources {
		if req.URL.Path == sr.prefix || strings.HasPrefix(req.URL.Path, sr.prefix+"/") {
			attrs.Subresource, fallback = sr.subresource, sr.fallback
			break
		}
	}
	decision, reason, err := s.cfg.Authorizer.Authorize(req.Context(), attrs)
	if decision != authorizer.DecisionAllow && fallback {
		attrs.Subresource = "proxy"
		decision, reason, err = s.cfg.Authorizer.Authorize(req.Context(), attrs)
	}
	if err != nil {
		s.cfg.Log.Error(err, "Authorization error", "user", u.GetName(), "verb", attrs.Verb, "subresource", attrs.Subresource)
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
