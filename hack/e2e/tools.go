//go:build tools

// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package tools records the ginkgo CLI, which build.sh builds at the
// version of the library compiled into e2e.test (the CLI refuses a
// mismatch), so that `go mod tidy` keeps its dependencies.
package tools

import (
	_ "github.com/onsi/ginkgo/v2/ginkgo"
)
