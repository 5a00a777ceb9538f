// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package admission

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/allocator/feed"
	"github.com/svcnet-io/svcnet/allocator/ipam"
	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
)

// DefaultServiceCIDR is the ServiceCIDR kube-apiserver creates from its
// --service-cluster-ip-range flag; its families are the cluster's.
const DefaultServiceCIDR = "kubernetes"

// clusterIPs chooses ClusterIPs; its view of ServiceCIDRs and IPAddresses
// comes from informer events.
type clusterIPs struct {
	alloc  *ipam.Allocator
	reader client.Reader // cache: Namespaces, ServiceCIDRBindings

	mu       sync.RWMutex
	families map[string][]corev1.IPFamily // ServiceCIDR name -> its families
	created  map[string]time.Time
}

func newClusterIPs(alloc *ipam.Allocator, reader client.Reader) *clusterIPs {
	return &clusterIPs{alloc: alloc, reader: reader, families: map[string][]corev1.IPFamily{}, created: map[string]time.Time{}}
}

// trackFamilies remembers each ServiceCIDR's families and age, from which
// the cluster's families follow.
func (c *clusterIPs) trackFamilies(sc *networkingv1.ServiceCIDR, deleted bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if deleted {
		delete(c.families, sc.Name)
		delete(c.created, sc.Name)
		return
	}
	var fams []corev1.IPFamily
	for _, p := range feed.ToCIDR(sc).Prefixes {
		if p.Addr().Is4() {
			fams = append(fams, corev1.IPv4Protocol)
		} else {
			fams = append(fams, corev1.IPv6Protocol)
		}
	}
	c.families[sc.Name] = fams
	c.created[sc.Name] = sc.CreationTimestamp.Time
}

// clusterFamilies are the families of the default ServiceCIDR (else the
// oldest one), primary first: what kube-apiserver's flags made the cluster.
func (c *clusterIPs) clusterFamilies() []corev1.IPFamily {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if f, ok := c.families[DefaultServiceCIDR]; ok && len(f) > 0 {
		return f
	}
	var name string
	var when time.Time
	for n, t := range c.created {
		if name == "" || t.Before(when) || (t.Equal(when) && n < name) {
			name, when = n, t
		}
	}
	return c.families[name]
}

// tenancy resolves the ServiceCIDRBindings for a namespace: the ServiceCIDRs
// bound to it, and those bound exclusively to others.
func (c *clusterIPs) tenancy(ctx context.Context, namespace string) (bound, denied []string, err error) {
	var bindings svcnetv1alpha1.ServiceCIDRBindingList
	if err := c.reader.List(ctx, &bindings); err != nil {
		return nil, nil, fmt.Errorf("listing ServiceCIDRBindings: %w", err)
	}
	if len(bindings.Items) == 0 {
		return nil, nil, nil
	}
	var ns corev1.Namespace
	if err := c.reader.Get(ctx, client.ObjectKey{Name: namespace}, &ns); err != nil {
		return nil, nil, fmt.Errorf("reading namespace %s: %w", namespace, err)
	}
	bound, denied = feed.Tenancy(bindings.Items, ns.Labels)
	return bound, denied, nil
}

// assign fills the ClusterIPs svc lacks and checks the ones the user set.
// undo gives back what it reserved, should the request fail later.
func (c *clusterIPs) assign(ctx context.Context, svc, old *corev1.Service, dryRun bool) (undo func(), warnings []string, err error) {
	var reserved []netip.Addr
	undo = func() {
		for _, a := range reserved {
			c.alloc.Release(a, feed.ServiceKey(svc))
		}
	}
	if !needsClusterIP(svc) || keepsPreferDualStack(svc, old) {
		return undo, nil, nil
	}
	fams, ok := wantedFamilies(svc, c.clusterFamilies())
	if !ok {
		return undo, nil, nil
	}
	owner := feed.ServiceKey(svc)
	bound, denied, err := c.tenancy(ctx, svc.Namespace)
	if err != nil {
		return nil, nil, err
	}
	ips := slices.Clone(svc.Spec.ClusterIPs)
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	var had []string
	if old != nil {
		had = old.Spec.ClusterIPs
	}
	for i, fam := range fams {
		req := ipam.Request{Owner: owner, Family: fam, Bound: bound, Denied: denied, DryRun: dryRun}
		if i < len(ips) && ips[i] != "" {
			if slices.Contains(had, ips[i]) {
				continue // kept from before: already committed
			}
			addr, err := c.reserveAsked(i, ips[i], req)
			if err != nil {
				undo()
				return nil, nil, err
			}
			if !dryRun {
				reserved = append(reserved, addr)
			}
			continue
		}
		addr, warning, err := c.allocateFree(req)
		if err != nil {
			undo()
			return nil, nil, err
		}
		if warning != "" {
			warnings = append(warnings, warning)
		}
		if !dryRun {
			reserved = append(reserved, addr)
		}
		if i < len(ips) {
			ips[i] = addr.String()
		} else {
			ips = append(ips, addr.String())
		}
	}
	svc.Spec.ClusterIPs = ips
	svc.Spec.ClusterIP = ips[0]
	return undo, warnings, nil
}

// reserveAsked reserves the address the user set as spec.clusterIPs[i].
func (c *clusterIPs) reserveAsked(i int, ip string, req ipam.Request) (netip.Addr, error) {
	addr, _ := netip.ParseAddr(ip) // wantedFamilies parsed it
	start := time.Now()
	if err := c.alloc.Reserve(addr, req); err != nil {
		c.countClusterIPError(addr, req, scopeStatic)
		return netip.Addr{}, userError{fmt.Sprintf("spec.clusterIPs[%d]: Invalid value: %q: %v", i, ip, err)}
	}
	took := time.Since(start)
	prefix, _ := c.alloc.PrefixOf(addr)
	countClusterIP(prefix, req, scopeStatic, took)
	return addr, nil
}

// allocateFree picks a free address for req, with a warning when it had
// to take one still in quarantine.
func (c *clusterIPs) allocateFree(req ipam.Request) (netip.Addr, string, error) {
	start := time.Now()
	got, err := c.alloc.Allocate(req)
	if err != nil {
		c.countClusterIPError(netip.Addr{}, req, scopeDynamic)
		if errors.Is(err, ipam.ErrFull) {
			return netip.Addr{}, "", userError{fmt.Sprintf("failed to allocate a ClusterIP: %v", err)}
		}
		return netip.Addr{}, "", err
	}
	countClusterIP(got.Prefix, req, scopeDynamic, time.Since(start))
	var warning string
	if got.QuarantineCut {
		warning = fmt.Sprintf("ClusterIP %s was released less than the reuse delay ago: its ServiceCIDRs have no other free address", got.Addr)
	}
	return got.Addr, warning, nil
}

// userError is a request the user must change; the handler denies it with
// the message.
type userError struct{ msg string }

func (e userError) Error() string { return e.msg }
