// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package builder makes the Kubernetes objects tests need, readably:
//
//	builder.Service("web", ns).Port("http", 80, intstr.FromString("http")).Selector("app", "web").Obj()
//	builder.Pod("web-1", ns).Label("app", "web").ContainerPort("http", 8080).IP("10.1.0.5").Ready().Obj()
package builder

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// ServiceBuilder builds a Service.
type ServiceBuilder struct{ svc *corev1.Service }

// Service starts a ClusterIP Service.
func Service(name, namespace string) *ServiceBuilder {
	return &ServiceBuilder{svc: &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP},
	}}
}

// Port adds a TCP port with a target port.
func (b *ServiceBuilder) Port(name string, port int32, target intstr.IntOrString) *ServiceBuilder {
	return b.PortProto(name, port, target, corev1.ProtocolTCP)
}

// PortProto adds a port of any protocol.
func (b *ServiceBuilder) PortProto(name string, port int32, target intstr.IntOrString, proto corev1.Protocol) *ServiceBuilder {
	b.svc.Spec.Ports = append(b.svc.Spec.Ports, corev1.ServicePort{Name: name, Port: port, TargetPort: target, Protocol: proto})
	return b
}

// Selector adds a selector term.
func (b *ServiceBuilder) Selector(key, value string) *ServiceBuilder {
	if b.svc.Spec.Selector == nil {
		b.svc.Spec.Selector = map[string]string{}
	}
	b.svc.Spec.Selector[key] = value
	return b
}

// Label adds a label.
func (b *ServiceBuilder) Label(key, value string) *ServiceBuilder {
	if b.svc.Labels == nil {
		b.svc.Labels = map[string]string{}
	}
	b.svc.Labels[key] = value
	return b
}

// Annotation adds an annotation.
func (b *ServiceBuilder) Annotation(key, value string) *ServiceBuilder {
	if b.svc.Annotations == nil {
		b.svc.Annotations = map[string]string{}
	}
	b.svc.Annotations[key] = value
	return b
}

// Type sets the Service type.
func (b *ServiceBuilder) Type(t corev1.ServiceType) *ServiceBuilder {
	b.svc.Spec.Type = t
	return b
}

// Headless sets clusterIP: None.
func (b *ServiceBuilder) Headless() *ServiceBuilder {
	b.svc.Spec.ClusterIP = corev1.ClusterIPNone
	return b
}

// ExternalName makes an ExternalName Service.
func (b *ServiceBuilder) ExternalName(host string) *ServiceBuilder {
	b.svc.Spec.Type = corev1.ServiceTypeExternalName
	b.svc.Spec.ExternalName = host
	return b
}

// DualStack asks for both families, IPv4 first.
func (b *ServiceBuilder) DualStack() *ServiceBuilder {
	b.svc.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicyRequireDualStack)
	b.svc.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	return b
}

// ClusterIPs asks for these ClusterIPs (spec.clusterIP is the first).
func (b *ServiceBuilder) ClusterIPs(ips ...string) *ServiceBuilder {
	b.svc.Spec.ClusterIP = ips[0]
	b.svc.Spec.ClusterIPs = ips
	return b
}

// Families sets ipFamilyPolicy and, when given, ipFamilies.
func (b *ServiceBuilder) Families(policy corev1.IPFamilyPolicy, families ...corev1.IPFamily) *ServiceBuilder {
	b.svc.Spec.IPFamilyPolicy = ptr.To(policy)
	b.svc.Spec.IPFamilies = families
	return b
}

// PublishNotReady sets publishNotReadyAddresses.
func (b *ServiceBuilder) PublishNotReady() *ServiceBuilder {
	b.svc.Spec.PublishNotReadyAddresses = true
	return b
}

// TrafficDistribution sets spec.trafficDistribution.
func (b *ServiceBuilder) TrafficDistribution(td string) *ServiceBuilder {
	b.svc.Spec.TrafficDistribution = ptr.To(td)
	return b
}

// Obj returns the Service.
func (b *ServiceBuilder) Obj() *corev1.Service { return b.svc.DeepCopy() }

// PodBuilder builds a Pod, spec and status.
type PodBuilder struct{ pod *corev1.Pod }

// Pod starts a Pod with one container and no status.
func Pod(name, namespace string) *PodBuilder {
	return &PodBuilder{pod: &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: "registry.k8s.io/pause:3.10",
		}}},
	}}
}

// Label adds a label.
func (b *PodBuilder) Label(key, value string) *PodBuilder {
	if b.pod.Labels == nil {
		b.pod.Labels = map[string]string{}
	}
	b.pod.Labels[key] = value
	return b
}

// ContainerPort declares a named TCP port on the first container.
func (b *PodBuilder) ContainerPort(name string, port int32) *PodBuilder {
	c := &b.pod.Spec.Containers[0]
	c.Ports = append(c.Ports, corev1.ContainerPort{Name: name, ContainerPort: port, Protocol: corev1.ProtocolTCP})
	return b
}

// Node sets spec.nodeName.
func (b *PodBuilder) Node(name string) *PodBuilder {
	b.pod.Spec.NodeName = name
	return b
}

// Hostname sets spec.hostname and spec.subdomain.
func (b *PodBuilder) Hostname(hostname, subdomain string) *PodBuilder {
	b.pod.Spec.Hostname = hostname
	b.pod.Spec.Subdomain = subdomain
	return b
}

// Finalizer adds a finalizer, so that a deleted Pod stays Terminating.
func (b *PodBuilder) Finalizer(f string) *PodBuilder {
	b.pod.Finalizers = append(b.pod.Finalizers, f)
	return b
}

// IP sets the Pod's IPs (status), Running.
func (b *PodBuilder) IP(ips ...string) *PodBuilder {
	b.pod.Status.Phase = corev1.PodRunning
	b.pod.Status.PodIP = ips[0]
	b.pod.Status.PodIPs = nil
	for _, ip := range ips {
		b.pod.Status.PodIPs = append(b.pod.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	return b
}

// Ready sets the Ready condition to True.
func (b *PodBuilder) Ready() *PodBuilder { return b.condition(corev1.ConditionTrue) }

// NotReady sets the Ready condition to False.
func (b *PodBuilder) NotReady() *PodBuilder { return b.condition(corev1.ConditionFalse) }

func (b *PodBuilder) condition(status corev1.ConditionStatus) *PodBuilder {
	b.pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.Now()}}
	return b
}

// Phase sets the phase.
func (b *PodBuilder) Phase(p corev1.PodPhase) *PodBuilder {
	b.pod.Status.Phase = p
	return b
}

// Obj returns the Pod.
func (b *PodBuilder) Obj() *corev1.Pod { return b.pod.DeepCopy() }
