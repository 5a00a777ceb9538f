// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Command coredns is CoreDNS built from its Go module with the plugins a
// cluster's default Corefile uses (kubeadm's and the coredns add-on's)
// and those upstream's e2e tests give the CoreDNS of agnhost's image
// (hosts, forward), in the order CoreDNS itself runs them. svcnet up's
// add-on forwards nothing: nothing outside its cluster is reachable, so
// names outside the cluster domain are answered SERVFAIL by CoreDNS.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	// The plugins register themselves with CoreDNS when imported.
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/hosts"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

// directives is the subset of CoreDNS's plugin.cfg order that is built in;
// a Corefile naming any other plugin is refused at start.
var directives = []string{
	"reload",
	"ready",
	"health",
	"prometheus",
	"errors",
	"log",
	"loadbalance",
	"cache",
	"hosts",
	"kubernetes",
	"loop",
	"forward",
}

func init() { dnsserver.Directives = directives }

func main() { coremain.Run() }
