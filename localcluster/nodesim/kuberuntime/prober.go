// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package kuberuntime

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/svcnet-io/svcnet/internal/platform/netns"
	"github.com/svcnet-io/svcnet/localcluster/nodesim/container"
)

// probeKind is what a probe decides. Readiness starts unknown (not
// ready), so its first verdict counts at once; liveness and startup start
// passing and failing respectively, and only failureThreshold failures in
// a row count, as the kubelet restarts a container only then.
type probeKind int

const (
	readiness probeKind = iota
	liveness
	startup
)

func (k probeKind) String() string {
	return [...]string{"Readiness", "Liveness", "Startup"}[k]
}

// startProbes runs the container's probes while it runs: the startup
// probe first (the container counts as started when it passes), then
// readiness and liveness. A failed liveness or startup probe kills the
// container, which its supervisor restarts per the restartPolicy.
func (p *Pod) startProbes(ctx context.Context, c corev1.Container, st *containerState, proc *container.Container) {
	kill := func(kind probeKind) {
		p.r.opts.Log.Info("Probe failed, restarting the container", "pod", p.key, "container", c.Name, "probe", kind.String())
		go p.kill(c, st, GracePeriod(p.pod), fmt.Sprintf("Container %s failed %s probe, will be restarted; container", c.Name, kind))
	}
	go func() {
		if c.StartupProbe != nil {
			passed := make(chan struct{})
			go p.probe(ctx, c.StartupProbe, proc, startup, func(ok bool) {
				if ok {
					close(passed)
				} else {
					kill(startup)
				}
			})
			select {
			case <-ctx.Done():
				return
			case <-passed:
			}
		}
		if p.update(st, func() { st.started = true }) {
			p.changed()
		}
		go p.probe(ctx, c.ReadinessProbe, proc, readiness, func(ok bool) {
			if p.update(st, func() { st.ready = ok }) {
				p.changed()
			}
		})
		if c.LivenessProbe != nil {
			go p.probe(ctx, c.LivenessProbe, proc, liveness, func(ok bool) {
				if !ok {
					kill(liveness)
				}
			})
		}
	}()
}

