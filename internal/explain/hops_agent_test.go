// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package explain

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/svcnet-io/svcnet/internal/nodeview"
)

// failingAgent answers every read with err.
type failingAgent struct{ err error }

func (f failingAgent) Address(host string) string { return net.JoinHostPort(host, "10266") }
func (f failingAgent) Service(context.Context, string, types.NamespacedName) (*nodeview.Service, error) {
	return nil, f.err
}

// TestReadAgentTellsUnseenFromBroken: how each failure to read an agent
// is classed, from the errors the client gives.
func TestReadAgentTellsUnseenFromBroken(t *testing.T) {
	dial := func(errno error) error {
		return &url.Error{Op: "Get", URL: "https://172.31.0.11:10266/", Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", errno)}}
	}
	for name, tc := range map[string]struct {
		err                      error
		unseen, untrusted, stuck bool
	}{
		"not admitted":         {err: &nodeview.StatusError{Code: 403, Status: "403 Forbidden"}, unseen: true},
		"its loop is stuck":    {err: &nodeview.StatusError{Code: 503, Status: "503 Service Unavailable"}, stuck: true},
		"an untrusted server":  {err: &url.Error{Op: "Get", Err: &tls.CertificateVerificationError{Err: errors.New("x509: certificate signed by unknown authority")}}, unseen: true, untrusted: true},
		"nothing listens":      {err: dial(syscall.ECONNREFUSED)},
		"no route from here":   {err: dial(syscall.ENETUNREACH), unseen: true},
		"connected, no answer": {err: &url.Error{Op: "Get", Err: errors.New("net/http: TLS handshake timeout")}},
	} {
		t.Run(name, func(t *testing.T) {
			w := healthy(web().Obj())
			fromPod(w, "node-1")
			w.in.Nodes[0].Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "172.31.0.11"}}
			w.in.ReadAgent(context.Background(), failingAgent{err: tc.err})
			got := w.in.Agent
			if got == nil || got.View != nil || got.Unseen != tc.unseen || got.Untrusted != tc.untrusted || got.Stuck != tc.stuck || got.Address != "172.31.0.11:10266" {
				t.Fatalf("read %+v, want unseen %v, untrusted %v, stuck %v at 172.31.0.11:10266", got, tc.unseen, tc.untrusted, tc.stuck)
			}
		})
	}
}
