// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package admission

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/svcnet-io/svcnet/allocator/feed"
	"github.com/svcnet-io/svcnet/allocator/ipam"
	"github.com/svcnet-io/svcnet/allocator/portrange"
	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
)

// Options select what the webhook allocates.
type Options struct {
	// ClusterIP enables ClusterIP allocation (the `clusterip` controller).
	ClusterIP bool
	// ClusterIPReuseDelay is --clusterip-reuse-delay.
	ClusterIPReuseDelay time.Duration

	// NodePort enables nodePort allocation (the `nodeport` controller).
	NodePort bool
	// NodePorts configures the nodePort allocator.
	NodePorts portrange.Options
}

// DefaultReuseDelay is the default quarantine of released values.
const DefaultReuseDelay = 5 * time.Minute

// +kubebuilder:rbac:groups=networking.k8s.io,resources=servicecidrs;ipaddresses,verbs=get;list;watch
// +kubebuilder:rbac:groups=networking.svcnet.io,resources=servicecidrbindings,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces;services,verbs=get;list;watch

// Setup registers the webhook handler with mgr's webhook server, feeds the
// allocators from mgr's cache, and adds the readiness checks "admission",
// which passes only on the replica that answers (the leader, in sync), and
// "synced", which passes on every replica whose caches are in sync.
func Setup(mgr ctrl.Manager, opts Options) error {
	if opts.ClusterIPReuseDelay < 0 {
		return fmt.Errorf("--clusterip-reuse-delay must not be negative, got %v", opts.ClusterIPReuseDelay)
	}
	ctx := context.Background()
	var synced []toolscache.InformerSynced
	watch := func(obj client.Object, h toolscache.ResourceEventHandler) error {
		inf, err := mgr.GetCache().GetInformer(ctx, obj)
		if err != nil {
			return fmt.Errorf("watching %T: %w", obj, err)
		}
		reg, err := inf.AddEventHandler(h)
		if err != nil {
			return err
		}
		synced = append(synced, reg.HasSynced)
		return nil
	}
	h := &Handler{decoder: admission.NewDecoder(mgr.GetScheme())}
	if opts.ClusterIP {
		ips, err := setupClusterIPs(ctx, mgr, opts, watch)
		if err != nil {
			return err
		}
		h.parts = append(h.parts, ips)
	}
	if opts.NodePort {
		alloc, err := portrange.New(opts.NodePorts)
		if err != nil {
			return err
		}
		if err := watch(&corev1.Service{}, feed.NodePortHandler(alloc)); err != nil {
			return err
		}
		h.parts = append(h.parts, &nodePorts{alloc: alloc, live: mgr.GetAPIReader()})
	}
	if len(h.parts) == 0 {
		return errors.New("admission: nothing to allocate")
	}
	allSynced := func() bool {
		for _, s := range synced {
			if !s() {
				return false
			}
		}
		return true
	}
	elected := mgr.Elected()
	var inSync atomic.Bool
	h.active = func() bool {
		select {
		case <-elected:
		default:
			return false
		}
		if inSync.Load() {
			return true
		}
		inSync.Store(allSynced())
		return inSync.Load()
	}
	mgr.GetWebhookServer().Register(Path, &webhook.Admission{Handler: h})
	return addReadyzChecks(mgr, h, allSynced)
}

// setupClusterIPs feeds the ClusterIP allocator from mgr's cache through
// watch.
func setupClusterIPs(ctx context.Context, mgr ctrl.Manager, opts Options, watch func(client.Object, toolscache.ResourceEventHandler) error) (*clusterIPs, error) {
	ips := newClusterIPs(ipam.New(ipam.Options{ReuseDelay: opts.ClusterIPReuseDelay}), mgr.GetClient())
	if err := watch(&networkingv1.ServiceCIDR{}, feed.CIDRHandler(ips.alloc, ips.trackFamilies)); err != nil {
		return nil, err
	}
	held, exists, err := clusterIPLookups(ctx, mgr)
	if err != nil {
		return nil, err
	}
	if err := watch(&networkingv1.IPAddress{}, feed.AddressHandler(ips.alloc, held)); err != nil {
		return nil, err
	}
	if err := watch(&corev1.Service{}, feed.ServiceAddressHandler(ips.alloc, exists)); err != nil {
		return nil, err
	}
	// Read at request time from the cache; watching starts them now.
	for _, obj := range []client.Object{&svcnetv1alpha1.ServiceCIDRBinding{}, &corev1.Namespace{}} {
		if err := watch(obj, toolscache.ResourceEventHandlerFuncs{}); err != nil {
			return nil, err
		}
	}
	return ips, nil
}

// heldIndex indexes Services by their ClusterIPs, for the allocator.
const heldIndex = "svcnet.io/admission-clusterip"

// clusterIPLookups answers, from mgr's cache, whether a Service holds an
// address and whether its IPAddress exists: an address stays used while
// either does.
func clusterIPLookups(ctx context.Context, mgr ctrl.Manager) (held, exists func(addr string) bool, err error) {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &corev1.Service{}, heldIndex, func(obj client.Object) []string {
		return obj.(*corev1.Service).Spec.ClusterIPs
	}); err != nil {
		return nil, nil, fmt.Errorf("indexing Services by ClusterIP: %w", err)
	}
	c := mgr.GetClient()
	held = func(addr string) bool {
		var list corev1.ServiceList
		err := c.List(ctx, &list, client.MatchingFields{heldIndex: addr}, client.UnsafeDisableDeepCopy)
		return err == nil && len(list.Items) > 0
	}
	exists = func(addr string) bool {
		err := c.Get(ctx, client.ObjectKey{Name: addr}, &networkingv1.IPAddress{})
		return err == nil || !apierrors.IsNotFound(err)
	}
	return held, exists, nil
}

// addReadyzChecks adds "synced", a replica's readiness to lead (the
// Deployment's readinessProbe asks /readyz/synced, so a standby in sync is
// Ready and a rollout can proceed replica by replica; the webhook Service
// selects the leader by its Pod's label), and "admission", which passes
// on the replica that answers only.
func addReadyzChecks(mgr ctrl.Manager, h *Handler, allSynced func() bool) error {
	if err := mgr.AddReadyzCheck("synced", func(*http.Request) error {
		if !allSynced() {
			return errors.New("the allocators' caches are not in sync yet")
		}
		return nil
	}); err != nil {
		return err
	}
	return mgr.AddReadyzCheck("admission", func(*http.Request) error {
		if !h.active() {
			return errors.New("not the leader, or caches not in sync: not answering Service admission")
		}
		return nil
	})
}
