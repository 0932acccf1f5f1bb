package sdk

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agenthost/agenthost/internal/agentpb"
	"github.com/agenthost/agenthost/internal/logtest"
	"github.com/agenthost/agenthost/internal/wire"
)

// holdAgent holds every turn until it is cancelled; with exports and
// imports set it is a StateExporter and StateImporter (stateAgent).
type holdAgent struct {
	UnimplementedAgent
}

func (holdAgent) NewSession(context.Context, NewSessionRequest) (SessionInfo, error) {
	return SessionInfo{Handle: "h-1"}, nil
}

func (holdAgent) ResumeSession(_ context.Context, req ResumeSessionRequest) (SessionInfo, error) {
	return SessionInfo{Handle: req.Handle}, nil
}

func (holdAgent) Prompt(ctx context.Context, _ PromptRequest, _ *Turn) (StopReason, error) {
	<-ctx.Done()
	return StopCancelled, nil
}

// stateAgent records the calls a resume makes, in order.
type stateAgent struct {
	holdAgent
	mu    sync.Mutex
	calls []string
	state []byte
}

func (a *stateAgent) ExportState(_ context.Context, handle string) ([]byte, error) {
	return []byte("state of " + handle), nil
}

func (a *stateAgent) ImportState(_ context.Context, handle string, state []byte) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls, a.state = append(a.calls, "import "+handle), state
	return nil
}

func (a *stateAgent) ResumeSession(ctx context.Context, req ResumeSessionRequest) (SessionInfo, error) {
	a.mu.Lock()
	a.calls = append(a.calls, "resume "+req.Handle)
	a.mu.Unlock()
	return a.holdAgent.ResumeSession(ctx, req)
}

