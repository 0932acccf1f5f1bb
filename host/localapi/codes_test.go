package localapi

import (
	acp "github.com/coder/acp-go-sdk"

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

// A session that runs on another host of the cluster is CodeSessionElsewhere
// with the host and its address, whose message tells the user where to
// connect; the cluster's other refusals (this host not live, the owner
// host lost but not taken over yet, a session taken over) are retryable.
func TestSessionElsewhereNamesTheHost(t *testing.T) {
	err := fmt.Errorf("start: %w", &host.ElsewhereError{SessionID: "s", HostID: "host-b", Address: "/run/b/api.sock"})
	re := apiError(err).(*acp.RequestError)
	data, ok := re.Data.(api.ElsewhereData)
	if re.Code != api.CodeSessionElsewhere || api.CodeSessionElsewhere != -32011 || !ok || data.HostID != "host-b" || data.Address != "/run/b/api.sock" {
		t.Fatalf("answered %+v", re)
	}
	if !strings.Contains(re.Message, "host-b") || !strings.Contains(re.Message, "/run/b/api.sock") {
		t.Errorf("message %q does not say where to connect", re.Message)
	}
	if code := errorCode(err); code != api.CodeSessionElsewhere {
		t.Errorf("errorCode %d", code)
	}
	for _, err := range []error{host.ErrNotLive, host.ErrOwnerHostLost, host.ErrDeposed} {
		if code := errorCode(fmt.Errorf("x: %w", err)); code != api.CodeSessionHeld {
			t.Errorf("%v: code %d, want CodeSessionHeld", err, code)
		}
	}
}

// A session whose conversation cannot move to this host is
// CodeSessionNotPortable with the host that holds it, and its message
// tells the user to resume it there.
func TestSessionNotPortableNamesTheHost(t *testing.T) {
	err := fmt.Errorf("start: %w", &host.NotPortableError{SessionID: "s", HostID: "host-a"})
	re := apiError(err).(*acp.RequestError)
	data, ok := re.Data.(api.NotPortableData)
	if re.Code != api.CodeSessionNotPortable || api.CodeSessionNotPortable != -32012 || !ok || data.HostID != "host-a" {
		t.Fatalf("answered %+v", re)
	}
	if !strings.Contains(re.Message, `"host-a"`) || !strings.Contains(re.Message, "resume it on that host") || !strings.Contains(re.Message, "does not export") {
		t.Errorf("message %q does not say where the conversation is and why", re.Message)
	}
	if code := errorCode(err); code != api.CodeSessionNotPortable {
		t.Errorf("errorCode %d", code)
	}
}
