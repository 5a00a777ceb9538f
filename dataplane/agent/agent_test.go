// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/svcnet-io/svcnet/dataplane"
	"github.com/svcnet-io/svcnet/dataplane/iptables"
	"github.com/svcnet-io/svcnet/dataplane/model"
	"github.com/svcnet-io/svcnet/test/builder"
)

func newFakeClient() client.Client {
	return fake.NewClientBuilder().WithScheme(scheme.Scheme).
		WithIndex(&discoveryv1.EndpointSlice{}, sliceServiceIndex, sliceServiceIndexValue).Build()
}

func testAgent(t *testing.T, c client.Client) (*Agent, *iptables.Fake) {
	t.Helper()
	return testAgentWithClock(t, c, clock.RealClock{})
}

// testAgentWithClock builds an agent for node-a with an IPv4 iptables
// backend on a Fake kernel.
func testAgentWithClock(t *testing.T, c client.Client, clk clock.WithTicker) (*Agent, *iptables.Fake) {
	t.Helper()
	fk := iptables.NewFake()
	cfg := testConfig(t, "--cluster-cidr=10.244.0.0/16")
	backend := iptables.NewBackend(corev1.IPv4Protocol, fk, iptables.Config{ClusterCIDRs: cfg.ClusterCIDRs[corev1.IPv4Protocol]})
	return newAgent(c, cfg, logr.Discard(), clk, []dataplane.Backend{backend}), fk
}

// testConfig completes the agent's options for node-a from flags.
func testConfig(t testing.TB, flags ...string) Config {
	t.Helper()
	opts := DefaultOptions()
	fs := pflag.NewFlagSet("agent", pflag.ContinueOnError)
	opts.AddFlags(fs)
	must(t, fs.Parse(append([]string{"--node-name=node-a"}, flags...)))
	cfg, err := opts.Complete()
	must(t, err)
	return cfg
}

func svc(name, ip string, mutate func(*corev1.Service)) *corev1.Service {
	s := builder.Service(name, "ns").Port("http", 80, intstr.FromInt32(8080)).Selector("app", name).Obj()
	s.Spec.ClusterIP, s.Spec.ClusterIPs = ip, []string{ip}
	if mutate != nil {
		mutate(s)
	}
	return s
}

func epSlice(svcName, name string, ips ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{discoveryv1.LabelServiceName: svcName}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for _, ip := range ips {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}, NodeName: ptr.To("node-a")})
	}
	return s
}

// TestIncrementalEqualsFull applies a sequence of changes, syncing after
// each with only the touched Services marked dirty, and checks that the
// rules always equal what a fresh agent renders from scratch.
func TestIncrementalEqualsFull(t *testing.T) {
	ctx := context.Background()
	c := newFakeClient()
	a, fk := testAgent(t, c)
	steps := []struct {
		name   string
		change func() []client.Object // objects touched, for the event handler
	}{
		{"initial objects", func() []client.Object {
			var objs []client.Object
			for i := range 5 {
				s := svc(fmt.Sprintf("s%d", i), fmt.Sprintf("10.96.0.%d", i+10), nil)
				sl := epSlice(s.Name, s.Name+"-1", fmt.Sprintf("10.244.%d.1", i), fmt.Sprintf("10.244.%d.2", i))
				must(t, c.Create(ctx, s))
				must(t, c.Create(ctx, sl))
				objs = append(objs, s, sl)
			}
			return objs
		}},
		{"an endpoint replaced", func() []client.Object {
			sl := &discoveryv1.EndpointSlice{}
			must(t, c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "s1-1"}, sl))
			sl.Endpoints[0].Addresses = []string{"10.244.1.99"}
			must(t, c.Update(ctx, sl))
			return []client.Object{sl}
		}},
		{"a second slice", func() []client.Object {
			sl := epSlice("s2", "s2-2", "10.244.2.3")
			must(t, c.Create(ctx, sl))
			return []client.Object{sl}
		}},
		{"a Service becomes NodePort", func() []client.Object {
			s := &corev1.Service{}
			must(t, c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "s3"}, s))
			s.Spec.Type = corev1.ServiceTypeNodePort
			s.Spec.Ports[0].NodePort = 30003
			must(t, c.Update(ctx, s))
			return []client.Object{s}
		}},
		{"a Service deleted, its slice left behind", func() []client.Object {
			s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s0"}}
			must(t, c.Delete(ctx, s))
			return []client.Object{s}
		}},
		{"all endpoints of a Service gone", func() []client.Object {
			// A delete event carries the object's last state, labels included.
			sl := &discoveryv1.EndpointSlice{}
			must(t, c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "s4-1"}, sl))
			must(t, c.Delete(ctx, sl))
			return []client.Object{sl}
		}},
	}
	for _, step := range steps {
		for _, obj := range step.change() {
			a.changed(nil, obj)
		}
		if err := a.SyncOnce(ctx); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		fresh, freshFake := testAgent(t, c)
		if err := fresh.SyncOnce(ctx); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(chainsOf(freshFake.Dump()), chainsOf(fk.Dump())); diff != "" {
			t.Fatalf("after %q the incremental rules differ from a full render (-full +incremental):\n%s", step.name, diff)
		}
	}
}

