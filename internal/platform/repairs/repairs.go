// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package repairs is how svcnet reports that it put back an object it owns
// after another writer deleted or changed it: a kubectl delete while
// debugging, a backup restore, GitOps pruning, a second controller that
// believes it owns the same objects. Every repair counts in
// svcnet_repairs_total{kind,reason} and logs one line that names the kind,
// the object, what changed and, when the API server recorded it, the field
// manager that changed it, so that an operator can see who is fighting
// whom.
//
// Controllers learn of another writer's change in two ways. Those whose
// informer events carry the old and the new object note the change when
// the event arrives (Pending) and report it once a sync has written the
// repair. Those that compare a status with what they wrote last remember
// that (Memo).
package repairs

import (
	"context"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Reasons, the values of the metric's reason label.
const (
	// ReasonDeleted: the object is gone; svcnet created it again.
	ReasonDeleted = "deleted"
	// ReasonEdited: a field svcnet sets was changed; svcnet set it back.
	ReasonEdited = "edited"
	// ReasonDisowned: labels moved the object out of svcnet's ownership
	// (another managed-by, another Service); svcnet leaves it to its new
	// owner and writes what the Service needs anew.
	ReasonDisowned = "disowned"
)

// Change is one change another writer made to an object svcnet owns.
type Change struct {
	// Kind is the object's kind, with the part of it svcnet owns when that
	// is not the whole object ("Service status.loadBalancer").
	Kind string
	// Object names the object.
	Object klog.ObjectRef
	// Reason is one of the Reason constants.
	Reason string
	// What says what changed, e.g. "labels endpointslice.kubernetes.io/managed-by".
	What string
	// By is the field manager of the change, when known.
	By string
}

var (
	metricRepairs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "svcnet_repairs_total",
		Help: "Objects svcnet owns that it repaired after another writer deleted or changed them, by kind and reason (deleted, edited, disowned).",
	}, []string{"kind", "reason"})
	registerOnce sync.Once
)

// Register adds svcnet_repairs_total to controller-runtime's registry; it
// can be called any number of times.
func Register() {
	registerOnce.Do(func() { ctrlmetrics.Registry.MustRegister(metricRepairs) })
}

// Report counts a repair and logs it.
func Report(log logr.Logger, c Change) {
	metricRepairs.WithLabelValues(c.Kind, c.Reason).Inc()
	kv := []any{"kind", c.Kind, "object", c.Object, "reason", c.Reason}
	if c.What != "" {
		kv = append(kv, "change", c.What)
	}
	if c.By != "" {
		kv = append(kv, "changedBy", c.By)
	}
	log.Info("Repaired an object another writer changed", kv...)
}

// Count returns how many repairs of kind for reason were reported (tests).
func Count(kind, reason string) float64 {
	var m dto.Metric
	if err := metricRepairs.WithLabelValues(kind, reason).Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

// LastManagerOf reads obj again through reader, which must not be a cache
// that strips managedFields (svcnet's manager strips them), and returns
// its LastManager; "" when it cannot be read. Repairs are rare: the read
// is paid only when one is reported.
func LastManagerOf(ctx context.Context, reader client.Reader, obj client.Object) string {
	live, ok := obj.DeepCopyObject().(client.Object)
	if !ok || reader.Get(ctx, client.ObjectKeyFromObject(obj), live) != nil {
		return ""
	}
	return LastManager(live)
}

// Self is the field manager of svcnet's manager (its user agent's name).
const Self = "svcnet-manager"

// LastManager returns the field manager of the newest entry of an object's
// managedFields other than svcnet's own: who else wrote it last, as far as
// the API server recorded (to the second).
func LastManager(obj metav1.Object) string {
	return newestManager(obj, func(e metav1.ManagedFieldsEntry) bool { return e.Manager != Self })
}

// StatusWriter returns the field manager that last wrote field (a field
// of status, e.g. "loadBalancer") of obj through its status subresource,
// as obj's managedFields record it; "" when none did. obj must come from
// a reader that keeps managedFields.
func StatusWriter(obj metav1.Object, field string) string {
	return newestManager(obj, func(e metav1.ManagedFieldsEntry) bool {
		return e.Subresource == "status" && e.FieldsV1 != nil && strings.Contains(e.FieldsV1.GetRawString(), `"f:`+field+`"`)
	})
}

// newestManager is the manager of the newest timed managedFields entry
// that keep accepts, the later one on a tie; "" when there is none.
func newestManager(obj metav1.Object, keep func(metav1.ManagedFieldsEntry) bool) string {
	var newest *metav1.ManagedFieldsEntry
	for _, e := range obj.GetManagedFields() {
		if e.Time == nil || !keep(e) {
			continue
		}
		if newest == nil || !e.Time.Before(newest.Time) {
			newest = &e
		}
	}
	if newest == nil {
		return ""
	}
	return newest.Manager
}

// maxPendingPerKey bounds what Pending keeps for one key: a writer that
// fights svcnet in a loop must not grow it.
const maxPendingPerKey = 8

// Pending holds the changes seen by event handlers until the sync that
// repairs them reports them. The zero value is ready to use.
type Pending[K comparable] struct {
	mu sync.Mutex
	m  map[K][]Change
}

// Note keeps c for key k.
func (p *Pending[K]) Note(k K, c Change) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[K][]Change{}
	}
	if len(p.m[k]) < maxPendingPerKey {
		p.m[k] = append(p.m[k], c)
	}
}

// Each calls f on every change noted for k, which it may update.
func (p *Pending[K]) Each(k K, f func(*Change)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range p.m[k] {
		f(&p.m[k][i])
	}
}

// Take returns and forgets the changes noted for k.
func (p *Pending[K]) Take(k K) []Change {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.m[k]
	delete(p.m, k)
	return c
}

// Memo remembers, per object, the value of the part svcnet owns as svcnet
// last wrote it, so that a sync can tell another writer's change from a
// change of its own inputs. The zero value is ready to use.
type Memo[V any] struct {
	mu sync.Mutex
	m  map[string]written[V]
}

type written[V any] struct {
	resourceVersion string
	value           V
}

// Wrote records v as written to the object key, whose resourceVersion
// after the write is rv.
func (m *Memo[V]) Wrote(key, rv string, v V) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil {
		m.m = map[string]written[V]{}
	}
	m.m[key] = written[V]{resourceVersion: rv, value: v}
}

// ChangedByOther reports whether the object key, as read at resourceVersion
// rv, holds a value other than the one svcnet last wrote, in a version
// newer than svcnet's write: someone else wrote it since.
func (m *Memo[V]) ChangedByOther(key, rv string, current V) bool {
	m.mu.Lock()
	w, ok := m.m[key]
	m.mu.Unlock()
	if !ok || equality.Semantic.DeepEqual(w.value, current) {
		return false
	}
	newer, err := resourceversion.CompareResourceVersion(rv, w.resourceVersion)
	return err == nil && newer > 0
}

// Last returns the value svcnet last wrote to the object key, if it
// remembers one: a cache that has not caught up with the write yet still
// shows the value before it.
func (m *Memo[V]) Last(key string) (V, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	w, ok := m.m[key]
	return w.value, ok
}

// Forget drops what is known of key.
func (m *Memo[V]) Forget(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.m, key)
}
