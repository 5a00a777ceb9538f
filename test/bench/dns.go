// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

// The cluster DNS benchmark (l), run in the same `svcnet up` clusters as
// (j): how long after a Service is created its name answers from the
// client namespace through the kube-dns ClusterIP, and how many queries a
// second kube-dns answers.
//
// CoreDNS caches a negative answer for the kubernetes plugin's TTL (30 s
// in the add-on's Corefile), keyed by name and type: a client that asks
// for a name before CoreDNS's informer holds the Service is told NXDOMAIN
// for the next 30 s. To time the informer rather than that cache, the
// prober asks with record types no DNS server serves (unassigned and
// private-use ones), a new one per probe: the kubernetes plugin answers
// any type it does not serve with NODATA for a name it knows and NXDOMAIN
// for one it does not, so each probe is a cache miss and its answer is CoreDNS's view at that moment.
// Each CoreDNS replica watches on its own, so a name is known once every
// replica knows it: the probes go to each replica's Pod address in turn,
// then the A query is asked for the first time, through the kube-dns
// ClusterIP, and must carry the expected addresses.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/internal/platform/netns"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
)

// probeTypes are the record types a probe may use: unassigned (IANA's
// registry has nothing from 4096 to 32767, nor from 32770 to 65279) and
// private-use (65280-65534, RFC 6895).
var probeTypes = [][2]uint16{{4096, 32767}, {32770, 65279}, {65280, 65534}}

const (
	// probeGap is the pause between two existence probes of one name.
	probeGap = 2 * time.Millisecond
	// dnsQueryTimeout bounds one query.
	dnsQueryTimeout = 200 * time.Millisecond
	// qpsClients each keep one UDP socket, as a resolver library does;
	// conntrack pins each socket to one CoreDNS Pod, so they spread over
	// both.
	qpsClients  = 16
	qpsDuration = 5 * time.Second
)

// dnsResult is (l)'s figures of one cluster.
type dnsResult struct {
	// Resolve: create a ClusterIP Service -> its A record answers;
	// Reach: -> a request to the answered address reaches a Pod;
	// Headless: create a headless Service -> its A records are the 3 Pods.
	Resolve  []time.Duration `json:"resolve"`
	Reach    []time.Duration `json:"reach"`
	Headless []time.Duration `json:"headless"`
	// QPS is (l3)'s queries answered a second, Queries how many were,
	// QueryP50 and QueryP99 their latency, Failed those not answered
	// or answered wrong.
	QPS      float64       `json:"qps"`
	Queries  int           `json:"queries"`
	QueryP50 time.Duration `json:"queryP50"`
	QueryP99 time.Duration `json:"queryP99"`
	Failed   int           `json:"failed"`
}

// dnsProber asks kube-dns from the client namespace, and each CoreDNS
// replica directly; one prober serves a whole run.
type dnsProber struct {
	server string // kube-dns ClusterIP:53
	// replicas are sockets connected to each Ready CoreDNS Pod's
	// address, one per replica for all its probes (answers are matched
	// by ID).
	replicas []net.Conn
	dial     func(ctx context.Context, network, addr string) (net.Conn, error)
	mu       sync.Mutex
	id       uint16
	// used counts the probe types used so far.
	used int
}

