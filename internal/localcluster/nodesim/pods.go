package nodesim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/svcnet-io/svcnet/internal/localcluster/netlab"
)

// DefaultPort is served by a Pod that declares no containerPort, as the
// web server images a walkthrough uses (nginx, httpd) would.
const DefaultPort = 80

// ReportingController is the reportingController of the simulator's Events.
const ReportingController = "svcnet-node-simulator"

// Options configure the simulator.
type Options struct {
	Nodes []Node
	// Now is the clock (tests); nil: time.Now.
	Now func() time.Time
	// Programs are the images run for real; a Pod with none of them gets
	// a server on each containerPort instead.
	Programs []Program
	// PodsDir holds the files of each Pod that runs Programs (volumes,
	// resolv.conf, hosts, container roots); LogDir receives each such
	// container's output as <namespace>_<pod>_<container>.log. Both are
	// needed with Programs.
	PodsDir, LogDir string
	// DNS is the kubelet's DNS settings, for the Pods' resolv.conf.
	DNS DNS
	// RestartBackoff is the first crash back-off (the kubelet's 10 s when
	// zero), doubled per restart up to 5 minutes.
	RestartBackoff time.Duration
}

// Add registers the Node keeper and the Pod reconciler with mgr.
func Add(mgr manager.Manager, opts Options) error {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	log := mgr.GetLogger().WithName("node-simulator")
	if err := mgr.Add(&nodeKeeper{c: mgr.GetClient(), r: mgr.GetAPIReader(), nodes: opts.Nodes, log: log, now: now}); err != nil {
		return err
	}
	if len(opts.Programs) > 0 && (opts.PodsDir == "" || opts.LogDir == "") {
		return errors.New("node simulator: Programs need PodsDir and LogDir")
	}
	r := newPodReconciler(mgr.GetClient(), mgr.GetEventRecorder(ReportingController), log, now, opts)
	// The Programs' processes end with the simulator.
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		r.stopAll()
		return nil
	})); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("node-simulator").
		For(&corev1.Pod{}).
		WatchesRawSource(source.Channel(r.changes, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: 8}).
		Complete(r)
}

// newPodReconciler is the kubelets' and scheduler's state for opts.Nodes.
func newPodReconciler(c client.Client, recorder events.EventRecorder, log logr.Logger, now func() time.Time, opts Options) *podReconciler {
	r := &podReconciler{
		c: c, recorder: recorder, log: log, now: now,
		nodes: map[string]*nodeState{}, pods: map[types.NamespacedName]*runningPod{}, bound: map[types.NamespacedName]string{},
		changes: make(chan event.GenericEvent, 64), stopping: make(chan struct{}),
	}
	r.runtime = &runtimeEnv{
		c: c, log: log, now: now, programs: opts.Programs, podsDir: opts.PodsDir, logDir: opts.LogDir,
		dns: opts.DNS, backoff: cmp.Or(opts.RestartBackoff, defaultRestartBackoff), changed: r.changed,
	}
	for _, n := range opts.Nodes {
		r.nodes[n.Name] = &nodeState{Node: n, used: map[netip.Addr]bool{}}
		r.order = append(r.order, n.Name)
	}
	return r
}

// changed asks for a Pod's status to be written again: one of its
// Program containers started, exited or changed readiness.
func (r *podReconciler) changed(key client.ObjectKey) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	select {
	case r.changes <- event.GenericEvent{Object: pod}:
	case <-r.stopping: // the controller no longer reads
	}
}

// stopAll stops every Pod's Programs, as a node going down would.
func (r *podReconciler) stopAll() {
	close(r.stopping)
	r.mu.Lock()
	var rts []*podRuntime
	for _, run := range r.pods {
		if run.rt != nil {
			rts = append(rts, run.rt)
		}
	}
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, rt := range rts {
		wg.Go(func() { _ = rt.stop() })
	}
	wg.Wait()
}

type nodeState struct {
	Node
	used  map[netip.Addr]bool
	count int // Pods bound here and not yet gone
}

