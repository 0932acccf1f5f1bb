package badgerstore_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agenthost/agenthost/leasestore/badgerstore"
)

// lockAndLeaveHeir is a host that dies while a child it started still holds
// copies of its descriptors, as a child caught between fork and exec does:
// it opens the store, starts sleep with every descriptor inherited, prints
// the child's pid and exits without closing anything.
func lockAndLeaveHeir(dir, sleep string) int {
	if _, err := badgerstore.Open(context.Background(), dir, badgerstore.Options{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for _, e := range fds {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0)
		}
	}
	heir := exec.Command("sleep", sleep)
	if err := heir.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("heir", heir.Process.Pid)
	return 0
}

// A host restarted right after a crash finds the state directory still
// locked when a child of the dead host still holds its descriptors. The
// open waits for that child to let go; if it does not within the wait, the
// error says the recorded holder has exited and how to find the real one.
func TestOpenWaitsForALockADeadHostsChildHolds(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sleep string
		opens bool
	}{
		{"the child lets go", "0.6", true},
		{"the child keeps it", "30", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), childEnv+"=lock-and-leave-heir", "LEASESTORE_TEST_DIR="+dir, "LEASESTORE_TEST_HEIR_SLEEP="+tc.sleep,
				"GORACE=atexit_sleep_ms=0") // a race-enabled child would otherwise linger a second at exit
			// Read its one line, not to EOF: the heir holds the pipe too.
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			line, _ := bufio.NewReader(stdout).ReadString('\n')
			if err := cmd.Wait(); err != nil {
				t.Fatalf("the dying host: %v", err)
			}
			var heir int
			if _, err := fmt.Sscanf(strings.TrimSpace(line), "heir %d", &heir); err != nil {
				t.Fatalf("the dying host printed %q", line)
			}
			t.Cleanup(func() { _ = syscall.Kill(heir, syscall.SIGKILL) })
			if f, err := os.Open(filepath.Join(dir, "agenthost.lock")); err != nil {
				t.Fatal(err)
			} else {
				err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
				f.Close()
				if !errors.Is(err, syscall.EWOULDBLOCK) {
					t.Fatalf("the dead host's child does not hold the lock (flock: %v); the test did not set up its case", err)
				}
			}

			start := time.Now()
			s, err := badgerstore.Open(testCtx(t), dir, badgerstore.Options{})
			took := time.Since(start)
			if tc.opens {
				if err != nil {
					t.Fatalf("open after the dead host's child let go: %v", err)
				}
				if err := s.Close(testCtx(t)); err != nil {
					t.Fatal(err)
				}
				t.Logf("opened after %s", took.Round(time.Millisecond))
				return
			}
			var locked *badgerstore.LockedError
			if !errors.As(err, &locked) || !locked.HolderExited || locked.PID != cmd.Process.Pid {
				t.Fatalf("open while the dead host's child holds the lock: %v, want a LockedError naming exited pid %d", err, cmd.Process.Pid)
			}
			for _, want := range []string{"has exited", "fuser", "agenthost.lock"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
			if took < time.Second {
				t.Errorf("refused after %s without waiting for the holder", took)
			}
		})
	}
}
