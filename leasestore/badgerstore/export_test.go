package badgerstore

import (
	"context"

	"github.com/dgraph-io/badger/v4"

	"github.com/agenthost/agenthost/leasestore"
)

// CommitCount exposes how many transactions the store committed, so tests
// can check that concurrent appends share commits.
func CommitCount(s *Store) uint64 { return s.writer.commits.Load() }

// BackedUp reports whether the backup holds every committed record change.
func BackedUp(s *Store) bool { return s.backup.current() }

// SetCommitHook makes the writer commit through fn, which gets the real
// commit to call (or not). Set it between writes: the writer reads it when
// it commits the next batch.
func SetCommitHook(s *Store, fn func(commit func() error) error) {
	s.writer.commitHook = func(txn *badger.Txn) error { return fn(txn.Commit) }
}

// SetRestoreHook sets what a restore calls between its steps; the crash
// tests exit the process from it.
func SetRestoreHook(o *Options, fn func(step string)) { o.restoreHook = fn }

// CorruptRecord overwrites a session record with bytes that do not decode.
func CorruptRecord(ctx context.Context, s *Store, id string) error {
	return s.submit(ctx, "corrupt", id, func(b *batch) error {
		b.set(recordKey(id), []byte("{not a record"))
		return nil
	})
}

// PutRecord writes sess as its record, bypassing the transitions, as a
// record an earlier build or a person wrote would be.
func PutRecord(ctx context.Context, s *Store, sess leasestore.Session) error {
	return s.submit(ctx, "put", sess.ID, func(b *batch) error { return b.putSession(sess) })
}

// StateKeys counts the provider state keys of a session: its description
// and every chunk, named or not.
func StateKeys(s *Store, id string) (int, error) {
	n := 0
	err := s.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: statePrefix(id)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			n++
		}
		return nil
	})
	return n, err
}

// PutStrayChunk writes a provider state chunk no description names, as a
// put cut short by a crash leaves one.
func PutStrayChunk(ctx context.Context, s *Store, id string) error {
	return s.submit(ctx, "stray chunk", id, func(b *batch) error {
		b.set(stateChunkKey(id, newStateGen(), 0), []byte("stray"))
		return nil
	})
}

// StateChunkSize is the size of one stored chunk of provider state.
const StateChunkSize = stateChunkSize
