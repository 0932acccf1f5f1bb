package localapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	acp "github.com/coder/acp-go-sdk"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/internal/pluginclient"
	"github.com/agenthost/agenthost/leasestore"
)

// The ACP session surface an agent declares: what initialize advertises,
// and the conversions between ACP's types and the plugin protocol's.

// agentsCapabilities learns the capabilities of the connection's agents
// (its default agent, or every configured one), each at most once per
// host (host.Capabilities caches them). An agent whose plugin cannot be
// identified is left out and logged: initialize still answers, and a
// session of that agent fails with the reason. several: the connection
// serves several agents, so auth method ids carry their agent's name.
func (a *agent) agentsCapabilities(ctx context.Context) (all map[string]pluginclient.Capabilities, several bool) {
	names := a.srv.Host.Agents()
	if a.srv.DefaultAgent != "" {
		names = []string{a.srv.DefaultAgent}
	}
	out := make(map[string]pluginclient.Capabilities, len(names))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, n := range names {
		wg.Go(func() {
			caps, err := a.srv.Host.Capabilities(ctx, n)
			if err != nil {
				a.srv.log().Warn("could not learn an agent's capabilities", "agent", n, "error", err)
				return
			}
			mu.Lock()
			out[n] = caps
			mu.Unlock()
		})
	}
	wg.Wait()
	return out, len(names) > 1
}

// declared is what initialize declares for a connection: the default
// agent's capabilities, or, without one, what every agent supports.
func declared(all map[string]pluginclient.Capabilities, def string) pluginclient.Capabilities {
	if c, ok := all[def]; ok {
		return c
	}
	first := true
	var out pluginclient.Capabilities
	for _, c := range all {
		if first {
			out, first = c, false
			continue
		}
		out.Image, out.Audio = out.Image && c.Image, out.Audio && c.Audio
		out.EmbeddedContext, out.ResourceLink = out.EmbeddedContext && c.EmbeddedContext, out.ResourceLink && c.ResourceLink
		out.MCPStdio, out.MCPHTTP, out.MCPSSE = out.MCPStdio && c.MCPStdio, out.MCPHTTP && c.MCPHTTP, out.MCPSSE && c.MCPSSE
	}
	return out
}

func promptCapabilities(c pluginclient.Capabilities) acp.PromptCapabilities {
	return acp.PromptCapabilities{Image: c.Image, Audio: c.Audio, EmbeddedContext: c.EmbeddedContext}
}

func mcpCapabilities(c pluginclient.Capabilities) acp.McpCapabilities {
	return acp.McpCapabilities{Http: c.MCPHTTP, Sse: c.MCPSSE}
}

// authMethodID is the id a method of agent goes by: its own when the host
// serves one agent, "<agent>:<id>" when it serves several.
func authMethodID(several bool, agent, id string) string {
	if several {
		return agent + ":" + id
	}
	return id
}

// authMethods are the ACP auth methods of every agent: an API key as an
// env_var method (the operator provides it: see CredentialPolicy.Inherit),
// a terminal login as a method the client shows, with the command under
// _meta.agenthost.terminalCommand.
func authMethods(all map[string]pluginclient.Capabilities, several bool) []acp.AuthMethod {
	out := []acp.AuthMethod{}
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		for _, m := range all[n].AuthMethods {
			id := authMethodID(several, n, m.ID)
			var desc *string
			if m.Description != "" {
				d := m.Description
				desc = &d
			}
			if len(m.EnvVars) > 0 {
				vars := make([]acp.AuthEnvVar, len(m.EnvVars))
				for i, v := range m.EnvVars {
					vars[i] = acp.AuthEnvVar{Name: v, Secret: true}
				}
				out = append(out, acp.AuthMethod{EnvVar: &acp.AuthMethodEnvVarInline{Id: id, Name: m.Name, Description: desc, Vars: vars,
					Meta: map[string]any{api.MetaKey: api.AuthMethodMeta{Agent: n}}}})
				continue
			}
			out = append(out, acp.AuthMethod{Agent: &acp.AuthMethodAgent{Id: id, Name: m.Name, Description: desc,
				Meta: map[string]any{api.MetaKey: api.AuthMethodMeta{Agent: n, TerminalCommand: m.TerminalCommand}}}})
		}
	}
	return out
}

