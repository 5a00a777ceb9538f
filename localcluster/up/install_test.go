// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package up

import (
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func workload(kind, name string, args ...string) *unstructured.Unstructured {
	ctr := map[string]any{"name": "c", "args": toAny(args)}
	return &unstructured.Unstructured{Object: map[string]any{
		"kind": kind, "metadata": map[string]any{"name": name},
		"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"containers": []any{ctr}}}},
	}}
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func args(t *testing.T, u *unstructured.Unstructured) []string {
	t.Helper()
	ctrs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
	a, _, err := unstructured.NestedStringSlice(ctrs[0].(map[string]any), "args")
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestSetKnobs: svcnet up's settings replace config/default's values of
// the same flags and fill the agents' API server ConfigMap; a flag or an
// object config/default no longer has is an error, not a silent default.
func TestSetKnobs(t *testing.T) {
	o := DefaultOptions()
	o.ProxyMode, o.ClusterCIDR, o.APIServerPort = "iptables", "10.200.0.0/16", 7443
	c, err := o.Complete(nil)
	if err != nil {
		t.Fatal(err)
	}
	agent := workload("DaemonSet", agentName, "agent", "--mode=nftables", "--cluster-cidr=10.244.0.0/16", "--conntrack-max-per-core=32768", "--node-name=$(NODE_NAME)")
	mgr := workload("Deployment", managerName, "manager", "--service-node-port-range=30000-32767")
	cm := &unstructured.Unstructured{Object: map[string]any{"kind": "ConfigMap", "metadata": map[string]any{"name": agentAPIServerCM}}}
	if err := setKnobs([]*unstructured.Unstructured{agent, mgr, cm}, c); err != nil {
		t.Fatal(err)
	}
	if got, want := args(t, agent), []string{"agent", "--mode=iptables", "--cluster-cidr=10.200.0.0/16", "--conntrack-max-per-core=0", "--node-name=$(NODE_NAME)"}; !slices.Equal(got, want) {
		t.Errorf("agent args %v, want %v", got, want)
	}
	if got := args(t, mgr); !slices.Equal(got, []string{"manager", "--service-node-port-range=" + c.Manager.Controllers.NodePort.Range}) {
		t.Errorf("manager args %v", got)
	}
	data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
	if data["host"] != "172.30.0.1" || data["port"] != "7443" {
		t.Errorf("agent API server ConfigMap data %v", data)
	}

	noFlag := workload("DaemonSet", agentName, "agent", "--mode=nftables", "--conntrack-max-per-core=32768")
	if err := setKnobs([]*unstructured.Unstructured{noFlag, mgr, cm}, c); err == nil || !strings.Contains(err.Error(), "--cluster-cidr") {
		t.Errorf("a missing --cluster-cidr: %v", err)
	}
	if err := setKnobs([]*unstructured.Unstructured{agent, mgr}, c); err == nil || !strings.Contains(err.Error(), agentAPIServerCM) {
		t.Errorf("a missing ConfigMap: %v", err)
	}
}

func TestClusterName(t *testing.T) {
	for name, ok := range map[string]bool{
		"": true, "dev": true, "kind-2": true, "a": true, "upstream-pipeline": true,
		"Dev": false, "-a": false, "a-": false, "a_b": false, "abcdefghijklmnopqrstu": false,
		"my-node": false, "x-pod-y": false, "nodes-a": true,
	} {
		if err := validateName(name); (err == nil) != ok {
			t.Errorf("validateName(%q) = %v, want ok=%t", name, err, ok)
		}
	}
	complete := func(args ...string) Config {
		t.Helper()
		o := DefaultOptions()
		fs := pflag.NewFlagSet("up", pflag.ContinueOnError)
		o.AddFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		c, err := o.Complete(fs)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if c := complete("--name=dev"); c.DataDir != ".svcnet-dev" || !c.choosePorts {
		t.Errorf("--name=dev: data dir %q, choose ports %t; want .svcnet-dev, true", c.DataDir, c.choosePorts)
	}
	if c := complete("--name=dev", "--data-dir=/tmp/x", "--apiserver-port=7443"); c.DataDir != "/tmp/x" || c.choosePorts {
		t.Errorf("--name=dev with a data dir and a port: data dir %q, choose ports %t; want the flags kept", c.DataDir, c.choosePorts)
	}
	// The defaults given as flags are given all the same.
	if c := complete("--name=dev", "--data-dir=.svcnet", "--webhook-port=9443"); c.DataDir != ".svcnet" || c.choosePorts {
		t.Errorf("--name=dev with the default data dir and webhook port given: data dir %q, choose ports %t; want them kept", c.DataDir, c.choosePorts)
	}
	// Without flags (svcnet up as a library), a setting differing from
	// its default was given.
	o := DefaultOptions()
	o.Name, o.EtcdPeerPort = "dev", 12380
	if c, err := o.Complete(nil); err != nil || c.DataDir != ".svcnet-dev" || c.choosePorts {
		t.Errorf("Name dev and an etcd peer port in code: data dir %q, choose ports %t, %v; want .svcnet-dev and the port kept", c.DataDir, c.choosePorts, err)
	}
}
