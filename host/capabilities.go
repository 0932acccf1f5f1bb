package host

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agenthost/agenthost/internal/pluginclient"
	"github.com/agenthost/agenthost/internal/wire"
	"github.com/agenthost/agenthost/leasestore"
)

// An agent's capabilities (what its plugin declares in Identify: prompt
// content, MCP transports, auth methods, session options) are learned once
// per host: from the first plugin of the agent this host starts, or, when
// a client asks before any session runs (ACP initialize), by starting the
// plugin only to identify it. A plugin executable replaced while the host
// runs keeps the capabilities its predecessor declared until a SetAgents
// changes its AgentPlugin (its Revision, which the agenthost binary's
// rescan sets from the file, or any other field) or the host restarts; the
// sha256 pin, checked before every spawn, is what guards the executable
// itself.

// capEntry is one agent's capabilities, or the probe that is learning
// them: done is closed once caps (or err) is set.
type capEntry struct {
	done chan struct{}
	caps pluginclient.Capabilities
	err  error
}

// Capabilities returns what the agent's plugin declares. The first call
// for an agent no session of this host has started yet spawns the plugin
// (the same runner, environment and sha256 check as a session's), reads
// its Identify and stops it; the answer is kept for the host's life. A
// failed probe is not kept: the next call tries again. Its error matches
// ErrStartFailed.
func (h *Host) Capabilities(ctx context.Context, agent string) (pluginclient.Capabilities, error) {
	set, ok := h.lookupAgent(ctx, agent)
	if !ok {
		return pluginclient.Capabilities{}, fmt.Errorf("%w %q: configured agents are %q", ErrUnknownAgent, agent, h.agentNames())
	}
	return h.capabilitiesOf(ctx, agent, set)
}

// capabilitiesOf is Capabilities of agent, whose settings were set when it
// was looked up. SetAgents may replace it at any moment: an entry is made
// (and so kept) only while plug is still the agent's plugin, checked under
// h.mu, which SetAgents takes to drop the entries of a changed plugin; a
// probe whose plugin was replaced before its entry was made looks the
// agent up again. A failed probe removes its own entry only, never one a
// later probe of a newer plugin made.
func (h *Host) capabilitiesOf(ctx context.Context, agent string, set agentSettings) (pluginclient.Capabilities, error) {
	for {
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			return pluginclient.Capabilities{}, fmt.Errorf("identify agent %q: %w", agent, leasestore.ErrClosed)
		}
		if cur, ok := h.settingsOf(agent); !ok || !samePlugin(cur.plugin, set.plugin) {
			h.mu.Unlock()
			if !ok {
				return pluginclient.Capabilities{}, fmt.Errorf("%w %q: configured agents are %q", ErrUnknownAgent, agent, h.agentNames())
			}
			set = cur
			continue
		}
		e, found := h.caps[agent]
		if !found {
			e = &capEntry{done: make(chan struct{})}
			h.caps[agent] = e
			h.starting.Add(1)
		}
		h.mu.Unlock()
		if !found {
			e.caps, e.err = h.identifyAgent(ctx, agent, set)
			if e.err != nil {
				e.err = startError{e.err}
			}
			h.starting.Done()
			if e.err != nil {
				h.mu.Lock()
				if h.caps[agent] == e {
					delete(h.caps, agent)
				}
				h.mu.Unlock()
			}
			close(e.done)
			return e.caps, e.err
		}
		select {
		case <-e.done:
		case <-ctx.Done():
			return pluginclient.Capabilities{}, ctx.Err()
		}
		if e.err == nil {
			return e.caps, nil
		}
		// The probe another caller ran failed: try again on this
		// caller's context.
	}
}

// learnCapabilities keeps what a session's plugin, started from plug,
// declared, unless the agent's are known already or plug is no longer the
// agent's plugin: a start or readoption in flight across a SetAgents that
// replaced it would otherwise put the old plugin's capabilities back after
// SetAgents dropped them. The check is under h.mu, as SetAgents' drop is.
func (h *Host) learnCapabilities(agent string, plug AgentPlugin, caps pluginclient.Capabilities) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if cur, ok := h.agent(agent); !ok || !samePlugin(cur, plug) {
		return
	}
	if _, ok := h.caps[agent]; !ok {
		e := &capEntry{done: make(chan struct{}), caps: caps}
		close(e.done)
		h.caps[agent] = e
	}
}

