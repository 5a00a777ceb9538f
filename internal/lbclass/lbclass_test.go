// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package lbclass

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func TestServes(t *testing.T) {
	lb := func(class string) *corev1.Service {
		s := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer}}
		if class != "" {
			s.Spec.LoadBalancerClass = ptr.To(class)
		}
		return s
	}
	nodePort := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort}}
	tests := map[string]struct {
		sel  Selection
		svc  *corev1.Service
		want bool
	}{
		"default: no class":          {DefaultSelection(), lb(""), true},
		"default: svcnet's class":    {DefaultSelection(), lb(Default), true},
		"default: another class":     {DefaultSelection(), lb("example.com/lb"), false},
		"class only: no class":       {Selection{Class: Default, Only: true}, lb(""), false},
		"class only: svcnet's class": {Selection{Class: Default, Only: true}, lb(Default), true},
		"own class: the default's":   {Selection{Class: "corp/lb"}, lb(Default), false},
		"own class: its own":         {Selection{Class: "corp/lb"}, lb("corp/lb"), true},
		"not a LoadBalancer":         {DefaultSelection(), nodePort, false},
	}
	for name, tc := range tests {
		if got := tc.sel.Serves(tc.svc); got != tc.want {
			t.Errorf("%s: Serves = %v, want %v", name, got, tc.want)
		}
	}
}
