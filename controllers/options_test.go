// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// The zero Options is usable: every field left at zero gets its default,
// and the reuse delays keep zero (immediate reuse, upstream's behaviour).
func TestZeroOptionsGetDefaults(t *testing.T) {
	got := Options{}.withDefaults()
	want := DefaultOptions()
	want.ClusterIP.ReuseDelay, want.NodePort.ReuseDelay = 0, 0
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if err := (Options{Controllers: []string{EndpointSliceName}}).Validate(); err != nil {
		t.Errorf("options with only the controllers set: %v", err)
	}
	set := Options{EndpointSlice: EndpointSliceOptions{MaxEndpointsPerSlice: 7}, Audit: AuditOptions{LeakGracePeriod: time.Second}}.withDefaults()
	if set.EndpointSlice.MaxEndpointsPerSlice != 7 || set.Audit.LeakGracePeriod != time.Second {
		t.Errorf("defaults replaced fields the caller set: %+v", set)
	}
}

func TestValidateNamesFieldAndFlag(t *testing.T) {
	for name, tc := range map[string]struct {
		opts Options
		want string
	}{
		"slice size": {
			opts: Options{EndpointSlice: EndpointSliceOptions{MaxEndpointsPerSlice: 2000}},
			want: "EndpointSlice.MaxEndpointsPerSlice (--max-endpoints-per-slice) must be between 1 and 1000, got 2000",
		},
		"node port range": {
			opts: Options{NodePort: NodePortOptions{Range: "3-2"}},
			want: "NodePort.Range (--service-node-port-range)",
		},
		"negative delay": {
			opts: Options{ClusterIP: ClusterIPOptions{ReuseDelay: -time.Second}},
			want: "ClusterIP.ReuseDelay (--clusterip-reuse-delay) must not be negative",
		},
		"unknown controller": {
			opts: Options{Controllers: []string{"nope"}},
			want: `unknown controller "nope"`,
		},
	} {
		t.Run(name, func(t *testing.T) {
			err := tc.opts.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	// A disabled controller's options are not checked.
	off := Options{Controllers: []string{"*", "-" + EndpointSliceName}, EndpointSlice: EndpointSliceOptions{MaxEndpointsPerSlice: 2000}}
	if err := off.Validate(); err != nil {
		t.Errorf("options of a disabled controller were checked: %v", err)
	}
}
