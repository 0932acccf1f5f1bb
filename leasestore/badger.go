package leasestore

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"
)

// Options configure OpenBadger. The zero value works.
type Options struct {
	// Logger receives the store's logs, Badger's own included (Badger's
	// chatty info lines are demoted to debug). Default: no logging.
	Logger hclog.Logger
	// Now is the clock for entry times, evidence and record timestamps.
	// Default: time.Now.
	Now func() time.Time
	// NewToken mints spawn tokens. Default: 128 random bits from
	// crypto/rand, base32-encoded.
	NewToken func() (string, error)
	// OpenAttempts is how many consecutive opens of the store may die
	// (Badger panics inside its own goroutines on some damaged tables,
	// which no caller can recover) before the store is treated as damaged,
	// moved aside and restored from its backup. Default: 2.
	//
	// The guard counts every death during an open, whatever killed the
	// process; see ProbeOpen for telling a damaged store from a watchdog
	// or a power cut during a slow open. Deaths after OpenBadger returned
	// are not counted: the guard is about opening, not running.
	OpenAttempts int
	// ProbeOpen, when set, is asked before a store whose last OpenAttempts
	// opens died is moved aside: it must open storeDir in a short-lived
	// child process (one that may die instead of the host) and report
	// whether that worked. A nil error means the store opens: the deaths
	// had another cause, so the marker is cleared and the store is opened
	// normally. An error (the child failed or died) means the store is
	// damaged and is restored from the backup. If ctx ends first, OpenBadger
	// fails with ctx's error and decides nothing.
	//
	// The store cannot start a process of its own (it does not know the
	// binary), so a host sets ProbeOpen to re-execute itself in a probe
	// mode whose whole job is
	//
	//	if err := leasestore.ProbeStore(storeDir); err != nil { os.Exit(1) }
	//	os.Exit(0)
	//
	// Nil (the default) keeps the plain rule: OpenAttempts deaths restore.
	ProbeOpen func(ctx context.Context, storeDir string) error
	// BackupDelay is how long lease changes are coalesced before the backup
	// of session records is rewritten. Default: 200ms.
	BackupDelay time.Duration
	// CloseRetries keeps journal handles whose close failed until a later
	// Close succeeds in closing them. Default: a registry owned by the
	// store (see BadgerStore.CloseRetries).
	CloseRetries *CloseRetries
	// MinFreeSpace is how many bytes must stay free on the file system
	// holding the store for a journal append to be accepted; lease and
	// record changes may use half of it, so a lease can still be released
	// or handed over after the journals filled the disk. A refused write
	// fails with ErrNoSpace and nothing is written. Default: 64 MiB.
	// Negative: no check (the caller guarantees space some other way).
	//
	// The check is a necessity, not a courtesy: Badger writes its log
	// through a sparse memory map, and a write into a page the full disk
	// cannot back is a SIGBUS that kills the whole process, not an error
	// (seen on a small tmpfs with the check off; the fault suite fills one
	// with it on, internal/faults). The default covers one
	// memtable's log (16 MiB), the table its flush writes and compaction
	// output, with room to spare.
	MinFreeSpace int64

	// restoreHook, set only by tests, runs between the steps of a restore.
	restoreHook func(step string)
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.NewToken == nil {
		o.NewToken = func() (string, error) { return rand.Text(), nil }
	}
	if o.OpenAttempts <= 0 {
		o.OpenAttempts = 2
	}
	if o.BackupDelay <= 0 {
		o.BackupDelay = 200 * time.Millisecond
	}
	if o.CloseRetries == nil {
		o.CloseRetries = &CloseRetries{}
	}
	if o.MinFreeSpace == 0 {
		o.MinFreeSpace = 64 << 20
	}
	return o
}

// Group commit bounds: at most this many operations share one transaction.
// Badger's own size limit (15% of the memtable) splits a batch further when
// the entries are large.
const maxBatchOps = 256

