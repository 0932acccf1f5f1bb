package host

import (
	"context"
	"maps"
	"slices"
)

// SetAgents replaces the agents the host serves and their credential
// policies (Config.Agents and Config.Credentials), for an embedder whose
// configuration changes while the host runs: the agenthost binary rescans
// its plugins directory and agenthost.json. The maps are copied.
//
// A start after it uses the new configuration; a session already running
// keeps the plugin process it runs, whatever the change, and a start of an
// agent no longer configured fails with ErrUnknownAgent. The capabilities
// kept for an agent whose plugin changed or went are dropped, so the next
// Capabilities asks the new plugin.
func (h *Host) SetAgents(agents map[string]AgentPlugin, credentials map[string]CredentialPolicy) {
	agents, credentials = maps.Clone(agents), maps.Clone(credentials)
	h.agentsMu.Lock()
	old := h.cfg.Agents
	h.cfg.Agents, h.cfg.Credentials = agents, credentials
	h.agentsMu.Unlock()
	h.mu.Lock()
	for name := range h.caps {
		was, nw := old[name], agents[name]
		if !samePlugin(was, nw) {
			delete(h.caps, name)
		}
	}
	h.mu.Unlock()
}

// samePlugin reports whether a and b start the same plugin.
func samePlugin(a, b AgentPlugin) bool {
	return a.Path == b.Path && a.SHA256 == b.SHA256 && a.Revision == b.Revision &&
		slices.Equal(a.Args, b.Args) && slices.Equal(a.Env, b.Env)
}

// agent returns the plugin configured for name.
func (h *Host) agent(name string) (AgentPlugin, bool) {
	h.agentsMu.RLock()
	defer h.agentsMu.RUnlock()
	p, ok := h.cfg.Agents[name]
	return p, ok
}

// agentSettings are an agent's plugin and credential policy as one
// SetAgents left them. A start reads them once (settingsOf) and carries
// them to the spawn: read apart, a SetAgents in between could give the old
// plugin the new policy, passing credentials to a plugin never opted in.
type agentSettings struct {
	plugin AgentPlugin
	policy CredentialPolicy
}

// settingsOf returns the plugin and credential policy configured for
// name, read together.
func (h *Host) settingsOf(name string) (agentSettings, bool) {
	h.agentsMu.RLock()
	defer h.agentsMu.RUnlock()
	p, ok := h.cfg.Agents[name]
	return agentSettings{plugin: p, policy: h.cfg.Credentials[name]}, ok
}

// lookupAgent returns the settings configured for name, asking
// Config.OnUnknownAgent once when there is none.
func (h *Host) lookupAgent(ctx context.Context, name string) (agentSettings, bool) {
	set, ok := h.settingsOf(name)
	if !ok && h.cfg.OnUnknownAgent != nil {
		h.cfg.OnUnknownAgent(ctx, name)
		set, ok = h.settingsOf(name)
	}
	return set, ok
}
