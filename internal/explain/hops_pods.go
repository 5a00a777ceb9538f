// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package explain

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// podsHop: the Pods the selector matches, their readiness and ports.
func podsHop(in Inputs) *hop {
	h := newHop(HopPods)
	svc := in.Service
	sel := labels.SelectorFromSet(svc.Spec.Selector)
	if len(in.Pods) == 0 {
		var seen []string
		for _, k := range slices.Sorted(maps.Keys(in.OtherLabels)) {
			for _, v := range in.OtherLabels[k] {
				seen = append(seen, k+"="+v)
			}
		}
		hint := ""
		if len(seen) > 0 {
			hint = " (Pods there carry " + strings.Join(seen, ", ") + ")"
		}
		h.problem("set the selector to the labels of the Pods that serve it, or label those Pods "+sel.String(),
			"selector %s matches no Pod in %s%s", sel, svc.Namespace, hint)
		return h
	}
	var ready, terminating []corev1.Pod
	perNode := map[string]int{}
	for _, p := range in.Pods {
		switch {
		case p.DeletionTimestamp != nil:
			terminating = append(terminating, p)
		case podReady(&p):
			ready = append(ready, p)
			perNode[cmpOr(p.Spec.NodeName, "no node")]++
		}
	}
	h.fact("%d Pod(s) match %s: %d Ready, %d terminating; Ready per node: %s", len(in.Pods), sel, len(ready), len(terminating), describeCounts(perNode))
	if len(ready) == 0 && !svc.Spec.PublishNotReadyAddresses {
		h.problem("make the Pods Ready: kubectl describe pod shows their probes and containers",
			"none of the %d Pod(s) is Ready: %s", len(in.Pods), notReadyReasons(in.Pods))
	}
	checkTargetPorts(h, svc, in.Pods)
	return h
}

// checkTargetPorts: every targetPort must be a port the Pods have, by
// name, or, when the Pods declare their ports, by number.
func checkTargetPorts(h *hop, svc *corev1.Service, pods []corev1.Pod) {
	for _, sp := range svc.Spec.Ports {
		tp := sp.TargetPort
		found, have := podsWithPort(pods, sp)
		switch {
		case tp.Type == intstr.String && found == 0:
			h.problem(fmt.Sprintf("set the port's targetPort to the name or number the Pods use, or name their container port %q", tp.StrVal),
				"targetPort %q of port %d matches no port of the %d Pod(s): they have %s", tp.StrVal, sp.Port, len(pods), orNone(have))
		case tp.Type == intstr.Int && found == 0 && len(have) > 0:
			h.problem("set the port's targetPort to the port the Pods listen on",
				"targetPort %d of port %d is no port the %d Pod(s) declare: they declare %s", targetNumber(sp), sp.Port, len(pods), strings.Join(have, ", "))
		case found > 0 && found < len(pods):
			h.fact("targetPort %s of port %d: on %d of %d Pods", tp.String(), sp.Port, found, len(pods))
		}
	}
}

// podsWithPort counts the Pods with a container port that sp's
// targetPort names (or numbers), and lists the ports of the protocol
// they declare.
func podsWithPort(pods []corev1.Pod, sp corev1.ServicePort) (found int, have []string) {
	tp := sp.TargetPort
	for _, p := range pods {
		ok := false
		for _, c := range p.Spec.Containers {
			for _, cp := range c.Ports {
				if cp.Protocol != "" && cp.Protocol != sp.Protocol {
					continue
				}
				desc := strconv.Itoa(int(cp.ContainerPort))
				if cp.Name != "" {
					desc = fmt.Sprintf("%q (%d)", cp.Name, cp.ContainerPort)
				}
				if !slices.Contains(have, desc) {
					have = append(have, desc)
				}
				ok = ok || (tp.Type == intstr.String && cp.Name == tp.StrVal) || (tp.Type == intstr.Int && cp.ContainerPort == targetNumber(sp))
			}
		}
		if ok {
			found++
		}
	}
	return found, have
}

func targetNumber(sp corev1.ServicePort) int32 {
	if sp.TargetPort.IntVal == 0 {
		return sp.Port
	}
	return sp.TargetPort.IntVal
}

func notReadyReasons(pods []corev1.Pod) string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name+" "+notReadyReason(&p))
		if len(out) == 3 {
			break
		}
	}
	return strings.Join(out, "; ")
}

// notReadyReason says why a Pod is not Ready, as its status tells.
func notReadyReason(p *corev1.Pod) string {
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			return fmt.Sprintf("(container %s waiting: %s)", cs.Name, w.Reason)
		}
		if t := cs.State.Terminated; t != nil {
			return fmt.Sprintf("(container %s terminated: %s)", cs.Name, t.Reason)
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status != corev1.ConditionTrue {
			return fmt.Sprintf("(%s %s)", cmpOr(c.Reason, "not Ready"), c.Message)
		}
	}
	if p.Spec.NodeName == "" {
		return "(not scheduled)"
	}
	return "(" + string(p.Status.Phase) + ")"
}

// slicesHop: the EndpointSlices, and whether they agree with the Pods.
func slicesHop(in Inputs) *hop {
	h := newHop(HopEndpointSlice)
	svc := in.Service
	var readyEPs, notReady int
	listed := map[string]bool{}
	for _, s := range in.Slices {
		for _, ep := range s.Endpoints {
			if ready(ep) {
				readyEPs++
				for _, a := range ep.Addresses {
					listed[a] = true
				}
			} else {
				notReady++
			}
		}
		h.fact("%s (%s, %s): %d endpoint(s)%s", s.Name, s.AddressType, s.Labels[discoveryv1.LabelManagedBy], len(s.Endpoints), hints(s))
	}
	if len(in.Slices) == 0 {
		if len(svc.Spec.Selector) == 0 {
			h.problem("write an EndpointSlice (label kubernetes.io/service-name="+svc.Name+") or an Endpoints object named "+svc.Name+" with the backends' addresses",
				"no EndpointSlice: a Service without a selector has endpoints only where someone writes them")
			return h
		}
		if len(readyPods(in.Pods)) > 0 {
			h.problem("check that an EndpointSlice controller runs: svcnet's manager (controller endpointslice) or kube-controller-manager's endpointslice-controller",
				"no EndpointSlice although %d Pod(s) are Ready: no EndpointSlice controller has published them", len(readyPods(in.Pods)))
		}
		return h
	}
	h.fact("%d ready endpoint(s), %d not ready", readyEPs, notReady)
	var missing []string
	for _, p := range readyPods(in.Pods) {
		if p.Status.PodIP != "" && !listed[p.Status.PodIP] {
			missing = append(missing, p.Name)
		}
	}
	if len(missing) > 0 {
		h.problem("check the EndpointSlice controller's log and its Events on the Service",
			"Ready Pod(s) %s are not ready endpoints of the slices: the EndpointSlice controller is behind", strings.Join(missing, ", "))
	}
	if readyEPs == 0 && len(svc.Spec.Selector) == 0 {
		h.problem("mark the endpoints ready, or add ready ones", "the slices hold no ready endpoint")
	}
	return h
}

func hints(s discoveryv1.EndpointSlice) string {
	zones := map[string]bool{}
	for _, ep := range s.Endpoints {
		if ep.Hints != nil {
			for _, z := range ep.Hints.ForZones {
				zones[z.Name] = true
			}
		}
	}
	if len(zones) == 0 {
		return ""
	}
	return ", hints for zones " + strings.Join(slices.Sorted(maps.Keys(zones)), ", ")
}
