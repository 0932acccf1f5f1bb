package badgerstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agenthost/agenthost/leasestore"
	"github.com/agenthost/agenthost/leasestore/badgerstore"
)

// createAll creates released sessions ids, concurrently so that group
// commit keeps the setup short.
func createAll(t *testing.T, ctx context.Context, s leasestore.Store, ids []string) {
	t.Helper()
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			_, errs[i] = s.Create(ctx, leasestore.SessionSpec{ID: id, Agent: "scripted"})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

func reserveMoves(ids []string) []leasestore.Move {
	moves := make([]leasestore.Move, len(ids))
	for i, id := range ids {
		moves[i] = leasestore.Move{ID: id, Transition: leasestore.Reserve{ExpectedFence: 0, ClaimKeyID: "key-1"}}
	}
	return moves
}

// A batch of a hundred sessions' moves is one synced commit, also when one
// of its sessions is being deleted (its move refused, the others not).
func TestBatchOfMovesIsOneCommit(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	s := openStore(t, t.TempDir())
	ids := make([]string, 100)
	for i := range ids {
		ids[i] = fmt.Sprintf("b-%03d", i)
	}
	createAll(t, ctx, s, ids)
	deleting := mustGet(t, s, ids[7])
	deleting.Deleting = true // a Delete that did not finish
	if err := badgerstore.PutRecord(ctx, s, deleting); err != nil {
		t.Fatal(err)
	}
	before := badgerstore.CommitCount(s)
	res := s.ApplyBatch(ctx, reserveMoves(ids))
	if commits := badgerstore.CommitCount(s) - before; commits != 1 {
		t.Errorf("a batch of %d moves took %d commits, want 1", len(ids), commits)
	}
	for i, r := range res {
		switch {
		case i == 7:
			if !errors.Is(r.Err, leasestore.ErrNotFound) {
				t.Errorf("the move of a session being deleted: %v, want ErrNotFound", r.Err)
			}
		case r.Err != nil:
			t.Errorf("move %d refused beside a session being deleted: %v", i, r.Err)
		}
	}
	if got := mustGet(t, s, ids[7]); got.Lease.Fence != 0 || !got.Deleting {
		t.Errorf("the refused move changed the session being deleted: %+v", got)
	}
}

// A batch larger than one Badger transaction holds is split into several
// commits, every move accepted; and every move's lifecycle entry reaches
// the journal mirror, so a lost store gives each of them back.
func TestBatchTooBigForOneTransactionIsSplitAndMirrored(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dir := t.TempDir()
	s := openStore(t, dir)
	// Ids near the limit make each move write ~50 KiB (record, journal
	// entry key, seq key, mirror frame): ~25 fit a transaction, so 40 take two commits or more.
	ids := make([]string, 40)
	for i := range ids {
		ids[i] = fmt.Sprintf("%03d-%s", i, strings.Repeat("x", leasestore.MaxSessionIDLen-8))
	}
	createAll(t, ctx, s, ids)
	before := badgerstore.CommitCount(s)
	res := s.ApplyBatch(ctx, reserveMoves(ids))
	commits := badgerstore.CommitCount(s) - before
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("move %d of a split batch: %v", i, r.Err)
		}
	}
	t.Logf("%d moves in %d commits", len(ids), commits)
	if commits < 2 || commits >= uint64(len(ids)) {
		t.Errorf("a batch too big for one transaction took %d commits for %d moves, want it split into a few", commits, len(ids))
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "store")); err != nil {
		t.Fatal(err)
	}
	s2 := openStore(t, dir)
	if s2.Recovery() == nil {
		t.Fatal("a lost store reported no recovery")
	}
	for _, id := range ids {
		var events []string
		if err := s2.Replay(ctx, id, 0, func(e leasestore.Entry) error {
			events = append(events, string(e.Payload))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if len(events) < 2 || !strings.Contains(events[1], `"reserved"`) {
			t.Fatalf("after the store was lost, the journal of %.8q… holds %d entries %q; want its batched reservation back from the mirror", id, len(events), events)
		}
	}
}

// A commit whose outcome is unknown fails every move it held with
// ErrDamaged, and the store refuses later writes, as after any such commit.
func TestBatchWhoseCommitFailedDamagesTheStore(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	s := openStore(t, t.TempDir())
	ids := []string{"a", "b", "c"}
	createAll(t, ctx, s, ids)
	badgerstore.SetCommitHook(s, func(commit func() error) error {
		if err := commit(); err != nil {
			return err
		}
		return errors.New("input/output error") // after it took effect, as a failed sync can
	})
	for i, r := range s.ApplyBatch(ctx, reserveMoves(ids)) {
		if !errors.Is(r.Err, leasestore.ErrDamaged) {
			t.Errorf("move %d of a failed commit: %v, want ErrDamaged", i, r.Err)
		}
	}
	if _, err := s.Apply(ctx, "a", leasestore.Reserve{ExpectedFence: 1}); !errors.Is(err, leasestore.ErrDamaged) {
		t.Errorf("a move after the failed batch: %v, want ErrDamaged", err)
	}
}
