// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package server is the kubelet's API of a simulated node: what
// kube-apiserver calls for `kubectl exec`, `attach`, `port-forward` and
// `logs`, and for the nodes/proxy subresource (/pods, /healthz,
// /metrics, /logs/). Callers are authenticated and authorized as a kubelet does
// it (client certificates of the cluster CA, or bearer tokens through a
// TokenReview; a SubjectAccessReview for the nodes/<subresource> the path
// maps to), through k8s.io/apiserver's delegating authenticator and
// authorizer. The streams are served by k8s.io/cri-streaming, the code
// the kubelet and CRI runtimes serve them with (SPDY and WebSocket), and
// the logs read by k8s.io/cri-client's CRI log reader, so that the wire
// and the log semantics are upstream's. What runs is the Runtime's
// business (nodesim/kuberuntime through nodesim).
package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/cri-streaming/pkg/streaming/portforward"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"

	"github.com/svcnet-io/svcnet/internal/platform/nodeauth"
	"github.com/svcnet-io/svcnet/localcluster/nodesim/container"
)

// Streaming timeouts: the kubelet's defaults (--streaming-connection-
// idle-timeout, and the stream creation timeout).
const (
	streamIdleTimeout     = 4 * time.Hour
	streamCreationTimeout = remotecommand.DefaultStreamCreationTimeout
)

// Runtime is what the API serves from: the node's Pods and their
// containers. Pods are named by namespace and name; uid, when the caller
// gives one, must match.
type Runtime interface {
	Exec(ctx context.Context, pod PodRef, container string, cmd []string, eio container.ExecIO) (int32, error)
	Attach(ctx context.Context, pod PodRef, container string, eio container.ExecIO) error
	PortForward(ctx context.Context, pod PodRef, port int32, stream io.ReadWriteCloser) error
	// LogFile is the log of a container's current (or, with previous,
	// last) run, and whether that run still goes.
	LogFile(pod PodRef, container string, previous bool) (path string, running func() bool, err error)
	// Pods are the Pods bound to the node.
	Pods() []corev1.Pod
}

// PodRef names a Pod of the node.
type PodRef struct {
	Namespace, Name, UID string
}

func (p PodRef) String() string { return p.Namespace + "/" + p.Name }

// Config is one node's API.
type Config struct {
	NodeName string
	Runtime  Runtime
	// Authenticator and Authorizer judge every request; nil Authorizer
	// allows every authenticated user (tests only).
	Authenticator authenticator.Request
	Authorizer    authorizer.Authorizer
	Log           logr.Logger
	// Metrics serves /metrics; nil: 404.
	Metrics http.Handler
	// LogRoot is the folder served under /logs/, as the kubelet serves
	// the node's /var/log (nodes/log, `kubectl get --raw
	// /api/v1/nodes/<node>/proxy/logs/`); empty: 404.
	LogRoot string
}

// Server is the kubelet API of one node.
type Server struct {
	cfg    Config
	mux    *http.ServeMux
	judged http.Handler // mux behind the kubelet's authentication and authorization
}

// New returns the API of cfg's node.
func New(cfg Config) *Server {
	s := &Server{cfg: cfg, mux: http.NewServeMux()}
	for _, prefix := range []string{"/exec/{namespace}/{pod}", "/exec/{namespace}/{pod}/{uid}"} {
		s.mux.HandleFunc(prefix+"/{container}", s.exec)
	}
	for _, prefix := range []string{"/attach/{namespace}/{pod}", "/attach/{namespace}/{pod}/{uid}"} {
		s.mux.HandleFunc(prefix+"/{container}", s.attach)
	}
	for _, prefix := range []string{"/run/{namespace}/{pod}", "/run/{namespace}/{pod}/{uid}"} {
		s.mux.HandleFunc("POST "+prefix+"/{container}", s.run)
	}
	s.mux.HandleFunc("/portForward/{namespace}/{pod}", s.portForward)
	s.mux.HandleFunc("/portForward/{namespace}/{pod}/{uid}", s.portForward)
	s.mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", s.containerLogs)
	s.mux.HandleFunc("GET /pods", s.pods)
	s.mux.HandleFunc("GET /pods/", s.pods)
	s.mux.HandleFunc("GET /healthz", healthz)
	s.mux.HandleFunc("GET /healthz/{check}", healthz)
	if cfg.Metrics != nil {
		s.mux.Handle("GET /metrics", cfg.Metrics)
	}
	s.judged = nodeauth.Handler(nodeauth.Config{NodeName: cfg.NodeName, Authenticator: cfg.Authenticator, Authorizer: cfg.Authorizer,
		Subresources: kubeletSubresources, Log: cfg.Log}, s.mux)
	if cfg.LogRoot != "" {
		// The kubelet's /logs/ is a file server of /var/log: a listing
		// of folders, each file as it is.
		s.mux.Handle("GET /logs/", http.StripPrefix("/logs/", http.FileServer(http.Dir(cfg.LogRoot))))
	}
	return s
}