// agentsMeta is _meta.agenthost of initialize: each agent's capabilities.
func agentsMeta(all map[string]pluginclient.Capabilities, several bool) map[string]any {
	agents := make(map[string]api.AgentCapabilities, len(all))
	for n, c := range all {
		ac := api.AgentCapabilities{
			PromptCapabilities: api.PromptCapabilities{Image: c.Image, Audio: c.Audio, EmbeddedContext: c.EmbeddedContext, ResourceLink: c.ResourceLink},
			MCPCapabilities:    api.MCPCapabilities{Stdio: c.MCPStdio, HTTP: c.MCPHTTP, SSE: c.MCPSSE},
			SetMode:            c.SetMode, SetConfigOption: c.SetConfigOption,
			Options: []api.OptionSpec{}, AuthMethods: []string{},
		}
		for _, o := range c.Options {
			ac.Options = append(ac.Options, api.OptionSpec{Name: o.Name, Description: o.Description})
		}
		for _, m := range c.AuthMethods {
			ac.AuthMethods = append(ac.AuthMethods, authMethodID(several, n, m.ID))
		}
		agents[n] = ac
	}
	return map[string]any{api.MetaKey: api.InitializeMeta{Agents: agents}}
}

// mcpServers converts ACP MCP servers. An ACP-transport server has no
// form in the plugin protocol: it is refused, naming it.
func mcpServers(in []acp.McpServer) ([]pluginclient.MCPServer, error) {
	var out []pluginclient.MCPServer
	for _, s := range in {
		switch {
		case s.Stdio != nil:
			m := pluginclient.MCPServer{Name: s.Stdio.Name, Transport: "stdio", Command: s.Stdio.Command, Args: s.Stdio.Args}
			for _, e := range s.Stdio.Env {
				m.Env = append(m.Env, pluginclient.NameValue{Name: e.Name, Value: e.Value})
			}
			out = append(out, m)
		case s.Http != nil:
			out = append(out, pluginclient.MCPServer{Name: s.Http.Name, Transport: "http", URL: s.Http.Url, Headers: headers(s.Http.Headers)})
		case s.Sse != nil:
			out = append(out, pluginclient.MCPServer{Name: s.Sse.Name, Transport: "sse", URL: s.Sse.Url, Headers: headers(s.Sse.Headers)})
		default:
			return nil, &pluginclient.InvalidOptionError{Option: "mcpServers", Reason: "only stdio, http and sse MCP servers are supported"}
		}
	}
	return out, nil
}

func headers(hs []acp.HttpHeader) []pluginclient.NameValue {
	var out []pluginclient.NameValue
	for _, h := range hs {
		out = append(out, pluginclient.NameValue{Name: h.Name, Value: h.Value})
	}
	return out
}

func modesToACP(m *pluginclient.ModeState) *acp.SessionModeState {
	if m == nil {
		return nil
	}
	out := &acp.SessionModeState{CurrentModeId: acp.SessionModeId(m.CurrentModeID), AvailableModes: []acp.SessionMode{}}
	for _, x := range m.Available {
		out.AvailableModes = append(out.AvailableModes, acp.SessionMode{Id: acp.SessionModeId(x.ID), Name: x.Name, Description: optString(x.Description)})
	}
	return out
}

func configOptionsToACP(opts []pluginclient.ConfigOption) []acp.SessionConfigOption {
	out := []acp.SessionConfigOption{}
	for _, o := range opts {
		values := acp.SessionConfigSelectOptionsUngrouped{}
		for _, v := range o.Values {
			values = append(values, acp.SessionConfigSelectOption{Value: acp.SessionConfigValueId(v.Value), Name: v.Name, Description: optString(v.Description)})
		}
		sel := &acp.SessionConfigOptionSelect{Id: acp.SessionConfigId(o.ID), Name: o.Name, Description: optString(o.Description),
			CurrentValue: acp.SessionConfigValueId(o.CurrentValue), Options: acp.SessionConfigSelectOptions{Ungrouped: &values}, Type: "select"}
		if o.Category != "" {
			c := acp.SessionConfigOptionCategory(o.Category)
			sel.Category = &c
		}
		out = append(out, acp.SessionConfigOption{Select: sel})
	}
	return out
}

// configOptionsOrNil leaves configOptions out of a result for an agent
// that reports none.
func configOptionsOrNil(opts []pluginclient.ConfigOption) []acp.SessionConfigOption {
	if len(opts) == 0 {
		return nil
	}
	return configOptionsToACP(opts)
}

