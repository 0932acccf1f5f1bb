package leasestore

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"
)

// Env is what a transition may take from outside the record: the time and a
// source of fresh spawn tokens. Backends supply it; tests pin it.
type Env struct {
	Now time.Time
	// NewToken mints a spawn token. Called only by a reservation that wins.
	NewToken func() (string, error)
	// LostHost is set only by Cluster.ApplyIfHostLost: the host id whose
	// absence from the cluster the backend's transaction requires. Evict
	// accepts EvidenceHostLost only with it, and only for a lease whose
	// owner host (Lease.OwnerHost) it names, so a takeover through a plain
	// Apply, or one naming another host than the owner's, is refused.
	LostHost string
}

// Transition is one move of the lease state machine. The set is closed: only
// this package defines transitions, so every backend enforces the same rules
// by calling Apply inside its own atomic read-modify-write.
type Transition interface {
	// Name is the transition's name in errors and journal entries.
	Name() string
	// Apply checks the transition against the session as read inside the
	// backend's transaction and returns the session as it must be written,
	// plus the journal entry that records the move (nil for none). On error
	// the returned session must be discarded. Apply never mutates s.
	Apply(s Session, env Env) (Session, *EntryInput, error)
	// Adjudicates reports whether this is a restart decision, the only kind
	// of transition allowed while a lease is unreconciled.
	Adjudicates() bool

	sealed()
}

// LifecycleEvent is the payload of every KindLifecycle journal entry a
// transition writes: the move and the lease state it left behind.
type LifecycleEvent struct {
	Event    string         `json:"event"`
	Fence    uint64         `json:"fence"`
	Claim    Claim          `json:"claim"`
	Stage    Stage          `json:"stage,omitempty"`
	PID      int            `json:"pid,omitempty"`
	Handle   string         `json:"handle,omitempty"`
	Evidence *DeathEvidence `json:"evidence,omitempty"`
	Reason   string         `json:"reason,omitempty"`
	// GapAfter, on the entry a restore from backup or a journal recovery
	// writes, is the last seq before the jump it made (RestoredSeqGap): no
	// seq between it and this entry's was ever handed out, and a reader
	// walking the journal backwards goes on from it.
	GapAfter uint64 `json:"gapAfter,omitempty"`
}

// LifecycleEntry returns the KindLifecycle journal entry that records ev on
// s, stamped with the lease state s is in. Transitions write their own; a
// backend uses it for events that are not transitions (a session created,
// a store restored from backup).
func LifecycleEntry(s Session, ev LifecycleEvent) EntryInput {
	return *lifecycle(KindLifecycle, s, ev)
}

func lifecycle(kind EntryKind, s Session, ev LifecycleEvent) *EntryInput {
	ev.Fence, ev.Claim, ev.Stage = s.Lease.Fence, s.Lease.Claim, s.Lease.Stage
	payload, err := json.Marshal(ev)
	if err != nil {
		// LifecycleEvent holds only strings, numbers and a time: Marshal
		// cannot fail on it.
		panic(fmt.Sprintf("leasestore: encode lifecycle event: %v", err))
	}
	return &EntryInput{Kind: kind, Payload: payload}
}

// refuseDeleting refuses any move on a session whose Delete has begun: part
// of its journal may be gone already, so nobody may take it over, and the
// only way on is a Delete that finishes the job.
func refuseDeleting(op string, s Session) error {
	return refuse(op, s, ErrNotFound, "the session is being deleted; call Delete again to finish")
}

func refuse(op string, s Session, sentinel error, format string, args ...any) error {
	return &TransitionError{
		Op: op, SessionID: s.ID, Claim: s.Lease.Claim, Stage: s.Lease.Stage,
		Reason: fmt.Sprintf(format, args...), Err: sentinel,
	}
}

