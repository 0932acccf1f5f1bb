package badgerstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"

	"github.com/agenthost/agenthost/leasestore"
)

// Create implements leasestore.SessionStore.
func (s *Store) Create(ctx context.Context, spec leasestore.SessionSpec) (leasestore.Session, error) {
	return s.CreateAndApply(ctx, spec, nil)
}

// CreateAndApply implements leasestore.SessionStore: the session is
// created and t (when not nil) applied to it in one transaction, so a new
// session's first reservation costs one synced commit instead of two. If t
// is refused, nothing is created.
func (s *Store) CreateAndApply(ctx context.Context, spec leasestore.SessionSpec, t leasestore.Transition) (leasestore.Session, error) {
	spec, err := spec.Prepare()
	if err != nil {
		return leasestore.Session{}, err
	}
	id := spec.ID
	var out leasestore.Session
	err = s.submit(ctx, "create", id, func(b *batch) error {
		if cur, err := b.session(id); err == nil {
			if cur.Deleting {
				return fmt.Errorf("create session %q: %w: a Delete of it did not finish; call Delete again first", id, leasestore.ErrExists)
			}
			return fmt.Errorf("create session %q: %w", id, leasestore.ErrExists)
		} else if !errors.Is(err, leasestore.ErrNotFound) {
			return err
		}
		now := s.now()
		sess, created := leasestore.NewSession(spec, now)
		if err := b.putSession(sess); err != nil {
			return err
		}
		if _, err := b.appendEntries(id, sess.Incarnation, 0, now, created); err != nil {
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

// Apply implements leasestore.SessionStore.
func (s *Store) Apply(ctx context.Context, id string, t leasestore.Transition) (leasestore.Session, error) {
	if t == nil {
		return leasestore.Session{}, fmt.Errorf("%w: nil transition", leasestore.ErrInvalidArgument)
	}
	var out leasestore.Session
	err := s.submit(ctx, t.Name(), id, func(b *batch) error {
		var err error
		out, err = s.applyIn(b, id, t)
		return err
	})
	return out, err
}

// ApplyBatch implements leasestore.SessionStore. Every move is an
// operation of its own (its writes staged apart, so a refused one leaves no
// trace), and all of them reach the writer in one send: they share one
// synced transaction, with whatever else is queued then, unless Badger's
// transaction size limit (15% of a memtable, tens of thousands of moves of
// ordinary records) splits them into several, each committed on its own.
// Each move's lifecycle entry goes to the journal mirror with the commit
// that holds it.
func (s *Store) ApplyBatch(ctx context.Context, moves []leasestore.Move) []leasestore.MoveResult {
	out := make([]leasestore.MoveResult, len(moves))
	ops := make([]*op, 0, len(moves))
	slots := make([]int, 0, len(moves)) // ops[i] is the move of out[slots[i]]
	for i, m := range moves {
		if m.Transition == nil {
			out[i].Err = fmt.Errorf("apply to session %q: %w: nil transition", m.ID, leasestore.ErrInvalidArgument)
			continue
		}
		ops = append(ops, newOp(m.Transition.Name(), m.ID, func(b *batch) error {
			var err error
			out[i].Session, err = s.applyIn(b, m.ID, m.Transition)
			return err
		}))
		slots = append(slots, i)
	}
	if len(ops) == 0 {
		return out
	}
	if err := s.send(ctx, ops...); err != nil {
		for _, i := range slots {
			out[i].Err = fmt.Errorf("%s session %q: %w", moves[i].Transition.Name(), moves[i].ID, err)
		}
		return out
	}
	for k, o := range ops {
		<-o.done
		if o.err != nil {
			out[slots[k]] = leasestore.MoveResult{Err: o.err}
		}
	}
	return out
}

// applyIn runs t on the session as the batch sees it and stages the result
// and its journal entry.
func (s *Store) applyIn(b *batch, id string, t leasestore.Transition) (leasestore.Session, error) {
	cur, err := b.session(id)
	if err != nil {
		return leasestore.Session{}, err
	}
	now := s.now()
	next, entry, err := t.Apply(cur, leasestore.Env{Now: now, NewToken: s.opts.NewToken})
	if err != nil {
		return leasestore.Session{}, err
	}
	next.UpdatedAt = now
	if err := b.putSession(next); err != nil {
		return leasestore.Session{}, err
	}
	if entry != nil {
		if _, err := b.appendEntries(id, next.Incarnation, next.Lease.Fence, now, *entry); err != nil {
			return leasestore.Session{}, err
		}
	}
	return next, nil
}

// MarkAllUnreconciled implements leasestore.SessionStore. Each session is marked by
// an operation of its own, all queued at once: group commit then packs as
// many into one transaction as fit, and a session whose record is large
// (many handle links, a long id) still fits a transaction on its own. An
// error names the session it is about; the other sessions are marked all
// the same, and the count says how many were.
func (s *Store) MarkAllUnreconciled(ctx context.Context) (int, error) {
	return s.markUnreconciled(ctx, func(leasestore.Lease) bool { return true })
}

// MarkHostUnreconciled implements leasestore.SessionStore: MarkAllUnreconciled
// for the leases hostID decides (leasestore.Lease.ReconciledBy), each judged
// on the record as its own operation reads it.
func (s *Store) MarkHostUnreconciled(ctx context.Context, hostID string) (int, error) {
	if hostID == "" {
		return 0, fmt.Errorf("%w: mark a host's leases unreconciled: empty host id", leasestore.ErrInvalidArgument)
	}
	return s.markUnreconciled(ctx, func(l leasestore.Lease) bool { return l.ReconciledBy(hostID) })
}

// markUnreconciled flags the leases flag selects, each in an operation of
// its own.
func (s *Store) markUnreconciled(ctx context.Context, flag func(leasestore.Lease) bool) (int, error) {
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
			if errors.Is(err, leasestore.ErrNotFound) {
				return nil // deleted since it was listed
			}
			if err != nil {
				return fmt.Errorf("%s session %q: %w", what, id, err)
			}
			if !flag(cur.Lease) {
				return nil
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

// Delete implements leasestore.SessionStore. The first step marks the record Deleting
// in its own transaction, so that from then on every transition and append
// is refused and nothing can take the session over; the backup is then
// rewritten, so that it never holds the session as alive once its record
// is gone (an open that finds a backup's live session missing from the
// store takes the store for damaged; see checkAgainstBackup). The journal
// and then the provider state are removed in bounded chunks, then the
// record. A Delete that is
// interrupted (its context ended, the host stopped) leaves a Deleting
// session that a second Delete, at the same fence, finishes.
func (s *Store) Delete(ctx context.Context, id string, fence uint64) error {
	err := s.submit(ctx, "delete", id, func(b *batch) error {
		cur, err := b.session(id)
		if err != nil {
			return err
		}
		if err := leasestore.CheckDelete(cur, fence); err != nil || cur.Deleting {
			return err
		}
		cur.Deleting = true
		cur.UpdatedAt = s.now()
		return b.putSession(cur)
	})
	if err != nil {
		return err
	}
	if err := s.backup.write(); err != nil {
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
				return &leasestore.StaleFenceError{SessionID: id, Expected: fence, Current: cur.Lease.Fence}
			}
			// The journal, then the provider state: no chunk of it lands
			// once the session is Deleting (see providerstate.go).
			n := 0
			for _, prefix := range [][]byte{journalPrefix(id), statePrefix(id)} {
				it := b.txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
				for it.Rewind(); it.Valid() && n < maxBatchOps*4; it.Next() {
					b.del(it.Item().KeyCopy(nil))
					n++
				}
				it.Close()
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

func getSession(txn *badger.Txn, id string) (leasestore.Session, error) {
	item, err := txn.Get(recordKey(id))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return leasestore.Session{}, fmt.Errorf("session %q: %w", id, leasestore.ErrNotFound)
	}
	if err != nil {
		return leasestore.Session{}, fmt.Errorf("read session %q: %w", id, err)
	}
	var out leasestore.Session
	err = item.Value(func(v []byte) error {
		var err error
		out, err = leasestore.DecodeRecord(v)
		return err
	})
	return out, err
}

// Get implements leasestore.SessionStore.
func (s *Store) Get(ctx context.Context, id string) (leasestore.Session, error) {
	var out leasestore.Session
	err := s.view(func(txn *badger.Txn) error {
		var err error
		out, err = getSession(txn, id)
		return err
	})
	return out, err
}

// List implements leasestore.SessionStore. A record that cannot be decoded does not
// hide the others: List returns every decodable session and, beside them,
// an error matching leasestore.ErrDamaged that names the unreadable ones.
func (s *Store) List(ctx context.Context) ([]leasestore.Session, error) {
	var out []leasestore.Session
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
				sess, err := leasestore.DecodeRecord(v)
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

func (s *Store) sessionIDs() ([]string, error) {
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
