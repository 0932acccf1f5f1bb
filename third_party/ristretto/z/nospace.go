/*
 * SPDX-FileCopyrightText: © Hypermode Inc. <hello@hypermode.com>
 * SPDX-License-Identifier: Apache-2.0
 */

// agenthost patch (see PATCH.md).

package z

import (
	"errors"
	"path/filepath"
	"sync"
)

// noSpaceHandlers maps a directory to the function asked to free space
// when a file created there cannot be allocated.
var noSpaceHandlers sync.Map

// SetNoSpaceHandler makes OpenMmapFile ask fn, when a file it creates in
// dir cannot be allocated for want of space, to free some; if fn reports
// it did, the allocation is tried once more. It returns the function that
// removes the handler. A store keeps a reserve this way: the room a flush
// or a new memtable log needs when another program took the disk's last
// byte.
func SetNoSpaceHandler(dir string, fn func() bool) (remove func()) {
	key := filepath.Clean(dir)
	h := &fn // a pointer, so that remove deletes this handler and no later one
	noSpaceHandlers.Store(key, h)
	return func() { noSpaceHandlers.CompareAndDelete(key, h) }
}

func freeSpaceFor(filename string) bool {
	fn, ok := noSpaceHandlers.Load(filepath.Dir(filename))
	return ok && (*fn.(*func() bool))()
}

// errAllocate marks OpenMmapFileUsing's failure to allocate a file it
// made: OpenMmapFile then removes the empty file.
var errAllocate = errors.New("cannot allocate the file's blocks")
