// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package e2e holds end-to-end tests that run the svcnet binary itself as
// a user would, with the upstream binaries from bin/k8s.
package e2e
