package badgerstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/agenthost/agenthost/internal/logtest"
	"github.com/agenthost/agenthost/leasestore"
	"github.com/agenthost/agenthost/leasestore/badgerstore"
	"github.com/agenthost/agenthost/leasestore/leasestoretest"
)

// Every test here works in a state directory of its own and most start
// child processes, so they run in parallel.

// seeded is what seedForRestore left in a state directory.
type seeded struct {
	live      leasestore.Session // the live session's record when the store closed
	lastAcked uint64             // the last seq an append to "live" acknowledged
	acked     map[uint64]string  // seq -> payload of every entry of "live" acknowledged
}

// seedForRestore leaves a closed store in dir with a live session "live"
// and a released one "idle", whose backup was written after the last lease
// change and so misses the appends made after it: the situation in which a
// restore could hand acknowledged seqs out again.
func seedForRestore(t *testing.T, dir string) seeded {
	t.Helper()
	ctx := testCtx(t)
	s, err := badgerstore.Open(ctx, dir, badgerstore.Options{Logger: logtest.New(t), BackupDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	live := leasestoretest.Live(t, ctx, s, "live")
	if _, err := s.Create(ctx, leasestore.SessionSpec{ID: "idle", Agent: "scripted"}); err != nil {
		t.Fatal(err)
	}
	waitBackedUp(t, s)
	acked := map[uint64]string{}
	if err := s.Replay(ctx, "live", 0, func(e leasestore.Entry) error { acked[e.Seq] = string(e.Payload); return nil }); err != nil {
		t.Fatal(err)
	}
	var last uint64
	for i := range 5 {
		es, err := s.Append(ctx, "live", live.Lease.Fence, leasestore.EntryInput{Kind: leasestore.KindUpdate, Payload: []byte(fmt.Sprint(i))})
		if err != nil {
			t.Fatal(err)
		}
		last = es[0].Seq
		acked[last] = fmt.Sprint(i)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	return seeded{live: live, lastAcked: last, acked: acked}
}

func waitBackedUp(t *testing.T, s *badgerstore.Store) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !badgerstore.BackedUp(s) {
		if time.Now().After(deadline) {
			t.Fatal("the backup was not written")
		}
		time.Sleep(time.Millisecond)
	}
}

// writeMarker leaves the crash-loop marker as n opens that died leave it.
func writeMarker(t *testing.T, dir string, n int) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "store.opening"), []byte(fmt.Sprintf("%d\n", n)), 0o600); err != nil {
		t.Fatal(err)
	}
}

