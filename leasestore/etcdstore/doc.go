// Package etcdstore is the leasestore backend for several machines: the
// sessions, leases and journals of every host in one etcd cluster, and
// each host's liveness as an etcd lease (leasestore.Cluster). It passes
// the same conformance suites as the Badger backend (leasestoretest.Run
// and leasestoretest.RunCluster).
//
// # Keys
//
// Every key starts with Options.Prefix (default "/agenthost/"). Session
// ids are opaque (any UTF-8, '/' and NUL included), so keys embed them
// escaped (NUL as NUL 0x01, '/' as NUL 0x02): an escaped id has no '/',
// so "<id>/" is a prefix of one session's keys only, and an id costs
// about its own length in every key (hex would double ids of up to 16 KiB).
//
//	r/<id>                       the session record (leasestore.EncodeRecord)
//	s/<id>/n                     the journal head: last seq, 20 decimal digits
//	s/<id>/w                     the writer key: the fence, 20 digits, present only
//	                             while leasestore.CheckAppend admits that fence
//	s/<id>/j/<seq, 20 digits>    a journal entry (leasestore.EncodeEntry)
//	s/<id>/p                     the provider state pointer (JSON)
//	s/<id>/q/<gen>/<8 digits>    the chunks of provider state generation gen
//	hosts/<host id>              a host's registration (leasestore.HostRecord
//	                             as JSON), attached to its liveness lease
//
// # Fencing is etcd's
//
// Every lease transition is one transaction that requires the record and
// the journal head to be at the mod revisions the transition was judged
// on, writes the new record, puts or deletes the writer key to match it
// (present only while the new record admits appends), and appends the
// transition's lifecycle entry. Every journal append is one transaction
// that requires the writer key to hold the appender's fence and the head
// to be the one its entries were numbered after. So a host that lost the
// session (another host took it over, or this host's restart flagged it
// unreconciled: either deletes or moves the writer key) has its late
// append refused by etcd itself, whatever it believes; and no seq is ever
// written twice or skipped. A fence value, once gone from the writer key,
// never comes back (every way back to a writer moves the fence), so an
// old appender cannot be readmitted by an ABA. A refused transaction reads
// the keys back in its Else branch, and the refusal is explained from
// them (ErrStaleFence, ErrReconciling, ...) or the move is judged again.
// ApplyIfHostLost adds one compare: the lost host's key has no
// registration (CreateRevision 0), so a host that came back in time keeps
// its sessions, and of two hosts racing to take a session over one wins:
// the other's compare on the record fails and its re-judged Evict is
// stale.
//
// # Group commit
//
// The writes of this process to one session go through one queue that a
// goroutine drains while it is not empty. Appends queued together at one
// fence go out in one transaction, up to Options.MaxTxnBytes (default
// 1 MiB, below etcd's default 1.5 MiB --max-request-bytes) and
// Options.MaxTxnOps (default 128, etcd's --max-txn-ops); more is split
// into several transactions, consecutive in seq since nothing else of the
// session commits between them. An entry that cannot fit one transaction
// with its key (a maximal payload under a very long session id) is
// refused before anything is written, with ErrInvalidArgument naming the
// limit. ApplyBatch (and MarkAllUnreconciled, MarkHostUnreconciled)
// commit in groups of up to 24 sessions: one read of the group, its moves
// judged in order on it (a later move of a session sees the earlier
// one's result), and one transaction that writes the accepted results
// and compares every touched session's record and head; a group that
// lost a compare to another host's write goes one transaction per move
// instead, each judged again. Every slot reports its own move's fate. At
// most 32 sessions of one store commit at once, so that a burst queues in
// the store rather than in etcd's proposal queue (where a loaded cluster
// times requests out, then applies them anyway).
//
// # An unanswered commit
//
// A transaction that fails without an answer (a timeout, a lost member)
// may have landed, or may still land. The store settles it before it
// answers: it rewrites the journal head with its own value in a
// transaction that requires the head's mod revision to be the one the
// lost commit compared, which makes sure the lost commit can never apply
// afterwards; if the head had moved, it reads back what the lost commit
// wrote (the first entry, or the record) to tell whether it landed. A
// commit proven landed succeeds; one proven not landed can no longer
// land, so it is judged and sent again (up to three times, then it fails,
// having written nothing); if etcd cannot be reached to tell within
// Options.RequestTimeout, the store refuses every later write
// (leasestore.ErrDamaged) until it is opened again, as package leasestore
// requires; reads go on.
//
// # Retention
//
// Journal keys live as long as their session: an entry is written once
// and never overwritten, and Delete removes the record and every key of
// the session in one transaction (so nothing is ever half deleted and no
// Deleting step is needed). What grows without bound otherwise is etcd's
// MVCC history (the journal head and the records are rewritten at every
// append and move), so the store compacts it: every CompactWindow/4
// (default window 10 minutes) it notes the cluster's revision and
// compacts to the one it noted a window ago (Options.CompactWindow;
// negative leaves compaction to etcd's own --auto-compaction-*).
// Compaction removes only the versions a key had before its latest one,
// and the tombstones of deleted keys: a key's latest value is never
// removed, so no entry a follower has not read is ever dropped. A
// follower (Tail) reads the journal by key, from its next seq, and then
// watches from the revision of its read; if that revision was compacted
// while it was away, its watch fails, and it reads again by key from the
// next seq it was due and watches anew: entries are delivered by seq, so
// none is skipped and none twice. A Tail ends with ErrNotFound when the
// session is deleted (its watch sees the journal keys deleted) or created
// again under its id (a read finds another incarnation).
//
// # Host liveness
//
// Join grants an etcd lease of the host's TTL (whole seconds; etcd raises
// a TTL below its minimum, one and a half election timeouts) and creates
// hosts/<id> attached to it, in a transaction that requires the key to be
// absent (ErrHostRegistered otherwise). A goroutine sends a keepalive
// every TTL/3; Valid is the send time of the last answered keepalive
// plus the granted TTL: the cluster counts the TTL from the keepalive's
// arrival, later, so the host's own view of its liveness ends no later
// than the cluster's (clock rates aside: see package host for the drift
// margin a taker waits on top). When Valid passes without an answer, or
// the cluster says the lease is gone, the Membership reports not live
// (Valid zero, Changed), revokes what may be left of the old lease, and
// registers again under a new incarnation and epoch+1: it never revives
// the old registration, so other hosts always see a loss between the
// two, and a takeover decided on the loss stays valid. Close revokes the
// lease, so the others see the host lost at once. WatchHosts watches the
// hosts/ keys from the revision of its first read; a watch that cannot go
// on is replaced by a fresh read, reported as the difference.
//
// # Provider state
//
// A state up to leasestore.MaxProviderStateBytes is written in chunks
// under a fresh generation, each chunk in a transaction fenced on the
// writer key, then made visible by flipping the pointer in a transaction
// fenced on the writer key and on the pointer it replaces, which also
// deletes the replaced generation's chunks. Readers read the pointer and
// its chunks at one revision: one put whole, or the one before.
package etcdstore
