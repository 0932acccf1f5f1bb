package badgerstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"

	"github.com/agenthost/agenthost/leasestore"
)

// replayChunk is how many entries a reader collects per read transaction;
// callbacks run outside the transaction so a slow reader never pins it.
const replayChunk = 256

// Append implements leasestore.JournalStore.
func (s *Store) Append(ctx context.Context, id string, fence uint64, entries ...leasestore.EntryInput) ([]leasestore.Entry, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	for _, e := range entries {
		if err := e.Validate(); err != nil {
			return nil, err
		}
	}
	var out []leasestore.Entry
	o := newOp("append to", id, func(b *batch) error {
		cur, err := b.session(id)
		if err != nil {
			return err
		}
		if err := leasestore.CheckAppend(cur, fence); err != nil {
			return err
		}
		out, err = b.appendEntries(id, cur.Incarnation, fence, s.now(), entries...)
		return err
	})
	o.journal = true
	err := s.wait(ctx, o)
	return out, err
}

// OpenJournal implements leasestore.Store. The store closes the handle,
// through its close-retry registry, when the store closes.
func (s *Store) OpenJournal(ctx context.Context, id string, fence uint64) (leasestore.Journal, error) {
	cur, err := s.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := leasestore.CheckAppend(cur, fence); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return nil, leasestore.ErrClosed
	}
	return s.journals.Track(leasestore.NewJournal(s, id, fence)), nil
}

// journalSession reads the session whose journal a reader wants: a session
// being deleted has lost part of its journal already, so it reads as gone.
func journalSession(txn *badger.Txn, id string) (leasestore.Session, error) {
	sess, err := getSession(txn, id)
	if err == nil && sess.Deleting {
		return leasestore.Session{}, fmt.Errorf("session %q is being deleted: %w", id, leasestore.ErrNotFound)
	}
	return sess, err
}

// LastSeq implements leasestore.JournalStore.
func (s *Store) LastSeq(ctx context.Context, id string) (uint64, error) {
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

// Replay implements leasestore.JournalStore.
func (s *Store) Replay(ctx context.Context, id string, from uint64, fn func(leasestore.Entry) error) error {
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
	return fmt.Errorf("session %q was deleted (and created again) while it was read: %w", id, leasestore.ErrNotFound)
}

// readChunk reads up to replayChunk entries of id with Seq >= from in one
// read transaction, after checking that the session exists and running
// also (if non-nil) in the same transaction. It returns the session's
// incarnation with them, so callers reading in several chunks notice a
// session deleted and created again in between.
func (s *Store) readChunk(id string, from uint64, also func(*badger.Txn) error) ([]leasestore.Entry, string, error) {
	var out []leasestore.Entry
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
				e, err := leasestore.DecodeEntry(v)
				if err != nil {
					return err
				}
				if e.Seq != seq {
					return fmt.Errorf("%w: malformed journal entry: entry under seq %d says seq %d", leasestore.ErrDamaged, seq, e.Seq)
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

// Tail implements leasestore.JournalStore.
func (s *Store) Tail(ctx context.Context, id string, from uint64, fn func(leasestore.Entry) error) error {
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

func (s *Store) watch(id string) (<-chan struct{}, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, leasestore.ErrClosed
	}
	ch, ok := s.watchers[id]
	if !ok {
		ch = make(chan struct{})
		s.watchers[id] = ch
	}
	return ch, nil
}

func (s *Store) notify(ids map[string]struct{}) {
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
