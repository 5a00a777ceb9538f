// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package addons

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/dataplane/agent"
	"github.com/svcnet-io/svcnet/localcluster/controlplane"
	"github.com/svcnet-io/svcnet/localcluster/nodesim/images"
)

const (
	// KubeProxyName names kube-proxy's objects in kube-system, as
	// kubeadm names them.
	KubeProxyName = "kube-proxy"
	// KubeProxyImage is the image kubeadm v1.37 runs kube-proxy from.
	KubeProxyImage = "registry.k8s.io/kube-proxy:v1.37.1"
	// kubeProxyBinary is where kube-proxy's image holds the program, the
	// first word of kubeadm's command.
	kubeProxyBinary = "/usr/local/bin/kube-proxy"
)

// KubeProxyAppLabels are the labels of kube-proxy's DaemonSet and Pods.
var KubeProxyAppLabels = map[string]string{"k8s-app": KubeProxyName}

// KubeProxyNodeImage runs kube-proxy's image as binary (bin/k8s/kube-proxy)
// with this machine's iptables and nft, as the image ships its own.
func KubeProxyNodeImage(binary string) images.Image {
	return images.Image{
		Name: KubeProxyName, Repositories: []string{images.Repository(KubeProxyImage)},
		HostDirs: []string{"/usr", "/bin", "/lib", "/lib64", "/sbin", "/etc/alternatives"},
		Files:    map[string]string{kubeProxyBinary: binary},
	}
}

// kubeadmProxyKubeconfig is the kubeconfig.conf beside config.conf: the
// API server at kubeadm's control plane endpoint (%s), trusted and
// authenticated with what the Pod's ServiceAccount volume holds.
const kubeadmProxyKubeconfig = `apiVersion: v1
kind: Config
clusters:
- cluster:
    certificate-authority: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt
    server: %s
  name: default
contexts:
- context:
    cluster: default
    namespace: default
    user: default
  name: default
current-context: default
users:
- name: default
  user:
    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token`

// KubeadmKubeProxy is what kubeadm v1.37 creates for kube-proxy: its
// ServiceAccount bound to the bootstrap ClusterRole system:node-proxier,
// the Role and RoleBinding that let joining nodes read the ConfigMap, the
// ConfigMap, and the DaemonSet running kube-proxy's image with config.conf
// and the node's name, last. apiServer is the control plane endpoint,
// https://host:port; config is config.conf (KubeadmKubeProxyConfig).
func KubeadmKubeProxy(apiServer string, config []byte) []client.Object {
	const ns, name = metav1.NamespaceSystem, KubeProxyName
	return []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "kubeadm:node-proxier"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:node-proxier"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}},
		},
		&rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Rules:      []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{name}}},
		},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, Name: "system:bootstrappers:kubeadm:default-node-token"}},
		},
		&corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": name}},
			Data: map[string]string{
				"kubeconfig.conf": fmt.Sprintf(kubeadmProxyKubeconfig, apiServer),
				"config.conf":     string(config),
			},
		},
		kubeadmKubeProxyDaemonSet(),
	}
}

func kubeadmKubeProxyDaemonSet() *appsv1.DaemonSet {
	const ns, name = metav1.NamespaceSystem, KubeProxyName
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: KubeProxyAppLabels},
		Spec: appsv1.DaemonSetSpec{
			Selector:       &metav1.LabelSelector{MatchLabels: KubeProxyAppLabels},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: KubeProxyAppLabels},
				Spec: corev1.PodSpec{
					PriorityClassName: "system-node-critical",
					Containers: []corev1.Container{{
						Name:            name,
						Image:           KubeProxyImage,
						ImagePullPolicy: corev1.PullIfNotPresent,
						Command:         []string{kubeProxyBinary, "--config=/var/lib/kube-proxy/config.conf", "--hostname-override=$(NODE_NAME)"},
						SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
						VolumeMounts: []corev1.VolumeMount{
							{MountPath: "/var/lib/kube-proxy", Name: name},
							{MountPath: "/run/xtables.lock", Name: "xtables-lock"},
							{MountPath: "/lib/modules", Name: "lib-modules", ReadOnly: true},
						},
						Env: []corev1.EnvVar{{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}},
					}},
					HostNetwork:        true,
					ServiceAccountName: name,
					Volumes: []corev1.Volume{
						{Name: name, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}}},
						{Name: "xtables-lock", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/run/xtables.lock", Type: ptr.To(corev1.HostPathFileOrCreate)}}},
						{Name: "lib-modules", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/lib/modules"}}},
					},
					Tolerations:  []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					NodeSelector: map[string]string{corev1.LabelOSStable: "linux"},
				},
			},
		},
	}
}

