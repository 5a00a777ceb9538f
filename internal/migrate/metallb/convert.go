// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package metallb

import (
	"cmp"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
)

// Group is MetalLB's API group.
const Group = "metallb.io"

// PoolLabel is the label every converted pool carries with its name, so
// that the announcements converted from advertisements that name pools can
// select them: svcnet selects pools by label only.
const PoolLabel = "migrate.svcnet.io/metallb-pool"

// SourceAnnotation on a converted object names the MetalLB objects it was
// made from.
const SourceAnnotation = "migrate.svcnet.io/metallb-source"

// Warning is a MetalLB field, or a whole object, that was not converted or
// not exactly.
type Warning struct {
	// Object names the MetalLB object, as "IPAddressPool metallb-system/prod".
	Object string
	// Field is the path of the field in it, as "spec.communities"; empty
	// for the whole object.
	Field string
	// Reason says why, and what the svcnet objects do instead.
	Reason string
}

func (w Warning) String() string {
	if w.Field == "" {
		return w.Object + ": " + w.Reason
	}
	return w.Object + ": " + w.Field + ": " + w.Reason
}

// Result is what Convert made of MetalLB's objects.
type Result struct {
	// Pools are the LoadBalancerIPPools, by name.
	Pools []svcnetv1alpha1.LoadBalancerIPPool
	// Announcements are the LoadBalancerAnnouncements, by name.
	Announcements []svcnetv1alpha1.LoadBalancerAnnouncement
	// Warnings list what was not converted, or not exactly.
	Warnings []Warning
}

// source is one MetalLB object with its spec decoded.
type source[S any] struct {
	ref       string // "Kind namespace/name", for warnings
	name      string
	namespace string
	// labels are the object's own; pools keep them, since MetalLB's
	// ipAddressPoolSelectors select on them.
	labels map[string]string
	spec   S
}

// input is MetalLB's configuration, each kind by name.
type input struct {
	pools []source[ipAddressPoolSpec]
	l2    []source[l2AdvertisementSpec]
	bgp   []source[bgpAdvertisementSpec]
	peers []source[bgpPeerSpec]
	// communities are the Community objects, whose aliases the
	// BGPAdvertisements use.
	communities []source[communitySpec]
	// bfdProfiles are the BFDProfiles the BGPPeers name.
	bfdProfiles []source[bfdProfileSpec]
}

// Convert turns MetalLB's objects into svcnet's. Objects of other groups
// are ignored; the error is for a MetalLB object whose fields do not have
// MetalLB's types.
func Convert(objs []*unstructured.Unstructured) (Result, error) {
	var res Result
	in, err := decode(objs, &res.Warnings)
	if err != nil {
		return Result{}, err
	}
	res.Pools = convertPools(in.pools, &res.Warnings)
	anns := convertL2(in.l2, res.Pools, &res.Warnings)
	aliases := communityAliases(in.communities, &res.Warnings)
	warnBFDProfiles(in.bfdProfiles, &res.Warnings)
	profiles := map[string]bfdProfileSpec{}
	for _, p := range in.bfdProfiles {
		profiles[p.name] = p.spec
	}
	anns = append(anns, convertBGP(in.bgp, in.peers, profiles, aliases, res.Pools, &res.Warnings)...)
	anns = merge(anns, &res.Warnings)
	limitPeers(anns, &res.Warnings)
	nameUniquely(anns)
	slices.SortFunc(anns, func(a, b svcnetv1alpha1.LoadBalancerAnnouncement) int { return cmp.Compare(a.Name, b.Name) })
	warnOverlaps(anns, res.Pools, &res.Warnings)
	res.Announcements = anns
	slices.SortStableFunc(res.Warnings, func(a, b Warning) int {
		return cmp.Or(cmp.Compare(a.Object, b.Object), cmp.Compare(a.Field, b.Field))
	})
	return res, nil
}