// checkRestored checks a store restored from the backup seedForRestore
// wrote: every session back, each lease with its fence and a floor above
// it, unreconciled, and a journal that kept every entry acknowledged before
// the restore (the journal mirror holds them) and hands none of their seqs
// out again.
func checkRestored(t *testing.T, s *badgerstore.Store, seed seeded) {
	t.Helper()
	ctx := testCtx(t)
	rec := s.Recovery()
	if rec == nil || rec.Sessions != 2 {
		t.Fatalf("recovery report %+v, want 2 restored sessions", rec)
	}
	got, err := s.Get(ctx, "live")
	if err != nil {
		t.Fatal(err)
	}
	l, fence := got.Lease, seed.live.Lease.Fence
	if l.Fence != fence || l.MinNextFence < fence+2 || !l.Unreconciled || l.Owner == nil {
		t.Fatalf("restored lease %+v: want fence %d kept, a floor of at least %d, unreconciled, owner kept", l, fence, fence+2)
	}
	restoredEntry := false
	kept := 0
	err = s.Replay(ctx, "live", 0, func(e leasestore.Entry) error {
		if e.Seq <= seed.lastAcked {
			if want, ok := seed.acked[e.Seq]; !ok || want != string(e.Payload) {
				return fmt.Errorf("seq %d after the restore holds %q, acknowledged before it as %q (present: %v)", e.Seq, e.Payload, want, ok)
			}
			kept++
			return nil
		}
		var ev leasestore.LifecycleEvent
		if e.Kind == leasestore.KindLifecycle && json.Unmarshal(e.Payload, &ev) == nil && ev.Event == "restored-from-backup" {
			restoredEntry = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !restoredEntry {
		t.Error("the journal does not record the restore")
	}
	if kept != len(seed.acked) {
		t.Errorf("the restored journal kept %d of the %d entries acknowledged before the store was lost", kept, len(seed.acked))
	}
	if _, err := s.Get(ctx, "idle"); err != nil {
		t.Errorf("session idle after the restore: %v", err)
	}
}

func damagedDirs(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "store.damaged-*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A restore can die at any step (the host is killed, the power fails). The
// next open must finish or redo it, never leave leases without their fence
// floor, and never start an empty store in place of the restored one.
func TestRestoreInterruptedAtAnyStep(t *testing.T) {
	t.Parallel()
	for _, step := range []string{"complete", "moved-aside", "in-place"} {
		t.Run(step, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			seed := seedForRestore(t, dir)
			writeMarker(t, dir, 2)
			out, err := runChildProcess(t, "restore-crash", dir, "LEASESTORE_TEST_STEP="+step)
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 7 {
				t.Fatalf("the restore did not die at step %s: %q (%v)", step, out, err)
			}
			s := openStore(t, dir)
			checkRestored(t, s, seed)
			rec := s.Recovery()
			if _, err := os.Stat(filepath.Join(rec.DamagedDir, "MANIFEST")); err != nil {
				t.Errorf("the damaged store was not kept aside: %v", err)
			}
			if _, err := os.Stat(filepath.Join(dir, "store.opening")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the crash-loop marker outlived the restore: %v", err)
			}
		})
	}
}

// The restore report outlives the open that restored: a host that dies
// before telling anyone still reports it next time. A clean Close ends it.
func TestRecoveryReportLastsUntilACleanClose(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	seed := seedForRestore(t, dir)
	writeMarker(t, dir, 2)
	out, err := runChildProcess(t, "open-and-die", dir)
	if err != nil || !strings.HasPrefix(out, "recovered:") {
		t.Fatalf("restoring open: %q, %v", out, err)
	}
	ctx := testCtx(t)
	s, err := badgerstore.Open(ctx, dir, badgerstore.Options{Logger: logtest.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	checkRestored(t, s, seed)
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s2 := openStore(t, dir)
	if rec := s2.Recovery(); rec != nil {
		t.Errorf("a restore reported again after a clean Close: %v", rec)
	}
}

// A store directory that is gone while its backup is there is restored,
// rather than replaced by an empty store whose first backup would
// overwrite the sessions.
func TestMissingStoreIsRestoredFromBackup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	seed := seedForRestore(t, dir)
	if err := os.RemoveAll(filepath.Join(dir, "store")); err != nil {
		t.Fatal(err)
	}
	s := openStore(t, dir)
	checkRestored(t, s, seed)
	if rec := s.Recovery(); rec.DamagedDir != "" {
		t.Errorf("recovery names a damaged directory %q where there was none", rec.DamagedDir)
	}
}

// A store without a single session never replaces a backup that has some.
func TestEmptyStoreKeepsTheBackup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := testCtx(t)
	s, err := badgerstore.Open(ctx, dir, badgerstore.Options{Logger: logtest.New(t), BackupDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, leasestore.SessionSpec{ID: "only", Agent: "scripted"}); err != nil {
		t.Fatal(err)
	}
	waitBackedUp(t, s)
	if err := s.Delete(ctx, "only", 0); err != nil {
		t.Fatal(err)
	}
	waitBackedUp(t, s)
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "store")); err != nil {
		t.Fatal(err)
	}
	s2 := openStore(t, dir)
	if rec := s2.Recovery(); rec == nil {
		t.Fatal("no restore: the backup was lost to an empty store")
	}
	// The backup was kept, and it knew the session was being deleted: the
	// restore does not bring it back alive.
	if sess, err := s2.Get(ctx, "only"); !errors.Is(err, leasestore.ErrNotFound) && (err != nil || !sess.Deleting) {
		t.Fatalf("the deleted session after the restore: %+v, %v; want it absent or still being deleted", sess, err)
	}
}

// Another program holding Badger's own lock (the badger CLI, a backup
// tool) is not damage: the open is refused naming the lock, nothing moves.
func TestStoreLockedByAnotherProgramIsNotMoved(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	seedForRestore(t, dir)
	raw, err := badger.Open(badger.DefaultOptions(filepath.Join(dir, "store")).WithLogger(nil).WithMemTableSize(8 << 20))
	if err != nil {
		t.Fatal(err)
	}
	_, err = badgerstore.Open(testCtx(t), dir, badgerstore.Options{Logger: logtest.New(t)})
	if cerr := raw.Close(); cerr != nil {
		t.Fatal(cerr)
	}
	if !errors.Is(err, leasestore.ErrLocked) || !strings.Contains(err.Error(), filepath.Join(dir, "store", "LOCK")) ||
		!strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Fatalf("open of a store locked by another program: %v, want ErrLocked naming the lock file and its holder", err)
	}
	assertNothingMoved(t, dir)
}

func assertNothingMoved(t *testing.T, dir string) {
	t.Helper()
	if d := damagedDirs(t, dir); len(d) != 0 {
		t.Errorf("the store was moved aside: %q", d)
	}
	if _, err := os.Stat(filepath.Join(dir, "store.opening")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the crash-loop marker was left behind: %v", err)
	}
	s := openStore(t, dir)
	if rec := s.Recovery(); rec != nil {
		t.Errorf("the store was restored: %v", rec)
	}
	if _, err := s.Get(testCtx(t), "live"); err != nil {
		t.Errorf("the store lost its session: %v", err)
	}
}

// A MANIFEST from another Badger version is not damage either.
func TestStoreFromAnotherBadgerVersionIsNotMoved(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	seedForRestore(t, dir)
	manifest := filepath.Join(dir, "store", "MANIFEST")
	b, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	newer := append([]byte(nil), b...)
	newer[6], newer[7] = 0xff, 0x7f // the version field after the magic
	if err := os.WriteFile(manifest, newer, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = badgerstore.Open(testCtx(t), dir, badgerstore.Options{Logger: logtest.New(t)})
	if err == nil || errors.Is(err, leasestore.ErrDamaged) || !strings.Contains(err.Error(), "another version of Badger") ||
		!strings.Contains(err.Error(), "nothing was moved") {
		t.Fatalf("open of a store from another Badger version: %v", err)
	}
	if err := os.WriteFile(manifest, b, 0o600); err != nil {
		t.Fatal(err)
	}
	assertNothingMoved(t, dir)
}

// A MANIFEST that does not parse is damage: the store is restored.
func TestCorruptManifestIsRestored(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	seed := seedForRestore(t, dir)
	if err := os.Truncate(filepath.Join(dir, "store", "MANIFEST"), 0); err != nil {
		t.Fatal(err)
	}
	s := openStore(t, dir)
	checkRestored(t, s, seed)
	if r := s.Recovery().Reason; !strings.Contains(r, "manifest has bad magic") {
		t.Errorf("recovery reason %q does not say what was wrong", r)
	}
}

// probeOpen is Options.ProbeOpen as a host sets it: re-execute this binary
// in its probe role.
func probeOpen(calls *atomic.Int32) func(ctx context.Context, storeDir string) error {
	return func(ctx context.Context, storeDir string) error {
		calls.Add(1)
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"=probe", "LEASESTORE_TEST_DIR="+storeDir)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%w: %s", err, tail(string(out), 512))
		}
		return nil
	}
}

