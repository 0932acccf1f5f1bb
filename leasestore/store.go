package leasestore

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// SessionStore keeps session records and moves their leases. Every method
// is atomic: a transition reads the record it writes inside one transaction
// and journals the move in that same transaction.
type SessionStore interface {
	// Create stores a new session record with a released lease at fence 0
	// (see SessionSpec.Prepare and NewSession). An empty spec.ID is
	// replaced by a generated UUIDv7. ErrExists when the id is taken.
	Create(ctx context.Context, spec SessionSpec) (Session, error)
	// CreateAndApply creates a session and applies a first transition to
	// it (typically Reserve) in one atomic, durable step: if t is refused,
	// nothing is created. A nil t makes it Create. The host creates and
	// reserves every new session with it, so a new session's first
	// reservation costs one commit.
	CreateAndApply(ctx context.Context, spec SessionSpec, t Transition) (Session, error)
	// Get returns one session, or ErrNotFound.
	Get(ctx context.Context, id string) (Session, error)
	// List returns every session, ordered by the store's key order. A
	// record that cannot be decoded does not hide the others: List returns
	// every decodable session and, beside them, an error matching
	// ErrDamaged that names the unreadable ones.
	List(ctx context.Context) ([]Session, error)
	// Apply runs one lease transition and returns the session as written.
	Apply(ctx context.Context, id string, t Transition) (Session, error)
	// ApplyBatch runs several lease transitions, usually of different
	// sessions, and makes the accepted ones durable together: one commit
	// (one sync) for the batch where Apply would cost one per move. Each
	// move is judged on its own, in order, exactly as Apply would judge it
	// (a later move of the same session sees the earlier one's result);
	// a refused move leaves no trace and does not refuse the others. The
	// result has one slot per move, in the order of moves: the session as
	// written, or the move's own error (a nil Transition is
	// ErrInvalidArgument). See the package doc's "Batches" for atomicity
	// and what a failed commit reports.
	ApplyBatch(ctx context.Context, moves []Move) []MoveResult
	// MarkAllUnreconciled flags every lease as awaiting a restart decision
	// and returns how many sessions it flagged. A host calls it right after
	// opening the store, before it admits any writer. A session that
	// cannot be flagged is named in the error and does not keep the others
	// from being flagged.
	MarkAllUnreconciled(ctx context.Context) (int, error)
	// MarkHostUnreconciled is MarkAllUnreconciled for one host among
	// several sharing the store: it flags only the leases hostID must
	// decide (Lease.ReconciledBy) — held leases whose owner runs on
	// hostID, ownerless reservations hostID made (ReservedBy), and held
	// leases that name no host at all (records from before hosts were
	// recorded: fail closed). Released leases and the leases of other
	// hosts are left as they are, so their writers go on appending. A
	// host in cluster mode calls it right after opening the store; a
	// single machine keeps MarkAllUnreconciled. ErrInvalidArgument for an
	// empty hostID.
	MarkHostUnreconciled(ctx context.Context, hostID string) (int, error)
	// Delete removes a released, decided session, its journal and its
	// provider state (see CheckDelete). fence must be current. A backend that needs several
	// steps marks the session Deleting first: from then on transitions and
	// appends are refused (ErrNotFound) and only a Delete at the same fence
	// is accepted, which finishes the job even after a restart flagged the
	// session unreconciled.
	Delete(ctx context.Context, id string, fence uint64) error
}

// Move is one lease transition of a batch (SessionStore.ApplyBatch): what
// Apply(ctx, ID, Transition) would run.
type Move struct {
	ID         string
	Transition Transition
}

// MoveResult is what became of one Move: the session as written when Err
// is nil, or why the move was refused or did not commit.
type MoveResult struct {
	Session Session
	Err     error
}

