package badgerstore_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/agenthost/agenthost/leasestore"
	"github.com/agenthost/agenthost/leasestore/badgerstore"
	"github.com/agenthost/agenthost/leasestore/leasestoretest"
)

func benchStore(b *testing.B) *badgerstore.Store {
	b.Helper()
	s, err := badgerstore.Open(context.Background(), b.TempDir(), badgerstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

var payload200 = []byte(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"` +
	"0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123" + `"}}`)

// BenchmarkAppend measures one durable append at a time from one session:
// every append pays its own sync.
func BenchmarkAppend(b *testing.B) {
	ctx := context.Background()
	s := benchStore(b)
	fence := leasestoretest.Live(b, ctx, s, "s").Lease.Fence
	b.SetBytes(int64(len(payload200)))
	for b.Loop() {
		if _, err := s.Append(ctx, "s", fence, leasestore.EntryInput{Kind: leasestore.KindUpdate, Payload: payload200}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAppendConcurrent8 measures durable appends from 8 sessions at
// once; group commit lets them share syncs. Compare ns/op with
// BenchmarkRawWriteFsync.
func BenchmarkAppendConcurrent8(b *testing.B) {
	ctx := context.Background()
	s := benchStore(b)
	const sessions = 8
	fences := make([]uint64, sessions)
	for i := range sessions {
		fences[i] = leasestoretest.Live(b, ctx, s, fmt.Sprint(i)).Lease.Fence
	}
	b.SetBytes(int64(len(payload200)))
	b.ResetTimer()
	var wg sync.WaitGroup
	per := b.N/sessions + 1
	for i := range sessions {
		wg.Go(func() {
			for range per {
				if _, err := s.Append(ctx, fmt.Sprint(i), fences[i], leasestore.EntryInput{Kind: leasestore.KindUpdate, Payload: payload200}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// BenchmarkRawWriteFsync is the physical baseline: one write and one fsync
// per record to a plain file.
func BenchmarkRawWriteFsync(b *testing.B) {
	f, err := os.Create(filepath.Join(b.TempDir(), "raw"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	b.SetBytes(int64(len(payload200)))
	for b.Loop() {
		if _, err := f.Write(payload200); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLeaseCycle measures a whole ownership generation as the host
// drives it: reserve, commit owner, prove, release — four durable
// transitions.
func BenchmarkLeaseCycle(b *testing.B) {
	ctx := context.Background()
	s := benchStore(b)
	sess, err := s.Create(ctx, leasestore.SessionSpec{ID: "s", Agent: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	fence := sess.Lease.Fence
	for b.Loop() {
		r, err := s.Apply(ctx, "s", leasestore.Reserve{ExpectedFence: fence})
		if err != nil {
			b.Fatal(err)
		}
		f := r.Lease.Fence
		steps := []leasestore.Transition{
			leasestore.CommitOwner{Fence: f, Owner: leasestoretest.Owner(1, r.Lease.ReservedSpawnToken)},
			leasestore.ProveOwner{Fence: f, Handle: "h", Origin: leasestore.HandleResumed},
			leasestore.Release{Fence: f},
		}
		for _, tr := range steps {
			if _, err := s.Apply(ctx, "s", tr); err != nil {
				b.Fatal(err)
			}
		}
		fence = f + 1
	}
}

// BenchmarkOpen measures opening (and closing) an existing store with a
// few sessions, the cost a host pays at every start.
func BenchmarkOpen(b *testing.B) {
	ctx := context.Background()
	dir := b.TempDir()
	s, err := badgerstore.Open(ctx, dir, badgerstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	for i := range 50 {
		leasestoretest.Live(b, ctx, s, fmt.Sprint(i))
	}
	if err := s.Close(ctx); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		s, err := badgerstore.Open(ctx, dir, badgerstore.Options{})
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Close(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