// ServeHTTP authenticates and authorizes the request, then serves it.
func (s *Server) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	s.judged.ServeHTTP(w, req)
}

func healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "ok")
}

func podRef(req *http.Request) PodRef {
	return PodRef{Namespace: req.PathValue("namespace"), Name: req.PathValue("pod"), UID: req.PathValue("uid")}
}

// executor adapts the Runtime to cri-streaming's Executor and Attacher,
// with the Pod named by the request.
type executor struct {
	rt  Runtime
	pod PodRef
}

func (e executor) ExecInContainer(ctx context.Context, _, _, name string, cmd []string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize, _ time.Duration) error {
	code, err := e.rt.Exec(ctx, e.pod, name, cmd, execIO(in, out, errw, tty, resize))
	if err != nil {
		return err
	}
	if code != 0 {
		return exitError(code)
	}
	return nil
}

func (e executor) AttachContainer(ctx context.Context, _, _, name string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
	return e.rt.Attach(ctx, e.pod, name, execIO(in, out, errw, tty, resize))
}

func (e executor) PortForward(ctx context.Context, _, _ string, port int32, stream io.ReadWriteCloser) error {
	return e.rt.PortForward(ctx, e.pod, port, stream)
}

// execIO turns cri-streaming's streams into the runtime's: nil ones stay
// unconnected, and terminal sizes are copied over.
func execIO(in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) container.ExecIO {
	eio := container.ExecIO{TTY: tty}
	if in != nil {
		eio.Stdin = in
	}
	if out != nil {
		eio.Stdout = out
	}
	if errw != nil {
		eio.Stderr = errw
	}
	if resize != nil {
		sizes := make(chan container.TerminalSize)
		go func() {
			defer close(sizes)
			for s := range resize {
				sizes <- container.TerminalSize{Width: s.Width, Height: s.Height}
			}
		}()
		eio.Resize = sizes
	}
	return eio
}

// exitError is a command's non-zero exit, which cri-streaming reports as
// the NonZeroExitCode status (k8s.io/utils/exec.ExitError).
type exitError int32

func (e exitError) Error() string {
	return fmt.Sprintf("command terminated with exit code %d", int32(e))
}
func (e exitError) String() string  { return e.Error() }
func (e exitError) Exited() bool    { return true }
func (e exitError) ExitStatus() int { return int(e) }

func (s *Server) exec(w http.ResponseWriter, req *http.Request) {
	opts, err := remotecommand.NewOptions(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	cmd := req.URL.Query()["command"]
	pod := podRef(req)
	remotecommand.ServeExec(w, req, executor{s.cfg.Runtime, pod}, pod.Name, pod.UID, req.PathValue("container"), cmd, opts,
		streamIdleTimeout, streamCreationTimeout, remotecommand.SupportedStreamingProtocols)
}

func (s *Server) attach(w http.ResponseWriter, req *http.Request) {
	opts, err := remotecommand.NewOptions(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	pod := podRef(req)
	remotecommand.ServeAttach(w, req, executor{s.cfg.Runtime, pod}, pod.Name, pod.UID, req.PathValue("container"), opts,
		streamIdleTimeout, streamCreationTimeout, remotecommand.SupportedStreamingProtocols)
}

func (s *Server) portForward(w http.ResponseWriter, req *http.Request) {
	opts, err := portforward.NewV4Options(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	pod := podRef(req)
	portforward.ServePortForward(w, req, executor{s.cfg.Runtime, pod}, pod.Name, pod.UID, opts,
		streamIdleTimeout, streamCreationTimeout, portforward.SupportedProtocols)
}

// run is the kubelet's /run: the command (cmd, split on spaces) runs in
// the container and its combined output is the answer.
func (s *Server) run(w http.ResponseWriter, req *http.Request) {
	cmd := strings.Fields(req.FormValue("cmd"))
	if len(cmd) == 0 {
		http.Error(w, "missing cmd", http.StatusBadRequest)
		return
	}
	var out strings.Builder
	_, err := s.cfg.Runtime.Exec(req.Context(), podRef(req), req.PathValue("container"), cmd, container.ExecIO{Stdout: &out, Stderr: &out})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	_, _ = io.WriteString(w, out.String())
}

// pods lists the node's Pods, as the kubelet's /pods does.
func (s *Server) pods(w http.ResponseWriter, _ *http.Request) {
	list := corev1.PodList{TypeMeta: podListType, Items: s.cfg.Runtime.Pods()}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&list)
}
