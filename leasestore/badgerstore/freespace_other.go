//go:build !unix

package badgerstore

// freeSpace cannot tell the free space here; writes are not held back.
func freeSpace(string) (int64, bool) { return 0, false }
