// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package kuberuntime

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/svcnet-io/svcnet/localcluster/nodesim/images"
)

func TestArgv(t *testing.T) {
	p := images.Config{Entrypoint: []string{"/app"}, Cmd: []string{"-default"}}
	env := map[string]string{"PORT": "8080"}
	for name, tc := range map[string]struct {
		c    corev1.Container
		want []string
	}{
		"image defaults":        {corev1.Container{}, []string{"/app", "-default"}},
		"args replace cmd":      {corev1.Container{Args: []string{"-listen", ":$(PORT)"}}, []string{"/app", "-listen", ":8080"}},
		"command replaces both": {corev1.Container{Command: []string{"/other"}}, []string{"/other"}},
		"command and args":      {corev1.Container{Command: []string{"/other"}, Args: []string{"x"}}, []string{"/other", "x"}},
		"undefined and escaped": {corev1.Container{Args: []string{"$(NOPE)", "$$(PORT)", "$", "$(PORT"}}, []string{"/app", "$(NOPE)", "$(PORT)", "$", "$(PORT"}},
	} {
		if diff := cmp.Diff(tc.want, argv(p, tc.c, env)); diff != "" {
			t.Errorf("%s: argv (-want +got):\n%s", name, diff)
		}
	}
}

func TestResolvConf(t *testing.T) {
	host := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(host, []byte("# host\nnameserver 192.0.2.53\nsearch corp.example\noptions edns0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dns := DNS{Servers: []netip.Addr{netip.MustParseAddr("10.96.0.10")}, HostResolvConf: host}
	five := "2"
	for name, tc := range map[string]struct {
		dns  DNS
		spec corev1.PodSpec
		want string
	}{
		"ClusterFirst (the default)": {dns, corev1.PodSpec{},
			"nameserver 10.96.0.10\nsearch team.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n"},
		"ClusterFirst on the host network resolves as Default": {dns, corev1.PodSpec{HostNetwork: true},
			"nameserver 192.0.2.53\nsearch corp.example\noptions edns0\n"},
		"ClusterFirstWithHostNet": {dns, corev1.PodSpec{HostNetwork: true, DNSPolicy: corev1.DNSClusterFirstWithHostNet},
			"nameserver 10.96.0.10\nsearch team.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n"},
		"ClusterFirst without cluster DNS resolves as Default": {DNS{HostResolvConf: host}, corev1.PodSpec{},
			"nameserver 192.0.2.53\nsearch corp.example\noptions edns0\n"},
		"Default": {dns, corev1.PodSpec{DNSPolicy: corev1.DNSDefault},
			"nameserver 192.0.2.53\nsearch corp.example\noptions edns0\n"},
		"None with dnsConfig": {dns, corev1.PodSpec{DNSPolicy: corev1.DNSNone, DNSConfig: &corev1.PodDNSConfig{
			Nameservers: []string{"192.0.2.1"}, Searches: []string{"a.example"}, Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: &five}}}},
			"nameserver 192.0.2.1\nsearch a.example\noptions ndots:2\n"},
		"dnsConfig merged into ClusterFirst": {DNS{Servers: dns.Servers, Domain: "corp.local"}, corev1.PodSpec{DNSConfig: &corev1.PodDNSConfig{
			Searches: []string{"x.example"}, Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: &five}, {Name: "rotate"}}}},
			"nameserver 10.96.0.10\nsearch team.svc.corp.local svc.corp.local corp.local x.example\noptions ndots:2 rotate\n"},
	} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "p"}, Spec: tc.spec}
		got, err := tc.dns.resolvConf(pod)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if diff := cmp.Diff(tc.want, string(got)); diff != "" {
			t.Errorf("%s: resolv.conf (-want +got):\n%s", name, diff)
		}
	}
}

// TestUnprovidedVolume: a volume type the simulator does not provide gets
// no folder, so that the container mounting it fails to start instead of
// seeing an empty folder.
func TestUnprovidedVolume(t *testing.T) {
	claim := corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}
	scratch := corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	f := &podFiles{dir: t.TempDir(), pod: &corev1.Pod{Spec: corev1.PodSpec{Volumes: []corev1.Volume{claim, scratch}}}}
	for _, v := range f.pod.Spec.Volumes {
		if err := f.writeVolume(context.Background(), v); err != nil {
			t.Fatalf("volume %s: %v", v.Name, err)
		}
	}
	if src, err := f.volumeSource("data"); err == nil {
		t.Errorf("a persistentVolumeClaim volume got a folder (%s); its mount would silently be empty", src)
	}
	if src, err := f.volumeSource("scratch"); err != nil || src != f.volumeDir("scratch") {
		t.Errorf("an emptyDir volume has no folder: %q, %v", src, err)
	}
}

