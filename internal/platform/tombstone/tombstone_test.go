// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package tombstone

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
)

func TestAs(t *testing.T) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"}}
	for name, tc := range map[string]struct {
		in               any
		wantOK, wantTomb bool
	}{
		"plain object":       {in: svc, wantOK: true},
		"tombstone":          {in: toolscache.DeletedFinalStateUnknown{Key: "ns/web", Obj: svc}, wantOK: true, wantTomb: true},
		"another type":       {in: &corev1.Pod{}},
		"tombstone of a Pod": {in: toolscache.DeletedFinalStateUnknown{Key: "ns/p", Obj: &corev1.Pod{}}, wantTomb: true},
	} {
		t.Run(name, func(t *testing.T) {
			got, ok := As[*corev1.Service](tc.in)
			if ok != tc.wantOK || (ok && got != svc) {
				t.Errorf("As = %v, %t; want the Service: %t", got, ok, tc.wantOK)
			}
			if _, tomb := Unwrap(tc.in); tomb != tc.wantTomb {
				t.Errorf("Unwrap says tombstone %t, want %t", tomb, tc.wantTomb)
			}
		})
	}
}
