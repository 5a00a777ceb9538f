// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package migrate

import (
	"context"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/controllers/loadbalancer"
	"github.com/svcnet-io/svcnet/dataplane/agent"
	"github.com/svcnet-io/svcnet/dataplane/model"
	"github.com/svcnet-io/svcnet/internal/migrate/metallb"
)

// snapshot is what several checks read.
type snapshot struct {
	nodes       []corev1.Node
	kubeProxies []*appsv1.DaemonSet
	// svcnetAgents are svcnet's agent DaemonSets already installed.
	svcnetAgents []*appsv1.DaemonSet
}

func (s *snapshot) anyNodeName() string {
	if len(s.nodes) == 0 {
		return "node"
	}
	return s.nodes[0].Name
}

// unreadable tells whether err is one the plan reports and goes past: no
// permission, or a kind the cluster does not serve.
func unreadable(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsNotFound(err) || meta.IsNoMatchError(err)
}

// load reads the nodes and the DaemonSets; what it cannot read is said.
func load(ctx context.Context, c client.Reader, r *Report) (*snapshot, error) {
	s := &snapshot{}
	var nodes corev1.NodeList
	switch err := c.List(ctx, &nodes); {
	case unreadable(err):
		r.add(AreaNodes, Note, "", "could not list Nodes: %v", err)
	case err != nil:
		return nil, err
	}
	s.nodes = nodes.Items
	var dss appsv1.DaemonSetList
	switch err := c.List(ctx, &dss); {
	case unreadable(err):
		r.add(AreaKubeProxy, Note, "", "could not list DaemonSets: %v", err)
	case err != nil:
		return nil, err
	}
	for i := range dss.Items {
		ds := &dss.Items[i]
		switch {
		case isKubeProxy(ds):
			s.kubeProxies = append(s.kubeProxies, ds)
		case ds.Spec.Template.Labels["app.kubernetes.io/name"] == "svcnet-agent":
			s.svcnetAgents = append(s.svcnetAgents, ds)
		}
	}
	return s, nil
}

// checkNodes counts the nodes by their svcnet.io/proxy label, and warns
// where svcnet's agent would take over nodes that kube-proxy still runs.
func checkNodes(_ context.Context, _ client.Reader, s *snapshot, r *Report) error {
	counts := map[string]int{}
	var unlabelled []string
	for _, n := range s.nodes {
		v, ok := n.Labels[agent.LabelNodeProxy]
		if !ok {
			unlabelled = append(unlabelled, n.Name)
			continue
		}
		if v != agent.NodeProxyKubeProxy {
			v = "svcnet"
		}
		counts[v]++
	}
	r.add(AreaNodes, Note, "", "nodes: %d, of which %d labelled %s=%s (kube-proxy's), %d given to svcnet, %d unlabelled (svcnet's agent takes an unlabelled node over as soon as it runs there)",
		len(s.nodes), counts[agent.NodeProxyKubeProxy], agent.LabelNodeProxy, agent.NodeProxyKubeProxy, counts["svcnet"], len(unlabelled))
	if len(s.kubeProxies) > 0 && len(unlabelled) > 0 {
		sev := Change
		if len(s.svcnetAgents) > 0 {
			sev = Blocker // svcnet's agents already run there: both proxies program those nodes
		}
		r.add(AreaNodes, sev, "", "kube-proxy runs, and %d of %d nodes carry no %s label (%s): label them before svcnet's agent runs, `kubectl label nodes --all %s=%s`, then move them one by one",
			len(unlabelled), len(s.nodes), agent.LabelNodeProxy, sample(unlabelled), agent.LabelNodeProxy, agent.NodeProxyKubeProxy)
	}
	return nil
}

// sample names up to three items and counts the rest.
func sample(names []string) string {
	if len(names) <= 3 {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:3], ", "), len(names)-3)
}

// The kube-controller-manager controllers svcnet's manager replaces, and
// its component label (kubeadm's static Pod).
var (
	replacedControllers = []string{"endpointslice-controller", "endpointslice-mirroring-controller", "service-cidr-controller"}
	kcmSelector         = client.MatchingLabels{"component": "kube-controller-manager"}
)

