package badgerstore_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agenthost/agenthost/internal/logtest"
	"github.com/agenthost/agenthost/leasestore"
	"github.com/agenthost/agenthost/leasestore/badgerstore"
	"github.com/agenthost/agenthost/leasestore/leasestoretest"
)

func stateKeys(t *testing.T, s *badgerstore.Store, id string) int {
	t.Helper()
	n, err := badgerstore.StateKeys(s, id)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// The largest state a session may keep fits, although it is 64 times one
// Badger value of this profile and far more than one transaction.
func TestLargestProviderStateFits(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	s := openStore(t, t.TempDir())
	sess := leasestoretest.Live(t, ctx, s, "s")
	block := make([]byte, 4093) // not a divisor of the chunk size
	for i := range block {
		block[i] = byte(i * 31)
	}
	data := bytes.Repeat(block, leasestore.MaxProviderStateBytes/len(block))
	data = append(data, block[:leasestore.MaxProviderStateBytes-len(data)]...)
	other := leasestoretest.Live(t, ctx, s, "other")
	put := make(chan error, 1)
	go func() {
		put <- s.PutProviderState(ctx, "s", sess.Lease.Fence, leasestore.ProviderState{Handle: "h", Data: data})
	}()
	// Once the put is under way, another session's append does not wait
	// for all of it (it is sent a transaction's worth at a time): it
	// lands while most chunks are still to be written.
	for stateKeys(t, s, "s") == 0 {
		select {
		case err := <-put:
			t.Fatalf("the put ended (%v) before any chunk of it was seen", err)
		case <-time.After(time.Millisecond):
		}
	}
	if _, err := s.Append(ctx, "other", other.Lease.Fence, leasestore.EntryInput{Kind: leasestore.KindUpdate}); err != nil {
		t.Fatal(err)
	}
	if n, all := stateKeys(t, s, "s"), leasestore.MaxProviderStateBytes/badgerstore.StateChunkSize; n > all/2 {
		t.Errorf("an append queued behind the first chunks of a put landed only once %d provider state keys were written (the put has %d chunks)", n, all)
	}
	if err := <-put; err != nil {
		t.Fatal(err)
	}
	got, err := s.GetProviderState(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Data, data) || got.ExportedAt.IsZero() {
		t.Fatalf("read back %d bytes (exported %v), stored %d", len(got.Data), got.ExportedAt, len(data))
	}
	if n, want := stateKeys(t, s, "s"), 1+leasestore.MaxProviderStateBytes/badgerstore.StateChunkSize; n != want {
		t.Errorf("%d provider state keys, want %d (a description and its chunks)", n, want)
	}
}

// Chunks that no description names (a put cut short) are swept by the
// next put, and a replaced state leaves none of its chunks behind.
func TestStrayChunksAreSwept(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	s := openStore(t, t.TempDir())
	sess := leasestoretest.Live(t, ctx, s, "s")
	put := func(n int) {
		t.Helper()
		if err := s.PutProviderState(ctx, "s", sess.Lease.Fence, leasestore.ProviderState{Handle: "h", Data: make([]byte, n)}); err != nil {
			t.Fatal(err)
		}
	}
	put(3*badgerstore.StateChunkSize + 1)
	if n := stateKeys(t, s, "s"); n != 5 {
		t.Fatalf("%d keys for a state of four chunks, want 5", n)
	}
	for range 3 {
		if err := badgerstore.PutStrayChunk(ctx, s, "s"); err != nil {
			t.Fatal(err)
		}
	}
	put(badgerstore.StateChunkSize)
	if n := stateKeys(t, s, "s"); n != 2 {
		t.Errorf("%d keys after a put over a larger state and stray chunks, want 2", n)
	}
	// A Delete removes strays too.
	if err := badgerstore.PutStrayChunk(ctx, s, "s"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(ctx, "s", leasestore.Release{Fence: sess.Lease.Fence}); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "s", sess.Lease.Fence+1); err != nil {
		t.Fatal(err)
	}
	if n := stateKeys(t, s, "s"); n != 0 {
		t.Errorf("%d provider state keys after Delete", n)
	}
}

// Provider state is not in the backup: a store restored from it has none,
// so it cannot bring back the state of a session deleted before the loss,
// and the sessions themselves come back.
func TestRestoreBringsBackNoProviderState(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := testCtx(t)
	s, err := badgerstore.Open(ctx, dir, badgerstore.Options{Logger: logtest.New(t), BackupDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"kept", "gone"} {
		sess := leasestoretest.Live(t, ctx, s, id)
		if err := s.PutProviderState(ctx, id, sess.Lease.Fence, leasestore.ProviderState{Handle: "h", Data: []byte(id)}); err != nil {
			t.Fatal(err)
		}
		if id == "gone" {
			if _, err := s.Apply(ctx, id, leasestore.Release{Fence: sess.Lease.Fence}); err != nil {
				t.Fatal(err)
			}
			if err := s.Delete(ctx, id, sess.Lease.Fence+1); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitBackedUp(t, s)
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "store")); err != nil {
		t.Fatal(err)
	}
	s2 := openStore(t, dir)
	if rec := s2.Recovery(); rec == nil || rec.Sessions != 1 {
		t.Fatalf("recovery %+v, want one session restored", rec)
	}
	for _, id := range []string{"kept", "gone"} {
		if _, err := s2.GetProviderState(ctx, id); !errors.Is(err, leasestore.ErrNotFound) {
			t.Errorf("provider state of %q after the restore: %v, want ErrNotFound", id, err)
		}
	}
	if _, err := s2.Get(ctx, "gone"); !errors.Is(err, leasestore.ErrNotFound) {
		t.Errorf("deleted session after the restore: %v", err)
	}
	if _, err := s2.Get(ctx, "kept"); err != nil {
		t.Errorf("kept session after the restore: %v", err)
	}
}
