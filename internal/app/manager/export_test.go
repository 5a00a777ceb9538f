// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package manager

// NewLeaderLabel lets the external tests (which need test/testenv, and so
// this package) build the leader label runnable.
var NewLeaderLabel = newLeaderLabel
