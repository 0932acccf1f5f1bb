package localapi

import (
	"fmt"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/leasestore"
)

// A session's lease held elsewhere, latched or undecided is CodeSessionHeld:
// -32000 is auth required only (api.CodeAuthRequired), and a client that
// reads it as "log in" for a lease conflict sends its user to a login that
// changes nothing.
func TestHeldLeasesAreSessionHeldNeverAuthRequired(t *testing.T) {
	for _, err := range []error{
		fmt.Errorf("reserve session %q: %w", "s", &leasestore.TransitionError{Op: "reserve", SessionID: "s", Reason: "the lease is held at fence 3", Err: leasestore.ErrConflict}),
		fmt.Errorf("reserve: %w", leasestore.ErrOwnershipUnknown),
		fmt.Errorf("session %q: %w", "s", host.ErrUndecided),
		&leasestore.StaleFenceError{SessionID: "s", Expected: 1, Current: 2},
	} {
		if code := errorCode(err); code != api.CodeSessionHeld {
			t.Errorf("%v: code %d, want CodeSessionHeld (%d)", err, code, api.CodeSessionHeld)
		}
	}
}

// A request that kept meeting the session's idle stop is given up on with
// a retryable code, never CodeInternalError: nothing went wrong but the
// timing, and the next attempt resumes the session.
func TestARequestGivenUpOnAtTheIdleStopIsRetryable(t *testing.T) {
	err := giveUpIdle("s", fmt.Errorf("session %q: %w", "s", host.ErrIdleStopped))
	if code := errorCode(err); code != api.CodeSessionHeld {
		t.Errorf("%v: code %d, want CodeSessionHeld (%d)", err, code, api.CodeSessionHeld)
	}
	if !strings.Contains(err.Error(), "retry") {
		t.Errorf("%v: want it to say to retry", err)
	}
}
