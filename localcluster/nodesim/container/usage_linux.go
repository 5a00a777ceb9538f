// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package container

import (
	"fmt"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// WritableLayerUsage is how many bytes the container's writable layer
// holds, for the kubelet's local storage eviction: its root is a tmpfs,
// or an overlay whose upper folder is on a tmpfs of its own (buildRoot),
// and an overlay reports its upper filesystem's use.
func (c *Container) WritableLayerUsage() (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Join("/proc", strconv.Itoa(c.pid), "root"), &st); err != nil {
		return 0, fmt.Errorf("measuring the writable layer of process %d: %w", c.pid, err)
	}
	return int64(st.Blocks-st.Bfree) * st.Bsize, nil
}