// maxConflictRetries bounds how often a batch is re-run after Badger
// reports a conflict with a concurrent transaction.
const maxConflictRetries = 8

// replayChunk is how many entries a reader collects per read transaction;
// callbacks run outside the transaction so a slow reader never pins it.
const replayChunk = 256

// BadgerStore is the embedded Store: one Badger directory under the state
// directory, guarded by an exclusive lock file and a crash-loop marker, with
// a backup of the session records beside it.
//
// All writes go through one writer goroutine that commits whatever has
// queued up in a single synced transaction (group commit): a durable append
// costs one sync however many sessions are appending at once.
type BadgerStore struct {
	stateDir string
	opts     Options
	log      hclog.Logger
	db       *badger.DB
	lock     *dirLock
	recovery *Recovery

	ops        chan *op
	stopWriter chan struct{}
	writerDone chan struct{}

	backupKick  chan struct{}
	stopBackup  chan struct{}
	backupDone  chan struct{}
	backupMu    sync.Mutex    // serialises backup writes
	leaseGen    atomic.Uint64 // bumped by every committed batch that changed a record
	commits     atomic.Uint64 // committed transactions, for tests of group commit
	backedUpGen atomic.Uint64 // leaseGen the last backup captured

	// submitMu orders senders on ops against the writer's shutdown.
	submitMu      sync.RWMutex
	writerStopped bool

	// readMu keeps reads out of a closing database.
	readMu sync.RWMutex

	// closeSem admits one Close at a time (a channel, so that a waiting
	// Close can give up when its context ends).
	closeSem chan struct{}

	// testHookCommit replaces txn.Commit in tests that inject commit
	// failures. Set before the first write.
	testHookCommit func(*badger.Txn) error

	mu       sync.Mutex
	closing  bool                     // a Close is under way or succeeded: no new writes
	closed   bool                     // a Close succeeded
	failed   error                    // set by a commit that may or may not have landed: no more writes
	journals map[*Journal]struct{}    // handles from OpenJournal not yet closed
	watchers map[string]chan struct{} // closed when a session's journal or record changes
}

var (
	_ Store         = (*BadgerStore)(nil)
	_ CreateApplier = (*BadgerStore)(nil)
)

// Recovery describes a restore from backup. The report is kept in the
// state directory (store.recovered.json) from before the restored store is
// put in place until the next Close that succeeds, so a host that dies
// before it could tell anyone still reports the restore on its next start.
type Recovery struct {
	// Reason says why the store was judged damaged.
	Reason string `json:"reason"`
	// DamagedDir is where the damaged Badger directory was moved; nothing in
	// it was deleted. Empty when there was no directory to move (the store
	// was missing).
	DamagedDir string `json:"damagedDir,omitempty"`
	// Sessions is how many session records the backup restored.
	Sessions int `json:"sessions"`
	// RestoredAt is when the restore ran.
	RestoredAt time.Time `json:"restoredAt"`
}

func (r *Recovery) String() string {
	kept := "there was no store directory to keep"
	if r.DamagedDir != "" {
		kept = "the damaged store is kept at " + r.DamagedDir
	}
	return fmt.Sprintf("state store was damaged (%s); restored %d session(s) from backup at %s; "+
		"their journals restart empty (the backup holds no entries), numbered from %d past "+
		"the last sequence number the backup knew; %s",
		r.Reason, r.Sessions, r.RestoredAt.Format(time.RFC3339), restoredSeqGap, kept)
}

