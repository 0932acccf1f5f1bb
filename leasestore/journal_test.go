package leasestore_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agenthost/agenthost/leasestore"
)

// A handle's close waits for the appends it admitted; a close whose context
// ends first fails and can be retried. Afterwards appends are refused.
func TestJournalCloseWaitsForInflightAppends(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	gate := &gatedJournal{release: make(chan struct{}), entered: make(chan struct{})}
	j := leasestore.NewJournal(gate, "s", 4)
	if j.SessionID() != "s" || j.Fence() != 4 || j.Name() != `journal "s"` {
		t.Fatalf("handle names session %q at fence %d as %q", j.SessionID(), j.Fence(), j.Name())
	}
	appended := make(chan error, 1)
	go func() {
		_, err := j.Append(ctx, leasestore.EntryInput{Kind: leasestore.KindUpdate, Payload: []byte("late")})
		appended <- err
	}()
	<-gate.entered
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancelShort()
	if err := j.Close(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("close with an append in flight: %v, want a deadline error", err)
	}
	close(gate.release)
	if err := j.Close(ctx); err != nil {
		t.Fatalf("retried close: %v", err)
	}
	// The admitted append is in the store by the time Close returns (its
	// caller may hear of it a moment later).
	if got := gate.payloads(); !slices.Equal(got, []string{"late"}) {
		t.Fatalf("close returned before the admitted append finished: the store holds %q", got)
	}
	if err := <-appended; err != nil {
		t.Fatalf("the in-flight append failed: %v", err)
	}
	if err := j.Close(ctx); err != nil {
		t.Errorf("a second close after success: %v", err)
	}
	if _, err := j.Append(ctx, leasestore.EntryInput{Kind: leasestore.KindUpdate}); !errors.Is(err, leasestore.ErrClosed) {
		t.Errorf("append after close: %v", err)
	}
}

// gatedJournal is a JournalStore whose Append waits until released, to keep
// one append in flight, and then keeps the payloads at the fence it was
// given. Its other methods are not used.
type gatedJournal struct {
	leasestore.JournalStore
	entered chan struct{}
	release chan struct{}

	mu   sync.Mutex
	kept []string
}

func (g *gatedJournal) Append(_ context.Context, id string, fence uint64, in ...leasestore.EntryInput) ([]leasestore.Entry, error) {
	close(g.entered)
	<-g.release
	if id != "s" || fence != 4 {
		return nil, errors.New("append to the wrong session or fence")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]leasestore.Entry, len(in))
	for i, e := range in {
		g.kept = append(g.kept, string(e.Payload))
		out[i] = leasestore.Entry{Seq: uint64(len(g.kept)), Fence: fence, Kind: e.Kind, Payload: e.Payload}
	}
	return out, nil
}

func (g *gatedJournal) payloads() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.kept)
}
