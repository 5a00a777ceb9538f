// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/logs"
	"k8s.io/utils/ptr"
)

var podListType = metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}

// podLogOptions reads the options of a log request from its query, with
// the API's parameter names, as kube-apiserver passes them on.
func podLogOptions(q url.Values) (*corev1.PodLogOptions, error) {
	o := &corev1.PodLogOptions{Container: q.Get("container")}
	var errs []error
	boolean := func(name string) bool {
		v := q.Get(name)
		if v == "" {
			return false
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
		return b
	}
	integer := func(name string) *int64 {
		v := q.Get(name)
		if v == "" {
			return nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			return nil
		}
		return &n
	}
	o.Follow, o.Previous, o.Timestamps = boolean("follow"), boolean("previous"), boolean("timestamps")
	o.SinceSeconds, o.TailLines, o.LimitBytes = integer("sinceSeconds"), integer("tailLines"), integer("limitBytes")
	if v := q.Get("sinceTime"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			errs = append(errs, fmt.Errorf("sinceTime: %w", err))
		}
		o.SinceTime = &metav1.Time{Time: t}
	}
	if v := q.Get("stream"); v != "" {
		o.Stream = &v
	}
	return o, errors.Join(errs...)
}

// containerLogs serves a container's log from its CRI log file with the
// kubelet's options (follow, previous, since, tail, limitBytes,
// timestamps, stream), read by the kubelet's own reader.
func (s *Server) containerLogs(w http.ResponseWriter, req *http.Request) {
	opts, err := podLogOptions(req.URL.Query())
	if err != nil {
		http.Error(w, fmt.Sprintf("unable to decode query: %v", err), http.StatusBadRequest)
		return
	}
	pod, name := podRef(req), req.PathValue("container")
	path, running, err := s.cfg.Runtime.LogFile(pod, name, opts.Previous)
	if err != nil {
		status := http.StatusBadRequest
		if errors.Is(err, ErrPodNotFound) {
			status = http.StatusNotFound
		}
		http.Error(w, err.Error(), status)
		return
	}
	stdout, stderr := io.Writer(w), io.Writer(w)
	switch ptr.Deref(opts.Stream, corev1.LogStreamAll) {
	case corev1.LogStreamStdout:
		stderr = nil
	case corev1.LogStreamStderr:
		stdout = nil
	}
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("Transfer-Encoding", "chunked")
	fw := &flushWriter{w: w}
	if stdout != nil {
		stdout = fw
	}
	if stderr != nil {
		stderr = fw
	}
	w.WriteHeader(http.StatusOK)
	err = logs.ReadLogs(req.Context(), path, "", criLogOptions(opts, time.Now()), runningStatus{running: running}, stdout, stderr)
	if err != nil && req.Context().Err() == nil {
		s.cfg.Log.V(2).Info("Reading a container log", "pod", pod, "container", name, "err", err.Error())
	}
}

// criLogOptions are the log reader's options from the API's, as the
// kubelet converts them.
func criLogOptions(o *corev1.PodLogOptions, now time.Time) *logs.LogOptions {
	out := &logs.LogOptions{TailLines: o.TailLines, LimitBytes: o.LimitBytes, Follow: o.Follow, Timestamp: o.Timestamps}
	switch {
	case o.SinceSeconds != nil:
		out.Since = now.Add(-time.Duration(*o.SinceSeconds) * time.Second)
	case o.SinceTime != nil:
		out.Since = o.SinceTime.Time
	}
	return out
}

// flushWriter flushes every write, so a followed log arrives as written.
type flushWriter struct{ w io.Writer }

func (f *flushWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if fl, ok := f.w.(http.Flusher); ok {
		fl.Flush()
	}
	return n, err
}

// runningStatus answers the log reader's one question to the runtime
// while it follows a log: does the container still run. The reader calls
// nothing else of the CRI (the embedded interface stays nil).
type runningStatus struct {
	internalapi.RuntimeService
	running func() bool
}

func (r runningStatus) ContainerStatus(context.Context, string, bool) (*runtimeapi.ContainerStatusResponse, error) {
	state := runtimeapi.ContainerState_CONTAINER_EXITED
	if r.running != nil && r.running() {
		state = runtimeapi.ContainerState_CONTAINER_RUNNING
	}
	return &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{State: state}}, nil
}
