package leasestore

import "context"

// SessionStore keeps session records and moves their leases. Every method
// is atomic: a transition reads the record it writes inside one transaction
// and journals the move in that same transaction.
type SessionStore interface {
	// Create stores a new session record with a released lease at fence 0.
	// An empty spec.ID is replaced by a generated UUIDv7. ErrExists when the
	// id is taken.
	Create(ctx context.Context, spec SessionSpec) (Session, error)
	// Get returns one session, or ErrNotFound.
	Get(ctx context.Context, id string) (Session, error)
	// List returns every session, ordered by the store's key order.
	List(ctx context.Context) ([]Session, error)
	// Apply runs one lease transition and returns the session as written.
	Apply(ctx context.Context, id string, t Transition) (Session, error)
	// MarkAllUnreconciled flags every lease as awaiting a restart decision
	// and returns how many sessions it flagged. A host calls it right after
	// opening the store, before it admits any writer.
	MarkAllUnreconciled(ctx context.Context) (int, error)
	// Delete removes a released, decided session and its journal. fence must
	// be current. A backend that needs several steps marks the session
	// Deleting first: from then on transitions and appends are refused
	// (ErrNotFound) and only a Delete at the same fence is accepted, which
	// finishes the job even after a restart flagged the session
	// unreconciled.
	Delete(ctx context.Context, id string, fence uint64) error
}

// CreateApplier is an optional interface of a SessionStore: it creates a
// session and applies a first transition to it (typically Reserve) in one
// atomic, durable step. If the transition is refused, nothing is created.
// BadgerStore has it, and the host creates and reserves a new session with
// it in one commit; a backend without it offers the same through Create
// and then Apply, at the cost of a second commit.
type CreateApplier interface {
	CreateAndApply(ctx context.Context, spec SessionSpec, t Transition) (Session, error)
}

// JournalStore keeps each session's append-only journal.
type JournalStore interface {
	// Append adds entries for the writer holding fence (see CheckAppend)
	// and returns them numbered and stamped. It returns only once they are
	// durable; concurrent appends are committed together.
	Append(ctx context.Context, id string, fence uint64, entries ...EntryInput) ([]Entry, error)
	// Replay calls fn for every entry with Seq >= from, in order, that
	// exists when Replay starts. from 0 and 1 both mean "from the start".
	Replay(ctx context.Context, id string, from uint64, fn func(Entry) error) error
	// Tail replays from `from` and then follows new entries until ctx ends
	// (ctx.Err()), fn fails (its error), the session is deleted
	// (ErrNotFound, also when a session of the same id was created again
	// meanwhile) or the store closes (ErrClosed). No entry is skipped or
	// delivered twice.
	Tail(ctx context.Context, id string, from uint64, fn func(Entry) error) error
	// LastSeq returns the newest entry's seq, 0 for an empty journal.
	LastSeq(ctx context.Context, id string) (uint64, error)
}

// Store is the durable model of sessions, leases and journals. The Badger
// store is the embedded implementation; any other backend (a distributed
// store, for hosts that outgrow one machine) must pass the conformance suite
// in package leasestoretest.
type Store interface {
	SessionStore
	JournalStore
	// Close releases the store. It first closes every journal handle it
	// handed out and retries the closes that failed before; if any still
	// fails, Close returns that error, keeps the store open and usable
	// (writes included), and the next Close tries again. A Close that
	// succeeded is final. Close is safe to call concurrently: one attempt
	// runs at a time, and a caller that waited for a successful one returns
	// nil. If ctx ends while the backend is still shutting down (Badger
	// retries a memtable flush it cannot write forever), Close returns an
	// error then; the store is closed for this process, and what it
	// acknowledged is durable.
	Close(ctx context.Context) error
}