// chainsOf maps "table/chain" to its rules in order. The order in which
// chains are listed carries no meaning; the order of rules does.
func chainsOf(dump string) map[string][]string {
	out := map[string][]string{}
	table := ""
	for _, line := range strings.Split(dump, "\n") {
		switch {
		case strings.HasPrefix(line, "*"):
			table = line[1:]
		case strings.HasPrefix(line, ":"):
			name := strings.Fields(line[1:])[0]
			if _, ok := out[table+"/"+name]; !ok {
				out[table+"/"+name] = []string{}
			}
		case strings.HasPrefix(line, "-A "):
			chain, rule, _ := strings.Cut(line[3:], " ")
			out[table+"/"+chain] = append(out[table+"/"+chain], rule)
		}
	}
	return out
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestPeriodicResyncIsPartial checks that a periodic resync rewrites
// nothing when nothing changed, and everything once fullSyncPeriod passed:
// at 10,000 Services a full restore takes minutes on iptables-nft. The
// agent's clock is fake: each resync is shown to have run (its success
// time is the fake clock's) before the restores are counted.
func TestPeriodicResyncIsPartial(t *testing.T) {
	c := newFakeClient()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := c.Create(ctx, svc("web", "10.96.0.10", nil)); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, epSlice("web", "web-1", "10.244.1.2")); err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	a, fk := testAgentWithClock(t, c, clk)
	done := make(chan error)
	go func() { done <- a.Loop(ctx) }()
	restores := func() int {
		fk.Lock()
		defer fk.Unlock()
		return fk.Restores
	}
	synced := syncedAt(a, clk)
	waitFor(ctx, t, "the first sync", func() bool { return restores() == 1 && synced() })
	for i := range 3 {
		clk.Step(a.cfg.SyncPeriod)
		waitFor(ctx, t, fmt.Sprintf("periodic resync %d", i+1), synced)
		if n := restores(); n != 1 {
			t.Fatalf("periodic resync %d of unchanged rules restored, %d restores in all, want 1", i+1, n)
		}
	}
	clk.Step(fullSyncPeriod)
	waitFor(ctx, t, "the hourly full resync", func() bool { return restores() == 2 && synced() })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// syncedAt reports whether the agent's last successful sync ran at the
// fake clock's present time.
func syncedAt(a *Agent, clk *clocktesting.FakeClock) func() bool {
	return func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.lastSuccess.Equal(clk.Now())
	}
}

func waitFor(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// countingBackend counts the renders handed to a backend, by Service.
type countingBackend struct {
	dataplane.Backend
	mu      sync.Mutex
	renders map[string]int
}

func (c *countingBackend) SetService(key types.NamespacedName, ports []*model.ServicePort) {
	c.mu.Lock()
	c.renders[key.String()]++
	c.mu.Unlock()
	c.Backend.SetService(key, ports)
}

func (c *countingBackend) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.renders
	c.renders = map[string]int{}
	return out
}