func (u *upCluster) dnsProber(ctx context.Context) (*dnsProber, error) {
	var svc corev1.Service
	if err := u.c.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "kube-dns"}, &svc); err != nil {
		return nil, fmt.Errorf("the kube-dns Service: %w", err)
	}
	pods, err := u.readyCoreDNS(ctx, svc.Spec.Selector)
	if err != nil {
		return nil, err
	}
	p := &dnsProber{server: net.JoinHostPort(svc.Spec.ClusterIP, "53"), dial: netns.DialContext(netlab.Path(u.client))}
	for _, pod := range pods {
		conn, err := p.dial(ctx, "udp", net.JoinHostPort(pod.Status.PodIP, "53"))
		if err != nil {
			p.close()
			return nil, err
		}
		p.replicas = append(p.replicas, conn)
	}
	// The Pods are Ready; kube-dns answers once every node has their
	// endpoints.
	deadline := time.Now().Add(pipelineTimeout)
	for {
		ans, err := p.query(ctx, "kubernetes.default.svc.cluster.local.", dnsmessage.TypeA)
		if err == nil && ans.RCode == dnsmessage.RCodeSuccess {
			return p, nil
		}
		if time.Now().After(deadline) {
			p.close()
			return nil, fmt.Errorf("kube-dns does not answer after %s: %s", pipelineTimeout, rcodeOr(ans, err))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// readyCoreDNS waits until every CoreDNS replica is Ready and returns the
// Pods.
func (u *upCluster) readyCoreDNS(ctx context.Context, selector map[string]string) ([]corev1.Pod, error) {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var d appsv1.Deployment
		if err := u.c.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "coredns"}, &d); err != nil {
			return nil, fmt.Errorf("the CoreDNS Deployment: %w", err)
		}
		var pods corev1.PodList
		if err := u.c.List(ctx, &pods, client.InNamespace("kube-system"), client.MatchingLabels(selector)); err != nil {
			return nil, fmt.Errorf("the CoreDNS Pods: %w", err)
		}
		ready := slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil || !podReady(&p) })
		if want := ptr.Deref(d.Spec.Replicas, 1); len(ready) == int(want) {
			return ready, nil
		}
		if time.Now().After(deadline) {
			return nil, errors.New("the CoreDNS replicas are not all Ready after 2m")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func (p *dnsProber) close() {
	for _, c := range p.replicas {
		c.Close()
	}
}

// query sends one question through the kube-dns ClusterIP over a new UDP
// socket (a new conntrack entry, so a random CoreDNS Pod) and returns the
// answer.
func (p *dnsProber) query(ctx context.Context, name string, t dnsmessage.Type) (*dnsmessage.Message, error) {
	conn, err := p.dial(ctx, "udp", p.server)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return exchange(conn, p.nextID(), name, t)
}

func (p *dnsProber) nextID() uint16 {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.id++
	return p.id
}

// freshType is a record type this prober has not asked before.
func (p *dnsProber) freshType() (dnsmessage.Type, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.used
	for _, r := range probeTypes {
		if size := int(r[1]-r[0]) + 1; n >= size {
			n -= size
			continue
		}
		p.used++
		return dnsmessage.Type(int(r[0]) + n), nil
	}
	return 0, errors.New("out of unused record types: every further probe could be answered from CoreDNS's cache")
}

// exchange sends a question on conn and reads its answer.
func exchange(conn net.Conn, id uint16, name string, t dnsmessage.Type) (*dnsmessage.Message, error) {
	q, err := dnsmessage.NewName(name)
	if err != nil {
		return nil, err
	}
	msg := dnsmessage.Message{Header: dnsmessage.Header{ID: id, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: q, Type: t, Class: dnsmessage.ClassINET}}}
	b, err := msg.Pack()
	if err != nil {
		return nil, err
	}
	if err := conn.SetDeadline(time.Now().Add(dnsQueryTimeout)); err != nil {
		return nil, err
	}
	if _, err := conn.Write(b); err != nil {
		return nil, err
	}
	buf := make([]byte, 1500)
	for {
		n, err := conn.Read(buf)
		if err != nil {
			return nil, err
		}
		var ans dnsmessage.Message
		if err := ans.Unpack(buf[:n]); err != nil {
			return nil, err
		}
		if ans.ID == id {
			return &ans, nil
		}
	}
}