// admit applies the checks every transition makes first, in this order: a
// session being deleted admits nothing but the Delete that finishes it, an
// unreconciled lease admits only restart decisions, and the caller's fence
// must be the current one.
func admit(t Transition, s Session, fence uint64) error {
	if s.Deleting {
		return refuseDeleting(t.Name(), s)
	}
	if s.Lease.Unreconciled && !t.Adjudicates() {
		return refuse(t.Name(), s, ErrReconciling, "the host has not decided this session since the store was opened")
	}
	if fence != s.Lease.Fence {
		return &StaleFenceError{SessionID: s.ID, Expected: fence, Current: s.Lease.Fence}
	}
	return nil
}

// released returns the lease as a proven end of ownership leaves it: next
// fence, nobody holding it, with the evidence that proved it.
func released(l Lease, ev DeathEvidence) Lease {
	return Lease{
		Fence:         l.NextFence(),
		Claim:         ClaimReleased,
		DeathEvidence: &ev,
		MinNextFence:  l.MinNextFence,
		ClaimKeyID:    l.ClaimKeyID,
	}
}

// CheckAppend reports whether a writer holding fence may append to the
// session's journal: the session must not be being deleted, the fence must
// be current, the session decided since the store was opened, and held
// (reserved or live) without a latch.
func CheckAppend(s Session, fence uint64) error {
	const op = "append"
	if s.Deleting {
		return refuseDeleting(op, s)
	}
	if s.Lease.Unreconciled {
		return refuse(op, s, ErrReconciling, "the host has not decided this session since the store was opened")
	}
	if fence != s.Lease.Fence {
		return &StaleFenceError{SessionID: s.ID, Expected: fence, Current: s.Lease.Fence}
	}
	switch {
	case s.Lease.Stage.Latched():
		return refuse(op, s, ErrOwnershipUnknown, "the lease is latched; no writer is admitted")
	case s.Lease.Claim == ClaimConflicted:
		return refuse(op, s, ErrConflict, "the session is conflicted")
	case s.Lease.Claim != ClaimReserved && s.Lease.Claim != ClaimLive:
		return refuse(op, s, ErrInvalidTransition, "nobody holds the lease at fence %d", s.Lease.Fence)
	}
	return nil
}

// CheckDelete reports whether a Delete at fence may go on with s. A session
// whose Delete has begun admits a Delete at its fence, which finishes the
// job: a restart may have flagged it unreconciled since, but only Delete can
// move it on, so only the fence is checked. Any other session must be
// decided since the store was opened, at the current fence, and released and
// settled.
func CheckDelete(s Session, fence uint64) error {
	const op = "delete"
	stale := fence != s.Lease.Fence
	if s.Deleting {
		if stale {
			return &StaleFenceError{SessionID: s.ID, Expected: fence, Current: s.Lease.Fence}
		}
		return nil
	}
	switch {
	case s.Lease.Unreconciled:
		return refuse(op, s, ErrReconciling, "the host has not decided this session since the store was opened")
	case stale:
		return &StaleFenceError{SessionID: s.ID, Expected: fence, Current: s.Lease.Fence}
	case s.Lease.Claim != ClaimReleased || s.Lease.Stage != StageNone:
		return refuse(op, s, ErrConflict, "only a released, settled session can be deleted")
	}
	return nil
}

// Reserve acquires the lease by compare-and-swap on ExpectedFence: the
// session must be released and unlatched. The fence moves to the next value,
// a fresh spawn token is minted, and the lease waits in stage proving for an
// owner process.
type Reserve struct {
	ExpectedFence uint64
	// ClaimKeyID names the host key the claim is granted under.
	ClaimKeyID string
	// HostID is the reserving host's id, recorded as Lease.ReservedBy so
	// that other hosts sharing the store know whose reservation it is
	// before an owner process is committed. Empty: not recorded.
	HostID string
}

func (Reserve) Name() string      { return "reserve" }
func (Reserve) Adjudicates() bool { return false }
func (Reserve) sealed()           {}

