package localapi

import (
	"fmt"
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
