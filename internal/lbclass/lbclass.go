// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package lbclass says which LoadBalancer Services svcnet serves, by
// spec.loadBalancerClass: the manager gives them addresses and the
// agents announce those, with the same flags on both.
package lbclass

import (
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// Default is the spec.loadBalancerClass svcnet serves by default.
const Default = "svcnet.io/loadbalancer"

// Selection is which LoadBalancer Services svcnet serves: those of Class
// and, unless Only, those without a class.
type Selection struct {
	Class string
	// Only serves Class alone, leaving Services without a class to
	// another implementation (a cloud's, or a second one), as MetalLB's
	// --lb-class does.
	Only bool
}

// DefaultSelection serves Default and Services without a class.
func DefaultSelection() Selection { return Selection{Class: Default} }

// Serves reports whether svc is a LoadBalancer Service svcnet serves.
func (s Selection) Serves(svc *corev1.Service) bool {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return false
	}
	class := ptr.Deref(svc.Spec.LoadBalancerClass, "")
	if class == "" {
		return !s.Only
	}
	return class == s.Class
}

// AddFlags binds --load-balancer-class and --load-balancer-class-only,
// which the manager and the agent share; what says which component reads
// them.
func (s *Selection) AddFlags(fs *pflag.FlagSet, what string) {
	fs.StringVar(&s.Class, "load-balancer-class", s.Class, what+": the spec.loadBalancerClass served.")
	fs.BoolVar(&s.Only, "load-balancer-class-only", s.Only, what+": serve only Services of --load-balancer-class, leaving those without a class to another implementation (set it on the manager and the agents alike).")
}