func (t Reserve) Apply(s Session, env Env) (Session, *EntryInput, error) {
	if err := admit(t, s, t.ExpectedFence); err != nil {
		return s, nil, err
	}
	l := s.Lease
	switch {
	case l.Claim == ClaimConflicted:
		return s, nil, refuse(t.Name(), s, ErrConflict, "the session is conflicted; settle it before reserving")
	case l.Stage.Latched():
		// No stage expires into an owner: only evidence unlatches.
		return s, nil, refuse(t.Name(), s, ErrOwnershipUnknown, "the previous owner is unverified (%s)", l.LatchReason)
	case l.Claim != ClaimReleased:
		return s, nil, refuse(t.Name(), s, ErrConflict, "the lease is held at fence %d", l.Fence)
	}
	token, err := env.NewToken()
	if err != nil {
		return s, nil, fmt.Errorf("reserve session %q: mint spawn token: %w", s.ID, err)
	}
	if token == "" {
		// CommitOwner compares the child's token with this one: an empty
		// token would accept any child that carries none.
		return s, nil, fmt.Errorf("reserve session %q: mint spawn token: the token source returned an empty token", s.ID)
	}
	s.Lease = Lease{
		Fence:              l.NextFence(),
		Claim:              ClaimReserved,
		Stage:              StageProving,
		ReservedSpawnToken: token,
		MinNextFence:       l.MinNextFence,
		ClaimKeyID:         t.ClaimKeyID,
		ReservedBy:         t.HostID,
	}
	return s, lifecycle(KindLifecycle, s, LifecycleEvent{Event: "reserved"}), nil
}

// requireProving checks the state every spawn-side transition needs: a
// reservation still waiting for its owner to prove itself.
func requireProving(op string, s Session) error {
	if s.Lease.Claim != ClaimReserved || s.Lease.Stage != StageProving {
		return refuse(op, s, ErrInvalidTransition, "the lease is not a reservation awaiting its owner")
	}
	return nil
}

// PreSpawnFailure records durable proof that the acquisition at Fence failed
// before any spawn attempt. A restart may then free the reservation without
// probing for a process that cannot exist.
type PreSpawnFailure struct {
	Fence  uint64
	Reason string
}

func (PreSpawnFailure) Name() string      { return "pre-spawn-failure" }
func (PreSpawnFailure) Adjudicates() bool { return false }
func (PreSpawnFailure) sealed()           {}

func (t PreSpawnFailure) Apply(s Session, env Env) (Session, *EntryInput, error) {
	if err := admit(t, s, t.Fence); err != nil {
		return s, nil, err
	}
	if err := requireProving(t.Name(), s); err != nil {
		return s, nil, err
	}
	if s.Lease.Owner != nil {
		return s, nil, refuse(t.Name(), s, ErrInvalidTransition, "an owner process was already committed (pid %d)", s.Lease.Owner.PID)
	}
	s.Lease.ProcesslessAt = env.Now
	return s, lifecycle(KindLifecycle, s, LifecycleEvent{Event: "pre-spawn-failure", Reason: t.Reason}), nil
}

// CommitOwner records the spawned process as the reservation's owner. Only a
// process that echoes the reserved spawn token is accepted; committing the
// same process twice is a no-op retry.
type CommitOwner struct {
	Fence    uint64
	Owner    ProcessIdentity
	Reattach *Reattach
}

func (CommitOwner) Name() string      { return "commit-owner" }
func (CommitOwner) Adjudicates() bool { return false }
func (CommitOwner) sealed()           {}

