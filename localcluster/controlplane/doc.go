// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package controlplane holds what `svcnet up` needs around the control
// plane it runs on this machine (etcd, kube-apiserver,
// kube-controller-manager): the credentials it makes once per data dir
// (PKI), the admin kubeconfig, and the waits for a child to be ready or
// for a condition read from the API server to hold. Starting and
// supervising the children is localcluster/up's.
package controlplane