// TestPeriodicResyncRendersOnlyUnseenChanges checks that a periodic resync
// re-renders no Service whose objects are the ones it was rendered from
// (at 50,000 Services reading them all is seconds that a change would wait
// behind) and still repairs a Service whose change the agent missed.
// The agent here has no informers: a write to the client is a change
// without an event.
func TestPeriodicResyncRendersOnlyUnseenChanges(t *testing.T) {
	c := newFakeClient()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, o := range []client.Object{svc("web", "10.96.0.10", nil), epSlice("web", "web-1", "10.244.1.2"),
		svc("api", "10.96.0.11", nil), epSlice("api", "api-1", "10.244.1.3")} {
		must(t, c.Create(ctx, o))
	}
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	fk := iptables.NewFake()
	counter := &countingBackend{Backend: iptables.NewBackend(corev1.IPv4Protocol, fk, iptables.Config{}), renders: map[string]int{}}
	a := newAgent(c, testConfig(t), logr.Discard(), clk, []dataplane.Backend{counter})
	done := make(chan error)
	go func() { done <- a.Loop(ctx) }()
	waitFor(ctx, t, "the first sync", syncedAt(a, clk))
	if got, want := counter.take(), map[string]int{"ns/web": 1, "ns/api": 1}; !cmp.Equal(got, want) {
		t.Fatalf("first sync rendered %v, want %v", got, want)
	}

	clk.Step(a.cfg.SyncPeriod)
	waitFor(ctx, t, "a periodic recheck", recheckedAndSynced(a, 1))
	if got := counter.take(); len(got) != 0 {
		t.Fatalf("a periodic recheck with nothing changed rendered %v, want nothing", got)
	}

	var slice discoveryv1.EndpointSlice
	must(t, c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "api-1"}, &slice))
	slice.Endpoints[0].Addresses = []string{"10.244.1.9"}
	must(t, c.Update(ctx, &slice))
	clk.Step(a.cfg.SyncPeriod)
	waitFor(ctx, t, "a periodic recheck", recheckedAndSynced(a, 2))
	if got, want := counter.take(), map[string]int{"ns/api": 1}; !cmp.Equal(got, want) {
		t.Fatalf("a periodic recheck after an unseen slice change rendered %v, want %v", got, want)
	}
	if dump := fk.Dump(); !strings.Contains(dump, "10.244.1.9:8080") || strings.Contains(dump, "10.244.1.3:8080") {
		t.Fatalf("the rules do not send api to its new endpoint only:\n%s", dump)
	}

	must(t, c.Delete(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"}}))
	clk.Step(a.cfg.SyncPeriod)
	waitFor(ctx, t, "a periodic recheck", recheckedAndSynced(a, 3))
	if dump := fk.Dump(); strings.Contains(dump, "10.96.0.10") {
		t.Fatalf("a periodic recheck after an unseen Service delete left its rules:\n%s", dump)
	}
	counter.take()

	clk.Step(fullSyncPeriod)
	waitFor(ctx, t, "the hourly full resync", syncedAt(a, clk))
	if got, want := counter.take(), map[string]int{"ns/api": 1}; !cmp.Equal(got, want) {
		t.Fatalf("the hourly full resync rendered %v, want %v", got, want)
	}
	cancel()
	must(t, <-done)
}

// TestPeriodicRecheckGoesInStepsBetweenChanges checks that a recheck of
// many Services is done a chunk at a time, with a change queued meanwhile
// synced before the recheck ends: at 50,000 Services a recheck in one
// piece held a change back for seconds.
func TestPeriodicRecheckGoesInStepsBetweenChanges(t *testing.T) {
	ctx := context.Background()
	services := 3*recheckChunk + 10
	m := newMemReader(services)
	a := newAgent(m, testConfig(t), logr.Discard(), clock.RealClock{}, []dataplane.Backend{
		iptables.NewBackend(corev1.IPv4Protocol, iptables.NewFake(), iptables.Config{})})
	must(t, a.SyncOnce(ctx))

	a.periodicResync()
	a.recheckStep(ctx)
	if !a.rechecking || a.recheckPasses != 0 {
		t.Fatalf("after one step of a recheck of %d Services: rechecking %v, %d passes done; want a recheck under way", services, a.rechecking, a.recheckPasses)
	}
	// A change now is synced at once, between two steps.
	changedKey, unseenKey := a.order[0], a.order[len(a.order)-1]
	next := m.slices[changedKey.String()][0].DeepCopy()
	next.ResourceVersion = "2"
	next.Endpoints[0].Addresses = []string{"10.200.0.1"}
	a.changed(m.slices[changedKey.String()][0], next)
	m.slices[changedKey.String()] = []*discoveryv1.EndpointSlice{next}
	// And one that no event tells of, in the last chunk.
	unseen := m.slices[unseenKey.String()][0].DeepCopy()
	unseen.ResourceVersion = "2"
	unseen.Endpoints[0].Addresses = []string{"10.200.0.2"}
	m.slices[unseenKey.String()] = []*discoveryv1.EndpointSlice{unseen}
	a.mu.Lock()
	queued := maps.Clone(a.dirty)
	a.mu.Unlock()
	if !cmp.Equal(queued, map[types.NamespacedName]bool{changedKey: true}) {
		t.Fatalf("queued between two steps: %v, want %s", queued, changedKey)
	}
	must(t, a.SyncOnce(ctx))
	steps := 1
	for a.rechecking {
		a.recheckStep(ctx)
		steps++
	}
	if want := services/recheckChunk + 1; steps != want || a.recheckPasses != 1 {
		t.Fatalf("the recheck took %d steps and %d passes, want %d steps of %d Services and one pass", steps, a.recheckPasses, want, recheckChunk)
	}
	if work := a.takePending(); !cmp.Equal(work.dirty, map[types.NamespacedName]bool{unseenKey: true}) {
		t.Fatalf("the recheck queued %v, want the Service changed without an event, %s", work.dirty, unseenKey)
	}
}

// recheckedAndSynced reports whether the agent finished its passes'th
// periodic recheck and synced everything it queued.
func recheckedAndSynced(a *Agent, passes int) func() bool {
	return func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.recheckPasses >= passes && len(a.dirty) == 0 && len(a.queuedAt) == 0 && len(a.syncingQueuedAt) == 0
	}
}

