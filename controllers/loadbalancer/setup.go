package loadbalancer

import (
	"context"
	"net/netip"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/svcnet-io/svcnet/allocator/lbipam"
	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/internal/platform/tombstone"
)

var (
	descCapacity = prometheus.NewDesc("svcnet_loadbalancer_pool_capacity",
		"Addresses each LoadBalancerIPPool can give.", []string{"pool"}, nil)
	descAllocated = prometheus.NewDesc("svcnet_loadbalancer_pool_allocated",
		"Addresses of each LoadBalancerIPPool held by Services.", []string{"pool"}, nil)
	metricExhausted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "svcnet_loadbalancer_pool_exhausted_total",
		Help: "Allocations that found no free address, counted for every pool the Service could use.",
	}, []string{"pool"})
	registerOnce sync.Once
)

// usageCollector reads the allocator at scrape time, so the series of a
// deleted pool disappear with it. A restarted controller (tests) takes
// over the registration.
type usageCollector struct {
	mu    sync.Mutex
	alloc *lbipam.Allocator
}

var usage = &usageCollector{}

func (c *usageCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descCapacity
	ch <- descAllocated
}

func (c *usageCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	alloc := c.alloc
	c.mu.Unlock()
	if alloc == nil {
		return
	}
	for name, st := range alloc.Stats() {
		ch <- prometheus.MustNewConstMetric(descCapacity, prometheus.GaugeValue, float64(st.Capacity), name)
		ch <- prometheus.MustNewConstMetric(descAllocated, prometheus.GaugeValue, float64(st.Allocated), name)
	}
}

func registerMetrics(alloc *lbipam.Allocator) {
	usage.mu.Lock()
	usage.alloc = alloc
	usage.mu.Unlock()
	registerOnce.Do(func() { metrics.Registry.MustRegister(metricExhausted, usage) })
}

// +kubebuilder:rbac:groups="",resources=services;namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=services/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=networking.k8s.io,resources=ipaddresses,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=servicecidrs,verbs=get;list;watch
// +kubebuilder:rbac:groups=networking.svcnet.io,resources=loadbalancerippools,verbs=get;list;watch
// +kubebuilder:rbac:groups=networking.svcnet.io,resources=loadbalancerippools/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// indexes are the controller's field indexes.
var indexes = []struct {
	obj  client.Object
	name string
	fn   client.IndexerFunc
}{
	{&networkingv1.IPAddress{}, parentIndex, func(obj client.Object) []string {
		ipa := obj.(*networkingv1.IPAddress)
		if ipa.Labels[networkingv1.LabelManagedBy] != ManagedBy || ipa.Spec.ParentRef == nil || ipa.Spec.ParentRef.Resource != "services" {
			return nil
		}
		return []string{ipa.Spec.ParentRef.Namespace + "/" + ipa.Spec.ParentRef.Name}
	}},
	{&corev1.Service{}, ingressIndex, func(obj client.Object) []string {
		var out []string
		for _, ing := range obj.(*corev1.Service).Status.LoadBalancer.Ingress {
			if ing.IP != "" {
				out = append(out, ing.IP)
			}
		}
		return out
	}},
	{&corev1.Service{}, sharingIndex, func(obj client.Object) []string {
		if k := obj.GetAnnotations()[AnnotationSharingKey]; k != "" {
			return []string{k}
		}
		return nil
	}},
}

