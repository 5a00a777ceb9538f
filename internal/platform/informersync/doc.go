// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package informersync makes a controller-runtime manager start its
// controllers the moment their informers are synced, instead of at the next
// tick of a 100 ms poll.
//
// controller-runtime v0.25 waits for caches by polling: the manager's cache
// phase polls every informer's HasSynced, and each Kind source polls the
// cache again and then its own event handler's HasSynced. A controller that
// starts against a few thousand objects therefore waits two or three extra
// ticks (200-300 ms) after its informers already hold everything. client-go
// 0.37 exposes the same facts as channels (HasSyncedChecker); this package
// waits on those:
//
//   - NewCache wraps cache.New so that WaitForCacheSync blocks on the
//     checkers of the informers requested through it, then asks the wrapped
//     cache once more (which covers any informer it did not see and returns
//     at once when all are synced).
//   - Kind is a source like source.Kind whose WaitForSync blocks on its own
//     event handler registration's checker: it returns once the informer
//     listed everything and every object of that list was handed to the
//     handler.
//   - Prestart asks for informers before the manager starts, so they list in
//     parallel during the cache phase instead of one by one as controllers
//     start.
package informersync
