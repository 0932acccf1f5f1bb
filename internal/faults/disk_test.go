package faults

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/leasestore"
)

// tmpfs mounts a tmpfs of sizeMiB on a new directory and unmounts it when
// the test ends. Mounting needs root (CAP_SYS_ADMIN); without it the test
// is skipped with the reason.
func tmpfs(t *testing.T, sizeMiB int) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+strconv.Itoa(sizeMiB)+"m,mode=0700"); err != nil {
		t.Skipf("this fault needs a small tmpfs, and mounting one failed (%v): run the suite as root", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

func freeBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * int64(st.Bsize)
}

// The disk fills while a plugin streams updates. Without the store's
// free-space guard this kills the host: Badger writes its log through a
// sparse memory map, and a write the full disk cannot back is a SIGBUS.
// With it, appends are refused (nothing half-written), the plugin keeps the
// unacknowledged updates, and once space is freed journaling resumes: every
// update is journaled exactly once, in order.
func TestDiskFullDuringJournalAppend(t *testing.T) {
	mnt := tmpfs(t, 128)
	r := &reports{}
	h := openHost(t, config(t, filepath.Join(mnt, "state"), r))
	s, err := h.StartSession(ctxFor(t, time.Minute), host.SessionRequest{ID: "full", Agent: "scripted", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	// Leave the store 1 MiB above the 64 MiB it keeps free.
	filler := filepath.Join(mnt, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	size := freeBytes(t, mnt) - (64<<20 + 1<<20)
	if err := unix.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
		t.Fatalf("fill the disk: %v", err)
	}
	f.Close()
	injected(t, "a %d MiB file leaves %d KiB free on the store's disk, 1 MiB above the store's reserve, while the plugin streams 20000 updates",
		size>>20, freeBytes(t, mnt)>>10)

	const n = 20000
	var wg sync.WaitGroup
	var res host.TurnResult
	var perr error
	wg.Go(func() { res, perr = s.Prompt(ctxFor(t, 5*time.Minute), "count "+strconv.Itoa(n)) })

	deadline := time.Now().Add(2 * time.Minute)
	for r.find(leasestore.ErrNoSpace) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("no disk-full report within 2 minutes (%d KiB free)", freeBytes(t, mnt)>>10)
		}
		time.Sleep(20 * time.Millisecond)
	}
	rep := r.find(leasestore.ErrNoSpace)
	if !strings.Contains(rep.Error(), "free some disk space") {
		t.Errorf("the report does not say what to do: %v", rep)
	}
	stalled := len(pluginSeqs(t, journal(t, h.Store(), "full")))
	time.Sleep(300 * time.Millisecond)
	// A new prompt is refused clearly while the disk is full: it cannot be
	// journaled before dispatch.
	other, err := h.StartSession(ctxFor(t, time.Minute), host.SessionRequest{ID: "other", Agent: "scripted", Workspace: t.TempDir()})
	if err == nil {
		if _, perr := other.Prompt(ctxFor(t, time.Minute), "echo hi"); !errors.Is(perr, leasestore.ErrNoSpace) {
			t.Errorf("prompt on a full disk: %v, want ErrNoSpace", perr)
		}
	} else if !errors.Is(err, leasestore.ErrNoSpace) {
		t.Errorf("start on a full disk: %v, want success or ErrNoSpace", err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if perr != nil || res.StopReason != "end_turn" {
		t.Fatalf("the turn after space was freed: %+v, %v", res, perr)
	}
	checkOnceInOrder(t, pluginSeqs(t, journal(t, h.Store(), "full")), 1, n+1) // the updates and the turn's end
	held(t, "the host reported %q and kept running; journaling stalled at %d updates; after the filler was removed all %d updates are journaled once, in order, and the turn ended %q",
		rep, stalled, n, res.StopReason)
}

// A state directory on a read-only file system is refused at open with an
// error that says so; nothing is moved aside or restored (it is not
// damage), and the same directory opens intact once it is writable again.
func TestReadOnlyStateDirectoryIsRefusedClearly(t *testing.T) {
	src := t.TempDir()
	state := filepath.Join(src, "state")
	h, err := openOnBadger(context.Background(), config(t, state, nil))
	if err != nil {
		t.Fatal(err)
	}
	s, err := h.StartSession(ctxFor(t, time.Minute), host.SessionRequest{ID: "ro", Agent: "scripted", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Prompt(ctxFor(t, time.Minute), "count 5"); err != nil {
		t.Fatal(err)
	}
	if err := h.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	noChildrenLeft(t)
	before := listing(t, state)

	ro := t.TempDir()
	if err := unix.Mount(src, ro, "", unix.MS_BIND, ""); err != nil {
		t.Skipf("this fault needs a read-only bind mount, and mounting failed (%v): run the suite as root", err)
	}
	defer unix.Unmount(ro, unix.MNT_DETACH)
	if err := unix.Mount("", ro, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatalf("remount read-only: %v", err)
	}
	injected(t, "the state directory (a session with a 5-update journal) is mounted read-only and a host opens it")
	for attempt := 1; attempt <= 3; attempt++ {
		h2, err := openOnBadger(context.Background(), config(t, filepath.Join(ro, "state"), nil))
		if err == nil {
			_ = h2.Shutdown(context.Background())
			t.Fatalf("open #%d of a read-only state directory succeeded", attempt)
		}
		if !strings.Contains(err.Error(), "read-only") || !strings.Contains(err.Error(), "must be writable") {
			t.Fatalf("open #%d: %v, want an error that names the read-only file system and says what to do", attempt, err)
		}
		if attempt == 1 {
			held(t, "open refused: %v", err)
		}
	}
	if after := listing(t, state); after != before {
		t.Fatalf("the refused opens changed the state directory:\nbefore %s\nafter  %s", before, after)
	}
	h3 := openHost(t, config(t, state, nil))
	if got := pluginSeqs(t, journal(t, h3.Store(), "ro")); len(got) != 6 {
		t.Fatalf("after the directory is writable again the journal holds %d plugin updates, want 6 (5 and the turn's end)", len(got))
	}
	held(t, "three opens refused alike (no crash loop, nothing moved aside); writable again, the store opens with its 5 updates and the turn's end")
}

// listing names the entries of dir and its store directory, so a test can
// tell whether anything was moved, created or removed.
func listing(t *testing.T, dir string) string {
	t.Helper()
	var names []string
	for _, d := range []string{dir, filepath.Join(dir, "store")} {
		ents, err := os.ReadDir(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			names = append(names, strings.TrimPrefix(filepath.Join(d, e.Name()), dir))
		}
	}
	return strings.Join(names, " ")
}