// runningPod is a Pod with a namespace.
type runningPod struct {
	uid     types.UID
	node    string
	net     *netlab.Pod
	started time.Time
	// stopping is when the deletion was first seen.
	stopping time.Time
	// rt runs the Pod's Programs, if it has any.
	rt *podRuntime
}

type podReconciler struct {
	c        client.Client
	recorder events.EventRecorder
	log      logr.Logger
	now      func() time.Time

	mu    sync.Mutex
	nodes map[string]*nodeState
	order []string
	pods  map[types.NamespacedName]*runningPod
	// bound remembers which node each known Pod is on, for spreading.
	bound map[types.NamespacedName]string

	runtime *runtimeEnv
	changes chan event.GenericEvent
	// stopping is closed when the simulator stops.
	stopping chan struct{}
}

func (r *podReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var pod corev1.Pod
	if err := r.c.Get(ctx, req.NamespacedName, &pod); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, r.stop(req.NamespacedName)
		}
		return ctrl.Result{}, err
	}
	if pod.Spec.NodeName == "" {
		// The simulator is the scheduler and every kubelet at once: the
		// Pod starts with its binding, without waiting for the binding to
		// come back through the watch.
		node, err := r.bind(ctx, &pod)
		if node == "" || err != nil {
			return ctrl.Result{}, err
		}
		pod.Spec.NodeName = node
	}
	r.mu.Lock()
	node := r.nodes[pod.Spec.NodeName]
	r.remember(req.NamespacedName, pod.Spec.NodeName)
	r.mu.Unlock()
	if node == nil {
		return ctrl.Result{}, nil // not a simulated node
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return ctrl.Result{}, r.stop(req.NamespacedName)
	}
	if pod.DeletionTimestamp != nil {
		return r.terminate(ctx, &pod)
	}
	run, err := r.start(ctx, &pod, node)
	if err != nil {
		r.recorder.Eventf(&pod, nil, corev1.EventTypeWarning, "FailedCreatePodSandBox", "CreateSandbox", "Simulated Pod network: %v", err)
		return ctrl.Result{}, err
	}
	return r.writeStatus(ctx, &pod, node, run)
}

// remember records pod's node for spreading; r.mu is held.
func (r *podReconciler) remember(key types.NamespacedName, node string) {
	if old, ok := r.bound[key]; ok {
		if old == node {
			return
		}
		if s := r.nodes[old]; s != nil {
			s.count--
		}
	}
	r.bound[key] = node
	if s := r.nodes[node]; s != nil {
		s.count++
	}
}

// forget drops a Pod from the spreading counts; r.mu is held.
func (r *podReconciler) forget(key types.NamespacedName) {
	if old, ok := r.bound[key]; ok {
		if s := r.nodes[old]; s != nil {
			s.count--
		}
		delete(r.bound, key)
	}
}

