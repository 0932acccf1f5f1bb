package leasestore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// RetryableCloser is a handle whose Close may fail and be retried: a close
// that failed is not final, a close that succeeded is. Implementations must be
// comparable (typically a pointer): the registry keeps each handle once.
type RetryableCloser interface {
	Close(ctx context.Context) error
	// Name identifies the handle in reports (a session id or a directory).
	Name() string
}

// CloseRetries keeps every handle whose close failed, so that the next stop
// retries it instead of forgetting it. Dropping a failed handle on the floor
// leaves its resources held with nothing left that can release them.
//
// The zero value is ready to use. It is safe for concurrent use.
type CloseRetries struct {
	mu      sync.Mutex
	pending []RetryableCloser // each handle at most once, oldest first
}

// CloseOrRetain closes c. If the close fails, c is kept for RetryAll and the
// error is returned; if it succeeds, c is forgotten.
func (r *CloseRetries) CloseOrRetain(ctx context.Context, c RetryableCloser) error {
	err := c.Close(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	i := slices.Index(r.pending, c)
	switch {
	case err != nil && i < 0:
		r.pending = append(r.pending, c)
	case err == nil && i >= 0:
		r.pending = slices.Delete(r.pending, i, i+1)
	}
	if err != nil {
		return fmt.Errorf("close %s: %w", c.Name(), err)
	}
	return nil
}

// RetryAll retries every retained close. Handles that close are forgotten;
// the others stay retained and their errors are returned joined.
func (r *CloseRetries) RetryAll(ctx context.Context) error {
	r.mu.Lock()
	todo := slices.Clone(r.pending)
	r.mu.Unlock()
	var errs []error
	for _, c := range todo {
		if err := r.CloseOrRetain(ctx, c); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Pending returns the names of the handles whose close has not succeeded
// yet, oldest first.
func (r *CloseRetries) Pending() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	names := make([]string, len(r.pending))
	for i, c := range r.pending {
		names[i] = c.Name()
	}
	return names
}