// JournalStore keeps each session's append-only journal.
type JournalStore interface {
	// Append adds entries for the writer holding fence (see CheckAppend and
	// EntryInput.Validate) and returns them numbered and stamped. It
	// returns only once they are durable.
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

// Store is the durable model of sessions, leases and journals, and all the
// host knows of its storage. Package leasestore/badgerstore is the embedded
// implementation; any other backend (a distributed store, for hosts that
// outgrow one machine) must pass the conformance suite in package
// leasestoretest.
type Store interface {
	SessionStore
	JournalStore
	ProviderStates
	// OpenJournal returns a writer handle on a session's journal at fence,
	// after checking that a writer holding fence may append (CheckAppend).
	// The store closes every handle it handed out when it closes.
	OpenJournal(ctx context.Context, id string, fence uint64) (Journal, error)
	// Recovery reports the last restore of the store from a backup that no
	// successful Close has followed yet, or nil. A backend that never
	// restores returns nil.
	Recovery() *Recovery
	// CloseRetries is the registry of handles whose close failed; Close
	// retries them, and a host's teardown may add its own.
	CloseRetries() *CloseRetries
	// Close releases the store. It first closes every journal handle it
	// handed out and retries the closes that failed before; if any still
	// fails, Close returns that error, keeps the store open and usable
	// (writes included), and the next Close tries again. A Close that
	// succeeded is final. Close is safe to call concurrently: one attempt
	// runs at a time, and a caller that waited for a successful one returns
	// nil. If ctx ends while the backend is still shutting down, Close
	// returns an error then; the store is closed for this process, and what
	// it acknowledged is durable.
	Close(ctx context.Context) error
}

// RestoredSeqGap is how far a restore from a backup moves every journal's
// position past the last seq the backup knew (and a journal recovery past
// the last seq its copy knew). The backup may be older than the last
// appends, so the lost store may have acknowledged any number of entries
// after it; continuing right after the backup's position would hand those
// seqs out again, to different entries. With the gap a client sees a
// jump, never a reuse, unless a session appended more than 2^32 entries
// between two backups. 2^32 also keeps seqs below 2^53, where JSON clients
// that read numbers as doubles lose precision, for two million restores.
const RestoredSeqGap = 1 << 32

// Recovery describes how the store recovered when it opened: a restore
// from backup, journals put back from a second copy, or both (see
// Store.Recovery).
type Recovery struct {
	// Reason says why the store was judged damaged.
	Reason string `json:"reason"`
	// DamagedDir is where the damaged store was moved; nothing in it was
	// deleted. Empty when there was nothing to move (the store was
	// missing).
	DamagedDir string `json:"damagedDir,omitempty"`
	// Sessions is how many session records the backup restored.
	Sessions int `json:"sessions"`
	// Entries is how many journal entries a restore took from the
	// backend's copy of the journals (the Badger backend's journal mirror).
	Entries int `json:"entries,omitempty"`
	// RestoredAt is when the restore ran.
	RestoredAt time.Time `json:"restoredAt"`
	// JournalsOnly says nothing was restored from a backup: the store
	// opened, but Journals were found shorter than their copy.
	JournalsOnly bool `json:"journalsOnly,omitempty"`
	// Journals are the journals the store found shorter than the copy it
	// keeps of them, and put back.
	Journals []JournalRecovery `json:"journals,omitempty"`
}

// JournalRecovery describes one journal that had lost entries it had
// acknowledged (the Badger backend: its memtable log lost after a crash),
// recovered from the backend's copy of the journal.
type JournalRecovery struct {
	Session string `json:"session"`
	// StoreSeq is the last seq the store still held.
	StoreSeq uint64 `json:"storeSeq"`
	// MirrorSeq is the last seq the copy held: every entry up to it is
	// back.
	MirrorSeq uint64 `json:"mirrorSeq"`
	// NextSeq is where numbering goes on: RestoredSeqGap past MirrorSeq
	// (the copy may lag the store by its sync interval after a power cut),
	// after a lifecycle entry "journal-recovered" that marks the gap.
	NextSeq uint64 `json:"nextSeq"`
}

func (j JournalRecovery) String() string {
	return fmt.Sprintf("the journal of %q ended at seq %d but its copy at %d: entries %d..%d were put back from the copy, "+
		"and numbering goes on at %d (any seq in between was lost)",
		j.Session, j.StoreSeq, j.MirrorSeq, j.StoreSeq+1, j.MirrorSeq, j.NextSeq)
}

func (r *Recovery) String() string {
	var journals []string
	for _, j := range r.Journals {
		journals = append(journals, j.String())
	}
	if r.JournalsOnly {
		return fmt.Sprintf("state store opened without journal entries it had acknowledged (%s); %s",
			r.Reason, strings.Join(journals, "; "))
	}
	kept := "there was no store directory to keep"
	if r.DamagedDir != "" {
		kept = "the damaged store is kept at " + r.DamagedDir
	}
	msg := fmt.Sprintf("state store was damaged (%s); restored %d session(s) from backup at %s "+
		"with %d journal entries from the journal copy (entries appended after the copy's last sync may be lost); "+
		"numbering goes on %d past the last sequence number the backup or the copy knew; %s",
		r.Reason, r.Sessions, r.RestoredAt.Format(time.RFC3339), r.Entries, RestoredSeqGap, kept)
	if len(journals) > 0 {
		msg += "; " + strings.Join(journals, "; ")
	}
	return msg
}