// probe runs pr against the container every period and reports each
// verdict that flips the result (after successThreshold successes or
// failureThreshold failures). No probe is a success at once. A startup
// probe stops after its first verdict.
func (p *Pod) probe(ctx context.Context, pr *corev1.Probe, proc *container.Container, kind probeKind, report func(ok bool)) {
	if pr == nil {
		report(true)
		return
	}
	if !sleepCtx(ctx, time.Duration(pr.InitialDelaySeconds)*time.Second) {
		return
	}
	period := 10 * time.Second
	if pr.PeriodSeconds > 0 {
		period = time.Duration(pr.PeriodSeconds) * time.Second
	}
	succ, fail := max(pr.SuccessThreshold, 1), pr.FailureThreshold
	if fail <= 0 {
		fail = 3
	}
	var okRun, failRun int32
	state := map[probeKind]int{readiness: -1, liveness: 1, startup: -1}[kind]
	for {
		err := p.probeOnce(ctx, pr, proc)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			okRun, failRun = okRun+1, 0
		} else {
			okRun, failRun = 0, failRun+1
		}
		switch {
		case err == nil && okRun >= succ && state != 1:
			state = 1
			report(true)
		case err != nil && (failRun >= fail || (state == -1 && kind == readiness)) && state != 0:
			state = 0
			p.event(corev1.EventTypeWarning, reasonUnhealthy, actionProbe, "%s probe failed: %v", kind, err)
			report(false)
		}
		if kind == startup && state != -1 {
			return
		}
		if !sleepCtx(ctx, period) {
			return
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// probeOnce runs one probe: HTTP GET and TCP from the Pod's network
// namespace to its address (as the kubelet does from the node), exec
// inside the container, gRPC health checks.
func (p *Pod) probeOnce(ctx context.Context, pr *corev1.Probe, proc *container.Container) error {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(max(pr.TimeoutSeconds, 1))*time.Second)
	defer cancel()
	h := pr.ProbeHandler
	switch {
	case h.Exec != nil:
		return execHandler(ctx, proc, h.Exec.Command)
	case h.HTTPGet != nil:
		return p.httpGet(ctx, h.HTTPGet)
	case h.TCPSocket != nil:
		host := p.sandbox.IP().String()
		if h.TCPSocket.Host != "" {
			host = h.TCPSocket.Host
		}
		conn, err := netns.DialContext(p.sandbox.NetNS)(ctx, "tcp", net.JoinHostPort(host, p.portString(h.TCPSocket.Port)))
		if err != nil {
			return err
		}
		return conn.Close()
	case h.GRPC != nil:
		return p.grpcHealth(ctx, h.GRPC)
	}
	return nil
}

// execHandler runs a probe's or hook's command in the container: exit 0
// passes.
func execHandler(ctx context.Context, proc *container.Container, cmd []string) error {
	var out bytes.Buffer
	code, err := proc.Exec(ctx, cmd, container.ExecIO{Stdout: &out, Stderr: &out})
	switch {
	case err != nil:
		return err
	case ctx.Err() != nil:
		return fmt.Errorf("command %q timed out", cmd)
	case code != 0:
		return fmt.Errorf("command %q exited with %d: %s", cmd, code, bytes.TrimSpace(out.Bytes()))
	}
	return nil
}

func (p *Pod) httpGet(ctx context.Context, h *corev1.HTTPGetAction) error {
	host := p.sandbox.IP().String()
	if h.Host != "" {
		host = h.Host
	}
	scheme := "http"
	if h.Scheme == corev1.URISchemeHTTPS {
		scheme = "https"
	}
	url := fmt.Sprintf("%s://%s%s", scheme, net.JoinHostPort(host, p.portString(h.Port)), h.Path)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("User-Agent", "kube-probe/1.37")
	for _, hd := range h.HTTPHeaders {
		req.Header.Set(hd.Name, hd.Value)
	}
	tr := &http.Transport{DialContext: netns.DialContext(p.sandbox.NetNS), DisableKeepAlives: true, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // the kubelet does not verify probe certificates either
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("HTTP probe failed with statuscode: %d", resp.StatusCode)
	}
	return nil
}

func (p *Pod) grpcHealth(ctx context.Context, g *corev1.GRPCAction) error {
	addr := net.JoinHostPort(p.sandbox.IP().String(), strconv.Itoa(int(g.Port)))
	dial := netns.DialContext(p.sandbox.NetNS)
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return dial(ctx, "tcp", a) }))
	if err != nil {
		return err
	}
	defer conn.Close()
	service := ""
	if g.Service != nil {
		service = *g.Service
	}
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return err
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("service unhealthy (responded with %q)", resp.GetStatus())
	}
	return nil
}

// portString is a probe's port, a named one looked up in the Pod's
// containers.
func (p *Pod) portString(port intstr.IntOrString) string {
	if port.Type != intstr.String {
		return strconv.Itoa(port.IntValue())
	}
	for _, c := range allContainers(p.pod) {
		for _, cp := range c.Ports {
			if cp.Name == port.StrVal {
				return strconv.Itoa(int(cp.ContainerPort))
			}
		}
	}
	return port.StrVal // fails to dial, and says which name
}

// runHook runs a lifecycle hook: exec in the container, an HTTP GET, or
// a sleep.
func (p *Pod) runHook(ctx context.Context, h *corev1.LifecycleHandler, proc *container.Container) error {
	switch {
	case h.Exec != nil:
		return execHandler(ctx, proc, h.Exec.Command)
	case h.HTTPGet != nil:
		return p.httpGet(ctx, h.HTTPGet)
	case h.Sleep != nil:
		if !sleepCtx(ctx, time.Duration(h.Sleep.Seconds)*time.Second) {
			return errors.New("sleep hook cut short by the grace period")
		}
	}
	return nil
}
