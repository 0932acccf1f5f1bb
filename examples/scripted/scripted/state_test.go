package scripted_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/agenthost/agenthost/examples/scripted/scripted"
	"github.com/agenthost/agenthost/plugin/sdk"
	"github.com/agenthost/agenthost/plugin/sdk/sdktest"
)

// The conversation exported after turns resumes elsewhere; on the same
// machine a restarted plugin resumes it from its session directory; an
// import a turn behind this machine's copy keeps the copy; a state of
// another handle or format is refused.
func TestProviderState(t *testing.T) {
	ctx := t.Context()
	a := sdktest.NewHarness(t, scripted.New, sdktest.WithCapabilities(scripted.Capabilities()))
	info, err := a.NewSession(ctx, sdk.NewSessionRequest{Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	a.Run("one", wait)
	behind, stateBehind, err := a.ExportState(ctx)
	if err != nil || behind != info.Handle {
		t.Fatalf("ExportState: %q, %v", behind, err)
	}
	a.Run("two", wait)
	_, state, err := a.ExportState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var e struct {
		Handle  string
		Prompts []string
	}
	if err := json.Unmarshal(state, &e); err != nil || e.Handle != info.Handle || len(e.Prompts) != 2 {
		t.Errorf("the export %s: %v", state, err)
	}

	b := sdktest.NewHarness(t, scripted.New)
	if _, err := b.ResumeSessionWithState(ctx, sdk.ResumeSessionRequest{Workspace: t.TempDir(), Handle: info.Handle}, state); err != nil {
		t.Fatal(err)
	}
	if ups, _ := b.Run("history", wait); sdktest.Messages(ups) != "history: 2 earlier prompts: one | two" {
		t.Errorf("history after the import: %s", sdktest.Describe(ups))
	}
	// On one machine (one session directory): a plugin that imported
	// both prompts, then a new process given the state a turn behind,
	// keeps this machine's copy.
	dir := t.TempDir()
	prompts := func(state []byte) int {
		var e struct{ Prompts []string }
		if err := json.Unmarshal(state, &e); err != nil {
			t.Fatal(err)
		}
		return len(e.Prompts)
	}
	first, _ := scripted.New(ctx, sdk.Environment{SessionDir: dir})
	if err := first.(sdk.StateImporter).ImportState(ctx, info.Handle, state); err != nil {
		t.Fatal(err)
	}
	again, _ := scripted.New(ctx, sdk.Environment{SessionDir: dir})
	if err := again.(sdk.StateImporter).ImportState(ctx, info.Handle, stateBehind); err != nil {
		t.Fatal(err)
	}
	if _, err := again.ResumeSession(ctx, sdk.ResumeSessionRequest{Workspace: t.TempDir(), Handle: info.Handle}); err != nil {
		t.Fatal(err)
	}
	if got, err := again.(sdk.StateExporter).ExportState(ctx, info.Handle); err != nil || prompts(got) != 2 {
		t.Errorf("after importing a state a turn behind this machine's: %s, %v; want this machine's two prompts", got, err)
	}

	for _, bad := range []struct {
		handle string
		state  []byte
	}{{"other", state}, {info.Handle, []byte(`{"format":"x"}`)}, {info.Handle, []byte("not json")}} {
		c := sdktest.NewHarness(t, scripted.New)
		if _, err := c.ResumeSessionWithState(ctx, sdk.ResumeSessionRequest{Workspace: t.TempDir(), Handle: bad.handle}, bad.state); !errors.Is(err, sdktest.ErrAgent) {
			t.Errorf("resume of %q with %q: %v, want ErrAgent", bad.handle, bad.state, err)
		}
	}
}

// An imported state is outside input: anything is refused or taken whole,
// and what is taken exports again as it came.
func FuzzImportState(f *testing.F) {
	f.Add([]byte(`{"format":"scripted-history-1","handle":"h","prompts":["a","b"]}`))
	f.Add([]byte(`{"format":"scripted-history-1","handle":"other"}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, state []byte) {
		ctx := context.Background()
		a, _ := scripted.New(ctx, sdk.Environment{SessionDir: t.TempDir()})
		if err := a.(sdk.StateImporter).ImportState(ctx, "h", state); err != nil {
			return
		}
		var in, out struct{ Prompts []string }
		if err := json.Unmarshal(state, &in); err != nil {
			t.Fatalf("an import took %q, which is no JSON: %v", state, err)
		}
		got, err := a.(sdk.StateExporter).ExportState(ctx, "h")
		if err != nil || json.Unmarshal(got, &out) != nil || !slices.Equal(in.Prompts, out.Prompts) {
			t.Fatalf("imported %q, exported %q (%v)", state, got, err)
		}
	})
}

// NewLocal's agent exports nothing and imports nothing, and is the
// scripted agent otherwise: a plugin whose sessions a cluster resumes only
// on their own machine.
func TestLocalAgentDoesNotExport(t *testing.T) {
	a, err := scripted.NewLocal(t.Context(), sdk.Environment{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := a.(sdk.StateExporter); ok {
		t.Error("NewLocal's agent is a StateExporter")
	}
	if _, ok := a.(sdk.StateImporter); ok {
		t.Error("NewLocal's agent is a StateImporter")
	}
	if _, ok := a.(sdk.Describer); !ok {
		t.Error("NewLocal's agent lost the scripted agent's other methods")
	}
}
