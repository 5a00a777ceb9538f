// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package nodeimages

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// TestAgnhost runs agnhost's netexec server and client, and the shell
// tools upstream's e2e tests run in agnhost's image.
func TestAgnhost(t *testing.T) {
	c := assemble(t, "agnhost")
	serveDNS(t)
	c.start(t, c.argv(nil, []string{"netexec", "--http-port=8080", "--udp-port=8081"})...)
	hostname, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	if got := get(t, "http://127.0.0.1:8080/hostname"); got != hostname {
		t.Errorf("netexec /hostname = %q, want %q", got, hostname)
	}
	c.output(t, "/agnhost", "connect", "127.0.0.1:8080", "--timeout=5s")
	c.output(t, "/agnhost", "connect", "--protocol=udp", "127.0.0.1:8081", "--timeout=5s")
	if out, code := c.run(t, "/agnhost", "connect", "127.0.0.1:1", "--timeout=5s"); code == 0 {
		t.Errorf("agnhost connect to a closed port succeeded: %s", out)
	}
	// What upstream's tests run in agnhost's image, beside agnhost.
	tools := "sh bash curl nc dig nslookup host ip ss socat iperf ping ps getent cat grep sed awk sleep seq timeout"
	if out := c.output(t, "sh", "-c", "for t in "+tools+"; do command -v $t >/dev/null || echo missing $t; done"); out != "" {
		t.Errorf("agnhost's image lacks tools:\n%s", out)
	}
	if got := c.output(t, "curl", "-s", "http://127.0.0.1:8080/hostname"); got != hostname {
		t.Errorf("curl of netexec = %q, want %q", got, hostname)
	}
	c.output(t, "nc", "-z", "-w", "2", "127.0.0.1", "8080")
	if got := c.output(t, "dig", "+short", "web.test"); got != "127.0.0.1\n" {
		t.Errorf("dig +short web.test = %q, want 127.0.0.1", got)
	}
	if got := c.output(t, "nslookup", "web.test"); !strings.Contains(got, "Address: 127.0.0.1") {
		t.Errorf("nslookup web.test:\n%s", got)
	}
	if got := c.output(t, "ss", "-ltn"); !strings.Contains(got, "127.0.0.1:8080") && !strings.Contains(got, "*:8080") {
		t.Errorf("ss -ltn shows no listener on 8080:\n%s", got)
	}
	// The user and group upstream's SupplementalGroups test expects.
	if got := c.output(t, "id", "user-defined-in-image"); !strings.Contains(got, "uid=1000") || !strings.Contains(got, "50000(group-defined-in-image)") {
		t.Errorf("id user-defined-in-image = %q", got)
	}
}

// TestBusybox fetches from a server of the test with busybox's wget, by
// address and by name.
func TestBusybox(t *testing.T) {
	c := assemble(t, "busybox")
	serveDNS(t)
	addr := serveText(t, "hello from the test\n")
	_, p, _ := net.SplitHostPort(addr)
	// As a Pod's command runs it (the applet's link in /bin), and from
	// the shell, whose applets are built in.
	for _, command := range [][]string{
		{"wget", "-q", "-O", "-", "http://" + addr + "/"},
		{"sh", "-c", "wget -q -O - http://web.test:" + p + "/"},
	} {
		if got := c.output(t, c.argv(command, nil)...); got != "hello from the test\n" {
			t.Errorf("%q = %q", command, got)
		}
	}
	if got := c.output(t, "nslookup", "web.test"); !strings.Contains(got, "127.0.0.1") {
		t.Errorf("nslookup web.test:\n%s", got)
	}
	if got := c.output(t, "which", "nc", "sleep", "cat", "hostname"); got != "/bin/nc\n/bin/sleep\n/bin/cat\n/bin/hostname\n" {
		t.Errorf("which of busybox's applets:\n%s", got)
	}
	if got := c.output(t, "id", "nobody"); !strings.Contains(got, "uid=65534(nobody)") {
		t.Errorf("id nobody = %q", got)
	}
	if got := c.output(t, c.argv(nil, nil)...); got != "" {
		t.Errorf("busybox's default command (sh, no input) printed %q", got)
	}
}

