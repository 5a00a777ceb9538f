// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package loadbalancer

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
)

// An overlap stops only the newcomer: the pool that serves keeps serving.
func TestJudgePoolsOverlapStopsOnlyTheNewcomer(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pool := func(name string, created time.Time, readySince *time.Time, disabled bool, cidr string) svcnetv1alpha1.LoadBalancerIPPool {
		p := svcnetv1alpha1.LoadBalancerIPPool{
			ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(created)},
			Spec:       svcnetv1alpha1.LoadBalancerIPPoolSpec{CIDRs: []string{cidr}, Disabled: disabled},
		}
		if readySince != nil {
			p.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, LastTransitionTime: metav1.NewTime(*readySince)}}
		}
		return p
	}
	at := func(d time.Duration) *time.Time { t := t0.Add(d); return &t }
	for name, tc := range map[string]struct {
		pools []svcnetv1alpha1.LoadBalancerIPPool
		want  map[string]string // pool -> reason
	}{
		"the serving pool keeps serving, the new one reports the overlap": {
			pools: []svcnetv1alpha1.LoadBalancerIPPool{
				pool("serving", t0, at(time.Second), false, "192.168.240.0/24"),
				pool("newcomer", t0.Add(time.Hour), nil, false, "192.168.240.0/25"),
			},
			want: map[string]string{"serving": "Ready", "newcomer": "Overlap"},
		},
		"an older pool enabled again does not take over a newer one that serves": {
			pools: []svcnetv1alpha1.LoadBalancerIPPool{
				pool("old", t0, nil, false, "192.168.240.0/24"),
				pool("serving", t0.Add(time.Hour), at(2*time.Hour), false, "192.168.240.128/25"),
			},
			want: map[string]string{"old": "Overlap", "serving": "Ready"},
		},
		"neither serves yet: the older one wins": {
			pools: []svcnetv1alpha1.LoadBalancerIPPool{
				pool("b-older", t0, nil, false, "10.1.0.0/24"),
				pool("a-newer", t0.Add(time.Minute), nil, false, "10.1.0.0/24"),
			},
			want: map[string]string{"b-older": "Ready", "a-newer": "Overlap"},
		},
		"both say Ready: the earlier Ready wins": {
			pools: []svcnetv1alpha1.LoadBalancerIPPool{
				pool("late", t0, at(time.Hour), false, "10.2.0.0/24"),
				pool("early", t0.Add(time.Minute), at(time.Minute), false, "10.2.0.0/24"),
			},
			want: map[string]string{"late": "Overlap", "early": "Ready"},
		},
		"a disabled pool blocks nobody": {
			pools: []svcnetv1alpha1.LoadBalancerIPPool{
				pool("off", t0, at(time.Second), true, "10.3.0.0/24"),
				pool("on", t0.Add(time.Hour), nil, false, "10.3.0.0/24"),
			},
			want: map[string]string{"off": "Disabled", "on": "Ready"},
		},
		"a chain: only the newcomer that overlaps a serving pool stops": {
			pools: []svcnetv1alpha1.LoadBalancerIPPool{
				pool("a", t0, at(time.Second), false, "10.4.0.0/25"),
				pool("b", t0.Add(time.Minute), nil, false, "10.4.0.0/24"),
				pool("c", t0.Add(2*time.Minute), nil, false, "10.4.0.128/25"),
			},
			want: map[string]string{"a": "Ready", "b": "Overlap", "c": "Ready"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			got := map[string]string{}
			for n, st := range judgePools(tc.pools, nil) {
				got[n] = st.reason
				if st.ready != (st.reason == svcnetv1alpha1.ReasonPoolReady) {
					t.Errorf("%s: ready %t with reason %s", n, st.ready, st.reason)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
