package host

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"

	"github.com/agenthost/agenthost/internal/pluginclient"
)

// SetAgents while sessions run: a session of a removed agent goes on, a
// new start of it is refused, an added agent starts, and the capabilities
// kept for an agent are dropped only when its plugin changes. Concurrent
// replacements and reads race nothing (run with -race).
func TestSetAgentsReplacesTheAgentsOfARunningHost(t *testing.T) {
	ctx := testCtx(t)
	h := openHost(t)
	s, err := h.StartSession(ctx, SessionRequest{Agent: "scripted", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Capabilities(ctx, "scripted"); err != nil {
		t.Fatal(err)
	}

	// Replaced many times while starts and listings read them.
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			h.SetAgents(map[string]AgentPlugin{"scripted": {Path: bins.scripted}}, map[string]CredentialPolicy{"scripted": {}})
		})
		wg.Go(func() { _ = h.Agents(); _, _ = h.agent("scripted"); _, _ = h.settingsOf("scripted") })
	}
	wg.Wait()
	h.mu.Lock()
	_, kept := h.caps["scripted"]
	h.mu.Unlock()
	if !kept {
		t.Errorf("the capabilities of an unchanged agent were dropped")
	}

	h.SetAgents(map[string]AgentPlugin{"again": {Path: bins.scripted}}, nil)
	h.mu.Lock()
	_, kept = h.caps["scripted"]
	h.mu.Unlock()
	if kept {
		t.Errorf("the capabilities of a removed agent were kept")
	}
	if got := h.Agents(); len(got) != 1 || got[0] != "again" {
		t.Errorf("Agents after SetAgents: %v", got)
	}
	if _, err := h.StartSession(ctx, SessionRequest{Agent: "scripted", Workspace: t.TempDir()}); !errors.Is(err, ErrUnknownAgent) {
		t.Errorf("a new session of the removed agent: %v", err)
	}
	if res, err := s.Prompt(ctx, "count 2"); err != nil || res.StopReason != "end_turn" {
		t.Errorf("the running session of the removed agent: %+v, %v", res, err)
	}
	again, err := h.StartSession(ctx, SessionRequest{Agent: "again", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := again.Prompt(ctx, "count 1"); err != nil || res.StopReason != "end_turn" {
		t.Errorf("a session of the added agent: %+v, %v", res, err)
	}
}

// OnUnknownAgent runs before a start of an unknown agent is refused, and
// what it sets is used at once.
func TestOnUnknownAgentMayConfigureTheAgent(t *testing.T) {
	ctx := testCtx(t)
	h := openHost(t)
	var asked []string
	h.cfg.OnUnknownAgent = func(_ context.Context, agent string) {
		asked = append(asked, agent)
		if agent == "late" {
			h.SetAgents(map[string]AgentPlugin{"scripted": {Path: bins.scripted}, "late": {Path: bins.scripted}}, nil)
		}
	}
	s, err := h.StartSession(ctx, SessionRequest{Agent: "late", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := s.Prompt(ctx, "count 1"); err != nil || res.StopReason != "end_turn" {
		t.Errorf("a session of the agent configured on the way: %+v, %v", res, err)
	}
	if _, err := h.StartSession(ctx, SessionRequest{Agent: "nobody", Workspace: t.TempDir()}); !errors.Is(err, ErrUnknownAgent) {
		t.Errorf("a start of an agent nobody configures: %v", err)
	}
	if len(asked) != 2 || asked[0] != "late" || asked[1] != "nobody" {
		t.Errorf("OnUnknownAgent was asked %v", asked)
	}
}

// Capabilities learned from a plugin SetAgents replaced are never kept: a
// start or readoption in flight across the replacement declares the old
// plugin's, and a probe that looked up the old plugin must not make the
// agent's entry (here the old plugin is missing, so identifying it fails;
// the probe identifies the agent's current plugin instead).
func TestCapabilitiesOfAReplacedPluginAreNotKept(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	h := openHost(t)
	old := AgentPlugin{Path: filepath.Join(t.TempDir(), "gone")}
	h.SetAgents(map[string]AgentPlugin{"scripted": old}, nil)
	h.SetAgents(map[string]AgentPlugin{"scripted": {Path: bins.scripted}}, nil)

	h.learnCapabilities("scripted", old, pluginclient.Capabilities{Options: []pluginclient.OptionSpec{{Name: "the old plugin"}}})
	h.mu.Lock()
	e, kept := h.caps["scripted"]
	h.mu.Unlock()
	if kept {
		t.Errorf("a start of the replaced plugin put its capabilities back: %+v", e.caps)
	}

	caps, err := h.capabilitiesOf(ctx, "scripted", agentSettings{plugin: old})
	if err != nil {
		t.Fatalf("a probe that looked up the replaced plugin: %v, want the current plugin identified", err)
	}
	if len(caps.Options) == 0 || caps.Options[0].Name == "the old plugin" {
		t.Errorf("capabilities: %+v, want the current plugin's", caps)
	}
}

// A plugin upgraded in place (same path, a new Revision) loses the
// capabilities its predecessor declared.
func TestSetAgentsWithANewRevisionDropsTheCapabilities(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	h := openHost(t)
	h.SetAgents(map[string]AgentPlugin{"scripted": {Path: bins.scripted, Revision: "1"}}, nil)
	if _, err := h.Capabilities(ctx, "scripted"); err != nil {
		t.Fatal(err)
	}
	h.SetAgents(map[string]AgentPlugin{"scripted": {Path: bins.scripted, Revision: "2"}}, nil)
	h.mu.Lock()
	_, kept := h.caps["scripted"]
	h.mu.Unlock()
	if kept {
		t.Errorf("the capabilities of the previous revision were kept")
	}
}