// decode sorts the MetalLB objects by kind and decodes their specs.
func decode(objs []*unstructured.Unstructured, warnings *[]Warning) (input, error) {
	var in input
	seen := map[string]bool{}
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		if gvk.Group != Group {
			continue
		}
		ref := gvk.Kind + " " + o.GetNamespace() + "/" + o.GetName()
		if o.GetNamespace() == "" {
			ref = gvk.Kind + " " + o.GetName()
		}
		key := gvk.Kind + "/" + o.GetName()
		if seen[key] {
			*warnings = append(*warnings, Warning{Object: ref, Reason: "another " + gvk.Kind + " of this name comes first; this one is ignored"})
			continue
		}
		seen[key] = true
		var err error
		switch gvk.Kind {
		case "IPAddressPool":
			in.pools, err = appendSource(in.pools, o, ref, warnings)
		case "L2Advertisement":
			in.l2, err = appendSource(in.l2, o, ref, warnings)
		case "BGPAdvertisement":
			in.bgp, err = appendSource(in.bgp, o, ref, warnings)
		case "BGPPeer":
			in.peers, err = appendSource(in.peers, o, ref, warnings)
		case "BFDProfile":
			in.bfdProfiles, err = appendSource(in.bfdProfiles, o, ref, warnings)
		case "Community":
			in.communities, err = appendSource(in.communities, o, ref, warnings)
		case "ServiceL2Status", "ServiceBGPStatus", "ConfigurationState":
			*warnings = append(*warnings, Warning{Object: ref, Reason: "MetalLB's status, not configuration; svcnet reports the same in its objects' and Services' conditions"})
		default:
			*warnings = append(*warnings, Warning{Object: ref, Reason: "kind unknown to this converter; not converted"})
		}
		if err != nil {
			return input{}, err
		}
	}
	byName := func(a, b string) int { return cmp.Compare(a, b) }
	slices.SortFunc(in.pools, func(a, b source[ipAddressPoolSpec]) int { return byName(a.name, b.name) })
	slices.SortFunc(in.l2, func(a, b source[l2AdvertisementSpec]) int { return byName(a.name, b.name) })
	slices.SortFunc(in.bgp, func(a, b source[bgpAdvertisementSpec]) int { return byName(a.name, b.name) })
	slices.SortFunc(in.peers, func(a, b source[bgpPeerSpec]) int { return byName(a.name, b.name) })
	slices.SortFunc(in.communities, func(a, b source[communitySpec]) int { return byName(a.name, b.name) })
	slices.SortFunc(in.bfdProfiles, func(a, b source[bfdProfileSpec]) int { return byName(a.name, b.name) })
	return in, nil
}

// appendSource decodes o's spec into S, warning about fields S lacks.
func appendSource[S any](list []source[S], o *unstructured.Unstructured, ref string, warnings *[]Warning) ([]source[S], error) {
	s := source[S]{ref: ref, name: o.GetName(), namespace: o.GetNamespace(), labels: o.GetLabels()}
	spec, _, err := unstructured.NestedMap(o.Object, "spec")
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", ref, err)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(spec, &s.spec); err != nil {
		return nil, fmt.Errorf("reading %s: spec is not a MetalLB %s: %w", ref, o.GetKind(), err)
	}
	known := jsonFields(reflect.TypeFor[S]())
	for _, k := range slices.Sorted(maps.Keys(spec)) {
		if !known[k] {
			*warnings = append(*warnings, Warning{Object: ref, Field: "spec." + k, Reason: "field unknown to this converter (written for MetalLB v0.16); not converted"})
		}
	}
	return append(list, s), nil
}

// jsonFields lists the JSON names of a struct's fields, inlined ones
// included.
func jsonFields(t reflect.Type) map[string]bool {
	out := map[string]bool{}
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" {
			for k := range jsonFields(f.Type) {
				out[k] = true
			}
			continue
		}
		out[name] = true
	}
	return out
}