// TestHostPathVolume: a hostPath volume binds the machine's path, checked
// against its type and created for the ...OrCreate types; a missing path
// of no type gets an empty folder of the Pod's, not one on the machine.
func TestHostPathVolume(t *testing.T) {
	host := t.TempDir()
	if err := os.WriteFile(filepath.Join(host, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	hp := func(name, path string, typ corev1.HostPathType) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: filepath.Join(host, path), Type: ptr.To(typ)}}}
	}
	pod := &corev1.Pod{Spec: corev1.PodSpec{Volumes: []corev1.Volume{
		hp("lock", "run/xtables.lock", corev1.HostPathFileOrCreate),
		hp("state", "var/lib/state", corev1.HostPathDirectoryOrCreate),
		hp("existing", "file", corev1.HostPathFile),
		hp("modules", "lib/modules", corev1.HostPathUnset),
		hp("not-a-dir", "file", corev1.HostPathDirectory),
		hp("absent", "absent", corev1.HostPathSocket),
	}}}
	f := &podFiles{dir: t.TempDir(), pod: pod}
	for name, want := range map[string]string{
		"lock":     filepath.Join(host, "run/xtables.lock"),
		"state":    filepath.Join(host, "var/lib/state"),
		"existing": filepath.Join(host, "file"),
		"modules":  filepath.Join(f.dir, "hostpaths", "modules"),
	} {
		got, err := f.volumeSource(name)
		if err != nil || got != want {
			t.Errorf("volume %s: got %q, %v; want %q", name, got, err, want)
			continue
		}
		if _, err := os.Stat(got); err != nil {
			t.Errorf("volume %s: %v", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(host, "lib")); !os.IsNotExist(err) {
		t.Errorf("a missing hostPath of no type was created on the machine (%v)", err)
	}
	for _, name := range []string{"not-a-dir", "absent"} {
		if src, err := f.volumeSource(name); err == nil {
			t.Errorf("volume %s: got %q, want an error", name, src)
		}
	}
}

// TestOptionalEnvReferences: an optional ConfigMap or Secret key that is
// missing leaves its variable unset (so a default, such as the service
// link KUBERNETES_SERVICE_HOST, stays); a required one is an error.
func TestOptionalEnvReferences(t *testing.T) {
	ctx := context.Background()
	kubernetes := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kubernetes"}, Spec: corev1.ServiceSpec{
		ClusterIP: "10.96.0.1", Ports: []corev1.ServicePort{{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP}},
	}}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "apiserver"}, Data: map[string]string{"host": "172.30.0.1"}}
	c := fake.NewClientBuilder().WithObjects(kubernetes, cm).Build()
	ref := func(name, cmName, key string, optional bool) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: cmName}, Key: key, Optional: ptr.To(optional),
		}}}
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "agent"}}
	ctr := corev1.Container{Name: "agent", Env: []corev1.EnvVar{
		ref("KUBERNETES_SERVICE_HOST", "apiserver", "host", true),
		ref("KUBERNETES_SERVICE_PORT", "apiserver", "port", true),
		ref("FROM_MISSING", "absent", "x", true),
	}}
	env, _, err := containerEnv(ctx, c, pod, ctr, nil)
	if err != nil {
		t.Fatal(err)
	}
	if env["KUBERNETES_SERVICE_HOST"] != "172.30.0.1" || env["KUBERNETES_SERVICE_PORT"] != "443" {
		t.Errorf("host from the ConfigMap, port from the service link: got %s:%s", env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"])
	}
	if v, ok := env["FROM_MISSING"]; ok {
		t.Errorf("an optional reference to a missing ConfigMap set %q", v)
	}
	for _, required := range []corev1.EnvVar{ref("X", "apiserver", "port", false), ref("X", "absent", "x", false)} {
		if _, _, err := containerEnv(ctx, c, pod, corev1.Container{Env: []corev1.EnvVar{required}}, nil); err == nil {
			t.Errorf("a required reference to %s/%s that is missing: no error", required.ValueFrom.ConfigMapKeyRef.Name, required.ValueFrom.ConfigMapKeyRef.Key)
		}
	}
}

func TestPreStopSleep(t *testing.T) {
	for name, tc := range map[string]struct {
		h    *corev1.LifecycleHandler
		want time.Duration
	}{
		"none":          {nil, 0},
		"sleep action":  {&corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 3}}, 3 * time.Second},
		"exec sleep":    {&corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/bin/sh", "-c", "sleep 5"}}}, 5 * time.Second},
		"exec no sleep": {&corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/bin/true"}}}, 0},
	} {
		c := corev1.Container{Name: "c"}
		if tc.h != nil {
			c.Lifecycle = &corev1.Lifecycle{PreStop: tc.h}
		}
		if got := preStopSleep(c); got != tc.want {
			t.Errorf("%s: preStopSleep = %s, want %s", name, got, tc.want)
		}
	}
}

