//go:build tools

// Package tools records the upstream commands this module builds, so that
// `go mod tidy` keeps their dependencies: the cluster's binaries
// (build.sh) and agnhost, the e2e tests' image program, which
// hack/node-images/build.sh builds here to share this module's downloads
// and build cache.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/test/images/agnhost"
)
