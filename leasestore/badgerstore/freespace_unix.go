//go:build unix

package badgerstore

import "golang.org/x/sys/unix"

// freeSpace returns the bytes an unprivileged writer may still use on the
// file system holding dir; ok is false when it cannot be told.
func freeSpace(dir string) (free int64, ok bool) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, false
	}
	return int64(st.Bavail) * int64(st.Bsize), true
}