// bind schedules pod on the simulated node with the fewest Pods among
// those its nodeSelector accepts, as the scheduler's spreading would, and
// returns the node; none when pod is not bound here. The Pod's namespace
// is made while the binding is written, and removed if the binding fails.
func (r *podReconciler) bind(ctx context.Context, pod *corev1.Pod) (string, error) {
	if pod.Spec.SchedulerName != "" && pod.Spec.SchedulerName != corev1.DefaultSchedulerName {
		return "", nil // another scheduler's Pod
	}
	key := client.ObjectKeyFromObject(pod)
	// Cordoned nodes (kubectl cordon) take no new Pods.
	cordoned := map[string]bool{}
	for _, name := range r.order {
		var node corev1.Node
		if err := r.c.Get(ctx, client.ObjectKey{Name: name}, &node); err == nil && node.Spec.Unschedulable {
			cordoned[name] = true
		}
	}
	r.mu.Lock()
	best := ""
	for _, name := range r.order {
		n := r.nodes[name]
		if cordoned[name] || !labels.SelectorFromSet(pod.Spec.NodeSelector).Matches(labels.Set(nodeObject(n.Node).Labels)) {
			continue
		}
		if best == "" || n.count < r.nodes[best].count {
			best = name
		}
	}
	if best != "" {
		r.remember(key, best)
	}
	r.mu.Unlock()
	if best == "" {
		r.recorder.Eventf(pod, nil, corev1.EventTypeWarning, "FailedScheduling", "Scheduling", "No schedulable simulated node matches the Pod's nodeSelector %v", pod.Spec.NodeSelector)
		return "", nil
	}
	started := make(chan struct{})
	bound := pod.DeepCopy() // the client writes to pod meanwhile
	bound.Spec.NodeName = best
	go func() {
		defer close(started)
		if bound.DeletionTimestamp == nil {
			// A failure is retried, and reported, by the start after binding.
			_, _ = r.start(ctx, bound, r.nodes[best])
		}
	}()
	binding := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: best},
	}
	err := r.c.SubResource("binding").Create(ctx, pod, binding)
	<-started
	if err != nil {
		stopErr := r.stop(key)
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return "", stopErr // bound meanwhile, or gone: the next event tells
		}
		return "", errors.Join(fmt.Errorf("binding Pod %s to %s: %w", key, best, err), stopErr)
	}
	r.recorder.Eventf(pod, nil, corev1.EventTypeNormal, "Scheduled", "Binding", "Successfully assigned %s to %s", key, best)
	return best, nil
}

// start gives pod its namespace, its servers and its Programs, once per
// Pod UID.
func (r *podReconciler) start(ctx context.Context, pod *corev1.Pod, node *nodeState) (*runningPod, error) {
	key := client.ObjectKeyFromObject(pod)
	r.mu.Lock()
	run := r.pods[key]
	r.mu.Unlock()
	if run != nil && run.uid == pod.UID {
		return run, nil
	}
	if run != nil {
		// Same name, new Pod (a StatefulSet replacement): start over.
		if err := r.stop(key); err != nil {
			return nil, err
		}
	}
	run = &runningPod{uid: pod.UID, node: node.Name, started: r.now()}
	netnsPath, ip := netlab.Path(node.Net.NetNS), node.Net.IP
	if !pod.Spec.HostNetwork {
		np, err := r.startNetwork(pod, node)
		if err != nil {
			return nil, err
		}
		run.net, netnsPath, ip = np, netlab.Path(np.NetNS), np.IP
	}
	if runsPrograms(r.runtime.programs, pod) {
		rt, err := r.runtime.startRuntime(ctx, pod, netnsPath, ip)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("starting the Pod's containers: %w", err), r.removeNetwork(run))
		}
		run.rt = rt
	}
	r.mu.Lock()
	r.pods[key] = run
	r.mu.Unlock()
	r.log.V(1).Info("Started Pod", "pod", key, "node", node.Name, "ip", ip)
	return run, nil
}

// startNetwork makes the Pod's namespace with an address of its node and
// a server on each containerPort its Programs do not serve.
func (r *podReconciler) startNetwork(pod *corev1.Pod, node *nodeState) (*netlab.Pod, error) {
	ip, err := r.takeIP(node, pod)
	if err != nil {
		return nil, err
	}
	np, err := node.Net.NewPod(podRole(pod), ip)
	if err != nil {
		r.releaseIP(node.Name, ip)
		return nil, err
	}
	name := []byte(pod.Name + "\n")
	for _, p := range servedPorts(pod, r.runtime.programs) {
		switch p.Protocol {
		case corev1.ProtocolUDP:
			err = np.ServeUDP(int(p.ContainerPort), func(net.Addr) []byte { return name })
		default:
			err = np.ServeHTTP(int(p.ContainerPort), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(name) }))
		}
		if err != nil {
			_ = np.Remove()
			r.releaseIP(node.Name, ip)
			return nil, fmt.Errorf("serving %s port %d: %w", p.Protocol, p.ContainerPort, err)
		}
	}
	return np, nil
}