// SetupWithManager registers the Service controller, the pool status
// controller and the pool metrics.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	ctx := context.Background()
	idx := mgr.GetFieldIndexer()
	for _, ix := range indexes {
		if err := idx.IndexField(ctx, ix.obj, ix.name, ix.fn); err != nil {
			return err
		}
	}
	// Feed the allocator: pools, and the addresses svcnet's IPAddresses hold.
	pools, err := mgr.GetCache().GetInformer(ctx, &svcnetv1alpha1.LoadBalancerIPPool{})
	if err != nil {
		return err
	}
	if _, err := pools.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.setPool(obj) },
		UpdateFunc: func(_, obj any) { r.setPool(obj) },
		DeleteFunc: func(obj any) {
			if p, ok := tombstone.As[*svcnetv1alpha1.LoadBalancerIPPool](obj); ok {
				r.forgetPool(p.Name, p.UID)
			}
		},
	}); err != nil {
		return err
	}
	addrs, err := mgr.GetCache().GetInformer(ctx, &networkingv1.IPAddress{})
	if err != nil {
		return err
	}
	if _, err := addrs.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.observe(obj) },
		UpdateFunc: func(_, obj any) { r.observe(obj) },
		DeleteFunc: func(obj any) {
			if ipa, ok := tombstone.As[*networkingv1.IPAddress](obj); ok && ipa.Labels[networkingv1.LabelManagedBy] == ManagedBy {
				if a, err := netip.ParseAddr(ipa.Name); err == nil {
					r.alloc.Forget(a)
				}
			}
		},
	}); err != nil {
		return err
	}
	registerMetrics(r.alloc)

	// Services: LoadBalancers, and the ones that were (to release).
	services := predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool { return r.handles(e.Object.(*corev1.Service)) },
		UpdateFunc: func(e event.UpdateEvent) bool {
			return r.handles(e.ObjectOld.(*corev1.Service)) || r.handles(e.ObjectNew.(*corev1.Service))
		},
		DeleteFunc:  func(e event.DeleteEvent) bool { return true },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
	parent := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
		ipa := obj.(*networkingv1.IPAddress)
		if ipa.Labels[networkingv1.LabelManagedBy] != ManagedBy || ipa.Spec.ParentRef == nil {
			return nil
		}
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: ipa.Spec.ParentRef.Namespace, Name: ipa.Spec.ParentRef.Name}}}
	})
	// A pool, ServiceCIDR or namespace label change can make a Pending
	// Service servable, or a held address leave every pool.
	allLoadBalancers := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		var list corev1.ServiceList
		if err := r.client.List(ctx, &list); err != nil {
			return nil
		}
		var out []reconcile.Request
		for i := range list.Items {
			if r.handles(&list.Items[i]) {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
			}
		}
		return out
	})
	if err := ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&corev1.Service{}, builder.WithPredicates(services)).
		Watches(&networkingv1.IPAddress{}, parent).
		// Only spec changes: a pool's status moves with every allocation.
		Watches(&svcnetv1alpha1.LoadBalancerIPPool{}, allLoadBalancers, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&networkingv1.ServiceCIDR{}, allLoadBalancers).
		Watches(&corev1.Namespace{}, allLoadBalancers, builder.WithPredicates(predicate.LabelChangedPredicate{})).
		Complete(r); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName+"-pool").
		// A pool's spec change can end or start another's overlap.
		Watches(&svcnetv1alpha1.LoadBalancerIPPool{}, allPools(r.client), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&networkingv1.ServiceCIDR{}, allPools(r.client)).
		Watches(&networkingv1.IPAddress{}, allPools(r.client), builder.WithPredicates(predicate.NewPredicateFuncs(func(obj client.Object) bool {
			return obj.GetLabels()[networkingv1.LabelManagedBy] == ManagedBy
		}))).
		Complete(&poolReconciler{r})
}

// allPools enqueues every pool: overlap and usage are judged across pools.
func allPools(c client.Client) handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		var list svcnetv1alpha1.LoadBalancerIPPoolList
		if err := c.List(ctx, &list); err != nil {
			return nil
		}
		out := make([]reconcile.Request, 0, len(list.Items))
		for i := range list.Items {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKey{Name: list.Items[i].Name}})
		}
		return out
	})
}

func (r *Reconciler) setPool(obj any) {
	if p, ok := obj.(*svcnetv1alpha1.LoadBalancerIPPool); ok {
		r.feedPool(p)
	}
}

func (r *Reconciler) observe(obj any) {
	ipa, ok := obj.(*networkingv1.IPAddress)
	if !ok || ipa.Labels[networkingv1.LabelManagedBy] != ManagedBy || ipa.Spec.ParentRef == nil {
		return
	}
	if a, err := netip.ParseAddr(ipa.Name); err == nil {
		r.alloc.Observe(a, ipa.Spec.ParentRef.Namespace+"/"+ipa.Spec.ParentRef.Name)
	}
}

// poolReconciler keeps each pool's status: Ready, capacity, allocated.
type poolReconciler struct{ r *Reconciler }

func (p *poolReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var pool svcnetv1alpha1.LoadBalancerIPPool
	if err := p.r.client.Get(ctx, req.NamespacedName, &pool); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	states, err := p.r.poolStates(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	st := states[pool.Name]
	if st == nil {
		return ctrl.Result{}, nil
	}
	usage := p.r.alloc.Stats()[pool.Name]
	// The allocator may not have seen this generation yet: count from the
	// ranges the spec has now.
	capacity := lbipam.Capacity(st.ranges, pool.Spec.AvoidBuggyIPs)
	patch := client.MergeFrom(pool.DeepCopy())
	status := metav1.ConditionFalse
	if st.ready {
		status = metav1.ConditionTrue
	}
	changed := apimeta.SetStatusCondition(&pool.Status.Conditions, metav1.Condition{
		Type: "Ready", Status: status, Reason: st.reason, Message: st.message, ObservedGeneration: pool.Generation,
	})
	want := svcnetv1alpha1.LoadBalancerIPPoolStatus{Capacity: capacityString(capacity), Allocated: int64(usage.Allocated), ObservedGeneration: pool.Generation}
	if changed || pool.Status.Capacity != want.Capacity || pool.Status.Allocated != want.Allocated || pool.Status.ObservedGeneration != want.ObservedGeneration {
		pool.Status.Capacity, pool.Status.Allocated, pool.Status.ObservedGeneration = want.Capacity, want.Allocated, want.ObservedGeneration
		if err := p.r.client.Status().Patch(ctx, &pool, patch); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{}, nil
}
