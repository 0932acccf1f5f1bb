package probe

import (
	"io/fs"

	"golang.org/x/sys/unix"
)

// readProcFile reads a /proc file into buf: open, read until end of file,
// close. fs.ReadFile adds a size lookup (which /proc answers with 0) and
// grows a new buffer for every file; a probe round reads two files per
// owner, and that overhead alone made it twice a bare stat scan.
func readProcFile(path string, buf *[]byte) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	for err == unix.EINTR {
		fd, err = unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	if *buf == nil {
		*buf = make([]byte, 4096)
	}
	b := (*buf)[:0]
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := unix.Read(fd, b[len(b):cap(b)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			*buf = b
			return b, nil
		}
		b = b[:len(b)+n]
	}
}