// removeNetwork removes the Pod's namespace and frees its address.
func (r *podReconciler) removeNetwork(run *runningPod) error {
	if run.net == nil {
		return nil
	}
	err := run.net.Remove()
	r.releaseIP(run.node, run.net.IP)
	return err
}

// podRole names the Pod's namespace: "pod-<namespace>-<name>", cut with a
// hash to stay a valid file name.
func podRole(pod *corev1.Pod) string {
	role := "pod-" + pod.Namespace + "-" + pod.Name
	if len(role) > 200 {
		role = fmt.Sprintf("%s-%s", role[:180], string(pod.UID)[:8])
	}
	return role
}

// servedPorts are the TCP and UDP containerPorts (restartable init
// containers included), each once, of the Pod's containers that are not
// Programs; DefaultPort when the Pod declares none and runs no Program.
func servedPorts(pod *corev1.Pod, programs []Program) []corev1.ContainerPort {
	var out []corev1.ContainerPort
	seen := map[string]bool{}
	add := func(c corev1.Container) {
		if _, ok := programFor(programs, c.Image); ok {
			return
		}
		for _, p := range c.Ports {
			proto := p.Protocol
			if proto == "" {
				proto = corev1.ProtocolTCP
			}
			k := fmt.Sprintf("%s/%d", proto, p.ContainerPort)
			if proto == corev1.ProtocolSCTP || seen[k] {
				continue
			}
			seen[k] = true
			out = append(out, corev1.ContainerPort{ContainerPort: p.ContainerPort, Protocol: proto})
		}
	}
	for _, c := range pod.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			add(c)
		}
	}
	for _, c := range pod.Spec.Containers {
		add(c)
	}
	if len(out) == 0 && !runsPrograms(programs, pod) {
		out = append(out, corev1.ContainerPort{ContainerPort: DefaultPort, Protocol: corev1.ProtocolTCP})
	}
	return out
}

