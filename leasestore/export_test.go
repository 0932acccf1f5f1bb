package leasestore

// CommitCount exposes how many transactions the store committed, so tests
// can check that concurrent appends share commits.
func CommitCount(s *BadgerStore) uint64 { return s.commits.Load() }