// checkControllerManager reports which of the controllers svcnet replaces
// kube-controller-manager still runs, with the --controllers to give it,
// and the EndpointSlices svcnet will adopt in place.
func checkControllerManager(ctx context.Context, c client.Reader, _ *snapshot, r *Report) error {
	var pods corev1.PodList
	switch err := c.List(ctx, &pods, client.InNamespace(metaSystem), kcmSelector); {
	case unreadable(err):
		r.add(AreaControllerManager, Note, "", "could not list kube-controller-manager's Pods: %v", err)
	case err != nil:
		return err
	}
	if len(pods.Items) == 0 {
		r.add(AreaControllerManager, Change, "", "kube-controller-manager is not a Pod in %s (a managed control plane?): before svcnet's manager runs, leave %s out of its --controllers",
			metaSystem, strings.Join(replacedControllers, ", "))
	}
	seen := map[string]bool{}
	for _, p := range pods.Items {
		value := controllersFlag(p.Spec.Containers)
		if seen[value] {
			continue // every replica says the same
		}
		seen[value] = true
		var running []string
		for _, ctl := range replacedControllers {
			if controllerEnabled(value, ctl) {
				running = append(running, ctl)
			}
		}
		if len(running) == 0 {
			r.add(AreaControllerManager, Note, ref("Pod", &p), "--controllers=%s leaves out every controller svcnet's manager runs", value)
			continue
		}
		want := value
		for _, ctl := range running {
			want += ",-" + ctl
		}
		r.add(AreaControllerManager, Change, ref("Pod", &p), "kube-controller-manager runs %s: once svcnet's manager runs, restart it with --controllers=%s",
			strings.Join(running, ", "), want)
	}
	var slices discoveryv1.EndpointSliceList
	switch err := c.List(ctx, &slices, client.MatchingLabels{discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}); {
	case unreadable(err):
	case err != nil:
		return err
	default:
		r.add(AreaControllerManager, Note, "", "%d EndpointSlices are kube-controller-manager's: svcnet's controller adopts them in place, and gives them back the same way", len(slices.Items))
	}
	return nil
}

const metaSystem = "kube-system"

// controllersFlag is the value of --controllers in the containers'
// command lines, "*" (kube-controller-manager's default) when unset.
func controllersFlag(ctrs []corev1.Container) string {
	for _, ctr := range ctrs {
		args := append(slices.Clone(ctr.Command), ctr.Args...)
		for i, a := range args {
			if v, ok := strings.CutPrefix(a, "--controllers="); ok {
				return v
			}
			if a == "--controllers" && i+1 < len(args) {
				return args[i+1]
			}
		}
	}
	return "*"
}

// controllerEnabled applies kube-controller-manager's rule: a controller
// named runs, one named with "-" does not, and "*" runs every controller
// on by default (these three are).
func controllerEnabled(value, name string) bool {
	items := strings.Split(value, ",")
	switch {
	case slices.Contains(items, "-"+name):
		return false
	case slices.Contains(items, name):
		return true
	default:
		return slices.Contains(items, "*")
	}
}