// takeIP picks the Pod's address: the one it already reports, if it is in
// the node's CIDR and free (a restart of svcnet up keeps addresses), else
// the lowest free one (the network address and .1 are never used).
func (r *podReconciler) takeIP(node *nodeState, pod *corev1.Pod) (netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cidr := node.Net.PodCIDR
	if prev, err := netip.ParseAddr(pod.Status.PodIP); err == nil && cidr.Contains(prev) && prev != cidr.Addr() && prev != cidr.Addr().Next() && !node.used[prev] && !isBroadcast(cidr, prev) {
		node.used[prev] = true
		return prev, nil
	}
	for a := cidr.Addr().Next().Next(); cidr.Contains(a); a = a.Next() {
		if isBroadcast(cidr, a) {
			break
		}
		if !node.used[a] {
			node.used[a] = true
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("node %s has no free address left in its Pod CIDR %s", node.Name, cidr)
}

func isBroadcast(cidr netip.Prefix, a netip.Addr) bool {
	return a.Is4() && !cidr.Contains(a.Next())
}

func (r *podReconciler) releaseIP(node string, ip netip.Addr) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := r.nodes[node]; n != nil {
		delete(n.used, ip)
	}
}

// stop removes a Pod's namespace, if it has one.
func (r *podReconciler) stop(key types.NamespacedName) error {
	r.mu.Lock()
	run := r.pods[key]
	delete(r.pods, key)
	r.forget(key)
	r.mu.Unlock()
	if run == nil {
		return nil
	}
	var errs []error
	if run.rt != nil {
		errs = append(errs, run.rt.stop())
	}
	errs = append(errs, r.removeNetwork(run))
	r.log.V(1).Info("Stopped Pod", "pod", key, "node", run.node)
	return errors.Join(errs...)
}

// terminate keeps a deleted Pod serving for its preStop sleep (at most its
// grace period, the time the kubelet would give it), then removes its
// namespace and finishes the deletion, as the kubelet does.
func (r *podReconciler) terminate(ctx context.Context, pod *corev1.Pod) (ctrl.Result, error) {
	grace := time.Duration(ptr.Deref(pod.DeletionGracePeriodSeconds, 0)) * time.Second
	// The grace period runs from when the kubelet saw the deletion (the
	// deletion timestamp has only seconds).
	key := client.ObjectKeyFromObject(pod)
	r.mu.Lock()
	run := r.pods[key]
	if run != nil && run.stopping.IsZero() {
		run.stopping = r.now()
	}
	r.mu.Unlock()
	if run == nil {
		run = &runningPod{stopping: r.now()}
	}
	stopAt := run.stopping.Add(min(grace, preStopSleep(pod)))
	if wait := stopAt.Sub(r.now()); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	if err := r.stop(key); err != nil {
		return ctrl.Result{}, err
	}
	err := r.c.Delete(ctx, pod, client.GracePeriodSeconds(0), client.Preconditions{UID: &pod.UID})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, err
}

// preStopSleep is how long the Pod's containers keep serving after
// SIGTERM: the longest preStop sleep (the sleep action or an exec of
// `sleep N`).
func preStopSleep(pod *corev1.Pod) time.Duration {
	var longest time.Duration
	for _, c := range pod.Spec.Containers {
		if c.Lifecycle == nil || c.Lifecycle.PreStop == nil {
			continue
		}
		h := c.Lifecycle.PreStop
		var d time.Duration
		switch {
		case h.Sleep != nil:
			d = time.Duration(h.Sleep.Seconds) * time.Second
		case h.Exec != nil:
			d = execSleep(h.Exec.Command)
		}
		longest = max(longest, d)
	}
	return longest
}

// execSleep reads N out of a `sleep N` command (also inside `sh -c`).
func execSleep(cmd []string) time.Duration {
	words := strings.Fields(strings.Join(cmd, " "))
	for i, w := range words {
		if (w == "sleep" || strings.HasSuffix(w, "/sleep")) && i+1 < len(words) {
			if d, err := time.ParseDuration(strings.Trim(words[i+1], `"';`) + "s"); err == nil {
				return d
			}
		}
	}
	return 0
}

// readinessDelay is the longest readinessProbe initialDelaySeconds: the
// Pod turns Ready that long after it started.
func readinessDelay(pod *corev1.Pod) time.Duration {
	var d time.Duration
	for _, c := range pod.Spec.Containers {
		if c.ReadinessProbe != nil {
			d = max(d, time.Duration(c.ReadinessProbe.InitialDelaySeconds)*time.Second)
		}
	}
	return d
}

// writeStatus reports the Pod Running with its address, its Program
// containers as they are, and its other containers Ready once the
// readiness delay has passed.
func (r *podReconciler) writeStatus(ctx context.Context, pod *corev1.Pod, node *nodeState, run *runningPod) (ctrl.Result, error) {
	readyAt := run.started.Add(readinessDelay(pod))
	now := r.now()
	simulatedReady := !now.Before(readyAt)
	ip := node.Net.IP
	if run.net != nil {
		ip = run.net.IP
	}
	var programs map[string]corev1.ContainerStatus
	if run.rt != nil {
		programs = run.rt.statuses(pod)
	}
	want := podStatus(pod, node, ip, metav1.NewTime(run.started), simulatedReady, programs, metav1.NewTime(now))
	var res ctrl.Result
	if !simulatedReady {
		res.RequeueAfter = readyAt.Sub(now)
	}
	if statusEqual(pod.Status, want) {
		return res, nil
	}
	orig := pod.DeepCopy()
	pod.Status = want
	if err := r.c.Status().Patch(ctx, pod, client.MergeFrom(orig)); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	return res, nil
}

// podStatus is what a kubelet would report for a running Pod: programs
// are the states of its Program containers, the others are Ready when
// simulatedReady.
func podStatus(pod *corev1.Pod, node *nodeState, ip netip.Addr, started metav1.Time, simulatedReady bool, programs map[string]corev1.ContainerStatus, now metav1.Time) corev1.PodStatus {
	var statuses []corev1.ContainerStatus
	ready, terminated, failed := true, 0, false
	for _, c := range pod.Spec.Containers {
		cs, ok := programs[c.Name]
		if !ok {
			cs = corev1.ContainerStatus{
				Name: c.Name, Image: c.Image, ImageID: c.Image, Ready: simulatedReady, Started: ptr.To(true),
				ContainerID: "svcnet://" + string(pod.UID)[:8] + "-" + c.Name,
				State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}},
			}
		}
		ready = ready && cs.Ready
		if t := cs.State.Terminated; t != nil {
			terminated++
			failed = failed || t.ExitCode != 0
		}
		statuses = append(statuses, cs)
	}
	phase := corev1.PodRunning
	if terminated > 0 && terminated == len(pod.Spec.Containers) {
		phase = corev1.PodSucceeded
		if failed {
			phase = corev1.PodFailed
		}
	}
	readyStatus := corev1.ConditionFalse
	if ready {
		readyStatus = corev1.ConditionTrue
	}
	cond := func(t corev1.PodConditionType, s corev1.ConditionStatus) corev1.PodCondition {
		c := corev1.PodCondition{Type: t, Status: s, LastTransitionTime: now}
		for _, old := range pod.Status.Conditions {
			if old.Type == t && old.Status == s {
				c.LastTransitionTime = old.LastTransitionTime
			}
		}
		return c
	}
	return corev1.PodStatus{
		Phase: phase,
		Conditions: []corev1.PodCondition{
			cond(corev1.PodReadyToStartContainers, corev1.ConditionTrue),
			cond(corev1.PodInitialized, corev1.ConditionTrue),
			cond(corev1.ContainersReady, readyStatus),
			cond(corev1.PodReady, readyStatus),
			cond(corev1.PodScheduled, corev1.ConditionTrue),
		},
		HostIP:            node.Net.IP.String(),
		HostIPs:           []corev1.HostIP{{IP: node.Net.IP.String()}},
		PodIP:             ip.String(),
		PodIPs:            []corev1.PodIP{{IP: ip.String()}},
		StartTime:         &started,
		QOSClass:          pod.Status.QOSClass,
		ContainerStatuses: statuses,
	}
}

