package badgerstore

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

var errUnsupported = errors.New("preallocation not supported")

// allocateFile creates path with size bytes allocated on disk (not
// sparse), or fails with errUnsupported where the file system cannot.
func allocateFile(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	err = unix.Fallocate(int(f.Fd()), 0, 0, size)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		err = errUnsupported
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