func TestHostsFile(t *testing.T) {
	ip, node := netip.MustParseAddr("10.244.1.5"), netip.MustParseAddr("172.30.0.11")
	sb := Sandbox{IPs: []netip.Addr{ip}, NodeName: "node-1", NodeIPs: []netip.Addr{node}}
	pod := func(spec corev1.PodSpec) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "web-0"}, Spec: spec}
	}
	for name, tc := range map[string]struct {
		pod  *corev1.Pod
		want []string
	}{
		"pod name":            {pod(corev1.PodSpec{}), []string{"10.244.1.5\tweb-0\n"}},
		"hostname":            {pod(corev1.PodSpec{Hostname: "db"}), []string{"10.244.1.5\tdb\n"}},
		"subdomain FQDN":      {pod(corev1.PodSpec{Hostname: "db", Subdomain: "dbs"}), []string{"10.244.1.5\tdb.dbs.team.svc.cluster.local\tdb\n"}},
		"host network":        {pod(corev1.PodSpec{HostNetwork: true}), []string{"172.30.0.11\tnode-1\n"}},
		"hostAliases at last": {pod(corev1.PodSpec{HostAliases: []corev1.HostAlias{{IP: "192.0.2.1", Hostnames: []string{"a", "b"}}}}), []string{"# Entries added by HostAliases.\n192.0.2.1\ta\tb\n"}},
	} {
		got := string(hostsFile(tc.pod, sb, "cluster.local"))
		if !strings.HasPrefix(got, "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n") {
			t.Errorf("%s: no loopback names:\n%s", name, got)
		}
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: hosts file misses %q:\n%s", name, w, got)
			}
		}
	}
	// A dual-stack Pod's name is on both its addresses, as the kubelet
	// writes them; so is a dual-stack node's on the host network.
	dual := Sandbox{IPs: []netip.Addr{ip, netip.MustParseAddr("fd00:10:244:1::5")}, NodeName: "node-1",
		NodeIPs: []netip.Addr{node, netip.MustParseAddr("fc00:f853:ccd:e793::11")}}
	for _, tc := range []struct {
		pod  *corev1.Pod
		want string
	}{
		{pod(corev1.PodSpec{}), "10.244.1.5\tweb-0\nfd00:10:244:1::5\tweb-0\n"},
		{pod(corev1.PodSpec{HostNetwork: true}), "172.30.0.11\tnode-1\nfc00:f853:ccd:e793::11\tnode-1\n"},
	} {
		if got := string(hostsFile(tc.pod, dual, "cluster.local")); !strings.Contains(got, tc.want) {
			t.Errorf("dual-stack: hosts file misses %q:\n%s", tc.want, got)
		}
	}
}

func TestDownwardAPIAddresses(t *testing.T) {
	// Upstream's hostNetwork endpoints run netexec with
	// --udp-listen-addresses=$(HOST_IP),$(POD_IPS).
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "netserver-0"}, Status: corev1.PodStatus{
		PodIP: "172.30.0.11", PodIPs: []corev1.PodIP{{IP: "172.30.0.11"}, {IP: "fd00:30::11"}},
		HostIP: "172.30.0.11", HostIPs: []corev1.HostIP{{IP: "172.30.0.11"}, {IP: "fd00:30::11"}},
	}}
	field := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	ctr := corev1.Container{Name: "webserver", Env: []corev1.EnvVar{
		field("HOST_IP", "status.hostIP"), field("HOST_IPS", "status.hostIPs"),
		field("POD_IP", "status.podIP"), field("POD_IPS", "status.podIPs"),
		{Name: "LISTEN", Value: "$(HOST_IP),$(POD_IPS)"},
	}}
	kubernetes := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kubernetes"}, Spec: corev1.ServiceSpec{
		ClusterIP: "10.96.0.1", Ports: []corev1.ServicePort{{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP}},
	}}
	env, _, err := containerEnv(context.Background(), fake.NewClientBuilder().WithObjects(kubernetes).Build(), pod, ctr, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"HOST_IP": "172.30.0.11", "HOST_IPS": "172.30.0.11,fd00:30::11",
		"POD_IP": "172.30.0.11", "POD_IPS": "172.30.0.11,fd00:30::11",
		"LISTEN": "172.30.0.11,172.30.0.11,fd00:30::11",
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
}

// TestSandboxAddressesReachTheEnvironment starts from a Pod the API
// server has no addresses for yet, as at its first start: the sandbox's
// addresses are what the downward API gives its containers.
func TestSandboxAddressesReachTheEnvironment(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "netserver-0"}}
	sandboxAddresses(pod, Sandbox{IPs: []netip.Addr{netip.MustParseAddr("172.30.0.11")}, NodeIPs: []netip.Addr{netip.MustParseAddr("172.30.0.11")}})
	kubernetes := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kubernetes"}, Spec: corev1.ServiceSpec{
		ClusterIP: "10.96.0.1", Ports: []corev1.ServicePort{{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP}},
	}}
	field := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	ctr := corev1.Container{Name: "webserver", Env: []corev1.EnvVar{field("HOST_IP", "status.hostIP"), field("POD_IPS", "status.podIPs")}}
	env, _, err := containerEnv(context.Background(), fake.NewClientBuilder().WithObjects(kubernetes).Build(), pod, ctr, nil)
	if err != nil {
		t.Fatal(err)
	}
	if env["HOST_IP"] != "172.30.0.11" || env["POD_IPS"] != "172.30.0.11" {
		t.Errorf("HOST_IP=%q POD_IPS=%q, want the sandbox's 172.30.0.11", env["HOST_IP"], env["POD_IPS"])
	}
}
