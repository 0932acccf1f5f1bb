//go:build !linux

/*
 * SPDX-FileCopyrightText: © Hypermode Inc. <hello@hypermode.com>
 * SPDX-License-Identifier: Apache-2.0
 */

// agenthost patch (see PATCH.md).

package z

import "os"

// preallocate is a no-op where fallocate(2) is not available: files stay
// sparse, as upstream leaves them.
func preallocate(fd *os.File, size int64) error { return nil }
