/*
 * SPDX-FileCopyrightText: © Hypermode Inc. <hello@hypermode.com>
 * SPDX-License-Identifier: Apache-2.0
 */

// agenthost patch (see PATCH.md).

package z

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// preallocate allocates the blocks of fd's first size bytes, so that writes
// through a mapping of them never fault for want of space. A file system
// that cannot preallocate (EOPNOTSUPP) is left sparse, as before.
func preallocate(fd *os.File, size int64) error {
	for {
		err := unix.Fallocate(int(fd.Fd()), 0, 0, size)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ENOSYS):
			return nil
		default:
			return &os.PathError{Op: "fallocate", Path: fd.Name(), Err: err}
		}
	}
}
