package host

import (
	"context"
	"errors"
	"sync"

	"github.com/agenthost/agenthost/leasestore"
)

// Runtime owns at most one Host for an application: Host opens it on first
// use (single-flight: concurrent callers share one open, and a failed open
// leaves nothing behind so the next call tries again), and Stop closes it.
// A Stop whose teardown fails keeps the host, so the next Stop retries the
// very handles that failed instead of forgetting them.
//
// The zero value is not usable; set Config and OpenStore.
type Runtime struct {
	Config Config
	// OpenStore opens the lease store for each attempt to open the host,
	// which takes it over as Config.Store (a failed Open closes it, so a
	// retry needs a store of its own). Nil: Config.Store is used as it is,
	// which serves one attempt.
	OpenStore func(ctx context.Context) (leasestore.Store, error)

	mu      sync.Mutex
	host    *Host
	opening *openCall
	pending *Host // a host whose Close failed; Stop retries it
}

type openCall struct {
	done chan struct{}
	host *Host
	err  error
}

// Host returns the running host, opening it if needed.
func (r *Runtime) Host(ctx context.Context) (*Host, error) {
	r.mu.Lock()
	if r.host != nil {
		h := r.host
		r.mu.Unlock()
		return h, nil
	}
	if r.pending != nil {
		// Its store (and state-directory lock) is still held: opening
		// again would only fail on our own lock.
		r.mu.Unlock()
		return nil, errors.New("the previous Stop failed and still holds the state directory: call Stop again to retry it")
	}
	call := r.opening
	if call == nil {
		call = &openCall{done: make(chan struct{})}
		r.opening = call
		go func() {
			h, err := r.open(context.WithoutCancel(ctx))
			r.mu.Lock()
			call.host, call.err = h, err
			if err == nil {
				r.host = h
			}
			r.opening = nil
			r.mu.Unlock()
			close(call.done)
		}()
	}
	r.mu.Unlock()
	select {
	case <-call.done:
		return call.host, call.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (r *Runtime) open(ctx context.Context) (*Host, error) {
	cfg := r.Config
	if r.OpenStore != nil {
		store, err := r.OpenStore(ctx)
		if err != nil {
			return nil, err
		}
		cfg.Store = store
	}
	return Open(ctx, cfg)
}

// Stop closes the host (its plugins keep running, see Host.Close) and any
// host whose earlier Stop failed. If closing fails, the host is kept and the
// error returned; the next Stop retries.
func (r *Runtime) Stop(ctx context.Context) error {
	r.mu.Lock()
	if call := r.opening; call != nil {
		r.mu.Unlock()
		<-call.done
		r.mu.Lock()
	}
	h := r.host
	if h == nil {
		h = r.pending
	}
	r.host, r.pending = nil, nil
	r.mu.Unlock()
	if h == nil {
		return nil
	}
	// Host.Close is itself retryable: a second call retries only what
	// failed.
	if err := h.Close(ctx); err != nil {
		r.mu.Lock()
		r.pending = h
		r.mu.Unlock()
		return err
	}
	return nil
}