// addresses are the A records of an answer.
func addresses(m *dnsmessage.Message) []netip.Addr {
	var out []netip.Addr
	for _, r := range m.Answers {
		if a, ok := r.Body.(*dnsmessage.AResource); ok {
			out = append(out, netip.AddrFrom4(a.A))
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// waitName probes every CoreDNS replica until it knows name, then asks its
// A record once through kube-dns and checks it holds want; it returns the
// time from start until the last replica knew the name.
func (p *dnsProber) waitName(ctx context.Context, name string, want []netip.Addr, start time.Time) (time.Duration, error) {
	slices.SortFunc(want, netip.Addr.Compare)
	for _, replica := range p.replicas {
		if err := p.waitKnown(replica, name, start); err != nil {
			return 0, err
		}
	}
	known := time.Since(start)
	ans, err := p.query(ctx, name, dnsmessage.TypeA)
	if err != nil {
		return 0, fmt.Errorf("the A record of %s: %w%s", name, err, p.diagnose(ctx, name))
	}
	if got := addresses(ans); !slices.Equal(got, want) {
		return 0, fmt.Errorf("the A record of %s: %v, want %v%s", name, got, want, p.diagnose(ctx, name))
	}
	return known, nil
}

// diagnose asks name's A record again through kube-dns and of each replica,
// for the error message of a wrong answer.
func (p *dnsProber) diagnose(ctx context.Context, name string) string {
	var b strings.Builder
	for i := range 3 {
		ans, err := p.query(ctx, name, dnsmessage.TypeA)
		fmt.Fprintf(&b, "\n  again through %s (%d): %s", p.server, i+1, answerOr(ans, err))
	}
	for _, r := range p.replicas {
		ans, err := exchange(r, p.nextID(), name, dnsmessage.TypeA)
		fmt.Fprintf(&b, "\n  of %s: %s", r.RemoteAddr(), answerOr(ans, err))
	}
	return b.String()
}

func answerOr(m *dnsmessage.Message, err error) string {
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%s %v", m.RCode, addresses(m))
}

// waitKnown probes one CoreDNS replica until it says name exists.
func (p *dnsProber) waitKnown(replica net.Conn, name string, start time.Time) error {
	for {
		t, err := p.freshType()
		if err != nil {
			return err
		}
		ans, err := exchange(replica, p.nextID(), name, t)
		if err == nil && ans.RCode == dnsmessage.RCodeSuccess {
			return nil
		}
		if time.Since(start) > pipelineTimeout {
			return fmt.Errorf("CoreDNS at %s does not know %s after %s (last answer: %v)", replica.RemoteAddr(), name, pipelineTimeout, rcodeOr(ans, err))
		}
		time.Sleep(probeGap)
	}
}

func rcodeOr(m *dnsmessage.Message, err error) string {
	if err != nil {
		return err.Error()
	}
	return m.RCode.String()
}

// serviceNames measures runs creations of a ClusterIP Service and of a
// headless Service for the 3 web Pods: until each name answers, and for
// the ClusterIP Service until a request to the answer reaches a Pod.
func (u *upCluster) serviceNames(ctx context.Context, p *dnsProber, runs int, pods map[string]bool, res *dnsResult) error {
	podIPs, err := u.podIPs(ctx)
	if err != nil {
		return err
	}
	for i := range runs {
		// A ClusterIP Service: its address is in the create's answer.
		svc := webService(fmt.Sprintf("n%d", i))
		time.Sleep(settle)
		start := time.Now()
		if err := u.c.Create(ctx, svc); err != nil {
			return err
		}
		name := fmt.Sprintf("%s.%s.svc.cluster.local.", svc.Name, pipelineNS)
		resolved, err := p.waitName(ctx, name, []netip.Addr{netip.MustParseAddr(svc.Spec.ClusterIP)}, start)
		if err != nil {
			return err
		}
		reached, err := u.waitRequest(ctx, u.client, "http://"+svc.Spec.ClusterIP+"/", func(p string) bool { return pods[p] }, start)
		if err != nil {
			return fmt.Errorf("request to %s: %w", name, err)
		}
		res.Resolve, res.Reach = append(res.Resolve, resolved), append(res.Reach, reached)
		// A headless one: its answer is the Pods, from the EndpointSlices.
		headless := webService(fmt.Sprintf("h%d", i))
		headless.Spec.ClusterIP = corev1.ClusterIPNone
		time.Sleep(settle)
		start = time.Now()
		if err := u.c.Create(ctx, headless); err != nil {
			return err
		}
		d, err := p.waitName(ctx, fmt.Sprintf("%s.%s.svc.cluster.local.", headless.Name, pipelineNS), slices.Clone(podIPs), start)
		if err != nil {
			return err
		}
		res.Headless = append(res.Headless, d)
		for _, s := range []*corev1.Service{svc, headless} {
			if err := u.c.Delete(ctx, s); err != nil {
				return err
			}
		}
		if _, err := u.waitRules(ctx, svc.Name, -1, time.Now()); err != nil {
			return err
		}
	}
	return nil
}

func (u *upCluster) podIPs(ctx context.Context) ([]netip.Addr, error) {
	var pods corev1.PodList
	if err := u.c.List(ctx, &pods, client.InNamespace(pipelineNS), client.MatchingLabels(webLabels)); err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, p := range pods.Items {
		a, err := netip.ParseAddr(p.Status.PodIP)
		if err != nil {
			return nil, fmt.Errorf("pod %s: %w", p.Name, err)
		}
		out = append(out, a)
	}
	return out, nil
}

// queryRate sends A queries for an existing Service's name through kube-dns
// from qpsClients sockets for qpsDuration, each waiting for its answer
// before the next question.
func (u *upCluster) queryRate(ctx context.Context, p *dnsProber, svc *corev1.Service, res *dnsResult) error {
	name := fmt.Sprintf("%s.%s.svc.cluster.local.", svc.Name, pipelineNS)
	want := netip.MustParseAddr(svc.Spec.ClusterIP)
	var (
		mu        sync.Mutex
		latencies []time.Duration
		failed    int
		wg        sync.WaitGroup
		firstErr  error
	)
	end := time.Now().Add(qpsDuration)
	for c := range qpsClients {
		conn, err := p.dial(ctx, "udp", p.server)
		if err != nil {
			return err
		}
		wg.Go(func() {
			defer conn.Close()
			var mine []time.Duration
			bad := 0
			for id := uint16(c) << 12; time.Now().Before(end); id++ {
				sent := time.Now()
				ans, err := exchange(conn, id, name, dnsmessage.TypeA)
				if err != nil || !slices.Equal(addresses(ans), []netip.Addr{want}) {
					bad++
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("the A record of %s: %s", name, rcodeOr(ans, err))
					}
					mu.Unlock()
					continue
				}
				mine = append(mine, time.Since(sent))
			}
			mu.Lock()
			latencies, failed = append(latencies, mine...), failed+bad
			mu.Unlock()
		})
	}
	wg.Wait()
	if len(latencies) == 0 {
		return fmt.Errorf("no query answered: %w", firstErr)
	}
	res.QPS, res.Queries, res.Failed = float64(len(latencies))/qpsDuration.Seconds(), len(latencies), failed
	res.QueryP50, res.QueryP99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
	return nil
}

func dnsTitle(nodes int) string {
	return fmt.Sprintf("## Cluster DNS: svcnet up with %d nodes, svcnet's pipeline vs the upstream one", nodes)
}

// renderDNS writes (l) from (j) and (l)'s record alone.
func renderDNS(rec *record[pipelineData]) string {
	var b strings.Builder
	d := rec.Data
	fmt.Fprintf(&b, "%s\n\n", dnsTitle(d.Nodes))
	fmt.Fprintf(&b, "Measured in (j)'s clusters, before (j), with the same provenance. Each cluster has its CoreDNS add-on (2 replicas of "+
		"CoreDNS %s behind the kube-dns ClusterIP, the add-on's Corefile), asked from the client namespace through the kube-dns "+
		"ClusterIP, so every query crosses a node's rules (UDP). (l1) ClusterIP Services created for the 3 web Pods: from the create "+
		"request until the Service's A record answers with its ClusterIP, and until a request to that address reaches a Pod (a person's "+
		"first `curl my-service`). (l2) headless Services: until the A records are the 3 Pods' addresses, which come from the "+
		"EndpointSlice controller. CoreDNS caches a negative answer for 30 s (the kubernetes plugin's TTL), so asking for a name before "+
		"CoreDNS knows it would time that cache: the prober asks each CoreDNS Pod in turn, every %s, with a record type no server serves "+
		"(unassigned or private-use), new for each probe (the kubernetes plugin answers NODATA for a name it knows, NXDOMAIN otherwise; "+
		"never cached before); the time is when the last replica knew the name, after which no client can be told otherwise, and the A "+
		"record is then asked through the kube-dns ClusterIP and checked. Each cluster measures each of these %d times. (l3) %d clients, "+
		"each with its own UDP socket, ask the A record of an existing Service back to back for %s (answers from CoreDNS's cache, as "+
		"most of a cluster's queries are).\n\n", rec.Tools["coredns"], d.ProbeGap, d.Runs, d.QPSClients, d.QPSDuration)
	table := pipelineTable(&b, d)
	table("(l1) create Service -> its name answers", func(c pipelineCluster) []time.Duration { return c.DNS.Resolve })
	table("(l1) create Service -> a request to the answer reaches a Pod", func(c pipelineCluster) []time.Duration { return c.DNS.Reach })
	table("(l2) create headless Service -> its name answers with the 3 Pods", func(c pipelineCluster) []time.Duration { return c.DNS.Headless })
	b.WriteString("\n(l3), a cluster's figures, the median of the clusters with the smallest and largest:\n\n" +
		"| clusters | queries answered a second | query p50 (ms) | query p99 (ms) | failed or wrong answers |\n|---|---|---|---|---|\n")
	for _, side := range d.Sides {
		clusters := sideClusters(d, side.Name)
		col := func(f func(dnsResult) float64, format string) string {
			return spreadOf(column(clusters, func(c pipelineCluster) float64 { return f(c.DNS) }), format)
		}
		p99 := col(func(r dnsResult) float64 { return millis(r.QueryP99) }, "%.2f")
		for _, c := range clusters {
			if c.DNS.Queries < 1000 {
				p99 = fmt.Sprintf("- (%d queries)", c.DNS.Queries)
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", side.Name, col(func(r dnsResult) float64 { return r.QPS }, "%.0f"),
			col(func(r dnsResult) float64 { return millis(r.QueryP50) }, "%.2f"), p99, col(func(r dnsResult) float64 { return float64(r.Failed) }, "%.0f"))
	}
	return b.String()
}

// coreDNSVersion is what bin/k8s/coredns says it is.
func coreDNSVersion(root string) string {
	out, err := exec.Command(filepath.Join(root, "bin/k8s/coredns"), "-version").Output()
	if err != nil {
		return "(version unknown: " + err.Error() + ")"
	}
	first, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimPrefix(strings.TrimSpace(first), "CoreDNS-")
}