// OpenBadger opens (creating if needed) the lease store in stateDir, which
// must be an absolute path. It takes an exclusive lock on the directory; a
// second opener gets a *LockedError naming the holder's pid.
//
// If the previous opens died (see Options.OpenAttempts and ProbeOpen), or
// Badger reports damage it recognisably cannot open (a corrupt MANIFEST, a
// missing or unreadable table, a checksum mismatch), the damaged directory
// is moved aside and the session records are restored from the backup (see
// Recovery); every restored lease gets a fence floor above anything the lost
// commits could have granted, and is marked unreconciled. Without a usable
// backup OpenBadger refuses with ErrDamaged and says what to do. Any other
// open error (a lock held by another process, a store written by a newer
// Badger, a full disk) is returned with advice and nothing is moved.
func OpenBadger(ctx context.Context, stateDir string, opts Options) (*BadgerStore, error) {
	if !filepath.IsAbs(stateDir) {
		return nil, fmt.Errorf("%w: state directory must be an absolute path, got %q", ErrInvalidArgument, stateDir)
	}
	opts = opts.withDefaults()
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("create state directory: %w", err)
	}
	lock, err := lockStateDir(stateDir)
	if err != nil {
		return nil, err
	}
	s := &BadgerStore{
		stateDir:   stateDir,
		opts:       opts,
		log:        opts.Logger,
		lock:       lock,
		ops:        make(chan *op, maxBatchOps),
		stopWriter: make(chan struct{}),
		writerDone: make(chan struct{}),
		backupKick: make(chan struct{}, 1),
		stopBackup: make(chan struct{}),
		backupDone: make(chan struct{}),
		journals:   make(map[*Journal]struct{}),
		watchers:   make(map[string]chan struct{}),
		closeSem:   make(chan struct{}, 1),
	}
	if err := s.openDB(ctx); err != nil {
		_ = lock.release()
		return nil, err
	}
	go s.writeLoop()
	go s.backupLoop()
	return s, nil
}

// Recovery reports the last restore from backup, or nil. It is the report
// OpenBadger wrote when it restored the store, during this open or an
// earlier one that no successful Close has followed since.
func (s *BadgerStore) Recovery() *Recovery { return s.recovery }

// CloseRetries is the registry of journal handles whose close failed; Close
// retries them.
func (s *BadgerStore) CloseRetries() *CloseRetries { return s.opts.CloseRetries }

func (s *BadgerStore) now() time.Time { return s.opts.Now().UTC() }

// Create implements SessionStore.
func (s *BadgerStore) Create(ctx context.Context, spec SessionSpec) (Session, error) {
	return s.CreateAndApply(ctx, spec, nil)
}

// CreateAndApply implements CreateApplier: the session is created and t
// (when not nil) applied to it in one transaction, so a new session's
// first reservation costs one synced commit instead of two. If t is
// refused, nothing is created.
func (s *BadgerStore) CreateAndApply(ctx context.Context, spec SessionSpec, t Transition) (Session, error) {
	id := spec.ID
	if id == "" {
		u, err := uuid.NewV7()
		if err != nil {
			return Session{}, fmt.Errorf("generate session id: %w", err)
		}
		id = u.String()
	}
	if err := ValidateSessionID(id); err != nil {
		return Session{}, err
	}
	if spec.Agent == "" {
		return Session{}, fmt.Errorf("%w: a session needs an agent name", ErrInvalidArgument)
	}
	var out Session
	err := s.submit(ctx, "create", id, func(b *batch) error {
		if cur, err := b.session(id); err == nil {
			if cur.Deleting {
				return fmt.Errorf("create session %q: %w: a Delete of it did not finish; call Delete again first", id, ErrExists)
			}
			return fmt.Errorf("create session %q: %w", id, ErrExists)
		} else if !errors.Is(err, ErrNotFound) {
			return err
		}
		now := s.now()
		sess := Session{
			ID: id, Agent: spec.Agent, Workspace: spec.Workspace, Options: spec.Options,
			Lease:       Lease{Claim: ClaimReleased},
			Incarnation: rand.Text(),
			CreatedAt:   now, UpdatedAt: now,
		}
		if err := b.putSession(sess); err != nil {
			return err
		}
		if _, err := b.appendEntries(id, 0, now, *lifecycle(KindLifecycle, sess, LifecycleEvent{Event: "created"})); err != nil {
			return err
		}
		out = sess
		if t == nil {
			return nil
		}
		applied, err := s.applyIn(b, id, t)
		out = applied
		return err
	})
	return out, err
}

