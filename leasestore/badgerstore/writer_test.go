package badgerstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/agenthost/agenthost/internal/logtest"
	"github.com/agenthost/agenthost/leasestore"
	"github.com/agenthost/agenthost/leasestore/badgerstore"
	"github.com/agenthost/agenthost/leasestore/leasestoretest"
)

// MarkAllUnreconciled marks sessions whose records together are far larger
// than one Badger transaction accepts: each session is its own operation,
// and group commit packs them.
func TestMarkAllUnreconciledLargeRecords(t *testing.T) {
	ctx := testCtx(t)
	s := openStore(t, t.TempDir())
	const n = 30 // ~56 KiB each: 1.7 MiB against a 1.2 MiB transaction limit
	big := map[string]string{"notes": strings.Repeat("o", 24<<10)}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			id := strings.Repeat(fmt.Sprintf("%02d", i), leasestore.MaxSessionIDLen/2)
			if _, err := s.Create(ctx, leasestore.SessionSpec{ID: id, Agent: "scripted", Options: big}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	marked, err := s.MarkAllUnreconciled(ctx)
	if err != nil || marked != n {
		t.Fatalf("marked %d of %d large sessions: %v", marked, n, err)
	}
	list, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, sess := range list {
		if !sess.Lease.Unreconciled {
			t.Fatalf("session %.8q… not marked", sess.ID)
		}
	}
}

// A session that cannot be marked is named, and does not keep the others
// from being marked.
func TestMarkAllUnreconciledNamesTheSession(t *testing.T) {
	ctx := testCtx(t)
	s := openStore(t, t.TempDir())
	for _, id := range []string{"a", "b", "c"} {
		if _, err := s.Create(ctx, leasestore.SessionSpec{ID: id, Agent: "scripted"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := badgerstore.CorruptRecord(ctx, s, "b"); err != nil {
		t.Fatal(err)
	}
	marked, err := s.MarkAllUnreconciled(ctx)
	if marked != 2 || !errors.Is(err, leasestore.ErrDamaged) || !strings.Contains(err.Error(), `session "b"`) {
		t.Fatalf("marked %d with one bad record: %v, want 2 and an error naming session \"b\"", marked, err)
	}
}

// A single write too large for a transaction says whose write it was.
func TestOversizedWriteNamesTheSession(t *testing.T) {
	ctx := testCtx(t)
	s := openStore(t, t.TempDir())
	fence := leasestoretest.Live(t, ctx, s, "big-one").Lease.Fence
	huge := leasestore.EntryInput{Kind: leasestore.KindUpdate, Payload: make([]byte, leasestore.MaxPayloadSize)}
	_, err := s.Append(ctx, "big-one", fence, huge, huge)
	if !errors.Is(err, leasestore.ErrInvalidArgument) || !strings.Contains(err.Error(), `append to session "big-one"`) {
		t.Fatalf("oversized append: %v, want ErrInvalidArgument naming the append and the session", err)
	}
}

// A commit that fails other than by a conflict may still have landed, so
// the store refuses every later write (a retried append would journal its
// entries twice) and says to restart; reads go on.
func TestFailedCommitRefusesFurtherWrites(t *testing.T) {
	ctx := testCtx(t)
	s := openStore(t, t.TempDir())
	fence := leasestoretest.Live(t, ctx, s, "s").Lease.Fence
	var failed atomic.Bool
	badgerstore.SetCommitHook(s, func(commit func() error) error {
		if err := commit(); err != nil || failed.Swap(true) {
			return err
		}
		return errors.New("input/output error") // after the commit took effect, as a failed sync can
	})
	entry := leasestore.EntryInput{Kind: leasestore.KindPrompt, Payload: []byte("once")}
	if _, err := s.Append(ctx, "s", fence, entry); err == nil {
		t.Fatal("the append whose commit failed reported success")
	}
	_, err := s.Append(ctx, "s", fence, entry) // the caller retries
	if !errors.Is(err, leasestore.ErrDamaged) || !strings.Contains(err.Error(), "input/output error") ||
		!strings.Contains(err.Error(), "restart the host") {
		t.Fatalf("append after a failed commit: %v, want ErrDamaged telling to restart", err)
	}
	if _, err := s.Apply(ctx, "s", leasestore.Release{Fence: fence}); !errors.Is(err, leasestore.ErrDamaged) {
		t.Errorf("transition after a failed commit: %v", err)
	}
	if _, err := s.Create(ctx, leasestore.SessionSpec{ID: "t", Agent: "scripted"}); !errors.Is(err, leasestore.ErrDamaged) {
		t.Errorf("create after a failed commit: %v", err)
	}
	n := 0
	err = s.Replay(ctx, "s", 0, func(e leasestore.Entry) error {
		if string(e.Payload) == "once" {
			n++
		}
		return nil
	})
	if err != nil || n > 1 {
		t.Fatalf("the prompt is journaled %d times (%v)", n, err)
	}
}

// An interrupted Delete leaves a session nobody can take over, whose
// journal reads as gone, and which a later Delete (after a restart, too)
// finishes.
func TestInterruptedDeleteIsFinishedByTheNext(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	s, err := badgerstore.Open(ctx, dir, badgerstore.Options{Logger: logtest.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	fence := leasestoretest.Live(t, ctx, s, "s").Lease.Fence
	appendMany(t, s, "s", fence, 3000) // three chunks of a Delete
	fence = mustApply(t, s, "s", leasestore.Release{Fence: fence}).Lease.Fence

	delCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	badgerstore.SetCommitHook(s, func(commit func() error) error {
		err := commit()
		cancel() // the host stops right after the Delete's first step
		return err
	})
	err = s.Delete(delCtx, "s", fence)
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "call Delete again") {
		t.Fatalf("interrupted delete: %v", err)
	}
	badgerstore.SetCommitHook(s, func(commit func() error) error { return commit() })

	got := mustGet(t, s, "s")
	if !got.Deleting {
		t.Fatalf("a half-deleted session is not marked: %+v", got)
	}
	if _, err := s.Apply(ctx, "s", leasestore.Reserve{ExpectedFence: fence}); !errors.Is(err, leasestore.ErrNotFound) {
		t.Errorf("reserve of a half-deleted session: %v", err)
	}
	if _, err := s.LastSeq(ctx, "s"); !errors.Is(err, leasestore.ErrNotFound) {
		t.Errorf("journal of a half-deleted session: %v", err)
	}
	if _, err := s.Create(ctx, leasestore.SessionSpec{ID: "s", Agent: "scripted"}); !errors.Is(err, leasestore.ErrExists) {
		t.Errorf("create over a half-deleted session: %v", err)
	}
	// A restart flags every session unreconciled; the Delete still finishes.
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s2 := openStore(t, dir)
	if _, err := s2.MarkAllUnreconciled(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s2.Delete(ctx, "s", fence); err != nil {
		t.Fatalf("finishing the delete: %v", err)
	}
	if _, err := s2.Get(ctx, "s"); !errors.Is(err, leasestore.ErrNotFound) {
		t.Errorf("after the delete finished: %v", err)
	}
}

func appendMany(t *testing.T, s leasestore.Store, id string, fence uint64, n int) {
	t.Helper()
	for n > 0 {
		in := make([]leasestore.EntryInput, min(n, 2000))
		for i := range in {
			in[i] = leasestore.EntryInput{Kind: leasestore.KindUpdate, Payload: []byte("x")}
		}
		if _, err := s.Append(testCtx(t), id, fence, in...); err != nil {
			t.Fatal(err)
		}
		n -= len(in)
	}
}

func mustApply(t *testing.T, s leasestore.Store, id string, tr leasestore.Transition) leasestore.Session {
	t.Helper()
	sess, err := s.Apply(testCtx(t), id, tr)
	if err != nil {
		t.Fatal(err)
	}
	return sess
}

// A Reserve refused for a token source that returned nothing leaves the
// session as it was.
func TestReserveRefusesAnEmptyToken(t *testing.T) {
	ctx := testCtx(t)
	s, err := badgerstore.Open(ctx, t.TempDir(), badgerstore.Options{Logger: logtest.New(t),
		NewToken: func() (string, error) { return "", nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	if _, err := s.Create(ctx, leasestore.SessionSpec{ID: "s", Agent: "scripted"}); err != nil {
		t.Fatal(err)
	}
	_, err = s.Apply(ctx, "s", leasestore.Reserve{ExpectedFence: 0})
	if err == nil || !strings.Contains(err.Error(), "empty token") {
		t.Fatalf("reserve with an empty spawn token: %v", err)
	}
	if got := mustGet(t, s, "s"); got.Lease.Claim != leasestore.ClaimReleased || got.Lease.Fence != 0 {
		t.Errorf("a refused reservation changed the lease: %+v", got.Lease)
	}
}

// The free-space guard, driven by the reserve rather than by filling a
// disk (the fault suite fills a real tmpfs, which needs root): with less
// free than MinFreeSpace, journal appends are refused with ErrNoSpace and
// nothing is written; lease changes still pass while more than half of it
// is free; below half, they are refused too. The store is not failed by
// any of it.
func TestWritesAreRefusedBeforeTheDiskIsFull(t *testing.T) {
	dir := t.TempDir()
	ctx := testCtx(t)
	free := func() int64 {
		var st syscall.Statfs_t
		if err := syscall.Statfs(dir, &st); err != nil {
			t.Fatal(err)
		}
		return int64(st.Bavail) * int64(st.Bsize)
	}
	open := func(minFree int64) *badgerstore.Store {
		s, err := badgerstore.Open(ctx, dir, badgerstore.Options{Logger: logtest.New(t), MinFreeSpace: minFree})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open(-1)
	leasestoretest.Live(t, ctx, s, "s")
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// Free space between half the reserve and the reserve: appends refused,
	// lease changes accepted.
	s = open(free() + free()/2)
	sess, err := s.Get(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Append(ctx, "s", sess.Lease.Fence, leasestore.EntryInput{Kind: leasestore.KindUpdate, Payload: []byte("x")})
	if !errors.Is(err, leasestore.ErrNoSpace) || !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "free some disk space") {
		t.Fatalf("append with too little free space: %v, want ErrNoSpace saying what to do", err)
	}
	before, _ := s.LastSeq(ctx, "s")
	if _, err := s.Apply(ctx, "s", leasestore.Release{Fence: sess.Lease.Fence, Detail: "test"}); err != nil {
		t.Fatalf("a lease change with more than half the reserve free: %v", err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// Less than half the reserve free: lease changes refused too.
	s = open(3 * free())
	if _, err := s.Create(ctx, leasestore.SessionSpec{ID: "t", Agent: "scripted"}); !errors.Is(err, leasestore.ErrNoSpace) {
		t.Fatalf("create with too little free space: %v, want ErrNoSpace", err)
	}
	if _, err := s.Get(ctx, "t"); !errors.Is(err, leasestore.ErrNotFound) {
		t.Fatalf("a refused create left a session: %v", err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// Space again: the same writes go through; nothing refused was written.
	s = open(0)
	defer s.Close(ctx)
	after, _ := s.LastSeq(ctx, "s")
	if after != before+1 { // the release's lifecycle entry only
		t.Fatalf("journal position %d after the refused append and one release, want %d", after, before+1)
	}
	if _, err := s.Create(ctx, leasestore.SessionSpec{ID: "t", Agent: "scripted"}); err != nil {
		t.Fatalf("create with space: %v", err)
	}
}
