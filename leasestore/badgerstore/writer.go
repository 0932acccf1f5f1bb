package badgerstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/hashicorp/go-hclog"

	"github.com/agenthost/agenthost/leasestore"
)

// op is one unit of work for the writer: run reads through the batch and
// stages writes; its writes land only if it returns nil, and its caller
// hears back only after the batch is durable.
type op struct {
	// what and id name the operation in the errors the writer itself
	// reports (a write too large for one transaction, a failed commit):
	// `append to session "s"`. The name is formatted only on error, so the
	// append path does not pay for it.
	what string
	id   string
	run  func(b *batch) error
	// journal marks a journal append: it is refused first when the disk
	// fills (see Options.MinFreeSpace).
	journal bool
	err     error
	done    chan struct{}
}

func newOp(what, id string, run func(b *batch) error) *op {
	return &op{what: what, id: id, run: run, done: make(chan struct{})}
}

func (o *op) name() string { return fmt.Sprintf("%s session %q", o.what, o.id) }

// Group commit bounds: at most this many operations share one transaction.
// Badger's own size limit (15% of the memtable) splits a batch further when
// the entries are large.
const maxBatchOps = 256

// maxConflictRetries bounds how often a batch is re-run after Badger
// reports a conflict with a concurrent transaction.
const maxConflictRetries = 8

// writer is the store's only write path: one goroutine that commits
// whatever has queued up in a single synced transaction (group commit), so
// a durable append costs one sync however many sessions are appending at
// once. It owns that goroutine: start runs it, shutdown ends it after the
// operations already queued.
type writer struct {
	db  *badger.DB
	log hclog.Logger
	// minFree, storeDir and stateDir are the free-space guard (see
	// Options.MinFreeSpace).
	minFree            int64
	storeDir, stateDir string
	reserve            *reserve
	// mirror receives the journal frames of every committed batch before
	// its callers hear back (see mirror.go).
	mirror *mirror
	// committed runs after every commit, before the batch's callers hear
	// back, with the sessions whose records or journals changed and
	// whether a record did.
	committed func(ids map[string]struct{}, records bool)
	// commitHook replaces txn.Commit in tests that inject commit failures.
	// Set before the first write.
	commitHook func(*badger.Txn) error

	ops  chan []*op // the ops of one send, kept together
	stop chan struct{}
	done chan struct{}

	// submitMu orders senders on ops against the writer's shutdown.
	submitMu sync.RWMutex
	stopped  bool

	mu     sync.Mutex
	failed error // set by a commit that may or may not have landed: no more writes

	commits atomic.Uint64 // committed transactions, for tests of group commit
}

func (w *writer) start() {
	w.ops = make(chan []*op, maxBatchOps)
	w.stop = make(chan struct{})
	w.done = make(chan struct{})
	go w.run()
}

// shutdown refuses new operations, lets the goroutine commit what was
// queued, and waits for it to end.
func (w *writer) shutdown() {
	w.submitMu.Lock()
	w.stopped = true
	w.submitMu.Unlock()
	close(w.stop)
	<-w.done
}

// send queues ops without waiting for their results, so that a caller
// with many independent operations (MarkAllUnreconciled, ApplyBatch) can
// queue them all and let group commit batch them. The ops of one send
// reach the writer together, so they share a transaction unless Badger's
// size limit splits them. The caller must wait on o.done for every o that
// send accepted. Once queued, an operation always completes, so a caller
// never has to guess whether a cancelled call took effect. After the store
// failed (see fail) it refuses.
func (w *writer) send(ctx context.Context, ops ...*op) error {
	if err := w.failure(); err != nil {
		return err
	}
	w.submitMu.RLock()
	defer w.submitMu.RUnlock()
	if w.stopped {
		return leasestore.ErrClosed
	}
	select {
	case w.ops <- slices.Clip(ops): // the writer appends to it
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// fail puts the store into its failed state after a commit error that was
// not a conflict. Such a commit may still have taken effect (Badger may
// have applied the entries to its memtable and advanced its read
// timestamp) while every caller in the batch heard an error, so a caller
// that retries would write twice: a retried append would journal its
// entries again. From here on every write is refused; reads go on, and a
// restart reopens the store from what is durable.
func (w *writer) fail(cause error) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failed == nil {
		w.failed = fmt.Errorf("%w: the store hit a write error (%w); restart the host to reopen it", leasestore.ErrDamaged, cause)
	}
	return w.failed
}

func (w *writer) failure() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.failed
}

// commitTxn commits txn; tests replace it to inject commit failures.
func (w *writer) commitTxn(txn *badger.Txn) error {
	if w.commitHook != nil {
		return w.commitHook(txn)
	}
	return txn.Commit()
}