// Apply implements SessionStore.
func (s *BadgerStore) Apply(ctx context.Context, id string, t Transition) (Session, error) {
	if t == nil {
		return Session{}, fmt.Errorf("%w: nil transition", ErrInvalidArgument)
	}
	var out Session
	err := s.submit(ctx, t.Name(), id, func(b *batch) error {
		var err error
		out, err = s.applyIn(b, id, t)
		return err
	})
	return out, err
}

// applyIn runs t on the session as the batch sees it and stages the result
// and its journal entry.
func (s *BadgerStore) applyIn(b *batch, id string, t Transition) (Session, error) {
	cur, err := b.session(id)
	if err != nil {
		return Session{}, err
	}
	now := s.now()
	next, entry, err := t.Apply(cur, Env{Now: now, NewToken: s.opts.NewToken})
	if err != nil {
		return Session{}, err
	}
	next.UpdatedAt = now
	if err := b.putSession(next); err != nil {
		return Session{}, err
	}
	if entry != nil {
		if _, err := b.appendEntries(id, next.Lease.Fence, now, *entry); err != nil {
			return Session{}, err
		}
	}
	return next, nil
}

// MarkAllUnreconciled implements SessionStore. Each session is marked by
// an operation of its own, all queued at once: group commit then packs as
// many into one transaction as fit, and a session whose record is large
// (many handle links, a long id) still fits a transaction on its own. An
// error names the session it is about; the other sessions are marked all
// the same, and the count says how many were.
func (s *BadgerStore) MarkAllUnreconciled(ctx context.Context) (int, error) {
	ids, err := s.sessionIDs()
	if err != nil {
		return 0, err
	}
	const what = "mark-unreconciled"
	marked := make([]bool, len(ids)) // written by the writer, read after done
	ops := make([]*op, 0, len(ids))
	var errs []error
	for i, id := range ids {
		o := newOp(what, id, func(b *batch) error {
			marked[i] = false // the writer re-runs an op after a conflict
			cur, err := b.session(id)
			if errors.Is(err, ErrNotFound) {
				return nil // deleted since it was listed
			}
			if err != nil {
				return fmt.Errorf("%s session %q: %w", what, id, err)
			}
			cur.Lease.Unreconciled = true
			if err := b.putSession(cur); err != nil {
				return err
			}
			marked[i] = true
			return nil
		})
		if err := s.send(ctx, o); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", o.name(), err))
			break // the rest would fail alike; wait for what was queued
		}
		ops = append(ops, o)
	}
	n := 0
	for i, o := range ops {
		<-o.done
		switch {
		case o.err == nil && marked[i]:
			n++
		case o.err != nil:
			errs = append(errs, o.err) // names the session
		}
	}
	return n, errors.Join(errs...)
}

