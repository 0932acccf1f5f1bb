package pluginclient

import (
	"context"
	"errors"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agenthost/agenthost/internal/wire"
)

// Sentinels a failed call matches with errors.Is. Each refusal reason of
// the protocol has its own; the rest follow the gRPC code.
var (
	// ErrStaleFence: the call carries a fence below the plugin's: a newer
	// host attached and drives the plugin now.
	ErrStaleFence = errors.New("stale fence: a newer host attached the plugin")
	// ErrNotAttached: the plugin is bound to no session; Attach first.
	ErrNotAttached = errors.New("the plugin is not attached")
	// ErrNeverAttached: the call carries a fence above the plugin's, one it
	// was never attached at.
	ErrNeverAttached = errors.New("the plugin was never attached at this fence")
	// ErrOtherSession: the plugin process serves another session.
	ErrOtherSession = errors.New("the plugin serves another session")
	// ErrNotThisProcess: Open named a spawn token or instance id that is
	// not the plugin process's (protocol version 2).
	ErrNotThisProcess = errors.New("the plugin is another process than the one asked for")
	// ErrClosed: the plugin's session was closed.
	ErrClosed = errors.New("the plugin's session is closed")
	// ErrAlreadyOpen: a session is already open, or opening, in the plugin.
	ErrAlreadyOpen = errors.New("a session is already open in the plugin")
	// ErrNoSession: no session is open in the plugin yet.
	ErrNoSession = errors.New("no session is open in the plugin")
	// ErrBusy: a turn is still running.
	ErrBusy = errors.New("the plugin is running a turn")
	// ErrTurnStarted: the prompt names a turn the plugin already started
	// in this process (running or ended); it did not run it again. Matched
	// by a *TurnStartedError, which says which.
	ErrTurnStarted = errors.New("the plugin already started this turn")
	// ErrSelfFenced: the plugin fenced itself (cluster mode: no Heartbeat
	// from a live host within its bound) and takes no turn until a
	// Heartbeat lifts it.
	ErrSelfFenced = errors.New("the plugin fenced itself: no live host was heard from in time")
	// ErrStateNotImportable: a resume carried provider state the agent
	// cannot import.
	ErrStateNotImportable = errors.New("the agent cannot import provider state")
	// ErrAgent: the agent itself refused or failed; the message is its own.
	ErrAgent = errors.New("the agent failed")
	// ErrRefused: the plugin refused the call (FAILED_PRECONDITION) without
	// a reason this client knows.
	ErrRefused = errors.New("the plugin refused the call")
	// ErrInvalidArgument: the plugin found the request malformed.
	ErrInvalidArgument = errors.New("the plugin refused the request as invalid")
	// ErrUnknownRequest: the permission request answered is not pending.
	ErrUnknownRequest = errors.New("no such pending request in the plugin")
	// ErrNotImplemented: the agent does not implement the call.
	ErrNotImplemented = errors.New("not implemented by the agent")
	// ErrDataLoss: the plugin lost updates it had not delivered (its
	// outbox could not be read).
	ErrDataLoss = errors.New("the plugin lost updates")
	// ErrInternal: the plugin failed internally (a bug in the plugin).
	ErrInternal = errors.New("the plugin failed internally")
	// ErrTooLarge: a message larger than the transport carries.
	ErrTooLarge = errors.New("message larger than the transport carries")
	// ErrUnavailable: the plugin is gone, or its connection broke.
	ErrUnavailable = errors.New("the plugin is unavailable")
)

// refusal returns the sentinel of a FAILED_PRECONDITION refusal with reason
// r; ErrRefused for none, or for one this client does not know.
func refusal(r wire.Reason) error {
	switch r {
	case wire.ReasonStaleFence:
		return ErrStaleFence
	case wire.ReasonNotAttached:
		return ErrNotAttached
	case wire.ReasonFenceNotAttached:
		return ErrNeverAttached
	case wire.ReasonOtherSession:
		return ErrOtherSession
	case wire.ReasonNotThisProcess:
		return ErrNotThisProcess
	case wire.ReasonClosed:
		return ErrClosed
	case wire.ReasonAlreadyOpen:
		return ErrAlreadyOpen
	case wire.ReasonNoSession:
		return ErrNoSession
	case wire.ReasonBusy:
		return ErrBusy
	case wire.ReasonAgent:
		return ErrAgent
	case wire.ReasonSelfFenced:
		return ErrSelfFenced
	case wire.ReasonStateNotImportable:
		return ErrStateNotImportable
	case wire.ReasonAuthRequired:
		return ErrAuthRequired
	}
	return ErrRefused
}

