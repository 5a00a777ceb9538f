// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package container is the node simulator's container runtime: it runs
// one container's process in a sandbox of its own and lets callers into
// it, as containerd and runc do for a kubelet.
//
// A container is a process in private mount, UTS and PID namespaces that
// joins its Pod's network namespace, whose root is a fresh tmpfs holding
// the image's files (overlay layers over folders of this machine, see
// nodesim/images), /dev's usual devices, its own /proc and the Pod's files
// (volumes, resolv.conf, hosts). Its first process is PID 1 of its PID
// namespace: a small init (this very binary, re-run with the container's
// settings in its environment) mounts /proc from inside the namespace,
// enters the root, drops privileges and executes the program. Exec joins
// the same namespaces and root; attach joins the process's standard
// streams; the output goes to a log file in the CRI format the kubelet
// reads.
//
// Nothing is mounted where this machine or other Pods can see it, and
// nothing outlives the container: its processes die with its PID 1, and
// PID 1 with the simulator (parent-death signal).
package container