// Delete implements SessionStore. The first step marks the record Deleting
// in its own transaction, so that from then on every transition and append
// is refused and nothing can take the session over; the backup is then
// rewritten, so that it never holds the session as alive once its record
// is gone (an open that finds a backup's live session missing from the
// store takes the store for damaged; see checkAgainstBackup). The journal
// is removed in bounded chunks, then the record. A Delete that is
// interrupted (its context ended, the host stopped) leaves a Deleting
// session that a second Delete, at the same fence, finishes.
func (s *BadgerStore) Delete(ctx context.Context, id string, fence uint64) error {
	err := s.submit(ctx, "delete", id, func(b *batch) error {
		cur, err := b.session(id)
		if err != nil {
			return err
		}
		const op = "delete"
		stale := fence != cur.Lease.Fence
		if cur.Deleting {
			// Decided when its Delete began. A restart may have flagged
			// it unreconciled since, but only Delete can move it on, so
			// only the fence is checked.
			if stale {
				return &StaleFenceError{SessionID: id, Expected: fence, Current: cur.Lease.Fence}
			}
			return nil
		}
		switch {
		case cur.Lease.Unreconciled:
			return refuse(op, cur, ErrReconciling, "the host has not decided this session since the store was opened")
		case stale:
			return &StaleFenceError{SessionID: id, Expected: fence, Current: cur.Lease.Fence}
		case cur.Lease.Claim != ClaimReleased || cur.Lease.Stage != StageNone:
			return refuse(op, cur, ErrConflict, "only a released, settled session can be deleted")
		}
		cur.Deleting = true
		cur.UpdatedAt = s.now()
		return b.putSession(cur)
	})
	if err != nil {
		return err
	}
	if err := s.writeBackup(); err != nil {
		return fmt.Errorf("delete session %q: record the deletion in the backup: %w; call Delete again to finish", id, err)
	}
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("delete session %q interrupted; call Delete again to finish: %w", id, err)
		}
		finished := false
		err := s.submit(ctx, "delete", id, func(b *batch) error {
			finished = false
			cur, err := b.session(id)
			if err != nil {
				return err
			}
			if !cur.Deleting || fence != cur.Lease.Fence {
				// Only another Delete's completion and a re-creation can
				// get here between two chunks.
				return &StaleFenceError{SessionID: id, Expected: fence, Current: cur.Lease.Fence}
			}
			it := b.txn.NewIterator(badger.IteratorOptions{Prefix: journalPrefix(id)})
			defer it.Close()
			n := 0
			for it.Rewind(); it.Valid() && n < maxBatchOps*4; it.Next() {
				b.del(it.Item().KeyCopy(nil))
				n++
			}
			if n == 0 {
				b.del(recordKey(id))
				b.del(seqKey(id))
				b.opRecords = true
				b.opNotify = append(b.opNotify, id)
				finished = true
			}
			return nil
		})
		if err != nil || finished {
			return err
		}
	}
}

// Append implements JournalStore.
func (s *BadgerStore) Append(ctx context.Context, id string, fence uint64, entries ...EntryInput) ([]Entry, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	for _, e := range entries {
		if err := e.validate(); err != nil {
			return nil, err
		}
	}
	var out []Entry
	o := newOp("append to", id, func(b *batch) error {
		cur, err := b.session(id)
		if err != nil {
			return err
		}
		if err := CheckAppend(cur, fence); err != nil {
			return err
		}
		out, err = b.appendEntries(id, fence, s.now(), entries...)
		return err
	})
	o.journal = true
	err := s.wait(ctx, o)
	return out, err
}

// OpenJournal returns a writer handle on a session's journal at fence. The
// store closes it, through its close-retry registry, when the store closes.
func (s *BadgerStore) OpenJournal(ctx context.Context, id string, fence uint64) (*Journal, error) {
	cur, err := s.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := CheckAppend(cur, fence); err != nil {
		return nil, err
	}
	j := NewJournal(s, id, fence)
	j.onClosed = func(j *Journal) {
		s.mu.Lock()
		delete(s.journals, j)
		s.mu.Unlock()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return nil, ErrClosed
	}
	s.journals[j] = struct{}{}
	return j, nil
}

// view runs fn in a read transaction unless the store is closed.
func (s *BadgerStore) view(fn func(txn *badger.Txn) error) error {
	s.readMu.RLock()
	defer s.readMu.RUnlock()
	if s.db == nil {
		return ErrClosed
	}
	return s.db.View(fn)
}

func getSession(txn *badger.Txn, id string) (Session, error) {
	item, err := txn.Get(recordKey(id))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return Session{}, fmt.Errorf("session %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return Session{}, fmt.Errorf("read session %q: %w", id, err)
	}
	var out Session
	err = item.Value(func(v []byte) error {
		var err error
		out, err = DecodeRecord(v)
		return err
	})
	return out, err
}

