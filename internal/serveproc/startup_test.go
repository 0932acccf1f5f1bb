package serveproc_test

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/internal/apiclient"
	"github.com/agenthost/agenthost/internal/serveproc"
	"github.com/agenthost/agenthost/leasestore"
	"github.com/agenthost/agenthost/leasestore/badgerstore"
)

// A plugin that does not answer (SIGSTOPped) while its host restarts
// holds up neither the API nor the other sessions' decisions: serve is
// ready at once, _agenthost/status shows the other session decided while
// the stopped one is still "undecided", and a resume of that one is
// answered CodeSessionHeld, "not decided yet", once it has waited the
// host's DecisionWait for the decision.
func TestStoppedPluginDelaysNeitherServingNorOtherDecisions(t *testing.T) {
	t.Parallel()
	dir := stateDir(t)
	env := append(os.Environ(), "AGENTHOST_LOG_LEVEL=warn")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t.Cleanup(func() { serveproc.KillSessionProcesses(dir) })

	ids, hungPID := killHostAndStopPlugin(ctx, t, dir, env, 2)
	hung, other := ids[0], ids[1]

	start := time.Now()
	s2, err := serveproc.Start(serveproc.Config{Bin: agenthostBin, StateDir: dir, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s2.Stop(30 * time.Second) }()
	t.Logf("serve was ready %v after it started, with a SIGSTOPped plugin", time.Since(start))
	c2 := dial(ctx, t, s2.Socket)
	err = c2.Call(ctx, api.MethodSessionResume, map[string]any{"sessionId": hung, "cwd": dir}, nil)
	if code := apiclient.ErrorCode(err); code != api.CodeSessionHeld || !strings.Contains(err.Error(), "not decided yet") {
		t.Fatalf("resuming the session whose plugin is stopped, while it is undecided: %v (code %d), want CodeSessionHeld, not decided yet", err, code)
	}
	for {
		st := status(ctx, t, c2)
		h, o := st.Decisions[hung], st.Decisions[other]
		if h.Action != api.ActionUndecided {
			t.Fatalf("status shows the stopped plugin's session %+v before the other one was decided (%+v), want it undecided meanwhile", h, o)
		}
		if o.Action == api.ActionReadopted {
			if !st.Reconciling {
				t.Errorf("status says it is not reconciling while a session is undecided: %+v", st)
			}
			break
		}
		if o.Action != api.ActionUndecided {
			t.Fatalf("the other session was decided %+v, want readopted", o)
		}
		select {
		case <-ctx.Done():
			t.Fatal("the other session was never decided")
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err := c2.Call(ctx, api.MethodSessionResume, map[string]any{"sessionId": other, "cwd": dir}, nil); err != nil {
		t.Fatalf("resuming the readopted session: %v", err)
	}
	t.Logf("the other session was decided and resumed %v after serve started", time.Since(start))
	// Woken, the plugin is decided too.
	if err := syscall.Kill(hungPID, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	for {
		st := status(ctx, t, c2)
		if d := st.Decisions[hung]; d.Action != api.ActionUndecided {
			t.Logf("the woken plugin's session was decided %+v %v after serve started", d, time.Since(start))
			if st.Reconciling {
				t.Errorf("status says it is still reconciling with every session decided: %+v", st)
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the woken plugin's session was never decided")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// A client that resumes its session from a host just started, while the
// host is still deciding it, waits for the decision and gets the session
// readopted, rather than a refusal it could do nothing with but retry (a
// desktop app reconnecting to its restarted sidecar). The plugin is held
// SIGSTOPped until the resume is seen waiting, so its decision is slower
// than the resume.
func TestResumeWaitsForTheSessionsDecision(t *testing.T) {
	t.Parallel()
	dir := stateDir(t)
	env := append(os.Environ(), "AGENTHOST_LOG_LEVEL=warn")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t.Cleanup(func() { serveproc.KillSessionProcesses(dir) })

	ids, pid := killHostAndStopPlugin(ctx, t, dir, env, 1)
	id := ids[0]

	s2, err := serveproc.Start(serveproc.Config{Bin: agenthostBin, StateDir: dir, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s2.Stop(30 * time.Second) }()
	c2 := dial(ctx, t, s2.Socket)
	if d := status(ctx, t, c2).Decisions[id]; d.Action != api.ActionUndecided {
		t.Fatalf("the stopped plugin's session was decided %+v before its plugin answered", d)
	}
	resumed := make(chan error, 1)
	go func() {
		resumed <- c2.Call(ctx, api.MethodSessionResume, map[string]any{"sessionId": id, "cwd": dir}, nil)
	}()
	select {
	case err := <-resumed:
		t.Fatalf("the resume was answered (%v) while its session was undecided, want it to wait for the decision", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := <-resumed; err != nil {
		t.Fatalf("resume once the plugin answered: %v", err)
	}
	if d := status(ctx, t, c2).Decisions[id]; d.Action != api.ActionReadopted {
		t.Errorf("the session's decision %+v, want readopted", d)
	}
	if got := ownerPID(ctx, t, c2, id); got != pid {
		t.Errorf("the session runs in pid %d after the resume, want its readopted plugin %d", got, pid)
	}
}

// killHostAndStopPlugin starts serve on dir with n sessions, SIGKILLs it
// and SIGSTOPs the first session's plugin (SIGCONTed when the test ends);
// it returns the sessions and that plugin's pid.
func killHostAndStopPlugin(ctx context.Context, t *testing.T, dir string, env []string, n int) ([]string, int) {
	t.Helper()
	s1, err := serveproc.Start(serveproc.Config{Bin: agenthostBin, StateDir: dir, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	c1 := dial(ctx, t, s1.Socket)
	var ids []string
	for range n {
		ids = append(ids, newSession(ctx, t, c1, dir))
	}
	pid := ownerPID(ctx, t, c1, ids[0])
	s1.Kill()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	return ids, pid
}

func status(ctx context.Context, t *testing.T, c *apiclient.Client) api.Status {
	t.Helper()
	var st api.StatusResult
	if err := c.Call(ctx, api.MethodStatus, nil, &st); err != nil {
		t.Fatal(err)
	}
	return st.Host
}

func dial(ctx context.Context, t *testing.T, sock string) *apiclient.Client {
	t.Helper()
	c, err := apiclient.Dial(ctx, sock, apiclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.Call(ctx, api.MethodInitialize, map[string]any{"protocolVersion": 1}, nil); err != nil {
		t.Fatal(err)
	}
	return c
}

func newSession(ctx context.Context, t *testing.T, c *apiclient.Client, dir string) string {
	t.Helper()
	var r struct {
		SessionID string `json:"sessionId"`
	}
	err := c.Call(ctx, api.MethodSessionNew, map[string]any{"cwd": dir, "mcpServers": []any{},
		"_meta": map[string]any{"agenthost": map[string]any{"agent": "scripted"}}}, &r)
	if err != nil {
		t.Fatal(err)
	}
	return r.SessionID
}

func ownerPID(ctx context.Context, t *testing.T, c *apiclient.Client, id string) int {
	t.Helper()
	var r json.RawMessage
	if err := c.Call(ctx, api.MethodSession, api.Params{SessionID: id}, &r); err != nil {
		t.Fatal(err)
	}
	var s api.SessionResult
	if err := json.Unmarshal(r, &s); err != nil || s.Session.Lease.Owner == nil {
		t.Fatalf("session %s: %s (%v)", id, r, err)
	}
	return s.Session.Lease.Owner.PID
}

// Host and plugin SIGKILLed together mid-turn: the next serve finds the
// plugin gone and journals the turn's end, failed, saying so; the session
// then takes prompts again.
func TestTurnOfAPluginKilledWithItsHostEndsAfterRestart(t *testing.T) {
	t.Parallel()
	dir := stateDir(t)
	env := append(os.Environ(), "AGENTHOST_LOG_LEVEL=warn")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t.Cleanup(func() { serveproc.KillSessionProcesses(dir) })

	s1, err := serveproc.Start(serveproc.Config{Bin: agenthostBin, StateDir: dir, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	chunks := make(chan struct{}, 1)
	c1, err := apiclient.Dial(ctx, s1.Socket, apiclient.Options{OnNotification: func(m *apiclient.Message) {
		if m.Method == api.MethodSessionUpdate && strings.Contains(string(m.Params), "agent_message_chunk") {
			select {
			case chunks <- struct{}{}:
			default:
			}
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	if err := c1.Call(ctx, api.MethodInitialize, map[string]any{"protocolVersion": 1}, nil); err != nil {
		t.Fatal(err)
	}
	id := newSession(ctx, t, c1, dir)
	go func() {
		_ = c1.Call(ctx, api.MethodSessionPrompt, map[string]any{"sessionId": id, "prompt": []any{map[string]any{"type": "text", "text": "count 100000 10ms"}}}, nil)
	}()
	select {
	case <-chunks:
	case <-ctx.Done():
		t.Fatal("the turn never streamed")
	}
	s1.Kill()
	if killed := serveproc.KillSessionProcesses(dir); len(killed) == 0 {
		t.Fatal("no plugin process to kill")
	}

	s2, err := serveproc.Start(serveproc.Config{Bin: agenthostBin, StateDir: dir, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s2.Stop(30 * time.Second) }()
	c2 := dial(ctx, t, s2.Socket)
	for status(ctx, t, c2).Reconciling {
		select {
		case <-ctx.Done():
			t.Fatal("never decided")
		case <-time.After(20 * time.Millisecond):
		}
	}
	if d := status(ctx, t, c2).Decisions[id]; d.Action != api.ActionEvicted {
		t.Fatalf("decision %+v, want evicted", d)
	}
	if err := c2.Call(ctx, api.MethodSessionLoad, map[string]any{"sessionId": id, "cwd": dir, "mcpServers": []any{}}, nil); err != nil {
		t.Fatal(err)
	}
	var answer struct {
		StopReason string `json:"stopReason"`
	}
	if err := c2.Call(ctx, api.MethodSessionPrompt, map[string]any{"sessionId": id, "prompt": []any{map[string]any{"type": "text", "text": "count 1"}}}, &answer); err != nil || answer.StopReason != "end_turn" {
		t.Fatalf("a prompt after the restart: %+v, %v", answer, err)
	}
	if err := s2.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	store, err := badgerstore.Open(ctx, dir, badgerstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close(context.Background())
	var stops []string
	err = store.Replay(ctx, id, 0, func(e leasestore.Entry) error {
		if e.Kind == leasestore.KindStop {
			stops = append(stops, string(e.Payload))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(stops) != 2 || !strings.Contains(stops[0], `"stopReason":"failed"`) || !strings.Contains(stops[0], "gone") || !strings.Contains(stops[1], "end_turn") {
		t.Fatalf("journaled stops %q, want the killed turn failed (its plugin gone), then the next turn's end_turn", stops)
	}
}
