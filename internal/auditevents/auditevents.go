// Package auditevents emits the audit controllers' Warning Events, each at
// most once per object, reason and message within a quiet period, so that a
// broken cluster does not flood the API server with Events.
package auditevents

import (
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Recorder de-duplicates Warning Events.
type Recorder struct {
	mu       sync.Mutex
	recorder events.EventRecorder
	clock    clock.PassiveClock
	quiet    time.Duration
	last     map[key]time.Time
}

type key struct {
	uid             types.UID
	reason, message string
}

// New wraps recorder.
func New(recorder events.EventRecorder, c clock.PassiveClock, quiet time.Duration) *Recorder {
	return &Recorder{recorder: recorder, clock: c, quiet: quiet, last: map[key]time.Time{}}
}

// Warn emits a Warning Event about obj unless the same one was emitted
// within the quiet period. It reports whether it emitted.
func (r *Recorder) Warn(obj client.Object, reason, action, format string, args ...any) bool {
	msg := fmt.Sprintf(format, args...)
	if !r.allow(obj.GetUID(), reason, msg) {
		return false
	}
	r.recorder.Eventf(obj, nil, corev1.EventTypeWarning, reason, action, "%s", msg)
	return true
}

func (r *Recorder) allow(uid types.UID, reason, message string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
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
