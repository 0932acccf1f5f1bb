package badgerstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gofrs/flock"

	"github.com/agenthost/agenthost/leasestore"
)

// dirLock is the exclusive lock a store holds on its state directory. It is
// taken before Badger is opened so that a second host learns which pid holds
// the directory, instead of Badger's generic "Another process is using this
// Badger database" (whose errno cannot even be matched with errors.Is).
type dirLock struct {
	f *flock.Flock
}

// lockWait bounds how long an open waits for a lock whose recorded holder
// is no longer running.
//
// A host that dies can leave its locks held for a moment: a child it was
// starting holds a copy of every descriptor, close-on-exec ones included,
// until its exec goes through (measured here: a process that locks a file
// and keeps starting children, SIGKILLed and reaped, left the lock held
// for the next opener 27 times in 200 on a loaded two-core machine).
// A host restarted at once after a crash must wait that out, not report
// the dead host as the holder.
const lockWait = 2 * time.Second

func lockStateDir(dir string) (*dirLock, error) {
	path := filepath.Join(dir, lockFileName)
	f := flock.New(path, flock.SetFlag(os.O_CREATE|os.O_RDWR), flock.SetPermissions(0o600))
	deadline := time.Now().Add(lockWait)
	for {
		ok, err := f.TryLock()
		if err != nil {
			if errors.Is(err, syscall.EROFS) || errors.Is(err, fs.ErrPermission) {
				// Not damage: nothing is moved or restored, the same
				// directory opens once it is writable again.
				return nil, fmt.Errorf("lock state directory %s: %w; the state directory must be writable: remount it read-write, fix its permissions, or choose another state directory", dir, err)
			}
			return nil, fmt.Errorf("lock state directory %s: %w", dir, err)
		}
		if ok {
			break
		}
		pid := readLockPID(path)
		running := pid > 0 && processRunning(pid)
		if running || !time.Now().Before(deadline) {
			return nil, &LockedError{Dir: dir, PID: pid, HolderExited: pid > 0 && !running}
		}
		time.Sleep(10 * time.Millisecond)
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

// processRunning reports whether pid is a process that has not exited: a
// zombie (exited, not yet reaped by its parent) holds no descriptors. When
// in doubt it says running, which fails the open at once as before.
func processRunning(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return true
	}
	return b[i+2] != 'Z' && b[i+2] != 'X'
}

// LockedError names the process holding the state directory. It matches
// leasestore.ErrLocked.
type LockedError struct {
	Dir string
	PID int // 0 when the holder did not record its pid
	// HolderExited: the process that recorded PID has exited, yet the lock
	// stayed held for as long as an open waits for it; a process that
	// inherited its descriptors (a plugin it started) holds it.
	HolderExited bool
}

func (e *LockedError) Error() string {
	if e.HolderExited {
		return fmt.Sprintf("state directory %s is still locked although pid %d, which locked it, has exited: a process it started holds its lock file (find it with: fuser %[3]s, or lsof %[3]s); stop that process or use another --state-dir",
			e.Dir, e.PID, filepath.Join(e.Dir, lockFileName))
	}
	if e.PID > 0 {
		return fmt.Sprintf("state directory %s in use by pid %d; stop that agenthost or use another --state-dir", e.Dir, e.PID)
	}
	return fmt.Sprintf("state directory %s in use by another process; stop it or use another --state-dir", e.Dir)
}

func (e *LockedError) Is(target error) bool { return target == leasestore.ErrLocked }
