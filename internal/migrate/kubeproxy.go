// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package migrate

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/dataplane/agent"
	"github.com/svcnet-io/svcnet/internal/app/agentcmd"
)

// checkKubeProxy reports, for each kube-proxy DaemonSet, what the agent
// would refuse or ignore of its settings, what to give svcnet's agent to
// behave the same, and whether the DaemonSet follows the svcnet.io/proxy
// label yet.
func checkKubeProxy(ctx context.Context, c client.Reader, s *snapshot, r *Report) error {
	if len(s.kubeProxies) == 0 {
		r.add(AreaKubeProxy, Note, "", "no kube-proxy DaemonSet found; if kube-proxy runs outside Kubernetes (a systemd unit), stop it on each node once svcnet's agent has taken the node over")
		return nil
	}
	for _, ds := range s.kubeProxies {
		obj := ref("DaemonSet", ds)
		if !followsProxyLabel(ds) {
			r.add(AreaKubeProxy, Change, obj, "kube-proxy runs on every node: give it a node affinity on %s In [%s] (docs/operations.md, \"Moving from kube-proxy\"), so that relabelling a node moves it", agent.LabelNodeProxy, agent.NodeProxyKubeProxy)
		}
		ctr, _ := kubeProxyContainer(ds)
		args, cleanup, err := commandLine(ctx, c, ds, ctr, s.anyNodeName())
		if err != nil {
			r.add(AreaKubeProxy, Note, obj, "could not read kube-proxy's command line: %v", err)
			continue
		}
		cfg, err := agentcmd.CheckKubeProxyArgs(args)
		cleanup()
		if err != nil {
			r.add(AreaKubeProxy, Blocker, obj, "svcnet's agent refuses kube-proxy's settings, so it could not do what kube-proxy does here: %v", err)
			continue
		}
		for _, ignored := range cfg.Ignored {
			r.add(AreaKubeProxy, Change, obj, "svcnet's agent does not act on %s", ignored)
		}
		r.add(AreaKubeProxy, Note, obj, "kube-proxy runs in %s mode%s; give svcnet's agent the same settings (agent.mode, agent.clusterCIDR, agent.extraArgs in the chart), or swap the DaemonSet's image for svcnet-agent, which reads them as they are",
			cfg.Mode, describeSettings(cfg))
		for _, agentDS := range s.svcnetAgents {
			compareAgent(ctx, c, agentDS, cfg, s.anyNodeName(), r)
		}
	}
	return nil
}

// compareAgent reports where svcnet's agent DaemonSet, already
// installed, would treat traffic otherwise than kube-proxy (cfg) does.
func compareAgent(ctx context.Context, c client.Reader, ds *appsv1.DaemonSet, kubeProxy agent.Config, node string, r *Report) {
	obj := ref("DaemonSet", ds)
	if len(ds.Spec.Template.Spec.Containers) == 0 {
		return
	}
	ctr := &ds.Spec.Template.Spec.Containers[0]
	args, cleanup, err := commandLine(ctx, c, ds, ctr, node)
	if err != nil {
		r.add(AreaKubeProxy, Note, obj, "could not read svcnet's agent's command line: %v", err)
		return
	}
	defer cleanup()
	if len(args) > 0 && args[0] == "agent" {
		args = args[1:]
	}
	cfg, err := agentcmd.CheckAgentArgs(args)
	if err != nil {
		r.add(AreaKubeProxy, Blocker, obj, "svcnet's agent would not start: %v", err)
		return
	}
	if got, want := describeSettings(cfg), describeSettings(kubeProxy); got != want {
		r.add(AreaKubeProxy, Change, obj, "svcnet's agent runs%s, kube-proxy%s: traffic that kube-proxy masquerades or accepts on NodePorts would be treated otherwise",
			orNone(got), orNone(want))
	}
}

func orNone(settings string) string {
	if settings == "" {
		return " with none of --cluster-cidr, --nodeport-addresses, --masquerade-all"
	}
	return settings
}

// describeSettings says the kube-proxy settings an operator must carry
// over to svcnet's own agent DaemonSet.
func describeSettings(cfg agent.Config) string {
	var parts []string
	var cidrs []string
	for _, f := range []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol} {
		for _, p := range cfg.ClusterCIDRs[f] {
			cidrs = append(cidrs, p.String())
		}
	}
	if len(cidrs) > 0 {
		parts = append(parts, "--cluster-cidr="+strings.Join(cidrs, ","))
	}
	if len(cfg.NodePortAddresses) > 0 {
		var ps []string
		for _, p := range cfg.NodePortAddresses {
			ps = append(ps, p.String())
		}
		parts = append(parts, "--nodeport-addresses="+strings.Join(ps, ","))
	}
	if cfg.MasqueradeAll {
		parts = append(parts, "--masquerade-all")
	}
	if len(parts) == 0 {
		return ""
	}
	return " with " + strings.Join(parts, " ")
}

