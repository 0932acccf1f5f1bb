package codex_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/agenthost/agenthost/plugin/sdk"
	"github.com/agenthost/agenthost/plugin/sdk/sdktest"
	"github.com/agenthost/agenthost/plugins/codex"
	"github.com/agenthost/agenthost/plugins/internal/plugintest"
)

// stateHarness serves the agent in h's environment and hands the test
// the agent, for its provider state methods; with a state, the agent
// imports it before it serves a session, as the SDK does before
// ResumeSession.
func stateHarness(t *testing.T, h home, handle string, state []byte) (*sdktest.Harness, func() sdk.Agent) {
	t.Helper()
	h.setenv(t)
	var (
		mu  sync.Mutex
		got sdk.Agent
	)
	p := sdktest.NewHarness(t, func(ctx context.Context, env sdk.Environment) (sdk.Agent, error) {
		a, err := codex.New(ctx, env)
		if err == nil && state != nil {
			err = a.(sdk.StateImporter).ImportState(ctx, handle, state)
		}
		mu.Lock()
		got = a
		mu.Unlock()
		return a, err
	})
	return p, func() sdk.Agent {
		mu.Lock()
		defer mu.Unlock()
		return got
	}
}

// With the fake codex: a thread's state moves to another CODEX_HOME and
// workspace and resumes there; the export waits for the turn's end in
// the rollout, which the fake writes before turn/completed as codex does.
func TestStateMovesWithTheFake(t *testing.T) {
	a := newHome(t, true)
	pa, agentA := stateHarness(t, a, "", nil)
	info, err := pa.NewSession(t.Context(), sdk.NewSessionRequest{Workspace: a.workspace})
	if err != nil {
		t.Fatal(err)
	}
	if _, st := pa.Turn(plugintest.Prompt(t, pa, "hello"), turnWait); st.StopReason != "end_turn" {
		t.Fatalf("turn on A: %v", st)
	}
	state, err := agentA().(sdk.StateExporter).ExportState(t.Context(), info.Handle)
	if err != nil {
		t.Fatal(err)
	}
	plugintest.CloseWithin(pa, turnWait)

	b := newHome(t, true)
	pb, _ := stateHarness(t, b, info.Handle, state)
	if got, err := resume(t, pb, b, info.Handle); err != nil || got != info.Handle {
		t.Fatalf("resume on B: %q %v", got, err)
	}
	if _, st := pb.Turn(plugintest.Prompt(t, pb, "hello"), turnWait); st.StopReason != "end_turn" {
		t.Fatalf("turn on B: %v", st)
	}
	matches, _ := filepath.Glob(filepath.Join(b.codexHome, "sessions", "*", "*", "*", "rollout-*-"+info.Handle+".jsonl"))
	if len(matches) != 1 {
		t.Fatalf("B's rollouts: %v", matches)
	}
	if st, err := os.Stat(matches[0]); err != nil || st.Size() == 0 {
		t.Errorf("B's rollout: %v", err)
	}
}
