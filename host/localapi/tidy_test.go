package localapi_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/leasestore"
)

// newNamed starts a session of the scripted agent with id on c.
func newNamed(t *testing.T, c *rpcClient, id string) {
	t.Helper()
	var created struct {
		SessionID string `json:"sessionId"`
	}
	c.mustCall(api.MethodSessionNew, map[string]any{"cwd": t.TempDir(), "mcpServers": []any{},
		"_meta": map[string]any{"agenthost": map[string]any{"agent": "scripted", "sessionId": id}}}, &created)
	if created.SessionID != id {
		t.Fatalf("session/new: id %q, want %q", created.SessionID, id)
	}
}

// wantCode asserts that m is an error with code, whose message (or
// data.error) says each of says.
func wantCode(t *testing.T, what string, m message, code int, says ...string) {
	t.Helper()
	if m.Error == nil {
		t.Errorf("%s: answered %s, want error %d", what, m.Result, code)
		return
	}
	text := m.Error.Message + " " + string(m.Error.Data)
	if m.Error.Code != code {
		t.Errorf("%s: error %d %s, want %d", what, m.Error.Code, text, code)
	}
	for _, s := range says {
		if !strings.Contains(text, s) {
			t.Errorf("%s: the error does not say %q: %s", what, s, text)
		}
	}
}

func sessionState(t *testing.T, c *rpcClient, id string) string {
	t.Helper()
	var info api.SessionResult
	c.mustCall(api.MethodSession, api.Params{SessionID: id}, &info)
	return info.Session.State
}