// TestNginx serves the welcome page on port 80, IPv4 and IPv6, logs the
// request on stdout and stops on the image's stop signal.
func TestNginx(t *testing.T) {
	c := assemble(t, "nginx")
	p := c.start(t, c.argv(nil, nil)...)
	urls := []string{"http://127.0.0.1/"}
	if _, err := os.Stat("/proc/net/if_inet6"); err == nil {
		urls = append(urls, "http://[::1]/")
	}
	for _, url := range urls {
		if got := get(t, url); !strings.Contains(got, "<title>Welcome to nginx!</title>") {
			t.Errorf("GET %s = %q, want the welcome page", url, got)
		}
	}
	waitFor(t, "the access log line on stdout", func() bool {
		return strings.Contains(p.out.String(), `"GET / HTTP/1.1" 200`)
	})
	if code := p.stop(t, signalNumber(t, c.image.Config.StopSignal)); code != 0 {
		t.Errorf("nginx exited %d on %s", code, c.image.Config.StopSignal)
	}
}

// TestHTTPD serves "It works!" on port 80, logs the request on stdout and
// stops on the image's stop signal.
func TestHTTPD(t *testing.T) {
	c := assemble(t, "httpd")
	p := c.start(t, c.argv(nil, nil)...)
	if got := get(t, "http://127.0.0.1/"); got != "<html><body><h1>It works!</h1></body></html>\n" {
		t.Errorf("GET / = %q", got)
	}
	waitFor(t, "the access log line on stdout", func() bool {
		return strings.Contains(p.out.String(), `"GET / HTTP/1.1" 200`)
	})
	if code := p.stop(t, signalNumber(t, c.image.Config.StopSignal)); code != 0 {
		t.Errorf("httpd exited %d on %s", code, c.image.Config.StopSignal)
	}
}

