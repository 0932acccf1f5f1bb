// Package leasestore is the durable model of agenthost: session records,
// the lease that says which process may write to each session, and each
// session's journal.
//
// # Sessions and leases
//
// A session record is the identity of one agent conversation, independent
// of any process: its id, agent, workspace, the options the plugin
// acknowledged, and the provider handle chain (each link a handle such as a
// Claude session id or a Codex thread id, how it came to be, and the fence it
// was minted at). Session ids are opaque: any valid UTF-8, NUL and '/'
// included; keys embed them length-prefixed so no id collides with another.
//
// The lease is a separate question: which process may write to the session
// right now. Its fence is a generation number that starts at 0 (never
// owned) and only ever grows. Every mutation names the fence its caller
// holds, and a caller holding an older fence is refused (ErrStaleFence): a
// host that lost its lease can never write again, whatever it believes.
//
// # The state machine
//
// A lease has a claim (released, reserved, live, conflicted) and a stage
// (none, proving, recovering, manual-recovery). A session admits a writer
// only after three things happened in order, at one fence: a reservation,
// an observed process identity, and a proved provider handle.
//
//	released ──Reserve(expected fence)──▶ reserved/proving       fence+1, new spawn token
//	reserved/proving ──PreSpawnFailure──▶ same, with durable proof no process was started
//	reserved/proving ──BeginSpawn──▶ same, proof cleared (this attempt may start a child)
//	reserved/proving ──CommitOwner(pid, token)──▶ same, owner recorded
//	                                       (only a process echoing the reserved token)
//	reserved/proving ──ProveOwner(handle)──▶ live/none            the writer is admitted
//	live ──RecordHandle──▶ live                                  handle chain grows
//	live | reserved ──Release──▶ released                        fence+1, "exit observed"
//	(an ownerless reservation releases only with pre-spawn proof)
//
// Restart decisions, the only moves allowed while a lease is unreconciled
// (every lease is, from the moment a new host opens the store until that host
// decides it):
//
//	held | latched ──Evict(evidence)──▶ released                 fence+1, evidence kept
//	held, owner alive and proven to be the recorded process
//	     ──Readopt──▶ live (or reserved/proving)                 fence+1, plugin told
//	held ──Latch──▶ recovering (an exact owner is recorded but unverified)
//	             or manual-recovery (nobody can be named)        fence unchanged
//	any ──MarkConflicted──▶ conflicted/manual-recovery
//	released ──Reconciled──▶ released                            nothing to decide
//
// The next fence is max(fence+1, MinNextFence). Every transition is pure
// (see Transition): a backend reads the record inside one transaction, calls
// Apply, and writes the result together with the journal entry the move
// produced, so the journal holds the lease's whole history.
//
// # Failing closed
//
// Latches leave only on evidence, never on a timeout. A lapsed deadline means
// the host stopped hearing from the owner, not that the agent stopped editing
// files and spending tokens; a wrong "dead" would put a second writer on one
// provider conversation, while a wrong "alive" only delays. So Reserve is
// refused on a latched lease (ErrOwnershipUnknown) and on a held or
// conflicted one (ErrConflict); only Evict with proof (exit observed, pid
// absent, identity mismatch, or a person's confirmation) or Readopt with a
// proven identity moves it on. Package probe produces that evidence.
//
// # The journal
//
// Each session has an append-only journal of entries {seq, fence, time,
// kind, payload}: lifecycle (every transition), prompt (written durably
// before dispatch), update, handle change, stop. Seqs start at 1 and have no
// gaps, with one exception: a restore from backup (below) jumps every
// journal's position 2^32 past the last seq its backup knew, so that no seq
// acknowledged before the store was lost is ever handed out again. Clients
// see a jump, never a reuse. An append carries the writer's fence and is
// refused unless that fence is current and the lease is held and unlatched
// (CheckAppend). An append returns only when it is durable; concurrent
// appends from many sessions are group-committed, one sync for the lot.
// Readers Replay from any seq, or Tail: replay, then follow live entries,
// missing none; a reader whose session is deleted (and perhaps created
// again under the same id) meanwhile gets ErrNotFound rather than entries
// of another journal.
//
// Delete removes a released session and its journal. Its first step marks
// the session Deleting; from then on nothing but a Delete that finishes the
// job is accepted, so an interrupted Delete never leaves a session someone
// took over with half its journal.
//
// A Journal is one writer's handle on a journal. Its Close waits for the
// appends it admitted and may fail (its context ended first); a failed close
// is kept by CloseRetries and retried by the next stop, so a failed stop never
// forgets what it was tearing down.
//
// # The Badger store
//
// OpenBadger keeps everything in one Badger directory under the state
// directory, tuned for a desktop footprint (see badgerOptions). Before
// opening it takes an exclusive lock naming its pid (a second host gets
// "state directory in use by pid N"; when pid N has exited, the open first
// waits up to two seconds, since a child the dead host was starting holds
// its descriptors until its exec), and a crash-loop marker: Badger can
// kill the process while opening a damaged table, so opens that keep dying
// are detected (Options.ProbeOpen tells them from deaths with other causes),
// the damaged directory is moved aside and the session records are restored
// from the backup the store rewrites after every batch of lease changes. An
// open error that proves damage (a corrupt MANIFEST, a missing table, a
// checksum mismatch) restores too; any other (a lock another program holds,
// a newer Badger's store, a read-only or full disk) is refused with advice
// and moves nothing. Some damage Badger opens silently (a MANIFEST cut
// short drops the tables its lost part listed), so a store that opened is
// compared with its backup: a session the backup holds alive that the
// store lacks, or a journal behind its backed-up position, restores too.
// Delete records the deletion in the backup before the record goes, so a
// deleted session is not mistaken for a lost one (a backup written by a
// build older than this check does not record deletions). A
// restored lease keeps its fence but gets a floor, MinNextFence, above
// anything the lost commits could have granted; the floors are set before
// the restored store is put in place, and every step of a restore can be
// interrupted and is finished or redone by the next open. The report
// (Recovery) lasts until a Close succeeds. Present checks whether a state
// directory has a store at all with two bounded existence checks and no
// open.
//
// The store keeps Options.MinFreeSpace free on its disk and refuses writes
// that would eat into it (ErrNoSpace): Badger writes through a sparse
// memory map, where a full disk is a SIGBUS rather than an error.
//
// A commit that fails other than by a conflict may have taken effect
// anyway; the store then refuses every further write with ErrDamaged, asking
// for a restart, rather than let a caller's retry write twice. Reads go on.
//
// Store is the interface over all of this; package leasestoretest holds the
// conformance suite every backend must pass, so that a distributed backend
// can be added without touching the host.
package leasestore
