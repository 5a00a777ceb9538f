// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Command etcd is etcd's own server entry point, built from its Go module.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
