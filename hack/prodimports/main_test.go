// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRefused(t *testing.T) {
	tests := map[string]bool{
		"github.com/svcnet-io/svcnet/localcluster/up":             true,
		"github.com/svcnet-io/svcnet/localcluster/nodesim/server": true,
		"github.com/svcnet-io/svcnet/test/builder":                true,
		"github.com/svcnet-io/svcnet/svcnettest":                  true,
		"helm.sh/helm/v3/pkg/action":                              true,
		"k8s.io/client-go/kubernetes/fake":                        true,
		"k8s.io/client-go/kubernetes/typed/core/v1/fake":          true,
		"k8s.io/client-go/testing":                                false,
		"sigs.k8s.io/controller-runtime/pkg/client/fake":          true,
		"sigs.k8s.io/controller-runtime/pkg/envtest":              true,
		"testing":                                                       true,
		"github.com/mdlayher/netlink/nltest":                            false,
		"github.com/foo/bar/nltest":                                     true,
		"k8s.io/client-go/tools/clientcmd/api/latest":                   false,
		"internal/testlog":                                              false,
		"net/http/httptest":                                             true,
		"github.com/onsi/gomega":                                        true,
		"k8s.io/apimachinery/pkg/util/testutil":                         true,
		"github.com/svcnet-io/svcnet/dataplane/agent":                   false,
		"github.com/svcnet-io/svcnet/localclusterish":                   false,
		"github.com/svcnet-io/svcnet/internal/app/manager":              false,
		"k8s.io/client-go/kubernetes":                                   false,
		"sigs.k8s.io/knftables":                                         false,
		"k8s.io/apimachinery/pkg/util/fakeish":                          false,
		"github.com/svcnet-io/svcnet/internal/platform/testingless/x":   true, // named for tests
		"github.com/svcnet-io/svcnet/internal/platform/certs":           false,
		"sigs.k8s.io/controller-runtime/pkg/client/apiutil":             false,
		"github.com/svcnet-io/svcnet/controllers/endpointslice/testing": true,
		"github.com/svcnet-io/svcnet/cmd/svcnet-up":                     true,
	}
	for pkg, want := range tests {
		if got := refused(pkg) != ""; got != want {
			t.Errorf("refused(%q) = %q, want refused: %v", pkg, refused(pkg), want)
		}
	}
}

// TestChain checks that a refused package is shown with the imports that
// brought it in, from the command down, the shortest way.
func TestChain(t *testing.T) {
	// go list -deps prints dependencies first and the command last.
	g := parseGraph([]byte(`k8s.io/client-go/kubernetes/fake
k8s.io/apiserver/pkg/server k8s.io/client-go/kubernetes/fake
github.com/svcnet-io/svcnet/localcluster/nodesim k8s.io/apiserver/pkg/server
github.com/svcnet-io/svcnet/localcluster/up github.com/svcnet-io/svcnet/localcluster/nodesim k8s.io/client-go/kubernetes/fake
github.com/svcnet-io/svcnet/cmd/svcnet github.com/svcnet-io/svcnet/localcluster/up
`))
	want := []string{"github.com/svcnet-io/svcnet/cmd/svcnet", "github.com/svcnet-io/svcnet/localcluster/up", "k8s.io/client-go/kubernetes/fake"}
	if diff := cmp.Diff(want, g.chain("k8s.io/client-go/kubernetes/fake")); diff != "" {
		t.Errorf("chain (-want +got):\n%s", diff)
	}
	var got []string
	for _, v := range g.violations() {
		got = append(got, v.pkg)
	}
	wantPkgs := []string{"github.com/svcnet-io/svcnet/localcluster/up", "github.com/svcnet-io/svcnet/localcluster/nodesim", "k8s.io/client-go/kubernetes/fake"}
	if diff := cmp.Diff(wantPkgs, got); diff != "" {
		t.Errorf("violations (-want +got):\n%s", diff)
	}
}

// TestAgentRefusesTheManager checks that the agent's command, and only
// it, may not link the manager's packages.
func TestAgentRefusesTheManager(t *testing.T) {
	manager := "github.com/svcnet-io/svcnet/controllers/endpointslice"
	if refusedIn(agentCommand, manager) == "" {
		t.Errorf("the agent may link %s", manager)
	}
	if why := refusedIn("github.com/svcnet-io/svcnet/cmd/svcnet", manager); why != "" {
		t.Errorf("the manager may not link its own controllers: %s", why)
	}
	for _, pkg := range []string{"github.com/svcnet-io/svcnet/dataplane/agent", "github.com/svcnet-io/svcnet/allocator/lbipam"} {
		if why := refusedIn(agentCommand, pkg); why != "" {
			t.Errorf("the agent may not link %s: %s", pkg, why)
		}
	}
	g := parseGraph([]byte(manager + "\n" + agentCommand + " " + manager + "\n"))
	if v := g.violations(); len(v) != 1 || v[0].pkg != manager {
		t.Errorf("violations of an agent linking a controller: %+v", v)
	}
}