// KubeProxyOnlyWhereLabelled is step 1 of docs/operations.md's move from
// kube-proxy, the merge patch of kube-proxy's DaemonSet that keeps its
// Pods on the nodes labelled svcnet.io/proxy=kube-proxy only.
var KubeProxyOnlyWhereLabelled = fmt.Sprintf(`{"spec":{"template":{"spec":{"affinity":{"nodeAffinity":`+
	`{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":`+
	`[{"key":%q,"operator":"In","values":[%q]}]}]}}}}}}}`, agent.LabelNodeProxy, agent.NodeProxyKubeProxy)

// ControlPlaneEndpoint is what kubeadm writes as the server of
// kube-proxy's kubeconfig when no controlPlaneEndpoint is configured: the
// API server's advertised address and port, which its endpoint reconciler
// keeps in the kubernetes Service's EndpointSlice.
func ControlPlaneEndpoint(ctx context.Context, c client.Client) (string, error) {
	var slices discoveryv1.EndpointSliceList
	if err := c.List(ctx, &slices, client.InNamespace(metav1.NamespaceDefault), client.MatchingLabels{discoveryv1.LabelServiceName: "kubernetes"}); err != nil {
		return "", err
	}
	for _, s := range slices.Items {
		if len(s.Endpoints) > 0 && len(s.Endpoints[0].Addresses) > 0 && len(s.Ports) > 0 && s.Ports[0].Port != nil {
			return "https://" + net.JoinHostPort(s.Endpoints[0].Addresses[0], strconv.Itoa(int(*s.Ports[0].Port))), nil
		}
	}
	return "", fmt.Errorf("no address in the kubernetes Service's EndpointSlices")
}

// InstallKubeProxy sets a cluster up as kubeadm does, with kube-proxy's
// objects (KubeadmKubeProxy, config is config.conf), then takes step 1 of
// docs/operations.md's move to svcnet: the nodes are labelled
// svcnet.io/proxy=kube-proxy and kube-proxy's DaemonSet is patched to run
// only there. It creates only what is missing and labels only nodes
// without the label, so that a cluster started again keeps the moves
// made since (a DaemonSet it finds keeps its affinity, or its lack).
func InstallKubeProxy(ctx context.Context, c client.Client, config []byte) error {
	apiServer, err := ControlPlaneEndpoint(ctx, c)
	if err != nil {
		return err
	}
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		return err
	}
	for i := range nodes.Items {
		if _, set := nodes.Items[i].Labels[agent.LabelNodeProxy]; set {
			continue
		}
		if err := LabelNode(ctx, c, &nodes.Items[i], agent.LabelNodeProxy, agent.NodeProxyKubeProxy); err != nil {
			return err
		}
	}
	var created *appsv1.DaemonSet
	for _, o := range KubeadmKubeProxy(apiServer, config) {
		switch err := c.Create(ctx, o); {
		case apierrors.IsAlreadyExists(err):
		case err != nil:
			return fmt.Errorf("creating kube-proxy's %T %s: %w", o, o.GetName(), err)
		default:
			if ds, ok := o.(*appsv1.DaemonSet); ok {
				created = ds
			}
		}
	}
	if created == nil {
		return nil // the DaemonSet was there: as it is
	}
	if err := c.Patch(ctx, created, client.RawPatch(types.MergePatchType, []byte(KubeProxyOnlyWhereLabelled))); err != nil {
		return fmt.Errorf("keeping kube-proxy on the nodes labelled %s=%s: %w", agent.LabelNodeProxy, agent.NodeProxyKubeProxy, err)
	}
	return nil
}

// WaitKubeProxy waits until kube-proxy's DaemonSet has a Ready, up-to-date
// Pod on every node labelled for it.
func WaitKubeProxy(ctx context.Context, c client.Client, timeout time.Duration) error {
	return controlplane.WaitFor(ctx, timeout, "kube-proxy's DaemonSet ready on the nodes labelled for it", func() (bool, error) {
		var nodes corev1.NodeList
		if err := c.List(ctx, &nodes, client.MatchingLabels{agent.LabelNodeProxy: agent.NodeProxyKubeProxy}); err != nil {
			return false, err
		}
		var ds appsv1.DaemonSet
		if err := c.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: KubeProxyName}, &ds); err != nil {
			return false, err
		}
		s := ds.Status
		return ds.Status.ObservedGeneration >= ds.Generation && int(s.DesiredNumberScheduled) == len(nodes.Items) &&
			s.NumberReady == s.DesiredNumberScheduled && s.UpdatedNumberScheduled == s.DesiredNumberScheduled, nil
	})
}

// LabelNode sets label key of node to value with a merge patch, as
// `kubectl label --overwrite` does.
func LabelNode(ctx context.Context, c client.Client, node *corev1.Node, key, value string) error {
	patch := client.MergeFrom(node.DeepCopy())
	if node.Labels == nil {
		node.Labels = map[string]string{}
	}
	node.Labels[key] = value
	if err := c.Patch(ctx, node, patch); err != nil {
		return fmt.Errorf("labelling node %s %s=%s: %w", node.Name, key, value, err)
	}
	return nil
}