// Opens that died for reasons of their own (a watchdog, power cuts during
// a slow replay) do not move a healthy store aside when a probe open in a
// child process succeeds.
func TestProbeOpenSparesAHealthyStore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	seedForRestore(t, dir)
	writeMarker(t, dir, 2)
	var calls atomic.Int32
	s, err := badgerstore.Open(testCtx(t), dir, badgerstore.Options{Logger: logtest.New(t), ProbeOpen: probeOpen(&calls)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 1 {
		t.Errorf("ProbeOpen called %d times, want 1", calls.Load())
	}
	assertNothingMoved(t, dir)
}

// A store whose probe open dies is damaged: it is restored.
func TestProbeOpenFailureRestores(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	seed := seedForRestore(t, dir)
	tables, _ := filepath.Glob(filepath.Join(dir, "store", "*.sst"))
	if len(tables) == 0 {
		t.Fatal("no table file to damage")
	}
	for _, tbl := range tables {
		corruptTail(t, tbl)
	}
	writeMarker(t, dir, 2)
	var calls atomic.Int32
	s, err := badgerstore.Open(testCtx(t), dir, badgerstore.Options{Logger: logtest.New(t), ProbeOpen: probeOpen(&calls)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	checkRestored(t, s, seed)
	if r := s.Recovery().Reason; !strings.Contains(r, "probe") {
		t.Errorf("recovery reason %q does not mention the failed probe", r)
	}
}

// A probe cut short by the caller's context decides nothing.
func TestProbeOpenCancelledDecidesNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	seedForRestore(t, dir)
	writeMarker(t, dir, 2)
	ctx, cancel := context.WithCancel(testCtx(t))
	_, err := badgerstore.Open(ctx, dir, badgerstore.Options{Logger: logtest.New(t),
		ProbeOpen: func(ctx context.Context, _ string) error { cancel(); return ctx.Err() }})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("open with a cancelled probe: %v", err)
	}
	if d := damagedDirs(t, dir); len(d) != 0 {
		t.Errorf("the store was moved aside: %q", d)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "store.opening")); strings.TrimSpace(string(b)) != "2" {
		t.Errorf("crash-loop marker %q after an undecided probe, want it kept at 2", b)
	}
}

