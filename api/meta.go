package api

import (
	"encoding/json"
	"fmt"
)

// What agenthost puts under _meta.agenthost of ACP messages. The ACP
// library carries _meta as map[string]any; the server puts these types in
// it and a client decodes them from the message's JSON.

// NewSessionMeta is _meta.agenthost of a session/new request.
type NewSessionMeta struct {
	// Agent names the agent to start; empty starts the server's default.
	Agent string `json:"agent"`
	// SessionID is the new session's id; empty generates one.
	SessionID string `json:"sessionId,omitempty"`
	// Options are the agent's session options (each agent documents its
	// own, as the plugins' Opt constants do). They are stored with the
	// session and passed to the plugin when the session starts.
	Options map[string]string `json:"options,omitempty"`
}

// ReadNewSessionMeta reads NewSessionMeta from the _meta of a session/new
// request as the ACP library decodes it. Member names match exactly; an
// agent or session id that is not a string reads as empty, and an option
// that is not a string is an error naming it.
func ReadNewSessionMeta(meta map[string]any) (NewSessionMeta, error) {
	m, _ := meta[MetaKey].(map[string]any)
	agent, _ := m["agent"].(string)
	id, _ := m["sessionId"].(string)
	out := NewSessionMeta{Agent: agent, SessionID: id}
	if opts, ok := m["options"].(map[string]any); ok {
		out.Options = make(map[string]string, len(opts))
		for k, v := range opts {
			s, ok := v.(string)
			if !ok {
				return NewSessionMeta{}, fmt.Errorf("_meta.%s.options.%s must be a JSON string: write \"%s\": \"%v\"", MetaKey, k, k, v)
			}
			out.Options[k] = s
		}
	}
	return out, nil
}

// MetaKey is the member of an ACP _meta object that holds agenthost's own.
const MetaKey = "agenthost"

// UpdateMeta is _meta.agenthost of a session/update notification the host
// sends: where the update sits in the session's journal.
type UpdateMeta struct {
	Seq    uint64 `json:"seq"`
	TurnID string `json:"turnId"`
}

// ListedSessionMeta is _meta.agenthost of a session in a session/list
// result.
type ListedSessionMeta struct {
	Agent  string `json:"agent"`
	Claim  string `json:"claim"`
	Fence  uint64 `json:"fence"`
	Handle string `json:"handle"`
	Stage  string `json:"stage"`
	// State is the session's Session.State.
	State string `json:"state,omitempty"`
	// OwnerHost is the host that holds the session's lease (its plugin
	// runs there, or is being started there); "" when nobody holds it.
	OwnerHost string `json:"ownerHost,omitempty"`
	// Portable: a provider state is stored with the session, so any host
	// of a cluster can resume it; false means only its own machine can.
	Portable bool `json:"portable"`
}

// Meta is the _meta member of an ACP message as a client decodes it, with
// agenthost's own under MetaKey.
type Meta[T any] struct {
	Agenthost T `json:"agenthost"`
}

// SessionUpdateParams are the params of a session/update notification as
// a client reads them: the update is left as JSON, for
// journal.DecodeUpdate.
type SessionUpdateParams struct {
	SessionID string           `json:"sessionId"`
	Update    json.RawMessage  `json:"update"`
	Meta      Meta[UpdateMeta] `json:"_meta"`
}

// ListSessionsResult is a session/list result as a client reads it, with
// agenthost's _meta of each session.
type ListSessionsResult struct {
	Sessions []ListedSession `json:"sessions"`
	// NextCursor asks for the next page (params {"cursor": …}); nil on
	// the last page. See ListPageSize.
	NextCursor *string `json:"nextCursor,omitempty"`
}

// ListedSession is one session of a session/list result.
type ListedSession struct {
	SessionID string `json:"sessionId"`
	Cwd       string `json:"cwd"`
	// Title is the session's title: the agent's, or the first line of its
	// first prompt; nil before it has one.
	Title *string `json:"title,omitempty"`
	// UpdatedAt is when the record last changed (RFC 3339).
	UpdatedAt *string                 `json:"updatedAt,omitempty"`
	Meta      Meta[ListedSessionMeta] `json:"_meta"`
}

// InitializeMeta is _meta.agenthost of the initialize result: what each
// agent of the host supports. The ACP members of the result
// (promptCapabilities, mcpCapabilities) declare the connection's default
// agent's (`agenthost acp --agent NAME`), or, on a socket that serves
// several agents and names no default, what every one of them supports; a
// client that starts sessions of a particular agent reads that agent's
// here.
type InitializeMeta struct {
	Agents map[string]AgentCapabilities `json:"agents"`
}

// AgentCapabilities is what one agent's plugin declares.
type AgentCapabilities struct {
	PromptCapabilities PromptCapabilities `json:"promptCapabilities"`
	MCPCapabilities    MCPCapabilities    `json:"mcpCapabilities"`
	// AuthMethods are the ids, as initialize's authMethods name them, of
	// the agent's auth methods.
	AuthMethods []string `json:"authMethods"`
	// Options are the session options the agent takes (in
	// _meta.agenthost.options of session/new); a name ending in "." is a
	// prefix ("env." takes "env.FOO"). Empty: the agent declares none, and
	// the host passes any option on for the agent to judge.
	Options []OptionSpec `json:"options"`
	// SetMode and SetConfigOption: session/set_mode and
	// session/set_config_option work for the agent's sessions.
	SetMode         bool `json:"setMode"`
	SetConfigOption bool `json:"setConfigOption"`
}

// PromptCapabilities are the prompt blocks beyond text an agent takes
// (ACP's, and resource_link, which ACP assumes).
type PromptCapabilities struct {
	Image           bool `json:"image"`
	Audio           bool `json:"audio"`
	EmbeddedContext bool `json:"embeddedContext"`
	ResourceLink    bool `json:"resourceLink"`
}

// MCPCapabilities are the MCP transports an agent takes.
type MCPCapabilities struct {
	Stdio bool `json:"stdio"`
	HTTP  bool `json:"http"`
	SSE   bool `json:"sse"`
}

// OptionSpec is one session option an agent declares.
type OptionSpec struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
}

// AuthMethodMeta is _meta.agenthost of an auth method in the initialize
// result.
type AuthMethodMeta struct {
	// Agent is the agent the method authenticates.
	Agent string `json:"agent"`
	// TerminalCommand is the command a user runs in a terminal to log in
	// (argv), for a terminal login.
	TerminalCommand []string `json:"terminalCommand,omitempty"`
}