func (t CommitOwner) Apply(s Session, env Env) (Session, *EntryInput, error) {
	if err := admit(t, s, t.Fence); err != nil {
		return s, nil, err
	}
	if err := requireProving(t.Name(), s); err != nil {
		return s, nil, err
	}
	switch {
	case t.Owner.HostID == "" || t.Owner.PID <= 0:
		return s, nil, refuse(t.Name(), s, ErrInvalidArgument, "an owner needs a host id and a positive pid")
	case t.Owner.SpawnToken != s.Lease.ReservedSpawnToken:
		// A child that cannot echo the reserved token is not the process
		// this reservation started.
		return s, nil, refuse(t.Name(), s, ErrTokenMismatch, "pid %d carries another spawn token", t.Owner.PID)
	case !s.Lease.ProcesslessAt.IsZero():
		// The proof is final: no process may own this reservation.
		return s, nil, refuse(t.Name(), s, ErrInvalidTransition, "a pre-spawn failure was recorded at this fence; release the reservation and reserve again")
	case s.Lease.Owner != nil && s.Lease.Owner.SameProcess(t.Owner):
		return s, nil, nil
	case s.Lease.Owner != nil:
		return s, nil, refuse(t.Name(), s, ErrConflict, "pid %d is already the committed owner", s.Lease.Owner.PID)
	}
	owner := t.Owner
	s.Lease.Owner = &owner
	if t.Reattach != nil {
		r := *t.Reattach
		s.Lease.Reattach = &r
	}
	return s, lifecycle(KindLifecycle, s, LifecycleEvent{Event: "owner-committed", PID: owner.PID}), nil
}

// ProveOwner admits the committed owner as the session's writer once it has
// answered readiness and named its provider handle: the handle is appended to
// the chain at this fence and the claim goes live.
type ProveOwner struct {
	Fence  uint64
	Handle string
	Origin HandleOrigin
	// InstanceID is the plugin instance id the owner reported over its
	// identity RPC; recorded in the owner identity (empty: unchanged).
	InstanceID string
	// Reattach is how a later host reconnects to the owner (nil:
	// unchanged).
	Reattach *Reattach
}

func (ProveOwner) Name() string      { return "prove-owner" }
func (ProveOwner) Adjudicates() bool { return false }
func (ProveOwner) sealed()           {}

func (t ProveOwner) Apply(s Session, env Env) (Session, *EntryInput, error) {
	if err := admit(t, s, t.Fence); err != nil {
		return s, nil, err
	}
	if err := requireProving(t.Name(), s); err != nil {
		return s, nil, err
	}
	if s.Lease.Owner == nil {
		return s, nil, refuse(t.Name(), s, ErrInvalidTransition, "no owner process was committed")
	}
	handles, err := appendHandle(t.Name(), s, t.Handle, t.Origin, env.Now)
	if err != nil {
		return s, nil, err
	}
	s.Handles = handles
	s.Lease.Claim, s.Lease.Stage = ClaimLive, StageNone
	if t.InstanceID != "" {
		owner := *s.Lease.Owner
		owner.InstanceID = t.InstanceID
		s.Lease.Owner = &owner
	}
	if t.Reattach != nil {
		r := *t.Reattach
		s.Lease.Reattach = &r
	}
	return s, lifecycle(KindLifecycle, s, LifecycleEvent{Event: "owner-proven", PID: s.Lease.Owner.PID, Handle: t.Handle}), nil
}

// appendHandle records handle as the chain's head, minted at the session's
// current fence, on the host the lease names (Lease.OwnerHost: the owner's
// HostID, or the reservation's). The chain records handle changes: proving the head's handle
// again at the same fence is a retry and changes nothing, and resuming the
// same handle under a later fence re-mints the head rather than adding a
// link, so a conversation resumed a thousand times does not fill the chain.
func appendHandle(op string, s Session, handle string, origin HandleOrigin, now time.Time) ([]HandleLink, error) {
	switch origin {
	case HandleCreated, HandleResumed, HandleForked, HandleAdopted:
	default:
		return nil, refuse(op, s, ErrInvalidArgument, "unknown handle origin %q", origin)
	}
	if handle == "" {
		return nil, refuse(op, s, ErrInvalidArgument, "a provider handle is required")
	}
	link := HandleLink{Handle: handle, Origin: origin, Fence: s.Lease.Fence, ObservedAt: now, HostID: s.Lease.OwnerHost()}
	if n := len(s.Handles); n > 0 {
		head := s.Handles[n-1]
		switch {
		case head.Fence > s.Lease.Fence:
			return nil, refuse(op, s, ErrStaleFence, "the newest handle was minted at a later fence %d", head.Fence)
		case head.Handle == handle && head.Fence == s.Lease.Fence:
			return s.Handles, nil
		case head.Handle == handle:
			out := slices.Clone(s.Handles)
			out[n-1] = link
			return out, nil
		}
	}
	if len(s.Handles) >= MaxHandleLinks {
		return nil, refuse(op, s, ErrInvalidArgument, "the provider handle chain is full (%d links)", MaxHandleLinks)
	}
	return append(slices.Clip(s.Handles), link), nil
}