// TestNotificationOfAlreadyRenderedObjectsRendersNothing checks that a
// Service marked dirty by a notification for objects it was already
// rendered from is not rendered again (a relist's adds arrive for objects
// a full sync has read; at 10,000 Services re-rendering them all held a
// change back most of a second). A notification for a real change still
// renders.
func TestNotificationOfAlreadyRenderedObjectsRendersNothing(t *testing.T) {
	c := newFakeClient()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	web, webSlice := svc("web", "10.96.0.10", nil), epSlice("web", "web-1", "10.244.1.2")
	api, apiSlice := svc("api", "10.96.0.11", nil), epSlice("api", "api-1", "10.244.1.3")
	for _, o := range []client.Object{web, webSlice, api, apiSlice} {
		must(t, c.Create(ctx, o))
	}
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	counter := &countingBackend{Backend: iptables.NewBackend(corev1.IPv4Protocol, iptables.NewFake(), iptables.Config{}), renders: map[string]int{}}
	a := newAgent(c, testConfig(t), logr.Discard(), clk, []dataplane.Backend{counter})
	must(t, a.SyncOnce(ctx))
	if got, want := counter.take(), map[string]int{"ns/web": 1, "ns/api": 1}; !cmp.Equal(got, want) {
		t.Fatalf("first sync rendered %v, want %v", got, want)
	}

	for _, o := range []any{web, webSlice, api, apiSlice} {
		a.changed(nil, o)
	}
	must(t, a.SyncOnce(ctx))
	if got := counter.take(); len(got) != 0 {
		t.Fatalf("notifications of the objects already rendered rendered %v, want nothing", got)
	}

	apiSlice.Endpoints[0].Addresses = []string{"10.244.1.9"}
	must(t, c.Update(ctx, apiSlice))
	a.changed(nil, apiSlice)
	must(t, a.SyncOnce(ctx))
	if got, want := counter.take(), map[string]int{"ns/api": 1}; !cmp.Equal(got, want) {
		t.Fatalf("a notification of a changed slice rendered %v, want %v", got, want)
	}
}

// TestInitialListIsLeftToTheFirstSync checks that the informers' initial
// adds queue nothing (the first, full sync reads those objects from the
// synced caches; re-reading 50,000 Services after it held the first
// changes back) while a later add does.
func TestInitialListIsLeftToTheFirstSync(t *testing.T) {
	c := newFakeClient()
	a, _ := testAgent(t, c)
	must(t, a.SyncOnce(context.Background()))
	h := a.handler()
	h.OnAdd(svc("web", "10.96.0.10", nil), true)
	h.OnAdd(epSlice("web", "web-1", "10.244.1.2"), true)
	if work := a.takePending(); len(work.dirty) != 0 || work.all || len(work.queuedAt) != 0 {
		t.Fatalf("the initial list queued %+v, want nothing", work)
	}
	h.OnAdd(svc("api", "10.96.0.11", nil), false)
	if work := a.takePending(); !cmp.Equal(work.dirty, map[types.NamespacedName]bool{{Namespace: "ns", Name: "api"}: true}) || len(work.queuedAt) == 0 {
		t.Fatalf("an add after the initial list queued %+v, want ns/api", work)
	}
}

