package leasestore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dgraph-io/badger/v4"
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

// submit hands run to the writer and waits for its durable result. Once
// queued, an operation always completes, so a caller never has to guess
// whether a cancelled call took effect.
func (s *BadgerStore) submit(ctx context.Context, what, id string, run func(b *batch) error) error {
	return s.wait(ctx, newOp(what, id, run))
}

// wait queues o and waits for its durable result.
func (s *BadgerStore) wait(ctx context.Context, o *op) error {
	if err := s.send(ctx, o); err != nil {
		return err
	}
	<-o.done
	return o.err
}

// admitWrite refuses new writes while a Close is under way or after one
// succeeded, and after the store failed (see fail).
func (s *BadgerStore) admitWrite() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return ErrClosed
	}
	return s.failed
}

// send queues o for the writer without waiting for its result, so that a
// caller with many independent operations (MarkAllUnreconciled) can queue
// them all and let group commit batch them. The caller must wait on o.done
// for every o that send accepted.
func (s *BadgerStore) send(ctx context.Context, o *op) error {
	if err := s.admitWrite(); err != nil {
		return err
	}
	s.submitMu.RLock()
	defer s.submitMu.RUnlock()
	if s.writerStopped {
		return ErrClosed
	}
	select {
	case s.ops <- o:
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
func (s *BadgerStore) fail(cause error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed == nil {
		s.failed = fmt.Errorf("%w: the store hit a write error (%w); restart the host to reopen it", ErrDamaged, cause)
	}
	return s.failed
}

func (s *BadgerStore) failure() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed
}

// commitTxn commits txn; tests replace it to inject commit failures.
func (s *BadgerStore) commitTxn(txn *badger.Txn) error {
	if s.testHookCommit != nil {
		return s.testHookCommit(txn)
	}
	return txn.Commit()
}

func (s *BadgerStore) writeLoop() {
	defer close(s.writerDone)
	for {
		var first *op
		select {
		case first = <-s.ops:
		case <-s.stopWriter:
			// Senders are excluded by now; finish what they queued.
			for {
				select {
				case o := <-s.ops:
					s.commit([]*op{o})
				default:
					return
				}
			}
		}
		batch := []*op{first}
	gather:
		for len(batch) < maxBatchOps {
			select {
			case o := <-s.ops:
				batch = append(batch, o)
			default:
				break gather
			}
		}
		s.commit(batch)
	}
}

// commit runs ops in as few transactions as Badger's size limit allows,
// after refusing those the free space on the store's disk cannot take.
func (s *BadgerStore) commit(ops []*op) {
	ops = s.refuseWithoutSpace(ops)
	for len(ops) > 0 {
		n := s.commitPrefix(ops)
		ops = ops[n:]
	}
}

// commitPrefix commits a prefix of ops in one transaction, finishes those
// ops, and returns how many it took (at least one).
func (s *BadgerStore) commitPrefix(ops []*op) int {
	if err := s.failure(); err != nil {
		// Ops queued before the store failed: refuse them too.
		for _, o := range ops {
			o.err = fmt.Errorf("%s: %w", o.name(), err)
			close(o.done)
		}
		return len(ops)
	}
	limit := len(ops)
	for attempt := 0; ; attempt++ {
		b := newBatch(s.db)
		placed, stageErr := b.run(ops[:limit])
		if stageErr != nil {
			b.txn.Discard()
			if placed == 0 {
				// The first op alone cannot be staged: it fails, the rest
				// go on in the next transaction.
				o := ops[0]
				o.err = fmt.Errorf("%s: stage write: %w", o.name(), stageErr)
				if errors.Is(stageErr, badger.ErrTxnTooBig) {
					o.err = fmt.Errorf("%s: %w: the write is larger than one store transaction accepts", o.name(), ErrInvalidArgument)
				}
				close(o.done)
				return 1
			}
			limit = placed
			continue
		}
		err := s.commitTxn(b.txn)
		if errors.Is(err, badger.ErrConflict) && attempt < maxConflictRetries {
			continue
		}
		if err != nil {
			if errors.Is(err, badger.ErrConflict) {
				// A conflict is a commit Badger refused outright: nothing
				// of it landed, so the store stays usable.
				err = fmt.Errorf("commit to lease store: %w", err)
			} else {
				err = s.fail(err)
			}
			s.log.Error("commit failed", "ops", limit, "error", err)
		}
		if err == nil {
			// Before the callers hear back: one that saw its change
			// committed also sees the backup marked as behind it.
			s.commits.Add(1)
			s.notify(b.notify)
			if b.records {
				s.leaseGen.Add(1)
				select {
				case s.backupKick <- struct{}{}:
				default:
				}
			}
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
func (s *BadgerStore) refuseWithoutSpace(ops []*op) []*op {
	if s.opts.MinFreeSpace < 0 {
		return ops
	}
	free, ok := freeSpace(s.path(storeDirName))
	if !ok || free >= s.opts.MinFreeSpace {
		// Without a figure the write goes ahead: a failed lookup says
		// nothing about space, and Badger reports real write errors.
		return ops
	}
	kept := ops[:0:0]
	for _, o := range ops {
		if !o.journal && free >= s.opts.MinFreeSpace/2 {
			kept = append(kept, o)
			continue
		}
		o.err = fmt.Errorf("%s: %w: %d MiB free under %s, the store keeps %d MiB free; free some disk space and the write can be retried",
			o.name(), ErrNoSpace, free>>20, s.stateDir, s.opts.MinFreeSpace>>20)
		close(o.done)
	}
	if len(kept) < len(ops) {
		s.log.Warn("disk nearly full; refusing writes until space is freed", "free_bytes", free, "refused", len(ops)-len(kept))
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
	records bool // a session record changed

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
		if err := safeRun(o.run, b); err != nil {
			o.err = err
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

func (b *batch) session(id string) (Session, error) {
	raw, err := b.get(recordKey(id))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return Session{}, fmt.Errorf("session %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return Session{}, fmt.Errorf("read session %q: %w", id, err)
	}
	return DecodeRecord(raw)
}

func (b *batch) putSession(s Session) error {
	raw, err := EncodeRecord(s)
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
// last seq.
func (b *batch) appendEntries(id string, fence uint64, now time.Time, in ...EntryInput) ([]Entry, error) {
	last, err := b.lastSeq(id)
	if err != nil {
		return nil, fmt.Errorf("read journal position of %q: %w", id, err)
	}
	out := make([]Entry, len(in))
	for i, e := range in {
		last++
		out[i] = Entry{Seq: last, Fence: fence, Time: now, Kind: e.Kind, Payload: e.Payload}
		b.set(journalKey(id, last), EncodeEntry(out[i]))
	}
	b.set(seqKey(id), encodeSeq(last))
	b.opNotify = append(b.opNotify, id)
	return out, nil
}