// RecordHandle appends a provider handle change reported by the live owner
// (a resume that minted a new id, a fork). The same handle again is a no-op.
type RecordHandle struct {
	Fence  uint64
	Handle string
	Origin HandleOrigin
}

func (RecordHandle) Name() string      { return "record-handle" }
func (RecordHandle) Adjudicates() bool { return false }
func (RecordHandle) sealed()           {}

func (t RecordHandle) Apply(s Session, env Env) (Session, *EntryInput, error) {
	if err := admit(t, s, t.Fence); err != nil {
		return s, nil, err
	}
	if !s.Lease.AdmitsWriter() {
		return s, nil, refuse(t.Name(), s, ErrInvalidTransition, "only the live owner reports handle changes")
	}
	if s.Handle() == t.Handle {
		return s, nil, nil
	}
	handles, err := appendHandle(t.Name(), s, t.Handle, t.Origin, env.Now)
	if err != nil {
		return s, nil, err
	}
	s.Handles = handles
	return s, lifecycle(KindHandle, s, LifecycleEvent{Event: "handle-changed", Handle: t.Handle}), nil
}

// Release ends ownership after this host observed its own plugin stop. The
// fence moves so that anything queued against the dead generation cannot
// land on the next one. An ownerless reservation may be released only with
// durable pre-spawn proof: otherwise the failure may have lost a race with a
// spawn rather than beaten it.
type Release struct {
	Fence  uint64
	Detail string
}

func (Release) Name() string      { return "release" }
func (Release) Adjudicates() bool { return false }
func (Release) sealed()           {}

func (t Release) Apply(s Session, env Env) (Session, *EntryInput, error) {
	if err := admit(t, s, t.Fence); err != nil {
		return s, nil, err
	}
	l := s.Lease
	if l.Stage.Latched() {
		return s, nil, refuse(t.Name(), s, ErrOwnershipUnknown, "a latched lease leaves only on evidence; evict it with the evidence")
	}
	if l.Claim != ClaimReserved && l.Claim != ClaimLive {
		return s, nil, refuse(t.Name(), s, ErrInvalidTransition, "nobody holds the lease")
	}
	ev := DeathEvidence{Kind: EvidenceExitObserved, Detail: t.Detail, ObservedAt: env.Now}
	if l.Owner == nil {
		if l.ProcesslessAt.IsZero() {
			return s, nil, refuse(t.Name(), s, ErrOwnershipUnknown, "no owner was committed and no pre-spawn failure was recorded")
		}
		ev = DeathEvidence{Kind: EvidencePIDAbsent, Detail: "reservation failed before spawn: " + t.Detail, ObservedAt: env.Now}
	}
	s.Lease = released(l, ev)
	return s, lifecycle(KindLifecycle, s, LifecycleEvent{Event: "released", Evidence: &ev}), nil
}

// Evict ends ownership at restart (or on an attach that re-probed a latched
// lease) on proof that the owner is gone: exit observed, pid absent,
// identity mismatch, or a person's explicit confirmation.
type Evict struct {
	Fence    uint64
	Evidence DeathEvidence
}

func (Evict) Name() string      { return "evict" }
func (Evict) Adjudicates() bool { return true }
func (Evict) sealed()           {}