func (w *writer) run() {
	defer close(w.done)
	for {
		var batch []*op
		select {
		case batch = <-w.ops:
		case <-w.stop:
			// Senders are excluded by now; finish what they queued.
			for {
				select {
				case ops := <-w.ops:
					w.commit(ops)
				default:
					return
				}
			}
		}
	gather:
		for len(batch) < maxBatchOps {
			select {
			case ops := <-w.ops:
				batch = append(batch, ops...)
			default:
				break gather
			}
		}
		w.commit(batch)
	}
}

// commit runs ops in as few transactions as Badger's size limit allows,
// after refusing those the free space on the store's disk cannot take.
func (w *writer) commit(ops []*op) {
	ops = w.refuseWithoutSpace(ops)
	for len(ops) > 0 {
		n := w.commitPrefix(ops)
		ops = ops[n:]
	}
}

// commitPrefix commits a prefix of ops in one transaction, finishes those
// ops, and returns how many it took (at least one).
func (w *writer) commitPrefix(ops []*op) int {
	if err := w.failure(); err != nil {
		// Ops queued before the store failed: refuse them too.
		for _, o := range ops {
			o.err = fmt.Errorf("%s: %w", o.name(), err)
			close(o.done)
		}
		return len(ops)
	}
	limit := len(ops)
	for attempt := 0; ; attempt++ {
		b := newBatch(w.db)
		placed, stageErr := b.run(ops[:limit])
		if stageErr != nil {
			b.txn.Discard()
			if placed == 0 {
				// The first op alone cannot be staged: it fails, the rest
				// go on in the next transaction.
				o := ops[0]
				o.err = fmt.Errorf("%s: stage write: %w", o.name(), stageErr)
				if errors.Is(stageErr, badger.ErrTxnTooBig) {
					o.err = fmt.Errorf("%s: %w: the write is larger than one store transaction accepts", o.name(), leasestore.ErrInvalidArgument)
				}
				close(o.done)
				return 1
			}
			limit = placed
			continue
		}
		err := w.commitTxn(b.txn)
		if errors.Is(err, badger.ErrConflict) && attempt < maxConflictRetries {
			continue
		}
		if err != nil {
			if errors.Is(err, badger.ErrConflict) {
				// A conflict is a commit Badger refused outright: nothing
				// of it landed, so the store stays usable.
				err = fmt.Errorf("commit to lease store: %w", err)
			} else {
				err = w.fail(err)
			}
			w.log.Error("commit failed", "ops", limit, "error", err)
		}
		if err == nil {
			// Before the callers or a reader hear of it: every entry a
			// client can have seen is in the mirror.
			w.mirror.write(b.mirror)
			// Before the callers hear back: one that saw its change
			// committed also sees the backup marked as behind it.
			w.commits.Add(1)
			w.committed(b.notify, b.records)
		}
		for _, o := range ops[:limit] {
			if err != nil && o.err == nil {
				o.err = fmt.Errorf("%s: %w", o.name(), err)
			}
			close(o.done)
		}
		return limit
	}
}

// refuseWithoutSpace finishes, with ErrNoSpace, the ops that would eat
// into the free space the store keeps (see Options.MinFreeSpace), and
// returns the others. One statfs per batch: the writer is the only place
// the store writes from.
func (w *writer) refuseWithoutSpace(ops []*op) []*op {
	if w.minFree < 0 {
		return ops
	}
	free, ok := freeSpace(w.storeDir)
	if !ok || free >= w.minFree {
		// Without a figure the write goes ahead: a failed lookup says
		// nothing about space, and Badger reports real write errors.
		if ok {
			w.reserve.ensure(free)
		}
		return ops
	}
	kept := ops[:0:0]
	for _, o := range ops {
		if !o.journal && free >= w.minFree/2 {
			kept = append(kept, o)
			continue
		}
		need := w.minFree
		if !o.journal {
			need = w.minFree / 2
		}
		o.err = fmt.Errorf("%s: %w: %d MiB free on the file system of %s, the store keeps %d MiB free; free some disk space (at least %d MiB there, whatever took it) and the write can be retried",
			o.name(), leasestore.ErrNoSpace, free>>20, w.stateDir, w.minFree>>20, (need-free+1<<20-1)>>20)
		close(o.done)
	}
	if len(kept) < len(ops) {
		w.log.Warn("disk nearly full; refusing writes until space is freed", "free_bytes", free, "refused", len(ops)-len(kept))
	}
	return kept
}

// batch is the writer's view of one transaction. Each op's writes are
// staged and reach the transaction only if the op succeeds, so a refused
// op leaves no trace; later ops in the batch read earlier ops' writes.
type batch struct {
	txn     *badger.Txn
	staged  []stagedWrite
	index   map[string]int // key -> position in staged
	notify  map[string]struct{}
	records bool   // a session record changed
	mirror  []byte // journal mirror frames of the ops that succeeded

	opNotify  []string
	opRecords bool
}

