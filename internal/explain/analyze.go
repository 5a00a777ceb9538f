// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package explain

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/svcnet-io/svcnet/allocator/ipam"
)

// The hops of a report, in the order a packet meets them.
const (
	HopName          = "name"
	HopService       = "service"
	HopPods          = "pods"
	HopEndpointSlice = "endpointslices"
	HopNode          = "node"
	HopExternal      = "external"
	HopEvents        = "events"
)

// Report is what Analyze finds: a hop per step of the path, and the
// first that breaks.
type Report struct {
	Service string `json:"service"`
	From    string `json:"from"`
	Hops    []Hop  `json:"hops"`
	// Works is true when no hop breaks.
	Works bool `json:"works"`
	// Broken is the first problem on the path, nil when it works.
	Broken *Finding `json:"broken,omitempty"`
}

// Hop is one step of the path: what holds there, and what does not.
type Hop struct {
	Name     string    `json:"name"`
	Facts    []string  `json:"facts,omitempty"`
	Problems []Finding `json:"problems,omitempty"`
}

// Finding is a problem on the path and what to change.
type Finding struct {
	Hop     string `json:"hop"`
	Problem string `json:"problem"`
	Fix     string `json:"fix"`
}

// hop collects one hop's facts and problems.
type hop struct{ Hop }

func newHop(name string) *hop { return &hop{Hop{Name: name}} }

func (h *hop) fact(format string, args ...any) {
	h.Facts = append(h.Facts, fmt.Sprintf(format, args...))
}

func (h *hop) problem(fix, format string, args ...any) {
	h.Problems = append(h.Problems, Finding{Hop: h.Name, Problem: fmt.Sprintf(format, args...), Fix: fix})
}

// Analyze follows the path from in.From to the Service's Pods. Pure.
func Analyze(in Inputs) Report {
	r := Report{Service: in.Key.String(), From: in.From.String()}
	svc := in.Service
	if svc == nil {
		h := newHop(HopService)
		if in.CreateRefused != "" {
			fix := "change what the API server's answer names (an admission policy, a quota)"
			if strings.Contains(in.CreateRefused, ipam.ErrFull.Error()) {
				fix = fmt.Sprintf("free addresses in the ServiceCIDRs namespace %s may use (kubectl get servicecidrs,servicecidrbindings), or add a ServiceCIDR", in.Key.Namespace)
			}
			h.problem(fix,
				"Service %s does not exist, and the API server refuses to create it now: %s", in.Key, in.CreateRefused)
			return finish(r, h.Hop)
		}
		h.problem("check the name and the namespace (-n); kubectl get services -A lists them",
			"Service %s does not exist", in.Key)
		return finish(r, h.Hop)
	}
	hops := []Hop{nameHop(in).Hop, serviceHop(in).Hop}
	if svc.Spec.Type != corev1.ServiceTypeExternalName {
		if len(svc.Spec.Selector) > 0 {
			hops = append(hops, podsHop(in).Hop)
		}
		hops = append(hops, slicesHop(in).Hop)
		if in.From.Node != "" && !in.From.External {
			hops = append(hops, nodeHop(in).Hop)
		}
		if in.From.External {
			hops = append(hops, externalHop(in).Hop)
		}
	}
	hops = append(hops, eventsHop(in).Hop)
	return finish(r, hops...)
}

func finish(r Report, hops ...Hop) Report {
	for _, h := range hops {
		if h.Name == HopName && len(h.Facts) == 0 && len(h.Problems) == 0 {
			continue // no name lookup on this path
		}
		r.Hops = append(r.Hops, h)
		if r.Broken == nil && len(h.Problems) > 0 {
			r.Broken = &h.Problems[0]
		}
	}
	r.Works = r.Broken == nil
	return r
}

func ready(ep discoveryv1.Endpoint) bool { return ep.Conditions.Ready == nil || *ep.Conditions.Ready }

func localReady(sl []discoveryv1.EndpointSlice, node string) int {
	n := 0
	for _, s := range sl {
		for _, ep := range s.Endpoints {
			if ready(ep) && ep.NodeName != nil && *ep.NodeName == node {
				n++
			}
		}
	}
	return n
}

func endpointAddresses(sl []discoveryv1.EndpointSlice, notReadyToo bool) []string {
	var out []string
	for _, s := range sl {
		for _, ep := range s.Endpoints {
			if ready(ep) || notReadyToo {
				out = append(out, ep.Addresses...)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func readyPods(pods []corev1.Pod) []corev1.Pod {
	var out []corev1.Pod
	for _, p := range pods {
		if p.DeletionTimestamp == nil && podReady(&p) {
			out = append(out, p)
		}
	}
	return out
}

func describeCounts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(out, ", ")
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