// isKubeProxy tells whether a DaemonSet runs kube-proxy: a container
// whose command or image is kube-proxy's.
func isKubeProxy(ds *appsv1.DaemonSet) bool {
	_, ok := kubeProxyContainer(ds)
	return ok
}

func kubeProxyContainer(ds *appsv1.DaemonSet) (*corev1.Container, bool) {
	for i := range ds.Spec.Template.Spec.Containers {
		ctr := &ds.Spec.Template.Spec.Containers[i]
		image := path.Base(strings.SplitN(ctr.Image, ":", 2)[0])
		if (len(ctr.Command) > 0 && path.Base(ctr.Command[0]) == "kube-proxy") || image == "kube-proxy" {
			return ctr, true
		}
	}
	return nil, false
}

// followsProxyLabel tells whether the DaemonSet runs only where
// svcnet.io/proxy says kube-proxy.
func followsProxyLabel(ds *appsv1.DaemonSet) bool {
	a := ds.Spec.Template.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return ds.Spec.Template.Spec.NodeSelector[agent.LabelNodeProxy] == agent.NodeProxyKubeProxy
	}
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	for _, t := range terms {
		found := false
		for _, e := range t.MatchExpressions {
			if e.Key == agent.LabelNodeProxy && e.Operator == corev1.NodeSelectorOpIn && len(e.Values) == 1 && e.Values[0] == agent.NodeProxyKubeProxy {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return len(terms) > 0
}

var envReference = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// commandLine is a DaemonSet container's command line (without the
// binary) as it would run on node: $(VAR) references expanded as the
// kubelet expands them, and each file under a ConfigMap volume (such as
// kubeadm's --config=/var/lib/kube-proxy/config.conf) written into a
// temporary folder that the arguments then name. cleanup removes it.
func commandLine(ctx context.Context, c client.Reader, ds *appsv1.DaemonSet, ctr *corev1.Container, node string) ([]string, func(), error) {
	var args []string
	if len(ctr.Command) > 0 {
		args = append(args, ctr.Command[1:]...)
	}
	args = append(args, ctr.Args...)
	env := map[string]string{}
	for _, e := range ctr.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName":
			env[e.Name] = node
		}
	}
	for i, a := range args {
		args[i] = envReference.ReplaceAllStringFunc(a, func(ref string) string {
			if v, ok := env[envReference.FindStringSubmatch(ref)[1]]; ok {
				return v
			}
			return ref
		})
	}
	dir, err := os.MkdirTemp("", "svcnet-migrate-")
	if err != nil {
		return nil, nil, err
	}
	cleanup := func() { _ = os.RemoveAll(dir) }
	for _, m := range ctr.VolumeMounts {
		cm := configMapVolume(ds, m.Name)
		if cm == "" {
			continue
		}
		var obj corev1.ConfigMap
		if err := c.Get(ctx, client.ObjectKey{Namespace: ds.Namespace, Name: cm}, &obj); err != nil {
			cleanup()
			return nil, nil, fmt.Errorf("ConfigMap %s/%s, mounted at %s: %w", ds.Namespace, cm, m.MountPath, err)
		}
		local := filepath.Join(dir, m.Name)
		if err := os.MkdirAll(local, 0o700); err != nil {
			cleanup()
			return nil, nil, err
		}
		for key, data := range obj.Data {
			if err := os.WriteFile(filepath.Join(local, key), []byte(data), 0o600); err != nil {
				cleanup()
				return nil, nil, err
			}
		}
		mount := strings.TrimSuffix(m.MountPath, "/") + "/"
		for i, a := range args {
			args[i] = strings.ReplaceAll(a, mount, local+"/")
		}
	}
	return args, cleanup, nil
}

// configMapVolume is the ConfigMap behind one of the Pod template's
// volumes, or "".
func configMapVolume(ds *appsv1.DaemonSet, volume string) string {
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.Name == volume && v.ConfigMap != nil {
			return v.ConfigMap.Name
		}
	}
	return ""
}