// TestHealthEntriesFollowRenders checks that the health check node ports
// served follow each Service's renders: added with a Local policy, gone
// when the policy or the Service goes.
func TestHealthEntriesFollowRenders(t *testing.T) {
	ctx := context.Background()
	c := newFakeClient()
	a, _ := testAgent(t, c)
	lb := svc("lb", "10.96.0.20", func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		s.Spec.HealthCheckNodePort = 30100
		s.Spec.Ports[0].NodePort = 30001
	})
	must(t, c.Create(ctx, svc("web", "10.96.0.10", nil)))
	must(t, c.Create(ctx, epSlice("web", "web-1", "10.244.1.2")))
	must(t, c.Create(ctx, lb))
	must(t, c.Create(ctx, epSlice("lb", "lb-1", "10.244.1.3", "10.244.1.4")))
	must(t, a.SyncOnce(ctx))
	if got, want := a.healthEntries(), map[int32]healthEntry{30100: {namespace: "ns", name: "lb", local: map[corev1.IPFamily]int{corev1.IPv4Protocol: 2}}}; !cmp.Equal(got, want, cmp.AllowUnexported(healthEntry{})) {
		t.Fatalf("health check node ports %v, want %v", got, want)
	}

	must(t, c.Get(ctx, client.ObjectKeyFromObject(lb), lb))
	lb.Spec.ExternalTrafficPolicy, lb.Spec.HealthCheckNodePort = corev1.ServiceExternalTrafficPolicyCluster, 0
	must(t, c.Update(ctx, lb))
	a.changed(nil, lb)
	must(t, a.SyncOnce(ctx))
	if got := a.healthEntries(); len(got) != 0 {
		t.Fatalf("health check node ports after the policy went to Cluster: %v, want none", got)
	}

	lb.Spec.ExternalTrafficPolicy, lb.Spec.HealthCheckNodePort = corev1.ServiceExternalTrafficPolicyLocal, 30100
	must(t, c.Update(ctx, lb))
	a.changed(nil, lb)
	must(t, a.SyncOnce(ctx))
	must(t, c.Delete(ctx, lb))
	a.changed(nil, lb)
	must(t, a.SyncOnce(ctx))
	if got := a.healthEntries(); len(got) != 0 || len(a.withHealth) != 0 {
		t.Fatalf("health check node ports after the Service went: %v (%v), want none", got, a.withHealth)
	}
}

// recordingBackend keeps what the last sync and renders were given.
type recordingBackend struct {
	dataplane.Backend
	node  dataplane.Node
	ports map[string][]*model.ServicePort
}

func (r *recordingBackend) SetService(key types.NamespacedName, ports []*model.ServicePort) {
	r.ports[key.String()] = ports
	r.Backend.SetService(key, ports)
}

func (r *recordingBackend) Sync(ctx context.Context, node dataplane.Node) (dataplane.SyncResult, error) {
	r.node = node
	return r.Backend.Sync(ctx, node)
}