// identifyAgent starts the agent's plugin without a session, reads its
// capabilities and stops it. The process carries a spawn token no lease
// holds (this host's reaper knows it: Host.identifying), so a host that
// dies meanwhile leaves an orphan the next host's reaper stops.
func (h *Host) identifyAgent(ctx context.Context, agent string, set agentSettings) (pluginclient.Capabilities, error) {
	plug := set.plugin
	if err := checkExecutable(plug.Path); err != nil {
		return pluginclient.Capabilities{}, fmt.Errorf("identify agent %q: %w", agent, err)
	}
	if err := checkDigest(plug.Path, plug.SHA256); err != nil {
		return pluginclient.Capabilities{}, fmt.Errorf("identify agent %q: %w", agent, err)
	}
	env, err := h.environment(ctx, agent, set, false)
	if err != nil {
		return pluginclient.Capabilities{}, fmt.Errorf("identify agent %q: %w", agent, err)
	}
	token := rand.Text()
	h.mu.Lock()
	h.identifying[token] = true
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.identifying, token)
		h.mu.Unlock()
	}()
	dir := filepath.Join(h.cfg.StateDir, "identify", agent+"-"+token[:8])
	env = append(env, wire.EnvSpawnTokenVar+"="+h.tokenVar, h.tokenVar+"="+token, wire.EnvSessionDir+"="+dir)
	proc, err := startPlugin(ctx, pluginSpec{
		Agent: agent, Path: plug.Path, Args: plug.Args, SessionDir: dir, SpawnToken: token, IdentifyOnly: true,
		SocketDir: filepath.Join(h.socketRoot(), token), SocketRoot: h.socketRoot(), Env: env,
		StartupTimeout: h.cfg.StartupTimeout, StopTimeout: h.cfg.StopTimeout,
		Logger: h.log.Named("plugin").With("agent", agent, "identify", true),
	})
	if err != nil {
		return pluginclient.Capabilities{}, fmt.Errorf("identify agent %q: %w", agent, err)
	}
	if err := proc.Stop(context.WithoutCancel(ctx)); err != nil {
		h.log.Warn("stop the plugin started to identify its agent", "agent", agent, "error", err)
	} else {
		_ = os.RemoveAll(dir)
	}
	return proc.caps, nil
}

// CheckSettings refuses, before any plugin sees them, settings the agent
// does not declare: an MCP server of a transport it does not take, and,
// when it declares its options, an option it does not list (a declared
// name ending in "." admits every name it begins). The error is a
// *pluginclient.InvalidOptionError naming the setting.
func CheckSettings(caps pluginclient.Capabilities, options map[string]string, servers []pluginclient.MCPServer) error {
	for _, s := range servers {
		ok := false
		switch s.Transport {
		case "stdio":
			ok = caps.MCPStdio
		case "http":
			ok = caps.MCPHTTP
		case "sse":
			ok = caps.MCPSSE
		}
		if !ok {
			return &pluginclient.InvalidOptionError{Option: "mcpServers." + s.Name,
				Reason: fmt.Sprintf("the agent takes no MCP servers over %q (it declares %s)", s.Transport, mcpTransports(caps))}
		}
	}
	if len(caps.Options) == 0 {
		return nil
	}
	names := make([]string, 0, len(options))
	for k := range options {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		if k == optAllowCredentials || optionDeclared(caps.Options, k) {
			continue
		}
		declared := make([]string, len(caps.Options))
		for i, o := range caps.Options {
			declared[i] = o.Name
		}
		return &pluginclient.InvalidOptionError{Option: k, Reason: fmt.Sprintf("the agent does not take this option; it takes %q", declared)}
	}
	return nil
}

func optionDeclared(specs []pluginclient.OptionSpec, name string) bool {
	for _, o := range specs {
		if strings.HasSuffix(o.Name, ".") {
			if strings.HasPrefix(name, o.Name) && len(name) > len(o.Name) {
				return true
			}
		} else if o.Name == name {
			return true
		}
	}
	return false
}

func mcpTransports(caps pluginclient.Capabilities) string {
	var t []string
	for _, x := range []struct {
		ok   bool
		name string
	}{{caps.MCPStdio, "stdio"}, {caps.MCPHTTP, "http"}, {caps.MCPSSE, "sse"}} {
		if x.ok {
			t = append(t, x.name)
		}
	}
	if len(t) == 0 {
		return "none"
	}
	return strings.Join(t, ", ")
}
