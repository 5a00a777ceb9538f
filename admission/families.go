// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package admission

import (
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/svcnet-io/svcnet/internal/platform/ipfamily"
)

// needsClusterIP: every Service but ExternalName and headless ones.
func needsClusterIP(svc *corev1.Service) bool {
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		return false
	}
	return svc.Spec.ClusterIP != corev1.ClusterIPNone &&
		(len(svc.Spec.ClusterIPs) == 0 || svc.Spec.ClusterIPs[0] != corev1.ClusterIPNone)
}

// wantedFamilies returns the address families a Service gets ClusterIPs
// for, in order, following kube-apiserver's defaulting: explicit ipFamilies
// first, else the families of the IPs given, else the cluster's primary
// family; a dual-stack policy adds the cluster's other family when it has
// one. clusterFamilies lists the cluster's families, primary first. ok is
// false when the request is one kube-apiserver will reject anyway (families
// that contradict the IPs, a family the cluster lacks): the handler then
// leaves it alone so that the user sees kube-apiserver's own error.
func wantedFamilies(svc *corev1.Service, clusterFamilies []corev1.IPFamily) (fams []corev1.IPFamily, ok bool) {
	if len(clusterFamilies) == 0 {
		return nil, false
	}
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	if len(ips) > 0 && svc.Spec.ClusterIP != "" && ips[0] != svc.Spec.ClusterIP {
		return nil, false
	}
	policy := corev1.IPFamilyPolicySingleStack
	if svc.Spec.IPFamilyPolicy != nil {
		policy = *svc.Spec.IPFamilyPolicy
	} else if len(svc.Spec.IPFamilies) == 2 || len(ips) == 2 {
		policy = corev1.IPFamilyPolicyRequireDualStack
	}
	for i, ip := range ips {
		f, valid := ipfamily.OfString(ip)
		if !valid {
			return nil, false
		}
		if i < len(svc.Spec.IPFamilies) && svc.Spec.IPFamilies[i] != f {
			return nil, false
		}
		fams = append(fams, f)
	}
	if len(svc.Spec.IPFamilies) > len(fams) {
		fams = append(fams, svc.Spec.IPFamilies[len(fams):]...)
	}
	if len(fams) == 0 {
		fams = []corev1.IPFamily{clusterFamilies[0]}
	}
	if policy == corev1.IPFamilyPolicySingleStack && len(fams) > 1 {
		return nil, false
	}
	if policy != corev1.IPFamilyPolicySingleStack && len(fams) == 1 && len(clusterFamilies) == 2 {
		fams = append(fams, ipfamily.Other(fams[0]))
	}
	if policy == corev1.IPFamilyPolicyRequireDualStack && len(fams) < 2 {
		return nil, false
	}
	if len(fams) > 2 || (len(fams) == 2 && fams[0] == fams[1]) {
		return nil, false
	}
	for _, f := range fams {
		if f != clusterFamilies[0] && (len(clusterFamilies) < 2 || f != clusterFamilies[1]) {
			return nil, false
		}
	}
	return fams, true
}

// keepsPreferDualStack tells an update of a PreferDualStack Service that
// must keep its ClusterIPs and families as they are, as kube-apiserver
// keeps them: a cluster that became dual-stack (or single-stack) since the
// Service was made changes it only when its owner asks, by another policy
// or by adding or removing a secondary IP or family. Without this, any
// later update (a label) would give it a second family.
func keepsPreferDualStack(svc, old *corev1.Service) bool {
	if old == nil || svc.Spec.IPFamilyPolicy == nil || old.Spec.Type != svc.Spec.Type || !needsClusterIP(svc) {
		return false
	}
	prefer := func(s *corev1.Service) bool {
		return s.Spec.IPFamilyPolicy == nil || *s.Spec.IPFamilyPolicy == corev1.IPFamilyPolicyPreferDualStack
	}
	return prefer(svc) && prefer(old) &&
		slices.Equal(svc.Spec.ClusterIPs, old.Spec.ClusterIPs) && slices.Equal(svc.Spec.IPFamilies, old.Spec.IPFamilies)
}
