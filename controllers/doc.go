// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package controllers registers svcnet's controllers with a
// controller-runtime manager. Each controller lives in its own sub-package;
// this package only knows their names and how to switch them on and off, so
// that `svcnet manager`, `svcnet up` and the envtest suites all run exactly
// the same wiring through Setup.
package controllers