// TurnStartedError is a plugin refusing a prompt for a turn it already
// started (wire.ReasonTurnStarted): Running says the turn still runs, else
// it ended. Either way the turn's updates and turn_stopped are, or will be,
// on the update stream; the caller writes no stop of its own. It is the
// Reason of an *Error and matches ErrTurnStarted.
type TurnStartedError struct {
	Running bool
}

func (e *TurnStartedError) Error() string {
	if e.Running {
		return ErrTurnStarted.Error() + ", and it is running"
	}
	return ErrTurnStarted.Error() + ", and it has ended"
}

// Is makes errors.Is(err, ErrTurnStarted) true.
func (e *TurnStartedError) Is(target error) bool { return target == ErrTurnStarted }

// Error is a failed call. It prints as the gRPC status it came from, so
// messages stay the plugin's own words, and unwraps to its Reason and to
// that status.
type Error struct {
	// Reason is the sentinel the failure matches (ErrStaleFence, …), or the
	// caller's context error when its context ended; nil when neither
	// applies (an UNKNOWN status, say).
	Reason error
	// Message is the status message: for a refusal, the plugin's.
	Message string

	code  codes.Code
	ended bool  // the caller's context had ended
	err   error // the gRPC status error
}

// contextEnded is ctx's error, or context.DeadlineExceeded once ctx's
// deadline has passed even if its timer has not fired yet: on a loaded
// machine the plugin's copy of the deadline (gRPC sends it along) can end
// the call before this process's timer runs, and ctx.Err() is still nil.
func contextEnded(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

func (e *Error) Error() string { return e.err.Error() }

// Unwrap returns the Reason (when set) and the gRPC status error.
func (e *Error) Unwrap() []error {
	if e.Reason == nil {
		return []error{e.err}
	}
	return []error{e.Reason, e.err}
}

// Answered reports whether the plugin answered the call, refusing it, as
// opposed to the transport failing or a deadline or cancellation ending it.
func (e *Error) Answered() bool {
	if e.ended {
		return false
	}
	switch e.code {
	case codes.OK, codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return false
	}
	return true
}

// classify turns the error of a call made with ctx into an *Error. io.EOF
// (a stream's end) and errors that are no gRPC status pass unchanged.
func classify(ctx context.Context, err error) error {
	if err == nil || errors.Is(err, io.EOF) {
		return err
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	e := &Error{Message: st.Message(), code: st.Code(), err: err}
	if cerr := contextEnded(ctx); cerr != nil {
		// The caller's context ended: whatever gRPC made of it (its own
		// DEADLINE_EXCEEDED, a RST_STREAM the plugin sent when its copy of
		// the deadline fired first, a connection torn down meanwhile), the
		// caller gets its own context's error, and the call was not
		// answered.
		e.Reason, e.ended = cerr, true
		return e
	}
	switch st.Code() {
	case codes.FailedPrecondition:
		r, meta := wire.InfoOf(st)
		e.Reason = refusal(r)
		if r == wire.ReasonTurnStarted {
			e.Reason = &TurnStartedError{Running: meta[wire.MetaTurnState] == wire.TurnStateRunning}
		}
	case codes.Canceled:
		// Without a cancelled caller, it is the connection that closed.
		e.Reason = ErrUnavailable
	case codes.DeadlineExceeded:
		e.Reason = context.DeadlineExceeded
	case codes.Unavailable:
		e.Reason = ErrUnavailable
	case codes.InvalidArgument:
		e.Reason = ErrInvalidArgument
		if r, meta := wire.InfoOf(st); r == wire.ReasonInvalidSetting {
			e.Reason = &InvalidOptionError{Option: meta[wire.MetaOption], Reason: meta[wire.MetaReason]}
		}
	case codes.NotFound:
		e.Reason = ErrUnknownRequest
	case codes.Unimplemented:
		e.Reason = ErrNotImplemented
	case codes.DataLoss:
		e.Reason = ErrDataLoss
	case codes.Internal:
		e.Reason = ErrInternal
	case codes.ResourceExhausted:
		e.Reason = ErrTooLarge
	}
	return e
}
