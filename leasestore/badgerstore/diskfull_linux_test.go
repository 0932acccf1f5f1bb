package badgerstore_test

import (
	"bufio"
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

	"github.com/dgraph-io/ristretto/v2/z"
	"golang.org/x/sys/unix"
)

// smallTmpfs mounts a tmpfs of sizeMiB on a new directory for the test;
// without root (CAP_SYS_ADMIN) the test is skipped saying so.
func smallTmpfs(t *testing.T, sizeMiB int) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+strconv.Itoa(sizeMiB)+"m,mode=0700"); err != nil {
		t.Skipf("this test fills a small tmpfs, and mounting one failed (%v): run it as root", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// crashHead is the start of a Go crash report in stderr (its first lines
// name the fault and the goroutine it hit), or stderr's tail.
func crashHead(stderr string) string {
	for _, sign := range []string{"unexpected fault address", "fatal error", "panic:", "SIGBUS"} {
		if i := strings.Index(stderr, sign); i >= 0 {
			end := min(len(stderr), i+1500)
			return stderr[i:end]
		}
	}
	return tail(stderr, 1500)
}

func statFree(t *testing.T, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * int64(st.Bsize)
}

// Another program fills the disk the store is on, to the last byte, while
// the store streams appends; later it frees the space again; and once the
// store is closed while the disk is full. Badger writes through sparse
// memory maps, where a page the disk cannot back is a SIGBUS, not an
// error: the store must never die of it. It refuses appends with
// ErrNoSpace saying what to free while the disk is full, resumes when the
// space is back, and closes on a full disk without a crash, round after
// round.
func TestDiskFilledByAnotherProgramNeverKillsTheStore(t *testing.T) {
	t.Parallel()
	const rounds = 3
	for round := 1; round <= rounds; round++ {
		mnt := smallTmpfs(t, 256)
		dir := filepath.Join(mnt, "state")
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"=append-until-closed", "LEASESTORE_TEST_DIR="+dir)
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 1024)
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(stdout)
			sc.Buffer(nil, 1<<20)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
		// until reads the child's lines until one starts with prefix; it
		// fails the test if the child ends first.
		until := func(prefix string, d time.Duration) string {
			t.Helper()
			timeout := time.After(d)
			last := ""
			for {
				select {
				case l, ok := <-lines:
					last = l
					if !ok {
						err := cmd.Wait()
						t.Fatalf("round %d: the store's process ended (%v) before saying %q; stderr: %s", round, err, prefix, crashHead(stderr.String()))
					}
					if strings.HasPrefix(l, prefix) {
						return l
					}
				case <-timeout:
					t.Fatalf("round %d: no %q from the store within %v; its last line: %.300q", round, prefix, d, last)
				}
			}
		}
		// fill runs another program, dd, that takes every free byte: it
		// writes until the disk is full.
		fill := func(name string) string {
			t.Helper()
			path := filepath.Join(mnt, name)
			if out, err := exec.Command("dd", "if=/dev/zero", "of="+path, "bs=1M").CombinedOutput(); err == nil || !strings.Contains(string(out), "No space left") {
				t.Fatalf("dd filling the disk: %v %s", err, out)
			}
			return path
		}
		until("ok", time.Minute)
		// Let the journal grow past a memtable or two, so flushes and
		// rotations are under way when the disk fills.
		for range 300 + round*100 {
			until("ok", time.Minute)
		}
		filler := fill("filler")
		t.Logf("injected: round %d: another program took every free byte (%d KiB left) while the store streamed appends", round, statFree(t, mnt)>>10)
		refused := until("refused", time.Minute)
		if !strings.Contains(refused, "no space") || !strings.Contains(refused, "free some disk space") {
			t.Fatalf("round %d: refusal %q does not say the disk is full and what to do", round, refused)
		}
		if round < rounds {
			// Space comes back: appends resume.
			if err := os.Remove(filler); err != nil {
				t.Fatal(err)
			}
			until("ok", time.Minute)
			// And the disk fills again while the store is busy.
			for range 50 {
				until("ok", time.Minute)
			}
			fill("filler2")
			until("refused", time.Minute)
		}
		// Close while the disk is full.
		stdin.Close()
		closed := until("closed", time.Minute)
		if closed != "closed <nil>" {
			t.Errorf("round %d: Close on a full disk: %q, want it to close (the store's reserve is the room to flush into)", round, closed)
		}
		for range lines {
		}
		err = cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			t.Fatalf("round %d: the store's process died of %v; stderr: %s", round, ws.Signal(), crashHead(stderr.String()))
		}
		if err != nil {
			t.Fatalf("round %d: the store's process failed: %v; stderr: %s", round, err, crashHead(stderr.String()))
		}
		t.Logf("held: round %d: refused with %.160q; %s", round, refused, closed)
	}
}

// On a full disk Badger retries a flush or a compaction each second, each
// with a new file created through the patched ristretto's OpenMmapFile:
// every failed allocation must give back its descriptor and leave no empty
// file, or a disk that stays full runs the host out of descriptors.
func TestFailedAllocationLeavesNoDescriptorOrFile(t *testing.T) {
	dir := smallTmpfs(t, 4)
	fill, err := os.Create(filepath.Join(dir, "fill"))
	if err != nil {
		t.Fatal(err)
	}
	defer fill.Close()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := fill.Write(chunk); err != nil {
			break
		}
	}
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	before := fds()
	for i := range 20 {
		name := filepath.Join(dir, fmt.Sprintf("%06d.sst", i))
		mf, err := z.OpenMmapFile(name, os.O_CREATE|os.O_RDWR|os.O_EXCL, 1<<20)
		if err == nil || mf != nil {
			t.Fatalf("allocating 1 MiB on a full disk: %v, want an error", err)
		}
		if _, err := os.Lstat(name); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the failed %s stays behind (%v)", filepath.Base(name), err)
		}
	}
	if after := fds(); after > before {
		t.Fatalf("%d descriptors after 20 failed allocations, %d before: each leaked one", after, before)
	}
}
