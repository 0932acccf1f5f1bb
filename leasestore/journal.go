package leasestore

import (
	"context"
	"fmt"
	"strconv"
	"sync"
)

// Journal is one writer's handle on a session journal: it appends at the
// fence the writer holds, and its Close waits for the appends it admitted.
// Close is retryable: a Close whose context ends before those appends are
// durable fails and may be called again; once a Close succeeds it is final.
type Journal struct {
	store JournalStore
	id    string
	fence uint64
	// onClosed runs once, after the first successful Close.
	onClosed func(*Journal)

	mu       sync.Mutex
	closing  bool          // no new appends are admitted
	closed   bool          // a Close succeeded
	inflight int           // admitted appends not yet returned
	idle     chan struct{} // closed when inflight drops to 0 while closing
}

// NewJournal returns a handle that appends to session id at fence.
func NewJournal(store JournalStore, id string, fence uint64) *Journal {
	return &Journal{store: store, id: id, fence: fence}
}

// SessionID returns the session the handle writes to.
func (j *Journal) SessionID() string { return j.id }

// Fence returns the fence the handle writes at.
func (j *Journal) Fence() uint64 { return j.fence }

// Name identifies the handle in close-retry reports.
func (j *Journal) Name() string { return "journal " + strconv.Quote(j.id) }

// Append appends entries at the handle's fence. After Close has been called
// it returns ErrClosed.
func (j *Journal) Append(ctx context.Context, entries ...EntryInput) ([]Entry, error) {
	j.mu.Lock()
	if j.closing {
		j.mu.Unlock()
		return nil, fmt.Errorf("append to %s: %w", j.Name(), ErrClosed)
	}
	j.inflight++
	j.mu.Unlock()
	defer j.done()
	return j.store.Append(ctx, j.id, j.fence, entries...)
}

func (j *Journal) done() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.inflight--
	if j.inflight == 0 && j.idle != nil {
		close(j.idle)
		j.idle = nil
	}
}

// Close stops admitting appends and waits until every admitted one has
// returned, or until ctx ends (then it fails and may be retried).
func (j *Journal) Close(ctx context.Context) error {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return nil
	}
	j.closing = true
	var wait chan struct{}
	if j.inflight > 0 {
		if j.idle == nil {
			j.idle = make(chan struct{})
		}
		wait = j.idle
	}
	j.mu.Unlock()
	if wait != nil {
		select {
		case <-wait:
		case <-ctx.Done():
			return fmt.Errorf("close %s: appends still in flight: %w", j.Name(), ctx.Err())
		}
	}
	j.mu.Lock()
	first := !j.closed
	j.closed = true
	j.mu.Unlock()
	if first && j.onClosed != nil {
		j.onClosed(j)
	}
	return nil
}