func optString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// promptBlocks converts an ACP prompt for the plugin: a text block as its
// text, every other block as its ACP JSON with its type. Whether the agent
// takes each type is the host's to check (host.ErrUnsupportedContent).
func promptBlocks(in []acp.ContentBlock) ([]pluginclient.ContentBlock, error) {
	out := make([]pluginclient.ContentBlock, 0, len(in))
	for i, b := range in {
		if b.Text != nil {
			out = append(out, pluginclient.ContentBlock{Type: "text", Text: b.Text.Text})
			continue
		}
		raw, err := json.Marshal(b)
		if err != nil {
			return nil, fmt.Errorf("%w: prompt block %d: %w", host.ErrUnsupportedContent, i, err)
		}
		var head struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(raw, &head) != nil || head.Type == "" {
			return nil, fmt.Errorf("%w: prompt block %d has no type", host.ErrUnsupportedContent, i)
		}
		out = append(out, pluginclient.ContentBlock{Type: head.Type, JSON: string(raw)})
	}
	return out, nil
}

// apiError carries a host error to the client with its code (api's list)
// and message.
func apiError(err error) error {
	if err == nil {
		return nil
	}
	var re *acp.RequestError
	if errors.As(err, &re) {
		return err
	}
	var elsewhere *host.ElsewhereError
	if errors.As(err, &elsewhere) {
		// The message is for the user: it names the host and where to
		// connect; data is for a client that connects there itself.
		return &acp.RequestError{Code: api.CodeSessionElsewhere, Message: err.Error(),
			Data: api.ElsewhereData{HostID: elsewhere.HostID, Address: elsewhere.Address}}
	}
	var notPortable *host.NotPortableError
	if errors.As(err, &notPortable) {
		return &acp.RequestError{Code: api.CodeSessionNotPortable, Message: err.Error(),
			Data: api.NotPortableData{HostID: notPortable.HostID}}
	}
	var inv *pluginclient.InvalidOptionError
	if errors.As(err, &inv) {
		return &acp.RequestError{Code: api.CodeInvalidParams, Message: err.Error(),
			Data: api.ErrorData{Error: err.Error(), Setting: inv.Option}}
	}
	code := errorCode(err)
	if code == api.CodeInvalidParams {
		return &acp.RequestError{Code: code, Message: err.Error(), Data: api.ErrorData{Error: err.Error()}}
	}
	return &acp.RequestError{Code: code, Message: err.Error()}
}

// errorCode is the API's code for a host error; the order matters: an
// auth failure is also a failed start, a refused setting also the agent's
// refusal.
func errorCode(err error) int {
	is := func(targets ...error) bool {
		for _, t := range targets {
			if errors.Is(err, t) {
				return true
			}
		}
		return false
	}
	var perr *pluginclient.Error
	switch {
	case is(pluginclient.ErrAuthRequired):
		return api.CodeAuthRequired
	case is(pluginclient.ErrInvalidOption, pluginclient.ErrInvalidArgument, host.ErrUnsupportedContent, host.ErrUnknownAgent, leasestore.ErrInvalidArgument):
		return api.CodeInvalidParams
	case is(leasestore.ErrNotFound):
		return api.CodeNotFound
	case is(host.ErrTurnRunning):
		return api.CodeTurnRunning
	case is(host.ErrSessionRunning):
		return api.CodeSessionRunning
	case is(host.ErrSessionElsewhere):
		return api.CodeSessionElsewhere
	case is(host.ErrNotPortable):
		return api.CodeSessionNotPortable
	case is(host.ErrStartFailed):
		return api.CodeAgentFailed
	case is(pluginclient.ErrSelfFenced):
		// The plugin heard no heartbeat in time (cluster mode): the host
		// heartbeats it again once live, and the next attempt runs.
		return api.CodeSessionHeld
	case is(host.ErrIdleStopped):
		// Only timing: the next attempt resumes the session.
		return api.CodeSessionHeld
	case is(leasestore.ErrReconciling, leasestore.ErrOwnershipUnknown, leasestore.ErrConflict, leasestore.ErrStaleFence, leasestore.ErrInvalidTransition):
		return api.CodeSessionHeld
	case is(leasestore.ErrClosed, leasestore.ErrNoSpace, leasestore.ErrDamaged, leasestore.ErrLocked):
		return api.CodeStoreFailed
	case is(pluginclient.ErrNotImplemented):
		return api.CodeMethodNotFound
	case errors.As(err, &perr):
		return api.CodeAgentRefused
	}
	return api.CodeInternalError
}

// knownAuthMethod reports whether id is one of the auth methods
// initialize offers.
func knownAuthMethod(all map[string]pluginclient.Capabilities, several bool, id string) bool {
	for n, c := range all {
		for _, m := range c.AuthMethods {
			if authMethodID(several, n, m.ID) == id {
				return true
			}
		}
	}
	return false
}