// Get implements SessionStore.
func (s *BadgerStore) Get(ctx context.Context, id string) (Session, error) {
	var out Session
	err := s.view(func(txn *badger.Txn) error {
		var err error
		out, err = getSession(txn, id)
		return err
	})
	return out, err
}

// List implements SessionStore. A record that cannot be decoded does not
// hide the others: List returns every decodable session and, beside them,
// an error matching ErrDamaged that names the unreadable ones.
func (s *BadgerStore) List(ctx context.Context) ([]Session, error) {
	var out []Session
	var bad []error
	err := s.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixRecord}, PrefetchValues: true, PrefetchSize: 64})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			_, id, rest, err := parseKey(item.Key())
			if err != nil || len(rest) != 1 || rest[0] != recordSuffix {
				continue
			}
			err = item.Value(func(v []byte) error {
				sess, err := DecodeRecord(v)
				if err != nil {
					return err
				}
				out = append(out, sess)
				return nil
			})
			if err != nil {
				bad = append(bad, fmt.Errorf("session %q: %w", id, err))
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, errors.Join(bad...)
}

func (s *BadgerStore) sessionIDs() ([]string, error) {
	var ids []string
	err := s.view(func(txn *badger.Txn) error {
		ids = recordIDs(txn, 0)
		return nil
	})
	return ids, err
}

// recordIDs lists the ids of the session records txn sees, at most limit of
// them (0: all), reading keys only.
func recordIDs(txn *badger.Txn, limit int) []string {
	var ids []string
	it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixRecord}})
	defer it.Close()
	for it.Rewind(); it.Valid() && (limit == 0 || len(ids) < limit); it.Next() {
		_, id, rest, err := parseKey(it.Item().Key())
		if err == nil && len(rest) == 1 && rest[0] == recordSuffix {
			ids = append(ids, id)
		}
	}
	return ids
}

// journalSession reads the session whose journal a reader wants: a session
// being deleted has lost part of its journal already, so it reads as gone.
func journalSession(txn *badger.Txn, id string) (Session, error) {
	sess, err := getSession(txn, id)
	if err == nil && sess.Deleting {
		return Session{}, fmt.Errorf("session %q is being deleted: %w", id, ErrNotFound)
	}
	return sess, err
}

// LastSeq implements JournalStore.
func (s *BadgerStore) LastSeq(ctx context.Context, id string) (uint64, error) {
	var last uint64
	err := s.view(func(txn *badger.Txn) error {
		if _, err := journalSession(txn, id); err != nil {
			return err
		}
		var err error
		last, err = readLastSeq(txn, id)
		return err
	})
	return last, err
}

// readLastSeq reads a session's journal position, 0 when it has none.
func readLastSeq(txn *badger.Txn, id string) (uint64, error) {
	item, err := txn.Get(seqKey(id))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var last uint64
	err = item.Value(func(v []byte) error {
		var err error
		last, err = decodeSeq(v)
		return err
	})
	return last, err
}