// Badger opens a MANIFEST cut short without an error: it reads as a torn
// last write, and the tables its lost part listed are dropped. The backup
// shows the sessions missing, and the store is restored from it.
func TestStoreShortOfItsBackupIsRestored(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := testCtx(t)
	s := openStore(t, dir)
	for i := range 10 {
		leasestoretest.Live(t, ctx, s, fmt.Sprintf("s%d", i))
	}
	if err := s.Close(ctx); err != nil { // flushes the memtable into a table
		t.Fatal(err)
	}
	manifest := filepath.Join(dir, "store", "MANIFEST")
	fi, err := os.Stat(manifest)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(manifest, fi.Size()/2); err != nil {
		t.Fatal(err)
	}
	s2 := openStore(t, dir)
	rec := s2.Recovery()
	if rec == nil || rec.Sessions != 10 || !strings.Contains(rec.Reason, "its backup holds are missing") {
		t.Fatalf("after the MANIFEST was cut in half: recovery %+v, want all 10 sessions restored because they were missing", rec)
	}
	if list, err := s2.List(ctx); err != nil || len(list) != 10 {
		t.Fatalf("after the restore: %d sessions (%v), want 10", len(list), err)
	}
}

// A session deleted just before the host died is not taken for a lost one:
// Delete records the deletion in the backup before the record goes.
func TestDeleteThenCrashIsNotTakenForDamage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := testCtx(t)
	s := openStore(t, dir)
	for _, id := range []string{"kept", "gone"} {
		if _, err := s.Create(ctx, leasestore.SessionSpec{ID: id, Agent: "scripted"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(ctx); err != nil { // the backup holds both, alive
		t.Fatal(err)
	}
	out, err := runChildProcess(t, "delete-and-die", dir, "LEASESTORE_TEST_SESSION=gone")
	if err != nil || strings.TrimSpace(out) != "deleted" {
		t.Fatalf("child: %q, %v", out, err)
	}
	s2 := openStore(t, dir)
	if rec := s2.Recovery(); rec != nil {
		t.Fatalf("a healthy store after a delete was restored: %v", rec)
	}
	if _, err := s2.Get(ctx, "gone"); !errors.Is(err, leasestore.ErrNotFound) {
		t.Fatalf("deleted session: %v, want ErrNotFound", err)
	}
	if _, err := s2.Get(ctx, "kept"); err != nil {
		t.Fatalf("kept session: %v", err)
	}
}
