package leasestore

import (
	"context"
	"fmt"
	"sync"
)

// JournalHandles is a store's registry of the journal handles its
// OpenJournal gave out and nobody closed yet, so that the store's Close
// closes them (through CloseRetries, keeping those that fail for the next
// Close). A backend refuses new handles once its Close is under way, under
// the same lock it registers them with, so no handle escapes a Close.
//
// The zero value is ready to use. It is safe for concurrent use.
type JournalHandles struct {
	mu   sync.Mutex
	open map[*trackedJournal]struct{}
}

// Track registers j until its Close succeeds and returns the handle to
// give out.
func (r *JournalHandles) Track(j Journal) Journal {
	t := &trackedJournal{Journal: j, reg: r}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.open == nil {
		r.open = map[*trackedJournal]struct{}{}
	}
	r.open[t] = struct{}{}
	return t
}

// CloseAll closes every registered handle through retries, and retries
// those retained before. It fails, naming the handles still open, when one
// would not close: the store stays usable and its next Close retries.
func (r *JournalHandles) CloseAll(ctx context.Context, retries *CloseRetries) error {
	r.mu.Lock()
	handles := make([]*trackedJournal, 0, len(r.open))
	for t := range r.open {
		handles = append(handles, t)
	}
	r.mu.Unlock()
	for _, t := range handles {
		_ = retries.CloseOrRetain(ctx, t) // a failure stays retained and is retried below
	}
	if err := retries.RetryAll(ctx); err != nil {
		return fmt.Errorf("close lease store: journal handles still open %q (call Close again to retry): %w",
			retries.Pending(), err)
	}
	return nil
}

// trackedJournal is a handle JournalHandles keeps until its Close succeeds.
type trackedJournal struct {
	Journal
	reg *JournalHandles
}

func (t *trackedJournal) Close(ctx context.Context) error {
	if err := t.Journal.Close(ctx); err != nil {
		return err
	}
	t.reg.mu.Lock()
	delete(t.reg.open, t)
	t.reg.mu.Unlock()
	return nil
}