func (t Evict) Apply(s Session, env Env) (Session, *EntryInput, error) {
	if err := admit(t, s, t.Fence); err != nil {
		return s, nil, err
	}
	l := s.Lease
	switch t.Evidence.Kind {
	case EvidenceExitObserved, EvidencePIDAbsent, EvidenceIdentityMismatch, EvidenceOperator:
	case EvidenceHostLost:
		// The loss of a host proves its plugins gone only for the
		// sessions it owned, and only the backend's check that the host
		// has no registration proves the loss.
		switch owner := l.OwnerHost(); {
		case env.LostHost == "":
			return s, nil, refuse(t.Name(), s, ErrInvalidArgument, "a lost host is proven only by a cluster's takeover (ApplyIfHostLost)")
		case owner == "":
			return s, nil, refuse(t.Name(), s, ErrOwnershipUnknown, "the lease names no owner host, so the loss of host %q proves nothing about it", env.LostHost)
		case owner != env.LostHost:
			return s, nil, refuse(t.Name(), s, ErrInvalidArgument, "the lease belongs to host %q, not to the lost host %q", owner, env.LostHost)
		}
	default:
		return s, nil, refuse(t.Name(), s, ErrInvalidArgument, "eviction needs proof of death, got evidence kind %q", t.Evidence.Kind)
	}
	if l.Claim == ClaimReleased && !l.Stage.Latched() {
		return s, nil, refuse(t.Name(), s, ErrInvalidTransition, "nobody holds the lease")
	}
	ev := t.Evidence
	if ev.ObservedAt.IsZero() {
		ev.ObservedAt = env.Now
	}
	s.Lease = released(l, ev)
	return s, lifecycle(KindLifecycle, s, LifecycleEvent{Event: "evicted", Evidence: &ev}), nil
}

// Readopt makes a new host the driver of an owner that survived the old
// one: the owner must be the recorded process (same host, pid, start time,
// spawn token and instance id, as its identity RPC and the probe showed).
// The fence moves and the plugin is told the new fence, so the old host can
// never drive it again.
type Readopt struct {
	Fence    uint64
	Owner    ProcessIdentity
	Reattach *Reattach
}

func (Readopt) Name() string      { return "readopt" }
func (Readopt) Adjudicates() bool { return true }
func (Readopt) sealed()           {}

func (t Readopt) Apply(s Session, env Env) (Session, *EntryInput, error) {
	if err := admit(t, s, t.Fence); err != nil {
		return s, nil, err
	}
	l := s.Lease
	switch {
	case l.Claim != ClaimLive && l.Claim != ClaimReserved:
		return s, nil, refuse(t.Name(), s, ErrInvalidTransition, "only a held lease can be readopted")
	case l.Owner == nil:
		return s, nil, refuse(t.Name(), s, ErrInvalidTransition, "no owner process is recorded")
	case !l.Owner.SameProcess(t.Owner):
		return s, nil, refuse(t.Name(), s, ErrIdentityMismatch, "recorded pid %d, offered pid %d", l.Owner.PID, t.Owner.PID)
	}
	l.Fence = l.NextFence()
	l.Stage = StageNone
	if l.Claim == ClaimReserved {
		l.Stage = StageProving
	}
	if t.Reattach != nil {
		r := *t.Reattach
		l.Reattach = &r
	}
	l.Unreconciled, l.LatchReason = false, ""
	s.Lease = l
	return s, lifecycle(KindLifecycle, s, LifecycleEvent{Event: "readopted", PID: l.Owner.PID}), nil
}

// Latch parks a lease whose owner could not be proven alive or dead:
// StageRecovering when an exact owner is recorded (the host keeps
// re-probing), StageManualRecovery when nobody can be named. The fence does
// not move; only new evidence unlatches.
type Latch struct {
	Fence  uint64
	Stage  Stage
	Reason string
}

func (Latch) Name() string      { return "latch" }
func (Latch) Adjudicates() bool { return true }
func (Latch) sealed()           {}

