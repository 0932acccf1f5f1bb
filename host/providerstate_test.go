package host

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/internal/wire"
	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/leasestore"
)

// The SDK's bound on a provider state and the store's are one.
func TestProviderStateBoundsAgree(t *testing.T) {
	if wire.MaxProviderStateSize != leasestore.MaxProviderStateBytes {
		t.Errorf("wire.MaxProviderStateSize = %d, leasestore.MaxProviderStateBytes = %d", wire.MaxProviderStateSize, leasestore.MaxProviderStateBytes)
	}
}

// agentText is the text of the session's agent message chunks, in order.
func agentText(t *testing.T, h *Host, id string) []string {
	t.Helper()
	var texts []string
	for _, e := range journalOf(t, h, id) {
		if e.Kind != leasestore.KindUpdate {
			continue
		}
		rec, err := journal.Decode(e)
		if err != nil {
			t.Fatal(err)
		}
		if u, ok := rec.(*journal.Update).Update.(*journal.Chunk); ok && u.Kind == journal.KindAgentMessageChunk {
			texts = append(texts, u.Content.Text())
		}
	}
	return texts
}

// After each turn the host stores what an exporting plugin exports, at
// the session's fence, and a resume of that handle hands it to the new
// plugin process, whose session directory (one per fence) holds nothing of
// the conversation: as on another machine, the conversation goes on.
// ProviderStateAlways makes a single machine's host do what a cluster's
// does.
func TestProviderStateReachesTheResumedPlugin(t *testing.T) {
	ctx := testCtx(t)
	h := openHostWith(t, func(c *Config) { c.ProviderState = ProviderStateAlways })
	s, err := h.StartSession(ctx, SessionRequest{ID: "portable", Agent: "scripted", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"hello", "count 2"} {
		if r, err := s.Prompt(ctx, p); err != nil || r.StopReason != "end_turn" {
			t.Fatalf("Prompt(%q): %+v, %v", p, r, err)
		}
	}
	// The turn's Prompt returns once its state is stored.
	st, err := h.store.GetProviderState(ctx, s.ID())
	if err != nil {
		t.Fatalf("no provider state stored after two turns: %v", err)
	}
	var exported struct{ Prompts []string }
	if err := json.Unmarshal(st.Data, &exported); err != nil || st.Handle != s.Handle() || st.Fence != s.fence ||
		strings.Join(exported.Prompts, " | ") != "hello | count 2" {
		t.Fatalf("stored state: handle %q fence %d data %s (%v); want handle %q, fence %d, both prompts", st.Handle, st.Fence, st.Data, err, s.Handle(), s.fence)
	}
	oldDir := s.proc.spec.SessionDir
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	s2, err := h.StartSession(ctx, SessionRequest{ID: "portable", Agent: "scripted"})
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	if s2.proc.spec.SessionDir == oldDir {
		t.Fatalf("the resumed plugin shares the session directory %s of the first: the test proves nothing", oldDir)
	}
	if r, err := s2.Prompt(ctx, "history"); err != nil || r.StopReason != "end_turn" {
		t.Fatalf("Prompt(history): %+v, %v", r, err)
	}
	texts := agentText(t, h, s2.ID())
	if got := texts[len(texts)-1]; got != "history: 2 earlier prompts: hello | count 2" {
		t.Errorf("the resumed plugin's history: %q, want the two earlier prompts", got)
	}
	// And the state moved on with the turn, at the new fence.
	if st, err := h.store.GetProviderState(ctx, s2.ID()); err != nil || st.Fence != s2.fence || !strings.Contains(string(st.Data), "history") {
		t.Errorf("stored state after the resumed turn: fence %d (want %d), %s, %v", st.Fence, s2.fence, st.Data, err)
	}
}

// On a single machine, by default, no turn waits for an export: nothing is
// stored, and a session with a conversation is not portable (answered
// without a store read).
func TestSingleMachineStoresNoProviderStateByDefault(t *testing.T) {
	ctx := testCtx(t)
	h := openHost(t)
	s, err := h.StartSession(ctx, SessionRequest{ID: "local", Agent: "scripted", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := s.Prompt(ctx, "hello"); err != nil || r.StopReason != "end_turn" {
		t.Fatalf("Prompt: %+v, %v", r, err)
	}
	if !s.proc.exports {
		t.Fatal("the scripted plugin does not export its state: the test proves nothing")
	}
	if st, err := h.store.GetProviderState(ctx, s.ID()); !errors.Is(err, leasestore.ErrNotFound) {
		t.Fatalf("a single machine's host stored provider state %+v (%v) after a turn, want none", st, err)
	}
	rec, err := h.store.Get(ctx, s.ID())
	if err != nil {
		t.Fatal(err)
	}
	if rec.Handle() == "" || h.Portable(ctx, rec) {
		t.Errorf("session with handle %q: portable %v, want a conversation with no stored state not portable", rec.Handle(), h.Portable(ctx, rec))
	}
}
