package host

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/agenthost/agenthost/leasestore"
)

// batchCountingStore is the real store, counting how the host moves
// leases: each ApplyBatch with the names of its moves, and every Apply.
// Its first ApplyBatch is held until every other readoption of the pass
// waits on the batcher (hold), and before it forwards a batch it moves the
// lease of session steal under the host's feet, as a second host would.
type batchCountingStore struct {
	leasestore.Store
	hold  func(inFlight int)
	steal string

	mu      sync.Mutex
	batches [][]string // transition names, per ApplyBatch call
	applies []string   // transition names of Apply calls
	stolen  uint64     // the fence steal's lease was moved to
}

func (s *batchCountingStore) Apply(ctx context.Context, id string, t leasestore.Transition) (leasestore.Session, error) {
	s.mu.Lock()
	s.applies = append(s.applies, t.Name())
	s.mu.Unlock()
	return s.Store.Apply(ctx, id, t)
}

func (s *batchCountingStore) ApplyBatch(ctx context.Context, moves []leasestore.Move) []leasestore.MoveResult {
	names := make([]string, len(moves))
	for i, m := range moves {
		names[i] = m.Transition.Name()
		if m.ID == s.steal {
			// Another host readopts it first: the batch's move is stale.
			sess, err := s.Store.Apply(ctx, m.ID, m.Transition)
			if err != nil {
				panic(fmt.Sprintf("moving the lease of %q under the host: %v", m.ID, err))
			}
			s.mu.Lock()
			s.stolen = sess.Lease.Fence
			s.mu.Unlock()
		}
	}
	s.mu.Lock()
	s.batches = append(s.batches, names)
	first := len(s.batches) == 1
	s.mu.Unlock()
	if first {
		s.hold(len(moves))
	}
	return s.Store.ApplyBatch(ctx, moves)
}

// A reconcile pass readopting several sessions moves their leases in
// batches: with one batch held in flight, every other readoption of the
// pass gathers into the next, so the pass costs two store commits, not
// one per session. A move the store refuses (a session whose lease moved
// meanwhile) latches only its own session; the others are readopted and
// take prompts.
func TestReadoptionsOfOnePassShareTheirLeaseCommits(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dir := stateDir(t)
	const n = 6
	h1 := mustOpen(t, hostConfig(t, dir))
	ids := make([]string, n)
	fences := map[string]uint64{}
	for i := range ids {
		s, err := h1.StartSession(ctx, SessionRequest{ID: fmt.Sprint("batched-", i), Agent: "scripted", Workspace: dir})
		if err != nil {
			t.Fatal(err)
		}
		ids[i], fences[s.ID()] = s.ID(), s.Fence()
		if i == 2 {
			// Nobody drives it once its lease is taken: the test stops it.
			pid := s.PID()
			t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
		}
	}
	if err := h1.Close(ctx); err != nil {
		t.Fatal(err)
	}

	cfg := hostConfig(t, dir)
	cfg.ReconcileInBackground = true // the hold below needs the host
	inner, err := openStore(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var h2 atomic.Pointer[Host]
	store := &batchCountingStore{Store: inner, steal: ids[2]}
	store.hold = func(inFlight int) {
		// Every readoption of the pass reached its lease move: the ones
		// in this batch, and the rest waiting for the next.
		waitFor(t, "the other readoptions to wait on the batcher", func() bool {
			h := h2.Load()
			if h == nil {
				return false
			}
			b := h.reconcileMoves()
			return b != nil && b.waiting.Load() == int64(n-inFlight)
		})
	}
	cfg.Store = store
	h, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	h2.Store(h)
	t.Cleanup(func() { _ = h.Shutdown(context.Background()) })
	select {
	case <-h.reconciled:
	case <-ctx.Done():
		t.Fatal("the reconcile pass did not end")
	}

	store.mu.Lock()
	batches, applies, stolen := store.batches, store.applies, store.stolen
	store.mu.Unlock()
	moved := 0
	for _, b := range batches {
		for _, name := range b {
			if name != "readopt" {
				t.Errorf("batch %v holds a %s move", b, name)
			}
			moved++
		}
	}
	if len(batches) != 2 || moved != n {
		t.Errorf("the pass moved %d leases in %d store calls %v, want all %d in 2", moved, len(batches), batches, n)
	}
	for _, name := range applies {
		if name == "readopt" {
			t.Errorf("a readoption moved its lease on its own (Apply), outside the pass's batches: %v", applies)
			break
		}
	}
	for _, id := range ids {
		d := h.Decisions()[id]
		rec, err := inner.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if id == store.steal {
			if d.Action != ActionLatched || rec.Lease.Fence != stolen {
				t.Errorf("the session whose lease moved under the pass: decision %+v, lease %+v; want latched, untouched at fence %d", d, rec.Lease, stolen)
			}
			h.mu.Lock()
			driven := h.sessions[id] != nil
			h.mu.Unlock()
			if driven {
				t.Errorf("the host drives %q, whose lease another host took", id)
			}
			continue
		}
		if d.Action != ActionReadopted || rec.Lease.Fence != fences[id]+1 || !rec.Lease.AdmitsWriter() {
			t.Errorf("%q beside a refused move: decision %+v, lease %+v", id, d, rec.Lease)
		}
	}
	h.mu.Lock()
	s := h.sessions[ids[0]]
	h.mu.Unlock()
	if s == nil {
		t.Fatal("a readopted session is not registered")
	}
	if r, err := s.Prompt(ctx, "count 2"); err != nil || r.StopReason != "end_turn" {
		t.Fatalf("prompt after a batched readoption: %+v, %v", r, err)
	}
	if h.reconcileMoves() != nil {
		t.Error("the pass ended and left its batcher behind")
	}
}