func (t Latch) Apply(s Session, env Env) (Session, *EntryInput, error) {
	if err := admit(t, s, t.Fence); err != nil {
		return s, nil, err
	}
	switch {
	case !t.Stage.Latched():
		return s, nil, refuse(t.Name(), s, ErrInvalidArgument, "latch to %q: only recovering or manual-recovery", t.Stage)
	case s.Lease.Claim == ClaimReleased:
		return s, nil, refuse(t.Name(), s, ErrInvalidTransition, "a released lease has no owner to be unsure about")
	case t.Stage == StageRecovering && s.Lease.Owner == nil:
		return s, nil, refuse(t.Name(), s, ErrInvalidTransition, "recovering needs a recorded owner to re-probe; use manual-recovery")
	}
	s.Lease.Stage, s.Lease.LatchReason, s.Lease.Unreconciled = t.Stage, t.Reason, false
	return s, lifecycle(KindLifecycle, s, LifecycleEvent{Event: "latched", Reason: t.Reason}), nil
}

// Reconciled records the restart decision for a lease nobody holds: there is
// nothing to probe, so it is simply admitted again.
type Reconciled struct {
	Fence uint64
}

func (Reconciled) Name() string      { return "reconciled" }
func (Reconciled) Adjudicates() bool { return true }
func (Reconciled) sealed()           {}

func (t Reconciled) Apply(s Session, env Env) (Session, *EntryInput, error) {
	if err := admit(t, s, t.Fence); err != nil {
		return s, nil, err
	}
	if s.Lease.Claim != ClaimReleased || s.Lease.Stage.Latched() {
		return s, nil, refuse(t.Name(), s, ErrInvalidTransition, "a held or latched lease needs readopt, evict or latch")
	}
	s.Lease.Unreconciled = false
	return s, nil, nil
}

// MaxAllowedScopes caps the permission scopes a session remembers.
const MaxAllowedScopes = 1024

// RecordSettings records what the session's writer learned about the
// session's settings: the options its agent acknowledged (and later changes
// of mode or config option), the MCP servers, a title, a permission scope
// answered "allow always", the agent's reported state. Only the holder of
// the current fence records them, while it holds the lease (reserved or
// live, not latched), so a host that lost the session cannot overwrite
// what its successor recorded. A zero field leaves its setting as it is
// (the record is still written, and its UpdatedAt moves: a caller with
// nothing new skips the call). It journals nothing: the settings are
// the record's, and what the agent reported is journaled as its update.
type RecordSettings struct {
	Fence uint64
	// Options replace the stored options when not nil.
	Options map[string]string
	// MCPServers replace the stored servers when SetMCPServers is true.
	MCPServers    []MCPServer
	SetMCPServers bool
	// Title replaces the stored title when not empty.
	Title string
	// AllowScope is added to AllowedScopes when not empty.
	AllowScope string
	// AgentState replaces the stored agent state when not nil.
	AgentState []byte
}

func (RecordSettings) Name() string      { return "record-settings" }
func (RecordSettings) Adjudicates() bool { return false }
func (RecordSettings) sealed()           {}

func (t RecordSettings) Apply(s Session, env Env) (Session, *EntryInput, error) {
	if err := admit(t, s, t.Fence); err != nil {
		return s, nil, err
	}
	switch l := s.Lease; {
	case l.Stage.Latched():
		return s, nil, refuse(t.Name(), s, ErrOwnershipUnknown, "the lease is latched; no writer is admitted")
	case l.Claim != ClaimReserved && l.Claim != ClaimLive:
		return s, nil, refuse(t.Name(), s, ErrInvalidTransition, "nobody holds the lease at fence %d", l.Fence)
	}
	if t.Options != nil {
		s.Options = maps.Clone(t.Options)
	}
	if t.SetMCPServers {
		s.MCPServers = slices.Clone(t.MCPServers)
	}
	if t.Title != "" {
		s.Title = t.Title
	}
	if t.AllowScope != "" && !slices.Contains(s.AllowedScopes, t.AllowScope) {
		if len(s.AllowedScopes) >= MaxAllowedScopes {
			return s, nil, refuse(t.Name(), s, ErrInvalidArgument, "the session remembers %d allowed scopes already", MaxAllowedScopes)
		}
		s.AllowedScopes = append(slices.Clip(s.AllowedScopes), t.AllowScope)
	}
	if t.AgentState != nil {
		s.AgentState = slices.Clone(t.AgentState)
	}
	return s, nil, nil
}
