// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Command probeapp is the "image" of the node simulator's Program tests:
// it reports what a container sees (environment, files, hostname,
// arguments, user, capabilities) over HTTP, answers a readiness path, and exits on request.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
)

func main() {
	listen := flag.String("listen", ":8080", "address to serve on")
	flag.Parse()
	var ready atomic.Bool
	ready.Store(true)
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			return "error: " + err.Error()
		}
		return string(b)
	}
	http.HandleFunc("/info", func(w http.ResponseWriter, _ *http.Request) {
		host, _ := os.Hostname()
		sa := "/var/run/secrets/kubernetes.io/serviceaccount/"
		_ = json.NewEncoder(w).Encode(map[string]any{
			"args":      os.Args,
			"env":       os.Environ(),
			"hostname":  host,
			"token":     read(sa + "token"),
			"ca":        read(sa + "ca.crt"),
			"namespace": read(sa + "namespace"),
			"config":    read("/etc/app/config"),
			"resolv":    read("/etc/resolv.conf"),
			"hosts":     read("/etc/hosts"),
			"uid":       os.Getuid(),
			"capEff":    capEff(read("/proc/self/status")),
			"writable":  map[string]bool{"/": writable("/"), "/scratch": writable("/scratch")},
		})
	})
	http.HandleFunc("/ready", func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	http.HandleFunc("/unready", func(w http.ResponseWriter, _ *http.Request) { ready.Store(false) })
	http.HandleFunc("/exit", func(w http.ResponseWriter, r *http.Request) {
		code, _ := strconv.Atoi(r.URL.Query().Get("code"))
		w.WriteHeader(http.StatusOK)
		os.Exit(code)
	})
	if err := http.ListenAndServe(*listen, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// capEff is the CapEff line of /proc/self/status: the effective
// capabilities, in hexadecimal.
func capEff(status string) string {
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// writable tells whether a file can be created in dir.
func writable(dir string) bool {
	f, err := os.CreateTemp(dir, "probe")
	if err != nil {
		return false
	}
	f.Close()
	_ = os.Remove(f.Name())
	return true
}
