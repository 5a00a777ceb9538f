// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package auditevents emits the audit controllers' Warning Events, each at
// most once per object, reason and message within a quiet period, so that a
// broken cluster does not flood the API server with Events. With
// WithHistory the quiet period also holds across restarts and leader
// changes: the Events the controller already wrote count as emitted.
package auditevents

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// WithHistory reads the Events already written through the core API.
// +kubebuilder:rbac:groups="",resources=events,verbs=list

// Recorder de-duplicates Warning Events.
type Recorder struct {
	mu       sync.Mutex
	recorder events.EventRecorder
	clock    clock.PassiveClock
	quiet    time.Duration
	last     map[key]time.Time

	// history, when set, is read once before the first Event.
	history    client.Reader
	controller string
	// seeded is set once history was read; seedAfter holds back the next
	// attempt after a failed read.
	seeded    bool
	seedAfter time.Time
}

type key struct {
	uid             types.UID
	reason, message string
}

// Option configures a Recorder.
type Option func(*Recorder)

// WithHistory makes the Recorder read, before its first Event, the Warning
// Events that controller (the recorder's reportingController) already
// wrote, through reader (past any cache), and treat those seen within the
// quiet period as emitted. A restarted manager, or the replica that takes
// over leadership, then does not repeat its predecessor's findings. The
// read is one paginated list of core/v1 Events, selected on the server by
// reportingComponent and type; it needs list on events.
func WithHistory(reader client.Reader, controller string) Option {
	return func(r *Recorder) { r.history, r.controller = reader, controller }
}

// New wraps recorder.
func New(recorder events.EventRecorder, c clock.PassiveClock, quiet time.Duration, opts ...Option) *Recorder {
	r := &Recorder{recorder: recorder, clock: c, quiet: quiet, last: map[key]time.Time{}}
	for _, o := range opts {
		o(r)
	}
	return r
}

// Warn emits a Warning Event about obj unless the same one was emitted
// within the quiet period. It reports whether it emitted.
func (r *Recorder) Warn(ctx context.Context, obj client.Object, reason, action, format string, args ...any) bool {
	msg := fmt.Sprintf(format, args...)
	if !r.allow(ctx, obj.GetUID(), reason, msg) {
		return false
	}
	r.recorder.Eventf(obj, nil, corev1.EventTypeWarning, reason, action, "%s", msg)
	return true
}

func (r *Recorder) allow(ctx context.Context, uid types.UID, reason, message string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seed(ctx)
	now := r.clock.Now()
	k := key{uid, reason, message}
	if t, ok := r.last[k]; ok && now.Sub(t) < r.quiet {
		return false
	}
	r.last[k] = now
	if len(r.last) > 10000 { // forget expired entries now and then
		for k, t := range r.last {
			if now.Sub(t) >= r.quiet {
				delete(r.last, k)
			}
		}
	}
	return true
}

// seedRetry is how long a failed history read holds back the next one;
// Events go out meanwhile, as without history.
const seedRetry = time.Minute

// seed reads the history once; r.mu is held.
func (r *Recorder) seed(ctx context.Context) {
	if r.history == nil || r.seeded || r.clock.Now().Before(r.seedAfter) {
		return
	}
	found, err := r.readHistory(ctx)
	if err != nil {
		r.seedAfter = r.clock.Now().Add(seedRetry)
		ctrl.LoggerFrom(ctx).Error(err, "Reading earlier Warning Events failed; findings may be reported again", "reportingController", r.controller)
		return
	}
	r.seeded = true
	for k, t := range found {
		if prev, ok := r.last[k]; !ok || t.After(prev) {
			r.last[k] = t
		}
	}
}

// readHistory returns, for each finding the controller reported within the
// quiet period, when it was last observed.
func (r *Recorder) readHistory(ctx context.Context) (map[key]time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second) // Warn calls wait meanwhile
	defer cancel()
	now := r.clock.Now()
	found := map[key]time.Time{}
	opts := []client.ListOption{
		client.MatchingFields{"reportingComponent": r.controller, "type": corev1.EventTypeWarning},
		client.Limit(500),
	}
	for cont := ""; ; {
		var list corev1.EventList
		if err := r.history.List(ctx, &list, append(opts, client.Continue(cont))...); err != nil {
			return nil, fmt.Errorf("listing Events of %s: %w", r.controller, err)
		}
		for i := range list.Items {
			ev := &list.Items[i]
			t := lastObserved(ev)
			if now.Sub(t) >= r.quiet {
				continue
			}
			k := key{ev.InvolvedObject.UID, ev.Reason, ev.Message}
			if prev, ok := found[k]; !ok || t.After(prev) {
				found[k] = t
			}
		}
		if cont = list.Continue; cont == "" {
			return found, nil
		}
	}
}

// lastObserved is when an Event was last seen: its series' last
// observation, else its eventTime, else the deprecated timestamps.
func lastObserved(ev *corev1.Event) time.Time {
	switch {
	case ev.Series != nil && !ev.Series.LastObservedTime.IsZero():
		return ev.Series.LastObservedTime.Time
	case !ev.EventTime.IsZero():
		return ev.EventTime.Time
	case !ev.LastTimestamp.IsZero():
		return ev.LastTimestamp.Time
	case !ev.FirstTimestamp.IsZero():
		return ev.FirstTimestamp.Time
	}
	return ev.CreationTimestamp.Time
}