// newTestServer returns a server of agent attached at fence 1, self-fencing
// with bound from start when bound is set, its session not yet open. It is
// shut down when the test ends.
func newTestServer(t *testing.T, agent Agent, bound time.Duration, start time.Time) *server {
	t.Helper()
	srv := newServer("test", Capabilities{}, func(context.Context, Environment) (Agent, error) { return agent, nil },
		Environment{Logger: logtest.New(t)}, 1, "", 0)
	t.Cleanup(func() {
		if err := srv.shutdown(context.Background()); err != nil {
			t.Error(err)
		}
		srv.box.close()
	})
	if bound > 0 {
		srv.startSelfFence(bound, start)
	}
	srv.mu.Lock()
	err := srv.attach(1, "session")
	srv.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

func openSession(t *testing.T, srv *server) {
	t.Helper()
	if _, err := srv.NewSession(t.Context(), &agentpb.NewSessionRequest{Fence: 1, Workspace: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
}

func reasonOf(err error) wire.Reason {
	st, _ := status.FromError(err)
	return wire.ReasonOf(st)
}

func TestSelfFenceBoundParsesTheEnvironment(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{{"", 0, true}, {"2.5s", 2500 * time.Millisecond, true}, {"bogus", 0, false}, {"0s", 0, false}, {"-1s", 0, false}} {
		got, err := selfFenceBound(c.in)
		if got != c.want || (err == nil) != c.ok {
			t.Errorf("selfFenceBound(%q) = %v, %v; want %v, ok %v", c.in, got, err, c.want, c.ok)
		}
		if err != nil && !strings.Contains(err.Error(), EnvSelfFence) {
			t.Errorf("selfFenceBound(%q)'s error %q does not name %s", c.in, err, EnvSelfFence)
		}
	}
}

// A plugin whose deadline has passed (no heartbeat since it started, an
// hour's bound ago) refuses a new turn with SELF_FENCED; a heartbeat at its
// fence lifts it and says it was fenced.
func TestSelfFencedPluginRefusesPromptsUntilAHeartbeat(t *testing.T) {
	ctx := t.Context()
	srv := newTestServer(t, holdAgent{}, time.Hour, time.Now().Add(-2*time.Hour))
	openSession(t, srv)
	_, err := srv.Prompt(ctx, &agentpb.PromptRequest{Fence: 1, Prompt: []*agentpb.ContentBlock{{Type: "text", Text: "x"}}})
	if status.Code(err) != codes.FailedPrecondition || reasonOf(err) != wire.ReasonSelfFenced || !strings.Contains(err.Error(), "fenced itself") {
		t.Fatalf("Prompt past the deadline: %v, want FAILED_PRECONDITION SELF_FENCED", err)
	}
	// Refused like any call at another fence, moving nothing.
	for fence, want := range map[uint64]wire.Reason{0: wire.ReasonStaleFence, 2: wire.ReasonFenceNotAttached} {
		if _, err := srv.Heartbeat(ctx, &agentpb.HeartbeatRequest{Fence: fence, ValidForMs: time.Hour.Milliseconds()}); reasonOf(err) != want {
			t.Errorf("Heartbeat at fence %d: %v, want %s", fence, err, want)
		}
	}
	// Granting nothing moves nothing either.
	if r, err := srv.Heartbeat(ctx, &agentpb.HeartbeatRequest{Fence: 1}); err != nil || !r.SelfFenced {
		t.Errorf("Heartbeat granting nothing: %v, %v; want self_fenced", r, err)
	}
	if _, err := srv.Prompt(ctx, &agentpb.PromptRequest{Fence: 1}); reasonOf(err) != wire.ReasonSelfFenced {
		t.Fatalf("Prompt after refused heartbeats: %v, want SELF_FENCED", err)
	}

	r, err := srv.Heartbeat(ctx, &agentpb.HeartbeatRequest{Fence: 1, ValidForMs: time.Hour.Milliseconds()})
	if err != nil || !r.SelfFenced {
		t.Fatalf("Heartbeat: %v, %v; want self_fenced true", r, err)
	}
	if _, err := srv.Prompt(ctx, &agentpb.PromptRequest{Fence: 1}); err != nil {
		t.Fatalf("Prompt after a heartbeat: %v", err)
	}
	if r, err := srv.Heartbeat(ctx, &agentpb.HeartbeatRequest{Fence: 1, ValidForMs: time.Hour.Milliseconds()}); err != nil || r.SelfFenced {
		t.Errorf("second Heartbeat: %v, %v; want self_fenced false", r, err)
	}
}

// A heartbeat sets the deadline to receipt + min(valid_for, bound): a grant
// beyond the bound is capped, and a smaller one lowers the deadline.
func TestHeartbeatSetsTheDeadlineWithinTheBound(t *testing.T) {
	ctx := t.Context()
	bound := time.Hour
	srv := newTestServer(t, holdAgent{}, bound, time.Now())
	deadline := func() int64 {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		return srv.deadline
	}
	now := func() int64 { ns, _ := srv.fenceNow(); return ns }
	before := now()
	if _, err := srv.Heartbeat(ctx, &agentpb.HeartbeatRequest{Fence: 1, ValidForMs: (100 * time.Hour).Milliseconds()}); err != nil {
		t.Fatal(err)
	}
	if d, after := deadline(), now(); d < before+int64(bound) || d > after+int64(bound) {
		t.Errorf("deadline %d after a 100h grant, want receipt + the 1h bound (between %d and %d)", d, before+int64(bound), after+int64(bound))
	}
	if _, err := srv.Heartbeat(ctx, &agentpb.HeartbeatRequest{Fence: 1, ValidForMs: time.Minute.Milliseconds()}); err != nil {
		t.Fatal(err)
	}
	if d := deadline(); d > now()+int64(time.Minute) {
		t.Errorf("deadline %d after a 1m grant, want no later than receipt + 1m", d)
	}
	// On a boot clock an end before receipt + valid_for lowers the
	// deadline to it.
	if _, boot := srv.fenceNow(); boot {
		until := now() + int64(time.Second)
		if _, err := srv.Heartbeat(ctx, &agentpb.HeartbeatRequest{Fence: 1, ValidForMs: time.Minute.Milliseconds(), ValidUntilBootNs: until}); err != nil {
			t.Fatal(err)
		}
		if d := deadline(); d != until {
			t.Errorf("deadline %d after a 1m grant ending at %d on the boot clock, want that end", d, until)
		}
	}
}

// At the deadline the running turn is cancelled, and its stop says the
// plugin fenced itself.
func TestSelfFenceCancelsTheRunningTurn(t *testing.T) {
	ctx := t.Context()
	srv := newTestServer(t, holdAgent{}, time.Hour, time.Now())
	openSession(t, srv)
	r, err := srv.Prompt(ctx, &agentpb.PromptRequest{Fence: 1, TurnId: "turn-held"})
	if err != nil {
		t.Fatal(err)
	}
	// The host grants only a millisecond more: the deadline passes at once.
	if _, err := srv.Heartbeat(ctx, &agentpb.HeartbeatRequest{Fence: 1, ValidForMs: 1}); err != nil {
		t.Fatal(err)
	}
	stop := waitStop(t, srv, r.TurnId)
	if stop.StopReason != string(StopCancelled) || !strings.Contains(stop.Error, "fenced itself") || !strings.Contains(stop.Error, "no live host") {
		t.Errorf("the turn stopped with %q, %q; want cancelled, saying the plugin fenced itself", stop.StopReason, stop.Error)
	}
	// A prompt re-sent for that turn is still told it was started.
	if _, err := srv.Prompt(ctx, &agentpb.PromptRequest{Fence: 1, TurnId: "turn-held"}); reasonOf(err) != wire.ReasonTurnStarted {
		t.Errorf("re-sent prompt of the fenced turn: %v, want TURN_ALREADY_STARTED", err)
	}
	if _, err := srv.Prompt(ctx, &agentpb.PromptRequest{Fence: 1}); reasonOf(err) != wire.ReasonSelfFenced {
		t.Errorf("new prompt: %v, want SELF_FENCED", err)
	}
}

// A heartbeat that arrives after the deadline passed, before the timer
// fired (a freeze or a suspend delays the timer; here it is stopped),
// cancels the running turn before it lifts the fence: the turn outlived
// the deadline and is not rescued.
func TestLateHeartbeatCancelsTheTurnBeforeLifting(t *testing.T) {
	ctx := t.Context()
	srv := newTestServer(t, holdAgent{}, time.Hour, time.Now())
	openSession(t, srv)
	r, err := srv.Prompt(ctx, &agentpb.PromptRequest{Fence: 1, TurnId: "turn-frozen"})
	if err != nil {
		t.Fatal(err)
	}
	srv.mu.Lock()
	srv.fenceTimer.Stop()
	now, _ := srv.fenceNow()
	srv.deadline = now - int64(time.Minute)
	srv.mu.Unlock()
	hb, err := srv.Heartbeat(ctx, &agentpb.HeartbeatRequest{Fence: 1, ValidForMs: time.Hour.Milliseconds()})
	if err != nil || !hb.SelfFenced {
		t.Fatalf("late Heartbeat: %v, %v; want self_fenced", hb, err)
	}
	stop := waitStop(t, srv, r.TurnId)
	if stop.StopReason != string(StopCancelled) || !strings.Contains(stop.Error, "fenced itself") {
		t.Errorf("the turn stopped with %q, %q; want cancelled, saying the plugin fenced itself", stop.StopReason, stop.Error)
	}
	// The heartbeat granted an hour: the fence is lifted for new turns.
	if _, err := srv.Prompt(ctx, &agentpb.PromptRequest{Fence: 1}); err != nil {
		t.Errorf("Prompt after the late heartbeat: %v", err)
	}
}

// waitStop waits for turn's turn_stopped in the outbox.
func waitStop(t *testing.T, srv *server, turn string) *agentpb.TurnStopped {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for from := uint64(1); ; {
		batch, changed, err := srv.box.read(from, maxBatch)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range batch {
			if ts := u.GetTurnStopped(); ts != nil && u.TurnId == turn {
				return ts
			}
			from = u.Seq + 1
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("turn %s did not stop", turn)
		}
	}
}

// Without a bound (one machine) a heartbeat is accepted and changes
// nothing, and turns run however long no host was heard from.
func TestNoSelfFenceWithoutABound(t *testing.T) {
	ctx := t.Context()
	srv := newTestServer(t, holdAgent{}, 0, time.Time{})
	openSession(t, srv)
	if r, err := srv.Heartbeat(ctx, &agentpb.HeartbeatRequest{Fence: 1, ValidForMs: 1}); err != nil || r.SelfFenced {
		t.Errorf("Heartbeat without a bound: %v, %v", r, err)
	}
	if _, err := srv.Prompt(ctx, &agentpb.PromptRequest{Fence: 1}); err != nil {
		t.Errorf("Prompt without a bound: %v", err)
	}
}

// The self-fence timer is the server's: shutdown stops it.
func TestShutdownStopsTheSelfFenceTimer(t *testing.T) {
	srv := newTestServer(t, holdAgent{}, time.Hour, time.Now())
	if err := srv.shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if srv.fenceTimer.Stop() {
		t.Error("the self-fence timer was still armed after shutdown")
	}
	// A heartbeat to the closed session does not arm it again.
	if _, err := srv.Heartbeat(t.Context(), &agentpb.HeartbeatRequest{Fence: 1, ValidForMs: 1000}); err != nil {
		t.Fatal(err)
	}
	if srv.fenceTimer.Stop() {
		t.Error("a heartbeat after shutdown armed the self-fence timer")
	}
}

func TestExportState(t *testing.T) {
	ctx := t.Context()
	t.Run("an exporter", func(t *testing.T) {
		srv := newTestServer(t, &stateAgent{}, 0, time.Time{})
		if _, err := srv.ExportState(ctx, &agentpb.ExportStateRequest{Fence: 1}); reasonOf(err) != wire.ReasonNoSession {
			t.Errorf("ExportState before a session opened: %v, want NO_SESSION_OPEN", err)
		}
		openSession(t, srv)
		if id, _ := srv.Identify(ctx, nil); !id.ExportsState {
			t.Error("Identify of an exporter says exports_state false")
		}
		r, err := srv.ExportState(ctx, &agentpb.ExportStateRequest{Fence: 1})
		if err != nil || r.Handle != "h-1" || string(r.State) != "state of h-1" {
			t.Errorf("ExportState: %v, %v", r, err)
		}
		if _, err := srv.ExportState(ctx, &agentpb.ExportStateRequest{Fence: 0}); reasonOf(err) != wire.ReasonStaleFence {
			t.Errorf("ExportState at a stale fence: %v", err)
		}
		// After Close too: the stop of the turn Close cancelled follows it.
		if err := srv.shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		if r, err := srv.ExportState(ctx, &agentpb.ExportStateRequest{Fence: 1}); err != nil || string(r.State) != "state of h-1" {
			t.Errorf("ExportState after Close: %v, %v", r, err)
		}
	})
	t.Run("no exporter", func(t *testing.T) {
		srv := newTestServer(t, holdAgent{}, 0, time.Time{})
		openSession(t, srv)
		if id, _ := srv.Identify(ctx, nil); id.ExportsState {
			t.Error("Identify of an agent without ExportState says exports_state true")
		}
		if _, err := srv.ExportState(ctx, &agentpb.ExportStateRequest{Fence: 1}); status.Code(err) != codes.Unimplemented {
			t.Errorf("ExportState: %v, want UNIMPLEMENTED", err)
		}
	})
}

// A resume carrying provider state imports it, with the resumed handle,
// before the agent resumes; an agent that cannot import refuses it.
func TestResumeImportsProviderStateFirst(t *testing.T) {
	ctx := t.Context()
	a := &stateAgent{}
	srv := newTestServer(t, a, 0, time.Time{})
	if _, err := srv.ResumeSession(ctx, &agentpb.ResumeSessionRequest{Fence: 1, Handle: "h-7", ProviderState: []byte("st")}); err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	calls, state := a.calls, string(a.state)
	a.mu.Unlock()
	if strings.Join(calls, ", ") != "import h-7, resume h-7" || state != "st" {
		t.Errorf("calls %q with state %q; want the import of h-7 then its resume", calls, state)
	}

	plain := newTestServer(t, holdAgent{}, 0, time.Time{})
	_, err := plain.ResumeSession(ctx, &agentpb.ResumeSessionRequest{Fence: 1, Handle: "h-7", ProviderState: []byte("st")})
	if status.Code(err) != codes.FailedPrecondition || reasonOf(err) != wire.ReasonStateNotImportable {
		t.Errorf("resume with state of an agent that cannot import: %v, want STATE_NOT_IMPORTABLE", err)
	}
	// Without state it resumes as before.
	if _, err := plain.ResumeSession(ctx, &agentpb.ResumeSessionRequest{Fence: 1, Handle: "h-7"}); err != nil {
		t.Errorf("resume without state: %v", err)
	}
}