func newBatch(db *badger.DB) *batch {
	return &batch{txn: db.NewTransaction(true), notify: map[string]struct{}{}}
}

// runOne runs one operation in a transaction of its own on db, outside the
// writer: the restore prepares a database that no writer serves yet.
func runOne(db *badger.DB, run func(b *batch) error) error {
	b := newBatch(db)
	defer b.txn.Discard()
	o := &op{run: run}
	if _, err := b.run([]*op{o}); err != nil {
		return err
	}
	if o.err != nil {
		return o.err
	}
	return b.txn.Commit()
}

type stagedWrite struct {
	key, val []byte
	del      bool
}

// run runs ops in order and returns how many were placed in the
// transaction. When Badger refuses an op's writes (the transaction is full,
// or staging failed), run stops there and returns the refusal: the
// transaction may hold part of that op's writes, so the caller discards it
// and commits the ops before it on their own.
func (b *batch) run(ops []*op) (placed int, stageErr error) {
	for i, o := range ops {
		o.err = nil
		b.staged, b.index, b.opNotify, b.opRecords = b.staged[:0], map[string]int{}, b.opNotify[:0], false
		mirrored := len(b.mirror)
		if err := safeRun(o.run, b); err != nil {
			o.err = err
			b.mirror = b.mirror[:mirrored]
			continue
		}
		for _, w := range b.staged {
			var err error
			if w.del {
				err = b.txn.Delete(w.key)
			} else {
				err = b.txn.SetEntry(badger.NewEntry(w.key, w.val))
			}
			if err != nil {
				return i, err
			}
		}
		for _, id := range b.opNotify {
			b.notify[id] = struct{}{}
		}
		b.records = b.records || b.opRecords
	}
	return len(ops), nil
}

// safeRun keeps a bug in one operation from taking the writer, and with it
// the host, down.
func safeRun(run func(*batch) error, b *batch) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("lease store operation panicked: %v", r)
		}
	}()
	return run(b)
}

func (b *batch) get(key []byte) ([]byte, error) {
	if i, ok := b.index[string(key)]; ok {
		if b.staged[i].del {
			return nil, badger.ErrKeyNotFound
		}
		return b.staged[i].val, nil
	}
	item, err := b.txn.Get(key)
	if err != nil {
		return nil, err
	}
	return item.ValueCopy(nil)
}

func (b *batch) set(key, val []byte) {
	if i, ok := b.index[string(key)]; ok {
		b.staged[i] = stagedWrite{key: key, val: val}
		return
	}
	b.index[string(key)] = len(b.staged)
	b.staged = append(b.staged, stagedWrite{key: key, val: val})
}

func (b *batch) del(key []byte) {
	if i, ok := b.index[string(key)]; ok {
		b.staged[i] = stagedWrite{key: key, del: true}
		return
	}
	b.index[string(key)] = len(b.staged)
	b.staged = append(b.staged, stagedWrite{key: key, del: true})
}

func (b *batch) session(id string) (leasestore.Session, error) {
	raw, err := b.get(recordKey(id))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return leasestore.Session{}, fmt.Errorf("session %q: %w", id, leasestore.ErrNotFound)
	}
	if err != nil {
		return leasestore.Session{}, fmt.Errorf("read session %q: %w", id, err)
	}
	return leasestore.DecodeRecord(raw)
}

func (b *batch) putSession(s leasestore.Session) error {
	raw, err := leasestore.EncodeRecord(s)
	if err != nil {
		return err
	}
	b.set(recordKey(s.ID), raw)
	b.opRecords = true
	b.opNotify = append(b.opNotify, s.ID)
	return nil
}

func (b *batch) lastSeq(id string) (uint64, error) {
	raw, err := b.get(seqKey(id))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return decodeSeq(raw)
}

// appendEntries numbers, stamps and stages entries after the session's
// last seq, and their journal mirror frames under the session's
// incarnation.
func (b *batch) appendEntries(id, incarnation string, fence uint64, now time.Time, in ...leasestore.EntryInput) ([]leasestore.Entry, error) {
	last, err := b.lastSeq(id)
	if err != nil {
		return nil, fmt.Errorf("read journal position of %q: %w", id, err)
	}
	out := make([]leasestore.Entry, len(in))
	for i, e := range in {
		last++
		out[i] = leasestore.Entry{Seq: last, Fence: fence, Time: now, Kind: e.Kind, Payload: e.Payload}
		enc := leasestore.EncodeEntry(out[i])
		b.set(journalKey(id, last), enc)
		b.mirror = appendMirrorFrame(b.mirror, id, incarnation, enc)
	}
	b.set(seqKey(id), encodeSeq(last))
	b.opNotify = append(b.opNotify, id)
	return out, nil
}
