//go:build tools

// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package tools records the upstream commands this module builds, so that
// `go mod tidy` keeps their dependencies: the cluster's binaries
// (build.sh) and the e2e tests' image programs (agnhost,
// regression-issue-74839), which hack/node-images/build.sh builds here to
// share this module's downloads and build cache.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/test/images/agnhost"
	_ "k8s.io/kubernetes/test/images/regression-issue-74839"
)
