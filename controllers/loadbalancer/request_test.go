// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package loadbalancer

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
)

// requestSummary is a serviceRequest in comparable form.
type requestSummary struct {
	IPs           map[corev1.IPFamily]string
	Pool          string
	SharingKey    string
	Honoured      []string // reason: message
	Disagreements []string
	Err           string
}

func summarizeRequest(svc *corev1.Service) requestSummary {
	req, err := readRequest(svc)
	if err != nil {
		return requestSummary{Err: err.Error()}
	}
	s := requestSummary{Pool: req.pool, SharingKey: sharingKey(svc), Disagreements: req.disagreements}
	for fam, a := range req.ips {
		if s.IPs == nil {
			s.IPs = map[corev1.IPFamily]string{}
		}
		s.IPs[fam] = a.String()
	}
	for _, h := range req.honoured {
		s.Honoured = append(s.Honoured, h.reason+": "+h.message)
	}
	return s
}

func TestReadRequest(t *testing.T) {
	svc := func(loadBalancerIP string, annotations map[string]string) *corev1.Service {
		return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", Annotations: annotations},
			Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerIP: loadBalancerIP},
		}
	}
	for name, tc := range map[string]struct {
		svc  *corev1.Service
		want requestSummary
	}{
		"nothing asked": {svc: svc("", nil), want: requestSummary{}},
		"svcnet's own annotations are not reported": {
			svc:  svc("", map[string]string{AnnotationIPs: "192.0.2.1", AnnotationPool: "p", AnnotationSharingKey: "k"}),
			want: requestSummary{IPs: map[corev1.IPFamily]string{corev1.IPv4Protocol: "192.0.2.1"}, Pool: "p", SharingKey: "k"},
		},
		"spec.loadBalancerIP is a request for one address": {
			svc: svc("192.0.2.7", nil),
			want: requestSummary{IPs: map[corev1.IPFamily]string{corev1.IPv4Protocol: "192.0.2.7"},
				Honoured: []string{`LoadBalancerIPHonoured: spec.loadBalancerIP "192.0.2.7" used as svcnet.io/load-balancer-ips`}},
		},
		"MetalLB's annotations, stable names": {
			svc: svc("", map[string]string{
				MetalLBAnnotationIPs: "192.0.2.1, 2001:db8::1", MetalLBAnnotationPool: "public", MetalLBAnnotationSharingKey: "k1",
			}),
			want: requestSummary{
				IPs:  map[corev1.IPFamily]string{corev1.IPv4Protocol: "192.0.2.1", corev1.IPv6Protocol: "2001:db8::1"},
				Pool: "public", SharingKey: "k1",
				Honoured: []string{
					`MetalLBAnnotationHonoured: metallb.io/loadBalancerIPs "192.0.2.1, 2001:db8::1" used as svcnet.io/load-balancer-ips`,
					`MetalLBAnnotationHonoured: metallb.io/address-pool "public" used as svcnet.io/load-balancer-ip-pool`,
					`MetalLBAnnotationHonoured: metallb.io/allow-shared-ip "k1" used as svcnet.io/sharing-key`,
				},
			},
		},
		"MetalLB's annotations, deprecated names": {
			svc: svc("", map[string]string{
				MetalLBLegacyAnnotationIPs: "192.0.2.1", MetalLBLegacyAnnotationPool: "public", MetalLBLegacyAnnotationSharingKey: "k1",
			}),
			want: requestSummary{
				IPs:  map[corev1.IPFamily]string{corev1.IPv4Protocol: "192.0.2.1"},
				Pool: "public", SharingKey: "k1",
				Honoured: []string{
					`MetalLBAnnotationHonoured: metallb.universe.tf/loadBalancerIPs "192.0.2.1" used as svcnet.io/load-balancer-ips`,
					`MetalLBAnnotationHonoured: metallb.universe.tf/address-pool "public" used as svcnet.io/load-balancer-ip-pool`,
					`MetalLBAnnotationHonoured: metallb.universe.tf/allow-shared-ip "k1" used as svcnet.io/sharing-key`,
				},
			},
		},
		"svcnet's annotation wins over MetalLB's, which wins over spec.loadBalancerIP": {
			svc: svc("192.0.2.3", map[string]string{
				AnnotationIPs: "192.0.2.1", MetalLBAnnotationIPs: "192.0.2.2", MetalLBLegacyAnnotationIPs: "192.0.2.1",
			}),
			want: requestSummary{
				IPs: map[corev1.IPFamily]string{corev1.IPv4Protocol: "192.0.2.1"},
				Disagreements: []string{
					`annotation svcnet.io/load-balancer-ips "192.0.2.1" and annotation metallb.io/loadBalancerIPs "192.0.2.2" disagree; svcnet uses annotation svcnet.io/load-balancer-ips`,
					`annotation svcnet.io/load-balancer-ips "192.0.2.1" and spec.loadBalancerIP "192.0.2.3" disagree; svcnet uses annotation svcnet.io/load-balancer-ips`,
				},
			},
		},
		"MetalLB's stable name wins over its deprecated one": {
			svc: svc("", map[string]string{MetalLBAnnotationSharingKey: "new", MetalLBLegacyAnnotationSharingKey: "old"}),
			want: requestSummary{
				SharingKey: "new",
				Honoured:   []string{`MetalLBAnnotationHonoured: metallb.io/allow-shared-ip "new" used as svcnet.io/sharing-key`},
				Disagreements: []string{
					`annotation metallb.io/allow-shared-ip "new" and annotation metallb.universe.tf/allow-shared-ip "old" disagree; svcnet uses annotation metallb.io/allow-shared-ip`,
				},
			},
		},
		"the same addresses in another order agree": {
			svc:  svc("", map[string]string{AnnotationIPs: "2001:db8::1,192.0.2.1", MetalLBAnnotationIPs: "192.0.2.1, 2001:db8::1"}),
			want: requestSummary{IPs: map[corev1.IPFamily]string{corev1.IPv4Protocol: "192.0.2.1", corev1.IPv6Protocol: "2001:db8::1"}},
		},
		"an address that does not parse names its source": {
			svc:  svc("", map[string]string{MetalLBAnnotationIPs: "192.0.2.300"}),
			want: requestSummary{Err: `annotation metallb.io/loadBalancerIPs: "192.0.2.300" is not an IP address`},
		},
		"a garbled loser is a disagreement, not an error": {
			svc: svc("", map[string]string{AnnotationIPs: "192.0.2.1", MetalLBAnnotationIPs: "nonsense"}),
			want: requestSummary{
				IPs: map[corev1.IPFamily]string{corev1.IPv4Protocol: "192.0.2.1"},
				Disagreements: []string{
					`annotation svcnet.io/load-balancer-ips "192.0.2.1" and annotation metallb.io/loadBalancerIPs "nonsense" disagree; svcnet uses annotation svcnet.io/load-balancer-ips`,
				},
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, summarizeRequest(tc.svc)); diff != "" {
				t.Errorf("readRequest (-want +got):\n%s", diff)
			}
		})
	}
}