// TestPause runs pause as PID 1 of a PID namespace: it waits, reaps the
// orphans the namespace hands it and exits 0 on SIGTERM.
func TestPause(t *testing.T) {
	c := assemble(t, "pause")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd, err := c.command(ctx, c.argv(nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWPID
	p := &process{cmd: cmd, out: &syncBuffer{}, err: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.err
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	defer func() { _ = cmd.Process.Kill() }()
	// A shell that enters pause's namespace and leaves a child behind:
	// the child becomes pause's, which must reap it when it ends.
	pid := cmd.Process.Pid
	nsenter := osexec.Command("nsenter", "--target", fmt.Sprint(pid), "--pid", "--", "sh", "-c", "sleep 1 >/dev/null 2>&1 &")
	if out, err := nsenter.CombinedOutput(); err != nil {
		t.Fatalf("nsenter: %v: %s", err, out)
	}
	waitFor(t, "the orphan to become pause's child", func() bool { return len(children(t, pid)) > 0 })
	waitFor(t, "pause to reap its orphan", func() bool { return len(children(t, pid)) == 0 })
	select {
	case <-p.done:
		t.Fatalf("pause ended by itself: %s", p.err)
	default:
	}
	if code := p.stop(t, syscall.SIGTERM); code != 0 {
		t.Errorf("pause exited %d on SIGTERM: %s", code, p.err)
	}
}

// TestCurl runs curl's entrypoint: help without arguments, curl's options
// as curl's, a command as itself.
func TestCurl(t *testing.T) {
	c := assemble(t, "curl")
	addr := serveText(t, "hello from the test\n")
	if got := c.output(t, "/entrypoint.sh"); !strings.Contains(got, "Usage: curl") {
		t.Errorf("the entrypoint without arguments printed %q, want curl's help", got)
	}
	for _, args := range [][]string{
		{"-s", "http://" + addr + "/"},
		{"curl", "-s", "http://" + addr + "/"},
		{"http://" + addr + "/"},
	} {
		if got := c.output(t, c.argv(nil, args)...); !strings.HasSuffix(got, "hello from the test\n") {
			t.Errorf("args %q: %q", args, got)
		}
	}
	if got := c.output(t, c.argv(nil, []string{"sh", "-c", "echo from sh"})...); got != "from sh\n" {
		t.Errorf("args sh -c: %q", got)
	}
}

// TestDNSUtils resolves a name with dig, host and nslookup.
func TestDNSUtils(t *testing.T) {
	c := assemble(t, "dnsutils")
	serveDNS(t)
	if got := c.output(t, "dig", "+short", "web.test"); got != "127.0.0.1\n" {
		t.Errorf("dig +short web.test = %q", got)
	}
	if got := c.output(t, "host", "web.test"); !strings.Contains(got, "web.test has address 127.0.0.1") {
		t.Errorf("host web.test:\n%s", got)
	}
	if got := c.output(t, "nslookup", "web.test"); !strings.Contains(got, "Address: 127.0.0.1") {
		t.Errorf("nslookup web.test:\n%s", got)
	}
	if out, code := c.run(t, "dig", "+short", "+tries=1", "missing.example"); code != 0 || out != "" {
		t.Errorf("dig of a missing name: exit %d, %q", code, out)
	}
	if got := c.output(t, c.argv([]string{"bash", "-c", "getent hosts localhost"}, nil)...); !strings.Contains(got, "localhost") {
		t.Errorf("bash -c getent: %q", got)
	}
}

// get polls url until it answers 200 and returns the body.
func get(t *testing.T, url string) string {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Proxy: nil}}
	var body string
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, serverTimeout, true,
		func(context.Context) (bool, error) {
			resp, err := client.Get(url)
			if err != nil {
				last = err
				return false, nil
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != http.StatusOK {
				last = fmt.Errorf("status %d, %w", resp.StatusCode, err)
				return false, nil
			}
			body = string(b)
			return true, nil
		})
	if err != nil {
		t.Fatalf("GET %s: %v (last: %v)", url, err, last)
	}
	return body
}

// waitFor polls cond until it holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, serverTimeout, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// serveText serves body on a loopback port of the test's namespace until
// t ends and returns its address.
func serveText(t *testing.T, body string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, body) }),
		ReadHeaderTimeout: 5 * time.Second,
	}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l.Addr().String()
}

// children are the processes (zombies too) whose parent is pid.
func children(t *testing.T, pid int) []int {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // ended meanwhile
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			child, _ := strconv.Atoi(strings.Split(f, "/")[2])
			out = append(out, child)
		}
	}
	return out
}

// TestDistrolessIptables runs the tools upstream's KubeProxy CLOSE_WAIT
// test runs in distroless-iptables: its probe for a conntrack table, the
// conntrack listing and sleep.
func TestDistrolessIptables(t *testing.T) {
	c := assemble(t, "distroless-iptables")
	for _, argv := range [][]string{
		{"conntrack", "--version"},
		{"iptables", "--version"},
		{"sh", "-c", "which conntrack"},
		{"sleep", "0"},
	} {
		if out, code := c.run(t, argv...); code != 0 {
			t.Errorf("%q: exit %d: %s", argv, code, out)
		}
	}
}

// TestBoomServer runs regression-issue-74839 with the Pod address the
// downward API gives it and connects to it: the server sees the
// handshake on its raw socket ("connection established"), which is when
// it sends its out-of-window packet.
func TestBoomServer(t *testing.T) {
	c := assemble(t, "boom-server")
	const addr = "127.0.0.1"
	c.image.Config.Env = append(c.image.Config.Env, "POD_IP="+addr)
	p := c.start(t, c.argv(nil, nil)...)
	waitFor(t, "the server to see a connection established", func() bool {
		conn, err := net.DialTimeout("tcp", addr+":9000", time.Second)
		if err != nil {
			return false
		}
		_ = conn.Close()
		return strings.Contains(p.err.String(), "connection established")
	})
	if log := p.err.String(); !strings.Contains(log, "external ip: "+addr) {
		t.Errorf("the server did not probe %s:\n%s", addr, log)
	}
}