// TestServiceCIDRsAndNodeIPsReachTheRules checks the agent's inputs beyond
// Services and slices: every ServiceCIDR's ranges of the backend's family
// reach each sync (nftables mode drops traffic to their unallocated
// addresses), and the Node's InternalIP decides whether its own traffic
// passes loadBalancerSourceRanges, re-rendered when it changes.
func TestServiceCIDRsAndNodeIPsReachTheRules(t *testing.T) {
	ctx := context.Background()
	c := newFakeClient()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
		{Type: corev1.NodeExternalIP, Address: "203.0.113.7"}, {Type: corev1.NodeInternalIP, Address: "192.168.0.10"}}}}
	kubernetes := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes"},
		Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.96.0.0/16", "fd00:96::/112"}}}
	lb := svc("lb", "10.96.0.20", func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.LoadBalancerSourceRanges = []string{" 192.168.0.0/24 "}
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.10"}}
	})
	for _, o := range []client.Object{node, kubernetes, lb, epSlice("lb", "lb-1", "10.244.1.2")} {
		must(t, c.Create(ctx, o))
	}
	rec := &recordingBackend{Backend: iptables.NewBackend(corev1.IPv4Protocol, iptables.NewFake(), iptables.Config{}), ports: map[string][]*model.ServicePort{}}
	a := newAgent(c, testConfig(t), logr.Discard(), clock.RealClock{}, []dataplane.Backend{rec})
	must(t, a.SyncOnce(ctx))
	want := []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")}
	if diff := cmp.Diff(want, rec.node.ServiceCIDRs, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
		t.Errorf("ServiceCIDRs of the IPv4 sync (-want +got):\n%s", diff)
	}
	if p := rec.ports["ns/lb"]; len(p) != 1 || !p[0].AllowFromNode {
		t.Errorf("the node's InternalIP 192.168.0.10 is in 192.168.0.0/24, but the port does not allow the node: %+v", p)
	}

	extra := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "extra"}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.100.0.0/24"}}}
	must(t, c.Create(ctx, extra))
	a.changed(nil, extra)
	must(t, a.SyncOnce(ctx))
	want = append(want, netip.MustParsePrefix("10.100.0.0/24"))
	if diff := cmp.Diff(want, rec.node.ServiceCIDRs, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
		t.Errorf("ServiceCIDRs after one was added (-want +got):\n%s", diff)
	}

	old := node.DeepCopy()
	node.Status.Addresses[1].Address = "192.168.1.10"
	must(t, c.Status().Update(ctx, node))
	a.changed(old, node)
	must(t, a.SyncOnce(ctx))
	if p := rec.ports["ns/lb"]; len(p) != 1 || p[0].AllowFromNode {
		t.Errorf("the node's InternalIP moved out of the ranges, but the port still allows the node: %+v", p)
	}
}

func TestNodeIPsAsKubeProxyPicksThem(t *testing.T) {
	addrs := func(a ...corev1.NodeAddress) *corev1.Node {
		return &corev1.Node{Status: corev1.NodeStatus{Addresses: a}}
	}
	internal := func(ip string) corev1.NodeAddress {
		return corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip}
	}
	external := func(ip string) corev1.NodeAddress {
		return corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: ip}
	}
	for name, tc := range map[string]struct {
		node *corev1.Node
		want []string
	}{
		"InternalIP before ExternalIP":   {addrs(external("203.0.113.1"), internal("10.0.0.1")), []string{"10.0.0.1"}},
		"dual-stack, first family first": {addrs(internal("fd00::1"), internal("10.0.0.1"), internal("10.0.0.2")), []string{"fd00::1", "10.0.0.1"}},
		"ExternalIP alone":               {addrs(external("203.0.113.1")), []string{"203.0.113.1"}},
		"none":                           {addrs(corev1.NodeAddress{Type: corev1.NodeHostName, Address: "n"}), nil},
	} {
		t.Run(name, func(t *testing.T) {
			var got []string
			for _, ip := range nodeIPs(tc.node) {
				got = append(got, ip.String())
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("nodeIPs (-want +got):\n%s", diff)
			}
		})
	}
}

// TestInformersSkipHeadlessSlices checks that the agent's cache, like
// kube-proxy's informer, does not watch EndpointSlices labelled
// service.kubernetes.io/headless (upstream's e2e "should implement
// service.kubernetes.io/headless"), and watches every other slice.
func TestInformersSkipHeadlessSlices(t *testing.T) {
	var sel labels.Selector
	for obj, by := range cacheOptions("node-a").ByObject {
		if _, ok := obj.(*discoveryv1.EndpointSlice); ok {
			sel = by.Label
		}
	}
	if sel == nil {
		t.Fatal("the EndpointSlice informer has no label selector")
	}
	for _, tc := range []struct {
		labels  map[string]string
		watched bool
	}{
		{map[string]string{discoveryv1.LabelServiceName: "web"}, true},
		{map[string]string{discoveryv1.LabelServiceName: "web", corev1.IsHeadlessService: ""}, false},
		{map[string]string{corev1.IsHeadlessService: "anything"}, false},
		{nil, true},
	} {
		if got := sel.Matches(labels.Set(tc.labels)); got != tc.watched {
			t.Errorf("a slice labelled %v watched = %v, want %v", tc.labels, got, tc.watched)
		}
	}
}
