package manager

// NewLeaderLabel lets the external tests (which need test/testenv, and so
// this package) build the leader label runnable.
var NewLeaderLabel = newLeaderLabel
