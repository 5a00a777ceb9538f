// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package version holds the build's identity, stamped by the Makefile with
// -ldflags "-X github.com/svcnet-io/svcnet/internal/platform/version.Version=...".
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is the svcnet release or `git describe` of the build.
var Version = "devel"

// KubernetesVersion is the Kubernetes release svcnet is built and tested
// against; bin/k8s holds binaries of exactly this version.
const KubernetesVersion = "v1.37.1"

// String describes the build for `svcnet version` and the User-Agent.
func String() string {
	commit := "unknown"
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" {
				commit = s.Value
			}
		}
	}
	return fmt.Sprintf("svcnet %s (commit %s, kubernetes %s, %s, %s/%s)",
		Version, commit, KubernetesVersion, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