// Replay implements JournalStore.
func (s *BadgerStore) Replay(ctx context.Context, id string, from uint64, fn func(Entry) error) error {
	var upTo uint64
	var incarnation string
	first := true
	for {
		chunk, inc, err := s.readChunk(id, from, func(txn *badger.Txn) error {
			if !first {
				return nil
			}
			// Fix the end at the first read so a busy journal cannot keep
			// Replay going forever; Tail is for following.
			var err error
			upTo, err = readLastSeq(txn, id)
			return err
		})
		if err != nil {
			return err
		}
		if first {
			incarnation, first = inc, false
		} else if inc != incarnation {
			return recreated(id)
		}
		for _, e := range chunk {
			if e.Seq > upTo {
				return nil
			}
			if err := fn(e); err != nil {
				return err
			}
			from = e.Seq + 1
		}
		if len(chunk) < replayChunk {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// recreated is what a reader gets when the session it was reading was
// deleted and a new one created under the same id between two of its
// reads: the new journal restarts at seq 1, so going on from the old
// position would skip its first entries and splice two conversations.
func recreated(id string) error {
	return fmt.Errorf("session %q was deleted (and created again) while it was read: %w", id, ErrNotFound)
}

// readChunk reads up to replayChunk entries of id with Seq >= from in one
// read transaction, after checking that the session exists and running
// also (if non-nil) in the same transaction. It returns the session's
// incarnation with them, so callers reading in several chunks notice a
// session deleted and created again in between.
func (s *BadgerStore) readChunk(id string, from uint64, also func(*badger.Txn) error) ([]Entry, string, error) {
	var out []Entry
	var incarnation string
	err := s.view(func(txn *badger.Txn) error {
		sess, err := journalSession(txn, id)
		if err != nil {
			return err
		}
		incarnation = sess.Incarnation
		if also != nil {
			if err := also(txn); err != nil {
				return err
			}
		}
		prefix := journalPrefix(id)
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true, PrefetchSize: 64})
		defer it.Close()
		for it.Seek(journalKey(id, max(from, 1))); it.Valid() && len(out) < replayChunk; it.Next() {
			item := it.Item()
			_, seq, err := parseJournalKey(item.Key())
			if err != nil {
				return fmt.Errorf("journal of %q: %w", id, err)
			}
			err = item.Value(func(v []byte) error {
				e, err := DecodeEntry(v)
				if err != nil {
					return err
				}
				if e.Seq != seq {
					return fmt.Errorf("%w: entry under seq %d says seq %d", errBadEntry, seq, e.Seq)
				}
				out = append(out, e)
				return nil
			})
			if err != nil {
				return fmt.Errorf("journal of %q at seq %d: %w", id, seq, err)
			}
		}
		return nil
	})
	return out, incarnation, err
}

// Tail implements JournalStore.
func (s *BadgerStore) Tail(ctx context.Context, id string, from uint64, fn func(Entry) error) error {
	next := max(from, 1)
	var incarnation string
	first := true
	for {
		// Watch before reading: a commit that lands after the read still
		// closes the channel we hold, so nothing slips between the two.
		changed, err := s.watch(id)
		if err != nil {
			return err
		}
		for {
			chunk, inc, err := s.readChunk(id, next, nil)
			if err != nil {
				return err
			}
			if first {
				incarnation, first = inc, false
			} else if inc != incarnation {
				return recreated(id)
			}
			for _, e := range chunk {
				if err := fn(e); err != nil {
					return err
				}
				next = e.Seq + 1
			}
			if len(chunk) < replayChunk {
				break
			}
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}

func (s *BadgerStore) watch(id string) (<-chan struct{}, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	ch, ok := s.watchers[id]
	if !ok {
		ch = make(chan struct{})
		s.watchers[id] = ch
	}
	return ch, nil
}

func (s *BadgerStore) notify(ids map[string]struct{}) {
	if len(ids) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range ids {
		if ch, ok := s.watchers[id]; ok {
			close(ch)
			delete(s.watchers, id)
		}
	}
}

// Close implements Store. Calls are serialised: a Close that finds
// another under way waits for it (or for its own ctx) and then returns nil
// if that one succeeded, or makes its own attempt if it failed.
//
// While a Close is under way, writes are refused with ErrClosed. A Close
// that fails (a journal handle still would not close) reopens the store for
// writes before it returns, so between a failed Close and its retry the
// store works as before: reads, Tail, lease transitions, appends, new
// journal handles. The handles this Close did close stay closed.
func (s *BadgerStore) Close(ctx context.Context) error {
	select {
	case s.closeSem <- struct{}{}:
	default:
		select {
		case s.closeSem <- struct{}{}:
		case <-ctx.Done():
			return fmt.Errorf("close lease store: waiting for another Close: %w", ctx.Err())
		}
	}
	defer func() { <-s.closeSem }()

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closing = true
	handles := make([]*Journal, 0, len(s.journals))
	for j := range s.journals {
		handles = append(handles, j)
	}
	s.mu.Unlock()

	retries := s.opts.CloseRetries
	for _, j := range handles {
		_ = retries.CloseOrRetain(ctx, j) // a failure stays retained and is retried below
	}
	if err := retries.RetryAll(ctx); err != nil {
		s.mu.Lock()
		s.closing = false
		s.mu.Unlock()
		return fmt.Errorf("close lease store: journal handles still open %q (call Close again to retry): %w",
			retries.Pending(), err)
	}
	return s.shutdown(ctx)
}

// shutdown stops the goroutines, writes a last backup and closes Badger.
// Only Close calls it, once: the store is closed afterwards whatever it
// reports.
func (s *BadgerStore) shutdown(ctx context.Context) error {
	s.submitMu.Lock()
	s.writerStopped = true
	s.submitMu.Unlock()
	close(s.stopWriter)
	<-s.writerDone
	close(s.stopBackup)
	<-s.backupDone

	var errs []error
	if s.leaseGen.Load() != s.backedUpGen.Load() {
		if err := s.writeBackup(); err != nil {
			errs = append(errs, err)
		}
	}
	s.mu.Lock()
	s.closed = true
	for id, ch := range s.watchers {
		close(ch)
		delete(s.watchers, id)
	}
	s.mu.Unlock()

	s.readMu.Lock()
	closed := make(chan error, 1)
	db := s.db
	go func() { closed <- db.Close() }()
	// A healthy Badger closes in milliseconds: give it a moment even when
	// the caller's deadline is already spent (a host may have used it up
	// stopping sessions), so that a normal close still releases the lock.
	grace := time.NewTimer(2 * time.Second)
	defer grace.Stop()
	var err error
	finished := false
	select {
	case err = <-closed:
		finished = true
	case <-grace.C:
		select {
		case err = <-closed:
			finished = true
		case <-ctx.Done():
		}
	}
	// Reads see a closed store either way (the goroutine keeps its db).
	s.db = nil
	s.readMu.Unlock()
	if !finished {
		// Badger's Close flushes the memtable into a table file and
		// retries that forever when it cannot (a directory made
		// read-only, a full disk): a host must still be able to quit.
		// Every acknowledged write is in Badger's log on disk, which the
		// next open replays. Badger keeps its files and its directory
		// lock until this process exits, and so does this store: its
		// lock is not released, so no second store opens the directory
		// in this process meanwhile.
		errs = append(errs, fmt.Errorf("close badger: it did not finish (%w), most likely because it cannot write to %s (check its permissions and free space); its log on disk holds every acknowledged write, and the next start replays it", ctx.Err(), s.path(storeDirName)))
		return errors.Join(errs...)
	}
	if err != nil {
		errs = append(errs, fmt.Errorf("close badger: %w", err))
	}
	if len(errs) == 0 {
		// A host that ran and stopped cleanly has had the restore report
		// (Recovery) all along; only a run that ended otherwise leaves it
		// for the next start.
		if err := os.Remove(filepath.Join(s.stateDir, recoveredFileName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("could not remove the restore report; the next start reports the restore again", "error", err)
		}
	}
	if err := s.lock.release(); err != nil {
		errs = append(errs, fmt.Errorf("unlock state directory: %w", err))
	}
	return errors.Join(errs...)
}

func encodeSeq(seq uint64) []byte {
	return binary.BigEndian.AppendUint64(nil, seq)
}

func decodeSeq(b []byte) (uint64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("%w: journal position is %d bytes", ErrDamaged, len(b))
	}
	return binary.BigEndian.Uint64(b), nil
}