// checkLoadBalancers previews every LoadBalancer Service against svcnet's
// pools (those in the cluster and extra, such as converted MetalLB
// pools): an address that no pool taking the Service holds would be
// replaced.
func checkLoadBalancers(ctx context.Context, c client.Reader, extra []svcnetv1alpha1.LoadBalancerIPPool, r *Report) error {
	var svcs corev1.ServiceList
	if err := c.List(ctx, &svcs); err != nil {
		if unreadable(err) {
			r.add(AreaLoadBalancer, Note, "", "could not list Services: %v", err)
			return nil
		}
		return err
	}
	var pools svcnetv1alpha1.LoadBalancerIPPoolList
	switch err := c.List(ctx, &pools); {
	case unreadable(err):
		r.add(AreaLoadBalancer, Note, "", "svcnet's LoadBalancerIPPools cannot be read (%v): addresses are checked against the pools given to the plan only", err)
	case err != nil:
		return err
	}
	all := pools.Items
	for _, p := range extra {
		if !slices.ContainsFunc(pools.Items, func(q svcnetv1alpha1.LoadBalancerIPPool) bool { return q.Name == p.Name }) {
			all = append(all, p)
		}
	}
	var cidrs networkingv1.ServiceCIDRList
	if err := c.List(ctx, &cidrs); err != nil && !unreadable(err) {
		return err
	}
	nsLabels := map[string]map[string]string{}
	for _, svc := range svcs.Items {
		if _, labelled := svc.Labels[model.LabelServiceProxyName]; labelled {
			r.add(AreaKubeProxy, Note, ref("Service", &svc), "labelled %s: neither kube-proxy nor svcnet's agent without --proxy-name programs it", model.LabelServiceProxyName)
		}
		if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
			continue
		}
		if cl := svc.Spec.LoadBalancerClass; cl != nil && *cl != loadbalancer.DefaultClass {
			r.add(AreaLoadBalancer, Note, ref("Service", &svc), "loadBalancerClass %s: left to that implementation", *cl)
			continue
		}
		labels, ok := nsLabels[svc.Namespace]
		if !ok {
			var ns corev1.Namespace
			if err := c.Get(ctx, client.ObjectKey{Name: svc.Namespace}, &ns); err != nil && !unreadable(err) {
				return err
			}
			labels = ns.Labels
			nsLabels[svc.Namespace] = labels
		}
		previewService(&svc, all, cidrs.Items, labels, r)
	}
	return nil
}

func previewService(svc *corev1.Service, pools []svcnetv1alpha1.LoadBalancerIPPool, cidrs []networkingv1.ServiceCIDR, nsLabels map[string]string, r *Report) {
	p := loadbalancer.PreviewService(svc, pools, cidrs, nsLabels)
	obj := ref("Service", svc)
	for _, a := range p.Replaced {
		r.add(AreaLoadBalancer, Blocker, obj, "would lose its address %s: no LoadBalancerIPPool that takes this Service holds it; create one that does (svcnet migrate metallb converts MetalLB's pools)", a)
	}
	for _, msg := range p.Conflicts {
		r.add(AreaLoadBalancer, Change, obj, "%s", msg)
	}
	if p.Problem != "" {
		r.add(AreaLoadBalancer, Change, obj, "%s", p.Problem)
	}
	for _, msg := range p.Read {
		r.add(AreaLoadBalancer, Note, obj, "svcnet reads %s", msg)
	}
}

// ref names an object as a finding's Object: kind/namespace/name, or
// kind/name for one without a namespace.
func ref(kind string, o client.Object) string {
	if o.GetNamespace() == "" {
		return kind + "/" + o.GetName()
	}
	return kind + "/" + o.GetNamespace() + "/" + o.GetName()
}

// reportMetalLB says what MetalLB configuration the cluster has, how to
// carry it over, and what of it svcnet cannot carry (the converter's
// warnings).
func reportMetalLB(objs []*unstructured.Unstructured, res metallb.Result, r *Report) {
	if len(objs) == 0 {
		return
	}
	counts := map[string]int{}
	var kinds []string
	for _, o := range objs {
		if counts[o.GetKind()] == 0 {
			kinds = append(kinds, o.GetKind())
		}
		counts[o.GetKind()]++
	}
	var parts []string
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%d %s", counts[k], k))
	}
	r.add(AreaMetalLB, Change, "", "MetalLB is configured (%s): `svcnet migrate metallb | kubectl apply -f -` writes %d LoadBalancerIPPools and %d LoadBalancerAnnouncements; apply them, and stop MetalLB's controller before svcnet's loadbalancer controller starts (docs/operations.md, \"Coming from MetalLB\"). The Services' addresses below are checked against those pools too",
		strings.Join(parts, ", "), len(res.Pools), len(res.Announcements))
	for _, w := range res.Warnings {
		msg := w.Reason
		if w.Field != "" {
			msg = w.Field + ": " + w.Reason
		}
		r.add(AreaMetalLB, Change, w.Object, "%s", msg)
	}
}
