package leasestore

import (
	"errors"
	"fmt"
	"syscall"
)

// Sentinel errors. Every error a Store returns for a refused operation
// matches one of these with errors.Is; the typed errors below carry detail
// and match their sentinel too.
var (
	// ErrNotFound: no session with that id.
	ErrNotFound = errors.New("session not found")
	// ErrExists: a session with that id already exists.
	ErrExists = errors.New("session already exists")
	// ErrStaleFence: the caller's fence is not the session's current fence.
	ErrStaleFence = errors.New("stale fence")
	// ErrReconciling: the host has not decided this session since it opened
	// the store, so no writer may be admitted yet.
	ErrReconciling = errors.New("session is awaiting restart reconciliation")
	// ErrOwnershipUnknown: the lease is latched (recovering or
	// manual-recovery); only new evidence about the owner can unlatch it.
	ErrOwnershipUnknown = errors.New("session ownership is unknown")
	// ErrConflict: the session is conflicted, or held by another owner.
	ErrConflict = errors.New("session lease conflict")
	// ErrInvalidTransition: the transition is not allowed from the lease's
	// current claim and stage.
	ErrInvalidTransition = errors.New("transition not allowed in this lease state")
	// ErrTokenMismatch: a process did not echo the reserved spawn token, so
	// it is not the process the host started.
	ErrTokenMismatch = errors.New("spawn token does not match the reservation")
	// ErrIdentityMismatch: a readoption named a different process than the
	// recorded owner.
	ErrIdentityMismatch = errors.New("process identity does not match the recorded owner")
	// ErrInvalidArgument: the request itself is malformed (bad session id,
	// oversized entry, missing evidence…).
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrLocked: another process holds the store (for the Badger backend,
	// its state directory).
	ErrLocked = errors.New("state directory in use")
	// ErrDamaged: the store on disk cannot be opened and could not be
	// restored from a backup; or a write failed in a way that may or may
	// not have taken effect, after which the store refuses every write
	// until the host restarts and reopens it.
	ErrDamaged = errors.New("state store is damaged")
	// ErrClosed: the store has been closed.
	ErrClosed = errors.New("lease store closed")
	// ErrNoSpace: the disk holding the store is (nearly) full, so the
	// write was refused before it reached the backend. Nothing was written;
	// the same write succeeds once space is freed. It wraps
	// syscall.ENOSPC, so errors.Is(err, syscall.ENOSPC) holds too.
	ErrNoSpace = fmt.Errorf("lease store disk is full: %w", syscall.ENOSPC)
)

// StaleFenceError is returned when a caller's fence is not current. It
// matches ErrStaleFence.
type StaleFenceError struct {
	SessionID string
	Expected  uint64 // the fence the caller named
	Current   uint64 // the session's fence
}

func (e *StaleFenceError) Error() string {
	return fmt.Sprintf("stale fence for session %q: caller holds fence %d, current fence is %d",
		e.SessionID, e.Expected, e.Current)
}

// Is makes errors.Is(err, ErrStaleFence) true.
func (e *StaleFenceError) Is(target error) bool { return target == ErrStaleFence }

// TransitionError explains why a transition was refused. Err is the sentinel
// it matches (ErrInvalidTransition, ErrConflict, ErrOwnershipUnknown,
// ErrReconciling, ErrTokenMismatch, ErrIdentityMismatch, ErrInvalidArgument,
// or ErrNotFound for a session whose Delete has begun).
type TransitionError struct {
	Op        string // transition name, e.g. "reserve"
	SessionID string
	Claim     Claim
	Stage     Stage
	Reason    string
	Err       error
}

func (e *TransitionError) Error() string {
	stage := string(e.Stage)
	if stage == "" {
		stage = "none"
	}
	return fmt.Sprintf("%s session %q refused (claim %s, stage %s): %s: %v",
		e.Op, e.SessionID, e.Claim, stage, e.Reason, e.Err)
}

func (e *TransitionError) Unwrap() error { return e.Err }
