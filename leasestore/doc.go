// Package leasestore is the durable model of agenthost: session records,
// the lease that says which process may write to each session, and each
// session's journal. It holds the types, the transitions, the codecs and
// the Store interface; it stores nothing itself. Package
// leasestore/badgerstore is the embedded backend, and package
// leasestoretest the conformance suite every backend passes.
//
// # Sessions and leases
//
// A session record is the identity of one agent conversation, independent
// of any process: its id, agent, workspace, the options the plugin
// acknowledged, and the provider handle chain (each link a handle such as a
// Claude session id or a Codex thread id, how it came to be, and the fence it
// was minted at). Beside the record a store keeps the session's journal and,
// when a plugin exported one, its provider state (see "Provider state"
// below). Session ids are opaque: any valid UTF-8, NUL and '/'
// included (ValidateSessionID).
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
//	reserved/proving ──CommitOwner(pid, token)──▶ same, owner recorded
//	                                       (only a process echoing the reserved token,
//	                                       never after a pre-spawn proof)
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
//	released ──Reconciled──▶ released                            nothing to decide
//
// No transition enters the conflicted claim; a record that carries one is
// refused every move but Latch and Evict. The next fence is
// max(fence+1, MinNextFence). Every transition is pure (see Transition): a
// backend reads the record inside one transaction, calls Apply, and writes
// the result together with the journal entry the move produced, so the
// journal holds the lease's whole history.
//
// # Batches
//
// ApplyBatch makes several sessions' moves durable in one commit: a host
// that readopts a hundred sessions at start pays one sync for the moves
// that arrive together, not one each. A batch changes nothing about what a
// move may do: each is judged alone (CheckAppend's rules, fences,
// Deleting, the journal entry it writes), and a refused move only fills its
// own result slot. Moves of one session apply in the batch's order.
//
// What is atomic is a commit, not a batch. The accepted moves of one
// commit land together or not at all, each with its lifecycle entry; a
// backend may split a batch too large for one commit (the Badger backend
// does, at its transaction size limit, and may also share a commit with
// other callers' writes), so a caller must not read a batch as one
// all-or-nothing step across sessions: every slot reports its own move's
// fate. A commit that failed gives each of its moves the commit's error;
// if the backend cannot tell whether it landed, the error matches
// ErrDamaged and the store refuses every later write, exactly as for
// Apply. A batch whose context ended before the backend took it reports
// ctx's error in every slot and wrote nothing; once taken, it completes.
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
// gaps, with one exception: a backend that recovers from losing part of its
// store (a restore from a backup, or journals found shorter than the copy
// it keeps of them) jumps every journal it cannot vouch for RestoredSeqGap
// past the last seq it knew, with a lifecycle entry naming where the gap
// starts (LifecycleEvent.GapAfter), so that no seq acknowledged before the
// loss is ever handed out again to another entry. Clients see a jump,
// never a reuse; Store.Recovery reports it. An append carries the writer's fence and is
// refused unless that fence is current and the lease is held and unlatched
// (CheckAppend); it returns only when it is durable. Readers Replay from any
// seq, or Tail: replay, then follow live entries, missing none; a reader
// whose session is deleted (and perhaps created again under the same id,
// with a new Incarnation) meanwhile gets ErrNotFound rather than entries of
// another journal.
//
// A Journal is one writer's handle on a journal (Store.OpenJournal). Its
// Close waits for the appends it admitted and may fail (its context ended
// first); a failed close is kept by CloseRetries and retried by the next
// stop, so a failed stop never forgets what it was tearing down.
//
// Delete removes a released session and its journal (CheckDelete). A
// backend that needs several steps marks the session Deleting first; from
// then on nothing but a Delete that finishes the job is accepted, so an
// interrupted Delete never leaves a session someone took over with half its
// journal.
//
// # Several hosts on one store
//
// A backend shared by hosts on several machines (leasestore/etcdstore)
// also implements Cluster; the model above holds unchanged, and a few
// fields say which host each session belongs to. A pid means nothing on
// another machine, so a session has exactly one owner host: the committed
// owner's ProcessIdentity.HostID, or, for a reservation no owner has been
// committed to yet, Lease.ReservedBy, the host that reserved it
// (Reserve.HostID; kept while the ownership lasts, cleared on release like
// the rest of the lease). Lease.OwnerHost names it. A host that opens a
// shared store marks unreconciled only the leases it must decide
// (MarkHostUnreconciled, Lease.ReconciledBy): its owners', its
// reservations', and held leases naming no host at all (records from
// before hosts were recorded: every host flags them, failing closed).
// Released leases and other hosts' leases are untouched, so their writers
// go on appending while this host starts. A single machine keeps
// MarkAllUnreconciled.
//
// Another host's session is never judged from this host's process table
// (package probe). It is taken over only when its owner host lost its
// liveness lease in the cluster, with Cluster.ApplyIfHostLost and an Evict
// carrying EvidenceHostLost: the backend's transaction checks the lost
// host still has no registration and names it in Env.LostHost, and Evict
// accepts that evidence only then, and only for a lease whose owner host
// it names. A plain Apply cannot carry it.
//
// # Provider state: what is portable
//
// The store holds everything a host needs to continue a session except the
// provider's own conversation, which lives in the plugin's files on the
// machine that ran it (claude's transcript, codex's rollout). A plugin
// that can export it hands it over after each turn, and the host keeps the
// newest export with the session (ProviderStates): PutProviderState is
// fenced exactly like an append (CheckAppend: only the current, unlatched
// holder of a decided lease), replaces the previous state whole, refuses
// Data over MaxProviderStateBytes, and records the writer's fence; Delete
// removes the state with the session; the state outlives a release, since
// a host on another machine resumes from it. A session whose stored state
// continues its current handle (Session.Handle; ProviderState.Handle) is
// portable: any host resumes it, importing the state first. One without
// (the plugin exports nothing, or its state is too large, or no turn of
// the current handle exported yet) resumes only where its provider files
// are: each HandleLink names the host it was minted on (HandleLink.HostID,
// empty in older records), so a host in a cluster can tell. Portability
// is asked of every listed session, so a backend implements the optional
// ProviderStateHandles, which names the stored state's handle without
// reading its data (StoredStateHandle falls back to GetProviderState). A backend may keep provider state
// out of its backups: a store restored from backup loses it, and the
// sessions stay resumable on their own machines.
//
// # Backends
//
// Store is all the host knows of its storage. A backend owes it more than
// the method contracts: a commit whose outcome it cannot tell (a failed sync,
// say) may have taken effect, so the backend must refuse every later write
// (ErrDamaged) rather than let a caller's retry append twice; reads go on.
// Every refused operation matches one of the sentinel errors.
package leasestore
