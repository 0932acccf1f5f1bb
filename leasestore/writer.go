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
	run  func(b *batch) error
	err  error
	done chan struct{}
}

func (s *BadgerStore) submit(ctx context.Context, run func(b *batch) error) error {
	s.mu.Lock()
	closing := s.closing
	s.mu.Unlock()
	if closing {
		return ErrClosed
	}
	return s.enqueue(ctx, run)
}

// enqueue hands run to the writer and waits for its durable result. Once
// queued, an operation always completes, so a caller never has to guess
// whether a cancelled call took effect.
func (s *BadgerStore) enqueue(ctx context.Context, run func(b *batch) error) error {
	o := &op{run: run, done: make(chan struct{})}
	s.submitMu.RLock()
	if s.writerStopped {
		s.submitMu.RUnlock()
		return ErrClosed
	}
	select {
	case s.ops <- o:
	case <-ctx.Done():
		s.submitMu.RUnlock()
		return ctx.Err()
	}
	s.submitMu.RUnlock()
	<-o.done
	return o.err
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

// commit runs ops in as few transactions as Badger's size limit allows.
func (s *BadgerStore) commit(ops []*op) {
	for len(ops) > 0 {
		n := s.commitPrefix(ops)
		ops = ops[n:]
	}
}

// commitPrefix commits a prefix of ops in one transaction, finishes those
// ops, and returns how many it took (at least one).
func (s *BadgerStore) commitPrefix(ops []*op) int {
	limit := len(ops)
	for attempt := 0; ; attempt++ {
		b := &batch{txn: s.db.NewTransaction(true), notify: map[string]struct{}{}}
		placed, stageErr := b.run(ops[:limit])
		if stageErr != nil {
			b.txn.Discard()
			if placed == 0 {
				// The first op alone cannot be staged: it fails, the rest
				// go on in the next transaction.
				ops[0].err = fmt.Errorf("stage write: %w", stageErr)
				if errors.Is(stageErr, badger.ErrTxnTooBig) {
					ops[0].err = fmt.Errorf("%w: the write is larger than one store transaction accepts", ErrInvalidArgument)
				}
				close(ops[0].done)
				return 1
			}
			limit = placed
			continue
		}
		err := b.txn.Commit()
		if errors.Is(err, badger.ErrConflict) && attempt < maxConflictRetries {
			continue
		}
		if err != nil {
			err = fmt.Errorf("commit to lease store: %w", err)
			s.log.Error("commit failed", "ops", limit, "error", err)
		}
		for _, o := range ops[:limit] {
			if err != nil && o.err == nil {
				o.err = err
			}
			close(o.done)
		}
		if err == nil {
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
		return limit
	}
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