// statusEqual compares what writeStatus decides: phase, addresses,
// readiness, and each container's state, readiness and restarts.
func statusEqual(a, b corev1.PodStatus) bool {
	if a.Phase != b.Phase || a.PodIP != b.PodIP || a.HostIP != b.HostIP || len(a.ContainerStatuses) != len(b.ContainerStatuses) {
		return false
	}
	cond := func(s corev1.PodStatus, t corev1.PodConditionType) corev1.ConditionStatus {
		i := slices.IndexFunc(s.Conditions, func(c corev1.PodCondition) bool { return c.Type == t })
		if i < 0 {
			return ""
		}
		return s.Conditions[i].Status
	}
	for _, t := range []corev1.PodConditionType{corev1.PodReady, corev1.ContainersReady, corev1.PodScheduled, corev1.PodInitialized} {
		if cond(a, t) != cond(b, t) {
			return false
		}
	}
	for i := range a.ContainerStatuses {
		if containerSummary(a.ContainerStatuses[i]) != containerSummary(b.ContainerStatuses[i]) {
			return false
		}
	}
	return true
}

// containerSummary is what of a container status writeStatus keeps up to
// date.
func containerSummary(cs corev1.ContainerStatus) string {
	state := "running"
	switch {
	case cs.State.Waiting != nil:
		state = "waiting:" + cs.State.Waiting.Reason
	case cs.State.Terminated != nil:
		state = fmt.Sprintf("terminated:%d", cs.State.Terminated.ExitCode)
	case cs.State.Running != nil:
		state = "running:" + cs.State.Running.StartedAt.UTC().String()
	}
	return fmt.Sprintf("%s/%t/%d/%s", cs.Name, cs.Ready, cs.RestartCount, state)
}
