// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"

	"github.com/svcnet-io/svcnet/dataplane"
)

// watchFlushes checks every --sync-period, as kube-proxy's iptables
// canary monitor does, whether another program removed a backend's rules
// (a firewalld reload, `iptables -F`), and if so makes that backend's
// next sync full and asks for it at once: the hourly full resync would
// leave the node's Services broken until then.
func (a *Agent) watchFlushes(ctx context.Context) {
	tick := a.clock.NewTicker(a.cfg.SyncPeriod)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C():
			a.checkFlushed(ctx)
		}
	}
}

// checkFlushed looks at the canary of every backend that has one, once a
// sync has put it in place, and forces a full sync of those that lost it.
func (a *Agent) checkFlushed(ctx context.Context) {
	a.mu.Lock()
	synced := !a.lastSuccess.IsZero()
	a.mu.Unlock()
	if !synced {
		return
	}
	flushed := false
	for _, b := range a.backends {
		f, ok := b.(dataplane.Flushable)
		if !ok {
			continue
		}
		switch err := f.CheckIntact(ctx); {
		case errors.Is(err, dataplane.ErrFlushed):
			a.log.Info("Rules were flushed by another program, resyncing everything", "mode", b.Mode(), "family", b.Family(), "reason", err.Error())
			metricFlushes.WithLabelValues(string(b.Family())).Inc()
			b.ForceFull()
			flushed = true
		case err != nil:
			a.log.V(2).Info("Could not check the rules' canary", "mode", b.Mode(), "family", b.Family(), "err", err.Error())
		}
	}
	if flushed {
		a.Trigger()
	}
}