func TestChoosePools(t *testing.T) {
	state := func(name string, ready bool, assignment svcnetv1alpha1.PoolAssignment) *poolState {
		return &poolState{
			pool:  &svcnetv1alpha1.LoadBalancerIPPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: svcnetv1alpha1.LoadBalancerIPPoolSpec{Assignment: assignment}},
			ready: ready, message: "the pool is disabled: Services keep its addresses, no new one is given",
		}
	}
	states := map[string]*poolState{
		"auto":      state("auto", true, ""),
		"explicit":  state("explicit", true, svcnetv1alpha1.PoolAssignmentAutomatic),
		"manual":    state("manual", true, svcnetv1alpha1.PoolAssignmentOnRequest),
		"disabled":  state("disabled", false, ""),
		"elsewhere": state("elsewhere", true, ""),
	}
	eligible := []string{"manual", "auto", "explicit"} // "elsewhere" does not select the Service
	for name, tc := range map[string]struct {
		req  serviceRequest
		want poolChoice
	}{
		"a plain Service skips pools that assign only on request": {
			want: poolChoice{automatic: []string{"auto", "explicit"}, onRequest: eligible, keep: eligible},
		},
		"a pool named is the only one": {
			req:  serviceRequest{pool: "manual", poolFrom: MetalLBLegacyAnnotationPool},
			want: poolChoice{automatic: []string{"manual"}, onRequest: []string{"manual"}, keep: eligible},
		},
		"a pool named that does not exist gives nothing": {
			req: serviceRequest{pool: "nope", poolFrom: MetalLBAnnotationPool},
			want: poolChoice{keep: eligible,
				problem: "LoadBalancerIPPool nope, named by annotation metallb.io/address-pool, does not exist"},
		},
		"a pool named that is not Ready gives nothing": {
			req: serviceRequest{pool: "disabled", poolFrom: AnnotationPool},
			want: poolChoice{keep: eligible,
				problem: "LoadBalancerIPPool disabled, named by annotation svcnet.io/load-balancer-ip-pool, gives no address: the pool is disabled: Services keep its addresses, no new one is given"},
		},
		"a pool named that does not take the Service gives nothing": {
			req: serviceRequest{pool: "elsewhere", poolFrom: AnnotationPool},
			want: poolChoice{keep: eligible,
				problem: "LoadBalancerIPPool elsewhere, named by annotation svcnet.io/load-balancer-ip-pool, does not take this Service (its namespaceSelector or serviceSelector)"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			got := choosePools(states, eligible, tc.req)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(poolChoice{})); diff != "" {
				t.Errorf("choosePools (-want +got):\n%s", diff)
			}
		})
	}
}

// The sharing key is svcnet's annotation, else MetalLB's (stable, then
// deprecated name).
func TestSharingKey(t *testing.T) {
	for name, tc := range map[string]struct {
		annotations map[string]string
		want        string
	}{
		"none":                {nil, ""},
		"svcnet's":            {map[string]string{AnnotationSharingKey: "a", MetalLBAnnotationSharingKey: "b"}, "a"},
		"MetalLB's":           {map[string]string{MetalLBAnnotationSharingKey: "b", MetalLBLegacyAnnotationSharingKey: "c"}, "b"},
		"MetalLB's, old name": {map[string]string{MetalLBLegacyAnnotationSharingKey: "c"}, "c"},
		"empty is none":       {map[string]string{AnnotationSharingKey: " ", MetalLBAnnotationSharingKey: "b"}, "b"},
	} {
		t.Run(name, func(t *testing.T) {
			got := sharingKey(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Annotations: tc.annotations}})
			if got != tc.want {
				t.Errorf("sharingKey = %q, want %q", got, tc.want)
			}
		})
	}
}
