package host

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/agenthost/agenthost/leasestore"
)

// leaseBatcher coalesces the lease moves of one reconcile pass into
// Store.ApplyBatch calls, so that the readoptions running at once share a
// synced commit instead of paying one each. It is a group commit, not a
// timer: a move that finds no batch in flight goes to the store at once
// (with any others already waiting), and the moves that arrive while a
// batch commits wait for it and go together in the next. So no move waits
// longer than the commit before it, and a pass of one session costs what
// an Apply does.
//
// The batcher owns one goroutine; the reconcile pass that starts it ends
// it (close) once every decision returned. A move offered after that, or
// while it closes, is applied on its own (Store.Apply): the batcher is an
// optimisation, never a gate.
//
// Each move is judged on its own by the store (see leasestore's
// "Batches"): a refused move fails only its own caller. A move handed to
// the goroutine is always answered, whatever its caller's context does
// meanwhile, so a caller never mistakes a move that committed for one
// that did not; its context only bounds the wait to hand it over.
type leaseBatcher struct {
	store leasestore.Store
	// ctx is the pass's: the store calls run under it.
	ctx context.Context
	// moves is unbuffered: a move is either taken by the goroutine, which
	// then answers it, or not at all (see close).
	moves chan *batchedMove
	stop  chan struct{}
	done  chan struct{}
	// waiting counts the moves offered and not yet taken: what the next
	// batch gathers. Tests wait on it to hold a batch open.
	waiting atomic.Int64
}

type batchedMove struct {
	move leasestore.Move
	res  leasestore.MoveResult
	done chan struct{}
}

// startLeaseBatcher starts a batcher whose store calls run under ctx.
func startLeaseBatcher(ctx context.Context, store leasestore.Store) *leaseBatcher {
	b := &leaseBatcher{
		store: store, ctx: ctx,
		moves: make(chan *batchedMove),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	go b.run()
	return b
}

// apply runs t on session id in the next batch and returns its result, as
// Store.Apply would.
func (b *leaseBatcher) apply(ctx context.Context, id string, t leasestore.Transition) (leasestore.Session, error) {
	m := &batchedMove{move: leasestore.Move{ID: id, Transition: t}, done: make(chan struct{})}
	b.waiting.Add(1) // the goroutine takes it off when it takes the move
	select {
	case b.moves <- m:
	case <-b.stop:
		b.waiting.Add(-1)
		return b.store.Apply(ctx, id, t)
	case <-ctx.Done():
		b.waiting.Add(-1)
		return leasestore.Session{}, ctx.Err()
	}
	<-m.done
	return m.res.Session, m.res.Err
}

func (b *leaseBatcher) run() {
	defer close(b.done)
	for {
		var first *batchedMove
		select {
		case first = <-b.moves:
			b.waiting.Add(-1)
		case <-b.stop:
			return
		}
		batch := []*batchedMove{first}
	gather:
		for {
			select {
			case m := <-b.moves:
				b.waiting.Add(-1)
				batch = append(batch, m)
			default:
				break gather
			}
		}
		moves := make([]leasestore.Move, len(batch))
		for i, m := range batch {
			moves[i] = m.move
		}
		res := b.store.ApplyBatch(b.ctx, moves)
		for i, m := range batch {
			if i < len(res) {
				m.res = res[i]
			} else {
				// A store that answered fewer moves than it was given says
				// nothing of the rest: they did not move, as far as anyone
				// can tell, and a decision treats them as failed.
				m.res.Err = fmt.Errorf("%s session %q: the store answered %d of a batch of %d moves", m.move.Transition.Name(), m.move.ID, len(res), len(moves))
			}
			close(m.done)
		}
	}
}

// close ends the goroutine after the batch in flight, if any, was
// answered. Moves offered from now on are applied on their own.
func (b *leaseBatcher) close() {
	close(b.stop)
	<-b.done
}
