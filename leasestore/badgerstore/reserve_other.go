//go:build !linux

package badgerstore

import "errors"

var errUnsupported = errors.New("preallocation not supported")

// allocateFile cannot allocate ahead here.
func allocateFile(string, int64) error { return errUnsupported }
