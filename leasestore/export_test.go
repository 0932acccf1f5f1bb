package leasestore

import (
	"context"

	"github.com/dgraph-io/badger/v4"
)

// CommitCount exposes how many transactions the store committed, so tests
// can check that concurrent appends share commits.
func CommitCount(s *BadgerStore) uint64 { return s.commits.Load() }

// BackedUp reports whether the backup holds every committed record change.
func BackedUp(s *BadgerStore) bool { return s.leaseGen.Load() == s.backedUpGen.Load() }

// SetCommitHook makes the writer commit through fn, which gets the real
// commit to call (or not). Set it between writes: the writer reads it when
// it commits the next batch.
func SetCommitHook(s *BadgerStore, fn func(commit func() error) error) {
	s.testHookCommit = func(txn *badger.Txn) error { return fn(txn.Commit) }
}

// SetRestoreHook sets what a restore calls between its steps; the crash
// tests exit the process from it.
func SetRestoreHook(o *Options, fn func(step string)) { o.restoreHook = fn }

// CorruptRecord overwrites a session record with bytes that do not decode.
func CorruptRecord(ctx context.Context, s *BadgerStore, id string) error {
	return s.submit(ctx, "corrupt", id, func(b *batch) error {
		b.set(recordKey(id), []byte("{not a record"))
		return nil
	})
}
