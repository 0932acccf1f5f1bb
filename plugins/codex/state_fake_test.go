package codex_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/agenthost/agenthost/plugin/sdk"
	"github.com/agenthost/agenthost/plugins/internal/plugintest"
)

// With the fake codex: a thread's state moves to another CODEX_HOME and
// workspace and resumes there; the export waits for the turn's end in
// the rollout, which the fake writes before turn/completed as codex does.
func TestStateMovesWithTheFake(t *testing.T) {
	a := newHome(t, true)
	pa := start(t, a)
	info, err := pa.NewSession(t.Context(), sdk.NewSessionRequest{Workspace: a.workspace})
	if err != nil {
		t.Fatal(err)
	}
	if _, st := pa.Turn(plugintest.Prompt(t, pa, "hello"), turnWait); st.StopReason != "end_turn" {
		t.Fatalf("turn on A: %v", st)
	}
	exported, state, err := pa.ExportState(t.Context())
	if err != nil || exported != info.Handle {
		t.Fatalf("ExportState: %q %v", exported, err)
	}
	plugintest.CloseWithin(pa, turnWait)

	b := newHome(t, true)
	pb := start(t, b)
	if got, err := pb.ResumeSessionWithState(t.Context(), sdk.ResumeSessionRequest{Workspace: b.workspace, Handle: info.Handle}, state); err != nil || got.Handle != info.Handle {
		t.Fatalf("resume on B: %+v %v", got, err)
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
