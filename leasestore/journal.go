package leasestore

import (
	"context"
	"fmt"
	"strconv"
	"sync"
)

// Journal is one writer's handle on a session journal, from
// Store.OpenJournal: it appends at the fence the writer holds, and its Close
// waits for the appends it admitted. Close is retryable: a Close whose
// context ends before those appends are durable fails and may be called
// again; once a Close succeeds it is final, and Append returns ErrClosed. A
// Journal is a RetryableCloser, so a failed Close can be kept in
// CloseRetries.
type Journal interface {
	// SessionID returns the session the handle writes to.
	SessionID() string
	// Fence returns the fence the handle writes at.
	Fence() uint64
	// Name identifies the handle in close-retry reports.
	Name() string
	// Append appends entries at the handle's fence (see JournalStore.Append).
	Append(ctx context.Context, entries ...EntryInput) ([]Entry, error)
	// Close stops admitting appends and waits until every admitted one has
	// returned, or until ctx ends (then it fails and may be retried).
	Close(ctx context.Context) error
}

// NewJournal returns a Journal that appends to session id at fence through
// store, without checking that the fence is current (Append checks it each
// time). A backend's OpenJournal builds its handles on it.
func NewJournal(store JournalStore, id string, fence uint64) Journal {
	return &journal{store: store, id: id, fence: fence}
}

type journal struct {
	store JournalStore
	id    string
	fence uint64

	mu       sync.Mutex
	closing  bool          // no new appends are admitted
	closed   bool          // a Close succeeded
	inflight int           // admitted appends not yet returned
	idle     chan struct{} // closed when inflight drops to 0 while closing
}

func (j *journal) SessionID() string { return j.id }

func (j *journal) Fence() uint64 { return j.fence }

func (j *journal) Name() string { return "journal " + strconv.Quote(j.id) }

func (j *journal) Append(ctx context.Context, entries ...EntryInput) ([]Entry, error) {
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

func (j *journal) done() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.inflight--
	if j.inflight == 0 && j.idle != nil {
		close(j.idle)
		j.idle = nil
	}
}

func (j *journal) Close(ctx context.Context) error {
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
	j.closed = true
	j.mu.Unlock()
	return nil
}
