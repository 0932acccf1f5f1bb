package leasestore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/gofrs/flock"
)

// dirLock is the exclusive lock a store holds on its state directory. It is
// taken before Badger is opened so that a second host learns which pid holds
// the directory, instead of Badger's generic "Another process is using this
// Badger database" (whose errno cannot even be matched with errors.Is).
type dirLock struct {
	f *flock.Flock
}

func lockStateDir(dir string) (*dirLock, error) {
	path := filepath.Join(dir, lockFileName)
	f := flock.New(path, flock.SetFlag(os.O_CREATE|os.O_RDWR), flock.SetPermissions(0o600))
	ok, err := f.TryLock()
	if err != nil {
		if errors.Is(err, syscall.EROFS) || errors.Is(err, fs.ErrPermission) {
			// Not damage: nothing is moved or restored, the same
			// directory opens once it is writable again.
			return nil, fmt.Errorf("lock state directory %s: %w; the state directory must be writable: remount it read-write, fix its permissions, or choose another state directory", dir, err)
		}
		return nil, fmt.Errorf("lock state directory %s: %w", dir, err)
	}
	if !ok {
		return nil, &LockedError{Dir: dir, PID: readLockPID(path)}
	}
	// The pid is advisory, for the error above; the flock is the lock. The
	// kernel drops the flock when this process dies, so a stale pid left in
	// the file never blocks the next host.
	if err := os.WriteFile(path, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		_ = f.Unlock()
		return nil, fmt.Errorf("record lock holder in %s: %w", path, err)
	}
	return &dirLock{f: f}, nil
}

func readLockPID(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

func (l *dirLock) release() error {
	return l.f.Unlock()
}