func TestTidyMethodsAnswerWithTheirCodes(t *testing.T) {
	t.Parallel()
	sock, _ := serve(t)
	c := dial(t, sock)
	c.mustCall(api.MethodInitialize, map[string]any{"protocolVersion": 1}, nil)
	newNamed(t, c, "t-a")
	newNamed(t, c, "t-b")
	if got := sessionState(t, c, "t-a"); got != api.StateRunning {
		t.Errorf("state of a running session: %q", got)
	}
	var list api.ListSessionsResult
	c.mustCall(api.MethodSessionList, map[string]any{}, &list)
	for _, s := range list.Sessions {
		if s.Meta.Agenthost.State != api.StateRunning {
			t.Errorf("session/list state of %s: %q, want running", s.SessionID, s.Meta.Agenthost.State)
		}
	}

	// remove: running refused, unknown not found.
	wantCode(t, "remove a running session", c.call(api.MethodRemove, api.Params{SessionID: "t-a"}), api.CodeSessionRunning, "force")
	wantCode(t, "remove an unknown session", c.call(api.MethodRemove, api.Params{SessionID: "nope"}), api.CodeNotFound)

	// prune: olderThan missing or malformed says what to write.
	for _, p := range []map[string]any{{}, {"olderThan": "7d"}, {"olderThan": "-1h"}} {
		wantCode(t, "prune "+mustJSON(p), c.call(api.MethodPrune, p), api.CodeInvalidParams, "olderThan", "Go duration such as", "72h")
	}
	wantCode(t, "prune with olderThan a number", c.call(api.MethodPrune, map[string]any{"olderThan": 3}), api.CodeInvalidParams)

	// stop, then stop again: stopped already; unknown: not found.
	var stopped api.StopResult
	c.mustCall(api.MethodStop, api.Params{SessionID: "t-a"}, &stopped)
	if stopped.AlreadyStopped {
		t.Errorf("stop of a running session: %+v", stopped)
	}
	c.mustCall(api.MethodStop, api.Params{SessionID: "t-a"}, &stopped)
	if !stopped.AlreadyStopped {
		t.Errorf("stop of a stopped session: %+v, want alreadyStopped", stopped)
	}
	wantCode(t, "stop an unknown session", c.call(api.MethodStop, api.Params{SessionID: "nope"}), api.CodeNotFound, "nope")
	if got := sessionState(t, c, "t-a"); got != api.StateStopped {
		t.Errorf("state of a stopped session: %q", got)
	}

	// prune's dry run lists the stopped one, removes nothing.
	var pruned api.PruneResult
	c.mustCall(api.MethodPrune, api.Params{OlderThan: "0s", DryRun: true}, &pruned)
	if strings.Join(pruned.Removed, ",") != "t-a" || !pruned.DryRun {
		t.Errorf("prune dry run: %+v", pruned)
	}
	if got := sessionState(t, c, "t-a"); got != api.StateStopped {
		t.Errorf("state after a dry run: %q", got)
	}

	// remove with force stops and removes.
	var removed api.RemoveResult
	c.mustCall(api.MethodRemove, api.Params{SessionID: "t-b", Force: true}, &removed)
	if !removed.Stopped || removed.FreedBytes <= 0 {
		t.Errorf("forced remove: %+v", removed)
	}
	wantCode(t, "session after its removal", c.call(api.MethodSession, api.Params{SessionID: "t-b"}), api.CodeNotFound)

	// prune removes the stopped one; stopAll with nothing running.
	var pruned2 api.PruneResult
	c.mustCall(api.MethodPrune, api.Params{OlderThan: "0s"}, &pruned2)
	if strings.Join(pruned2.Removed, ",") != "t-a" || pruned2.DryRun || len(pruned2.Failed) != 0 {
		t.Errorf("prune: %+v", pruned2)
	}
	wantCode(t, "session after prune", c.call(api.MethodSession, api.Params{SessionID: "t-a"}), api.CodeNotFound)

	newNamed(t, c, "t-c")
	var all, none api.StopAllResult
	c.mustCall(api.MethodStopAll, nil, &all)
	if strings.Join(all.Stopped, ",") != "t-c" || len(all.Failed) != 0 {
		t.Errorf("stopAll: %+v", all)
	}
	c.mustCall(api.MethodStopAll, nil, &none)
	if none.Stopped == nil || len(none.Stopped) != 0 {
		t.Errorf("stopAll with nothing running: %+v, want an empty list", none)
	}
	var st api.StatusResult
	c.mustCall(api.MethodStatus, nil, &st)
	if st.Host.DiskBytes <= 0 || len(st.Host.Running) != 0 {
		t.Errorf("status: disk %d, running %v", st.Host.DiskBytes, st.Host.Running)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// A session whose lease is held by a plugin this host does not run, or
// latched, was not "stopped already": its plugin may be alive. stop says
// so (CodeSessionHeld, the reason, where to look) instead of an answer a
// client would take for done.
func TestStopOfAHeldOrLatchedSessionIsRefusedNotStoppedAlready(t *testing.T) {
	t.Parallel()
	sock, h := serve(t)
	ctx := context.Background()
	st := h.Store()
	for _, id := range []string{"st-held", "st-latched"} {
		rec, err := st.Create(ctx, leasestore.SessionSpec{ID: id, Agent: "scripted", Workspace: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		if rec, err = st.Apply(ctx, id, leasestore.Reserve{ExpectedFence: rec.Lease.Fence}); err != nil {
			t.Fatal(err)
		}
		if id == "st-latched" {
			if _, err := st.Apply(ctx, id, leasestore.Latch{Fence: rec.Lease.Fence, Stage: leasestore.StageManualRecovery, Reason: "owner unverified"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	c := dial(t, sock)
	c.mustCall(api.MethodInitialize, map[string]any{"protocolVersion": 1}, nil)
	wantCode(t, "stop a held session", c.call(api.MethodStop, api.Params{SessionID: "st-held"}), api.CodeSessionHeld,
		"not stopped", "reserved", "agenthost status")
	wantCode(t, "stop a latched session", c.call(api.MethodStop, api.Params{SessionID: "st-latched"}), api.CodeSessionHeld,
		"not stopped", "latched (owner unverified)", "agenthost status")
}
