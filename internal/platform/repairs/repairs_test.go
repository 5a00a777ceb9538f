// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package repairs

import (
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestLastManager(t *testing.T) {
	at := func(s int) *metav1.Time { return &metav1.Time{Time: time.Unix(int64(s), 0)} }
	cases := map[string]struct {
		entries []metav1.ManagedFieldsEntry
		want    string
	}{
		"none":               {},
		"newest wins":        {entries: []metav1.ManagedFieldsEntry{{Manager: "svcnet", Time: at(20)}, {Manager: "kubectl-edit", Time: at(30)}, {Manager: "old", Time: at(10)}}, want: "kubectl-edit"},
		"untimed skips":      {entries: []metav1.ManagedFieldsEntry{{Manager: "svcnet", Time: at(20)}, {Manager: "untimed"}}, want: "svcnet"},
		"svcnet's own skips": {entries: []metav1.ManagedFieldsEntry{{Manager: "kubectl-edit", Time: at(20)}, {Manager: Self, Time: at(20)}}, want: "kubectl-edit"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := LastManager(&metav1.ObjectMeta{ManagedFields: tc.entries}); got != tc.want {
				t.Errorf("LastManager = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestMemoTellsOthersChanges(t *testing.T) {
	var m Memo[[]string]
	if m.ChangedByOther("a", "5", []string{"x"}) {
		t.Error("nothing written yet: nobody else to blame")
	}
	m.Wrote("a", "10", []string{"192.0.2.1"})
	cases := map[string]struct {
		rv    string
		value []string
		want  bool
	}{
		"as written":               {rv: "10", value: []string{"192.0.2.1"}, want: false},
		"cache behind the write":   {rv: "9", value: nil, want: false},
		"changed after the write":  {rv: "11", value: nil, want: true},
		"spec changed, same value": {rv: "12", value: []string{"192.0.2.1"}, want: false},
		"garbled resourceVersion":  {rv: "x", value: nil, want: false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := m.ChangedByOther("a", tc.rv, tc.value); got != tc.want {
				t.Errorf("ChangedByOther = %v, want %v", got, tc.want)
			}
		})
	}
	m.Forget("a")
	if m.ChangedByOther("a", "11", nil) {
		t.Error("a forgotten object has no writes of svcnet's")
	}
}

func TestPendingIsBoundedAndReported(t *testing.T) {
	var p Pending[string]
	for range 3 * maxPendingPerKey {
		p.Note("web", Change{Kind: "EndpointSlice", Reason: ReasonEdited})
	}
	p.Each("web", func(c *Change) { c.By = "kubectl-edit" })
	before := Count("EndpointSlice", ReasonEdited)
	for _, c := range p.Take("web") {
		if c.By != "kubectl-edit" {
			t.Errorf("change %+v lost its manager", c)
		}
		Report(logr.Discard(), c)
	}
	if got := Count("EndpointSlice", ReasonEdited) - before; got != maxPendingPerKey {
		t.Errorf("%v repairs reported, want %d", got, maxPendingPerKey)
	}
	if left := p.Take("web"); len(left) != 0 {
		t.Errorf("%d changes left after reporting", len(left))
	}
}

// StatusWriter names who last wrote a status field, by the status
// subresource's managedFields entries.
func TestStatusWriter(t *testing.T) {
	at := func(sec int64) *metav1.Time { ts := metav1.Unix(sec, 0); return &ts }
	lb := metav1.NewFieldsV1(`{"f:status":{"f:loadBalancer":{"f:ingress":{}}}}`)
	obj := &metav1.ObjectMeta{ManagedFields: []metav1.ManagedFieldsEntry{
		{Manager: "kubectl", Time: at(3), FieldsV1: metav1.NewFieldsV1(`{"f:spec":{}}`)},
		{Manager: "controller", Subresource: "status", Time: at(1), FieldsV1: lb},
		{Manager: Self, Subresource: "status", Time: at(2), FieldsV1: metav1.NewFieldsV1(`{"f:status":{"f:conditions":{}}}`)},
	}}
	if got := StatusWriter(obj, "loadBalancer"); got != "controller" {
		t.Errorf("writer of status.loadBalancer: %q, want controller", got)
	}
	obj.ManagedFields = append(obj.ManagedFields, metav1.ManagedFieldsEntry{Manager: Self, Subresource: "status", Time: at(4), FieldsV1: lb})
	if got := StatusWriter(obj, "loadBalancer"); got != Self {
		t.Errorf("after svcnet wrote it: %q, want %s", got, Self)
	}
	if got := StatusWriter(obj, "podIPs"); got != "" {
		t.Errorf("a field nobody wrote: %q", got)
	}
}
