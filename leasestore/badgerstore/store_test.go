package badgerstore_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agenthost/agenthost/internal/logtest"
	"github.com/agenthost/agenthost/leasestore"
	"github.com/agenthost/agenthost/leasestore/badgerstore"
	"github.com/agenthost/agenthost/leasestore/leasestoretest"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// openStore opens a Badger store in dir, logging to t, and closes it when
// the test ends unless the test closed it first.
func openStore(t *testing.T, dir string) *badgerstore.Store {
	t.Helper()
	s, err := badgerstore.Open(testCtx(t), dir, badgerstore.Options{Logger: logtest.New(t)})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(context.Background()); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	return s
}

func TestConformance(t *testing.T) {
	leasestoretest.Run(t, func(t *testing.T, cfg leasestoretest.StoreConfig) leasestore.Store {
		s, err := badgerstore.Open(testCtx(t), cfg.Dir, badgerstore.Options{Logger: logtest.New(t), Now: cfg.Now})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestOpenRefusesRelativeStateDir(t *testing.T) {
	_, err := badgerstore.Open(testCtx(t), "relative/state", badgerstore.Options{})
	if !errors.Is(err, leasestore.ErrInvalidArgument) || !strings.Contains(err.Error(), "absolute") {
		t.Fatalf("got %v, want an error asking for an absolute path", err)
	}
}

func TestSecondOpenerIsToldWhoHoldsTheDirectory(t *testing.T) {
	dir := t.TempDir()
	openStore(t, dir)
	_, err := badgerstore.Open(testCtx(t), dir, badgerstore.Options{})
	var locked *badgerstore.LockedError
	if !errors.As(err, &locked) || !errors.Is(err, leasestore.ErrLocked) {
		t.Fatalf("second open: %v, want a LockedError", err)
	}
	if locked.PID != os.Getpid() || !strings.Contains(err.Error(), fmt.Sprintf("in use by pid %d", os.Getpid())) {
		t.Errorf("lock error names pid %d (%q), want %d", locked.PID, err, os.Getpid())
	}
}

// The presence check answers from at most two existence checks and opens
// nothing: the store first, the backup only when the store is absent.
func TestPresenceCheck(t *testing.T) {
	storePath := filepath.Join("/profile", "store", "MANIFEST")
	backupPath := filepath.Join("/profile", "store.backup")
	for _, tc := range []struct {
		name   string
		exists map[string]bool
		want   bool
		calls  []string
	}{
		{"store found", map[string]bool{storePath: true}, true, []string{storePath}},
		{"backup only", map[string]bool{backupPath: true}, true, []string{storePath, backupPath}},
		{"fresh profile", nil, false, []string{storePath, backupPath}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls []string
			got := badgerstore.Present("/profile", func(p string) bool {
				calls = append(calls, p)
				return tc.exists[p]
			})
			if got != tc.want || !slices.Equal(calls, tc.calls) {
				t.Errorf("Present = %v after checks %q, want %v after %q", got, calls, tc.want, tc.calls)
			}
		})
	}
	dir := t.TempDir()
	if badgerstore.Present(dir, nil) {
		t.Error("an empty state directory reads as present")
	}
	s, err := badgerstore.Open(testCtx(t), dir, badgerstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if !badgerstore.Present(dir, nil) {
		t.Error("a state directory with a store reads as absent")
	}
}

// A store whose opens keep dying is moved aside and restored from the
// backup; restored leases keep their fence but get a floor above it, and
// no journal hands out a seq it acknowledged before, although the backup
// was written before the last appends.
func TestCrashLoopRestoresFromBackup(t *testing.T) {
	dir := t.TempDir()
	ctx := testCtx(t)
	seed := seedForRestore(t, dir)
	live := seed.live
	// Two opens that never finished, as a panic inside Badger leaves them.
	writeMarker(t, dir, 2)
	s2 := openStore(t, dir)
	checkRestored(t, s2, seed)
	rec := s2.Recovery()
	if _, err := os.Stat(filepath.Join(rec.DamagedDir, "MANIFEST")); err != nil {
		t.Errorf("the damaged store was not kept aside: %v", err)
	}
	l := mustGet(t, s2, "live").Lease
	if l.MinNextFence != live.Lease.Fence+2 {
		t.Errorf("restored floor %d, want %d", l.MinNextFence, live.Lease.Fence+2)
	}
	// The floor holds: the next fence skips what a lost commit may have used.
	got, err := s2.Apply(ctx, "live", leasestore.Evict{Fence: l.Fence, Evidence: leasestore.DeathEvidence{Kind: leasestore.EvidencePIDAbsent}})
	if err != nil {
		t.Fatal(err)
	}
	if got.Lease.Fence != live.Lease.Fence+2 {
		t.Errorf("fence after eviction of a restored lease: %d, want %d", got.Lease.Fence, live.Lease.Fence+2)
	}
	// New entries continue after the jump, never at an acknowledged seq.
	last, err := s2.LastSeq(ctx, "live")
	if err != nil {
		t.Fatal(err)
	}
	if last <= seed.lastAcked {
		t.Errorf("journal position after restore %d, at or below the last acknowledged seq %d", last, seed.lastAcked)
	}
}

func mustGet(t *testing.T, s leasestore.Store, id string) leasestore.Session {
	t.Helper()
	sess, err := s.Get(testCtx(t), id)
	if err != nil {
		t.Fatal(err)
	}
	return sess
}

func TestDamagedStoreWithoutBackupIsRefusedClearly(t *testing.T) {
	dir := t.TempDir()
	s, err := badgerstore.Open(testCtx(t), dir, badgerstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(testCtx(t)); err != nil { // no lease changes: no backup
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "store.opening"), []byte("2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for range 2 { // refused every time, never opened
		_, err = badgerstore.Open(testCtx(t), dir, badgerstore.Options{})
		if !errors.Is(err, leasestore.ErrDamaged) || !strings.Contains(err.Error(), "move that directory aside") {
			t.Fatalf("got %v, want ErrDamaged telling the user what to do", err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "store", "MANIFEST")); err != nil {
		t.Errorf("the damaged store was moved or removed without a backup: %v", err)
	}
}

// A real damaged table: Badger may kill the process while opening it. The
// guard must turn that into a restore within OpenAttempts crashes, and never
// crash again after that.
func TestCorruptTableDoesNotCrashLoop(t *testing.T) {
	dir := t.TempDir()
	ctx := testCtx(t)
	s, err := badgerstore.Open(ctx, dir, badgerstore.Options{Logger: logtest.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		leasestoretest.Live(t, ctx, s, fmt.Sprintf("s%d", i))
	}
	if err := s.Close(ctx); err != nil { // flushes the memtable into a table
		t.Fatal(err)
	}
	tables, _ := filepath.Glob(filepath.Join(dir, "store", "*.sst"))
	if len(tables) == 0 {
		t.Fatal("no table file to damage")
	}
	for _, tbl := range tables {
		corruptTail(t, tbl)
	}
	crashes := 0
	for run := 1; ; run++ {
		if run > 4 {
			t.Fatalf("no recovery after %d opens", run-1)
		}
		out, err := runChildProcess(t, "open", dir)
		t.Logf("open #%d: %s (exit: %v)", run, strings.TrimSpace(out), err)
		if strings.HasPrefix(out, "recovered:") {
			break
		}
		if strings.HasPrefix(out, "error:") || strings.HasPrefix(out, "opened") {
			t.Fatalf("open #%d of a store with damaged tables: %q, want a crash or a recovery", run, out)
		}
		crashes++
	}
	if crashes > 2 {
		t.Errorf("%d opens crashed, the guard allows 2", crashes)
	}
	s2 := openStore(t, dir)
	list, err := s2.List(ctx)
	if err != nil || len(list) != 20 {
		t.Errorf("after recovery: %d sessions (%v), want 20", len(list), err)
	}
}

func corruptTail(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	n := min(fi.Size(), 256)
	if _, err := f.WriteAt(make([]byte, n), fi.Size()-n); err != nil {
		t.Fatal(err)
	}
}

func runChildProcess(t *testing.T, role, dir string, env ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+role, "LEASESTORE_TEST_DIR="+dir)
	cmd.Env = append(cmd.Env, env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if stderr.Len() > 0 {
		t.Logf("child stderr (last 2k): %s", tail(stderr.String(), 2048))
	}
	return string(out), err
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// A host SIGKILLed while appending loses nothing it acknowledged.
func TestSIGKILLMidAppendLosesNoAcknowledgedEntry(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=append-forever", "LEASESTORE_TEST_DIR="+dir)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := map[uint64]int{} // seq -> payload number
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && len(acked) < 400 {
		var seq uint64
		var n int
		if _, err := fmt.Sscanf(sc.Text(), "%d %d", &seq, &n); err != nil {
			t.Fatalf("child said %q: %v", sc.Text(), err)
		}
		acked[seq] = n
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if len(acked) < 400 {
		t.Fatalf("child acknowledged only %d appends; stderr: %s", len(acked), stderr.String())
	}
	// Whatever the child printed after the 400th line was acknowledged too;
	// the pipe is gone with it, so check every seq that was read.
	ctx := testCtx(t)
	s := openStore(t, dir)
	found := map[uint64]string{}
	err = s.Replay(ctx, "crash", 0, func(e leasestore.Entry) error {
		if e.Kind == leasestore.KindUpdate {
			found[e.Seq] = string(e.Payload)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for seq, n := range acked {
		if got, want := found[seq], fmt.Sprintf("payload-%d", n); got != want {
			t.Fatalf("acknowledged seq %d: found %q after SIGKILL, want %q", seq, got, want)
		}
	}
	t.Logf("%d acknowledged entries all present; %d entries in the journal", len(acked), len(found))
}

// Badger's memtable log (*.mem) holds every entry not yet flushed to a
// table; losing it after a SIGKILL (a cleaner, a sync tool, a damaged file)
// used to shrink the journal without a word, and the next appends reused
// seqs clients had already seen, with other content. The journal mirror
// kept beside the store holds what was acknowledged: the store puts the
// lost entries back, reports the recovery, and numbers new entries past
// any it may still have lost.
func TestLostMemtableLogNeverReusesSeqs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	acked, maxAcked := killAppender(t, dir, 20000)
	mems, err := filepath.Glob(filepath.Join(dir, "store", "*.mem"))
	if err != nil || len(mems) == 0 {
		t.Fatalf("no memtable log to lose: %v %v", mems, err)
	}
	for _, m := range mems {
		if err := os.Remove(m); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("injected: SIGKILL after %d acknowledged entries (last seq %d), then %d memtable log(s) deleted", len(acked), maxAcked, len(mems))

	s := openStore(t, dir)
	missing, gapEntry := checkAcked(t, s, acked, maxAcked)
	if missing > 0 {
		t.Errorf("%d of %d acknowledged entries are gone after the memtable log was lost", missing, len(acked))
	}
	rec := s.Recovery()
	if rec == nil || !strings.Contains(rec.String(), `"crash"`) {
		t.Errorf("no recovery report names the journal that shrank: %v", rec)
	}
	if !gapEntry {
		t.Error("the journal does not record the recovery past the last acknowledged seq")
	}
	next := appendAfter(t, s, maxAcked)
	t.Logf("held: %d acknowledged entries kept, report %q, next seq %d", len(acked)-missing, rec, next)
}

// A store directory deleted after a SIGKILL (or damaged past opening) is
// restored from its backup, and its journals from the journal mirror: a
// process crash costs no acknowledged entry, however many the backup's
// positions are behind.
func TestStoreLostAfterSIGKILLKeepsEveryAcknowledgedEntry(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	acked, maxAcked := killAppender(t, dir, 5000)
	if err := os.RemoveAll(filepath.Join(dir, "store")); err != nil {
		t.Fatal(err)
	}
	t.Logf("injected: SIGKILL after %d acknowledged entries (last seq %d), then the store directory deleted", len(acked), maxAcked)
	s := openStore(t, dir)
	rec := s.Recovery()
	if rec == nil || rec.Sessions != 1 || rec.Entries < len(acked) {
		t.Fatalf("recovery %v, want the session restored with at least the %d acknowledged entries", rec, len(acked))
	}
	missing, gapEntry := checkAcked(t, s, acked, maxAcked)
	if missing > 0 {
		t.Fatalf("%d of %d acknowledged entries are gone after the store was lost", missing, len(acked))
	}
	if !gapEntry {
		t.Error("the journal does not record the restore past the last acknowledged seq")
	}
	next := appendAfter(t, s, maxAcked)
	t.Logf("held: %q; every acknowledged entry is back, next seq %d", rec, next)
}

// killAppender runs appendBatchesForever in dir until it acknowledged at
// least n entries, SIGKILLs it, and returns what it acknowledged (seq ->
// payload number) and the last seq.
func killAppender(t *testing.T, dir string, n int) (map[uint64]int, uint64) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=append-batches-forever", "LEASESTORE_TEST_DIR="+dir)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := map[uint64]int{}
	var maxAcked uint64
	sc := bufio.NewScanner(stdout)
	for len(acked) < n && sc.Scan() {
		var seq uint64
		var k int
		if _, err := fmt.Sscanf(sc.Text(), "%d %d", &seq, &k); err != nil {
			t.Fatalf("child said %q: %v", sc.Text(), err)
		}
		for i := range 32 {
			acked[seq-uint64(i)] = k - i
		}
		maxAcked = seq
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if len(acked) < n {
		t.Fatalf("child acknowledged only %d appends; stderr: %s", len(acked), stderr.String())
	}
	return acked, maxAcked
}

// checkAcked checks that no acknowledged seq of "crash" holds other
// content than it was acknowledged with, and returns how many are missing
// and whether a "journal-recovered" or "restored-from-backup" entry marks
// a gap after maxAcked.
func checkAcked(t *testing.T, s *badgerstore.Store, acked map[uint64]int, maxAcked uint64) (missing int, gapEntry bool) {
	t.Helper()
	found := map[uint64]string{}
	err := s.Replay(testCtx(t), "crash", 0, func(e leasestore.Entry) error {
		switch e.Kind {
		case leasestore.KindUpdate:
			found[e.Seq] = string(e.Payload)
		case leasestore.KindLifecycle:
			if e.Seq > maxAcked+1 && (strings.Contains(string(e.Payload), `"journal-recovered"`) || strings.Contains(string(e.Payload), `"restored-from-backup"`)) {
				gapEntry = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for seq, n := range acked {
		got, ok := found[seq]
		if !ok {
			missing++
			continue
		}
		if want := string(batchPayload(n)); got != want {
			t.Fatalf("acknowledged seq %d holds %.20q after the loss, acknowledged as %.20q", seq, got, want)
		}
	}
	return missing, gapEntry
}

// appendAfter appends to "crash" at its current fence (a restored lease
// keeps it) and checks the new seq is past every acknowledged one.
func appendAfter(t *testing.T, s *badgerstore.Store, maxAcked uint64) uint64 {
	t.Helper()
	ctx := testCtx(t)
	sess := mustGet(t, s, "crash")
	if sess.Lease.Unreconciled {
		// A restored lease awaits its restart decision; the writer that
		// held it is gone, so a new one takes it over.
		if _, err := s.Apply(ctx, "crash", leasestore.Evict{Fence: sess.Lease.Fence, Evidence: leasestore.DeathEvidence{Kind: leasestore.EvidenceExitObserved, ObservedAt: time.Now()}}); err != nil {
			t.Fatal(err)
		}
		sess = leasestoretest.Live(t, ctx, s, "crash")
	}
	es, err := s.Append(ctx, "crash", sess.Lease.Fence, leasestore.EntryInput{Kind: leasestore.KindUpdate, Payload: []byte("after")})
	if err != nil {
		t.Fatal(err)
	}
	if es[0].Seq <= maxAcked {
		t.Fatalf("a new entry got seq %d, a seq acknowledged before the loss (the last was %d)", es[0].Seq, maxAcked)
	}
	return es[0].Seq
}

// Appends from concurrent sessions share transactions: one sync serves many
// acknowledged entries. (How much that buys is measured by the benchmarks.)
func TestConcurrentAppendsAreGroupCommitted(t *testing.T) {
	ctx := testCtx(t)
	s := openStore(t, t.TempDir())
	const sessions, per = 8, 40
	fences := make([]uint64, sessions)
	for i := range sessions {
		fences[i] = leasestoretest.Live(t, ctx, s, fmt.Sprint(i)).Lease.Fence
	}
	before := badgerstore.CommitCount(s)
	var wg sync.WaitGroup
	for i := range sessions {
		wg.Go(func() {
			for range per {
				if _, err := s.Append(ctx, fmt.Sprint(i), fences[i], leasestore.EntryInput{Kind: leasestore.KindUpdate, Payload: []byte("x")}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	commits := badgerstore.CommitCount(s) - before
	t.Logf("%d appends in %d commits", sessions*per, commits)
	if commits >= sessions*per {
		t.Errorf("%d concurrent appends took %d commits: nothing was grouped", sessions*per, commits)
	}
}

// A conflicted record (no transition of this build writes one; an earlier
// build or a person may have) fails closed: nobody reserves it or appends
// to it, and only evidence settles it.
func TestConflictedRecordFailsClosed(t *testing.T) {
	ctx := testCtx(t)
	s := openStore(t, t.TempDir())
	sess := leasestoretest.Live(t, ctx, s, "c")
	fence := sess.Lease.Fence
	sess.Lease.Claim, sess.Lease.Stage, sess.Lease.LatchReason = leasestore.ClaimConflicted, leasestore.StageManualRecovery, "two hosts claim it"
	if err := badgerstore.PutRecord(ctx, s, sess); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(ctx, "c", leasestore.Reserve{ExpectedFence: fence}); !errors.Is(err, leasestore.ErrConflict) {
		t.Fatalf("reserve of a conflicted session: %v, want ErrConflict", err)
	}
	if _, err := s.Append(ctx, "c", fence, leasestore.EntryInput{Kind: leasestore.KindUpdate}); !errors.Is(err, leasestore.ErrOwnershipUnknown) {
		t.Fatalf("append to a conflicted session: %v, want ErrOwnershipUnknown", err)
	}
	if _, err := s.Apply(ctx, "c", leasestore.Release{Fence: fence}); !errors.Is(err, leasestore.ErrOwnershipUnknown) {
		t.Fatalf("release of a conflicted session: %v, want ErrOwnershipUnknown", err)
	}
	got := mustApply(t, s, "c", leasestore.Evict{Fence: fence, Evidence: leasestore.DeathEvidence{Kind: leasestore.EvidenceOperator, Detail: "user confirmed"}})
	if got.Lease.Claim != leasestore.ClaimReleased || got.Lease.Fence != fence+1 {
		t.Fatalf("settled conflict: %+v", got.Lease)
	}
	mustApply(t, s, "c", leasestore.Reserve{ExpectedFence: fence + 1})
}
