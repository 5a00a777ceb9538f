package ipaddress

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// dedup lets an Event through once per object, reason and message within
// quiet.
type dedup struct {
	mu    sync.Mutex
	clock clock.PassiveClock
	quiet time.Duration
	last  map[dedupKey]time.Time
}

type dedupKey struct {
	uid             types.UID
	reason, message string
}

func newDedup(c clock.PassiveClock, quiet time.Duration) *dedup {
	return &dedup{clock: c, quiet: quiet, last: map[dedupKey]time.Time{}}
}

// allow reports whether the Event should be emitted now, and records it.
func (d *dedup) allow(uid types.UID, reason, message string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.clock.Now()
	k := dedupKey{uid, reason, message}
	if t, ok := d.last[k]; ok && now.Sub(t) < d.quiet {
		return false
	}
	d.last[k] = now
	if len(d.last) > 10000 { // forget old entries now and then
		for k, t := range d.last {
			if now.Sub(t) >= d.quiet {
				delete(d.last, k)
			}
		}
	}
	return true
}
