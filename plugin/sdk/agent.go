package sdk

import (
	"context"
	"errors"

	"github.com/hashicorp/go-hclog"
)

// Agent is what a plugin implements. One plugin process serves one session,
// so an Agent holds one conversation: it is created by the Factory given to
// Serve when the host first opens or resumes the session.
//
// Three methods are required. Everything else is an optional interface
// (Closer, Describer, ModeSetter, ConfigOptionSetter, StateExporter,
// StateImporter); embed UnimplementedAgent to start from an agent that
// answers ErrNotImplemented and add methods one by one.
type Agent interface {
	// NewSession starts a new provider conversation in req.Workspace and
	// returns its provider handle (a Claude session id, a Codex thread id,
	// whatever the agent resumes from later). An error here is the
	// readiness failure the host reports, so say what the user must do:
	// "no model configured: set ANTHROPIC_MODEL or pass --model".
	NewSession(ctx context.Context, req NewSessionRequest) (SessionInfo, error)
	// ResumeSession reopens the conversation named by req.Handle. It may
	// report a different handle (some providers mint one per resume).
	ResumeSession(ctx context.Context, req ResumeSessionRequest) (SessionInfo, error)
	// Prompt runs one turn to its end and returns why it stopped. It
	// reports progress through turn. When the host cancels the turn, ctx is
	// cancelled and Prompt should stop promptly and return StopCancelled
	// (not an error). A returned error ends the turn as failed with that
	// message.
	Prompt(ctx context.Context, req PromptRequest, turn *Turn) (StopReason, error)
}

// Closer is implemented by agents that hold resources (a CLI process, open
// files) to release when the session closes or the plugin is stopped.
type Closer interface {
	Close(ctx context.Context) error
}

// Describer is implemented by agents that report their version in the
// plugin's identity. The agent exists only once a session is open, so the
// version is empty in identities reported before that.
type Describer interface {
	AgentVersion() string
}

// StateExporter is implemented by an Agent that can hand its provider conversation to a host on another machine.
//
// ExportState returns the open conversation's provider state (claude's
// session transcript, codex's rollout), named by handle, the session's
// current provider handle. The host calls it after every turn's stop is
// journaled, never during a turn, and stores the result with the session;
// a resume of that handle on any machine passes it to StateImporter. The
// bytes are opaque to the host and bounded (64 MiB: larger, the session
// stays resumable only on its own machine). An agent that cannot export now
// (the provider wrote nothing yet) returns an error, which the host logs.
// It may be called after Closer.Close (the last turn's stop follows a
// Close), and while the next turn starts: export what the provider has
// written, consistently.
type StateExporter interface {
	ExportState(ctx context.Context, handle string) ([]byte, error)
}

// StateImporter puts an exported state in place before ResumeSession continues it.
//
// The SDK calls ImportState before ResumeSession when the host's resume
// carries provider state (what a StateExporter returned for handle, on this
// machine or another), with the same handle; it must leave the provider
// able to resume handle from it. The state is the newest the host stored,
// which can be older than what this machine holds of the conversation (the
// host's export after the last turn failed, or the plugin ran on here
// after it): when this machine's copy already contains the state's and
// more, keep it, as an append-only transcript makes easy to tell. An error
// fails the resume with its message. A resume that carries state to an
// agent that is no StateImporter is refused.
type StateImporter interface {
	ImportState(ctx context.Context, handle string, state []byte) error
}

// UnimplementedAgent answers ErrNotImplemented to every required method.
// Embed it in an agent to satisfy the interface while building it, and so
// that future required methods added in a minor release have a default.
type UnimplementedAgent struct{}

func (UnimplementedAgent) NewSession(context.Context, NewSessionRequest) (SessionInfo, error) {
	return SessionInfo{}, ErrNotImplemented
}

func (UnimplementedAgent) ResumeSession(context.Context, ResumeSessionRequest) (SessionInfo, error) {
	return SessionInfo{}, ErrNotImplemented
}

func (UnimplementedAgent) Prompt(context.Context, PromptRequest, *Turn) (StopReason, error) {
	return "", ErrNotImplemented
}

// ErrNotImplemented is returned by UnimplementedAgent.
var ErrNotImplemented = errors.New("not implemented by this agent plugin")

// Factory creates the session's Agent. It runs once, when the host first
// opens or resumes the session; its error is reported to the host as the
// plugin's readiness failure. ctx belongs to that request and ends with it:
// do not keep it, or anything started from it, beyond the factory call.
type Factory func(ctx context.Context, env Environment) (Agent, error)

// Environment is what a Factory gets from the host and the SDK.
type Environment struct {
	// SessionDir is a private directory for this session's plugin state,
	// set by the host. The outbox spills there.
	SessionDir string
	// Logger writes structured logs to the plugin's log file. Never write
	// to stdout: it carries the plugin handshake.
	Logger hclog.Logger
	// Reporter reports updates outside a turn (slash commands, a title,
	// a mode change the agent made itself). Nil in an Environment built
	// by hand; the SDK always sets it.
	Reporter *Reporter
}

// Log is Logger, or a logger that discards everything when Logger is nil
// (an Environment built by hand, as in a test).
func (e Environment) Log() hclog.Logger {
	if e.Logger == nil {
		return hclog.NewNullLogger()
	}
	return e.Logger
}

// NewSessionRequest asks for a new conversation.
type NewSessionRequest struct {
	// Workspace is the absolute directory the agent works in.
	Workspace string
	// Options are session options from the host (model, mode, …). An
	// option the agent does not know, or a malformed value, is refused
	// with an *InvalidOptionError naming it.
	Options map[string]string
	// MCPServers are the MCP servers the client asks the agent to use,
	// only of transports the agent declared (Capabilities).
	MCPServers []MCPServer
}

// ResumeSessionRequest asks to reopen a conversation. Options and
// MCPServers are what the session was opened with (as acknowledged, and
// as later changed by SetMode and SetConfigOption): apply them again.
type ResumeSessionRequest struct {
	Workspace  string
	Options    map[string]string
	MCPServers []MCPServer
	// Handle is the provider handle the session last proved.
	Handle string
}

// SessionInfo describes the open conversation.
type SessionInfo struct {
	// Handle is the provider's handle; required.
	Handle string
	// Options are the options the agent acknowledged; the host stores them
	// with the session and passes them again on every resume.
	Options map[string]string
	// Modes are the session's modes; nil when the agent has none.
	Modes *ModeState
	// ConfigOptions are the session's config options (model, reasoning
	// effort, …), each with its current value.
	ConfigOptions []ConfigOption
}

// PromptRequest is one user turn.
type PromptRequest struct {
	TurnID string
	Prompt []ContentBlock
}

// Text returns the concatenated text blocks of the prompt.
func (r PromptRequest) Text() string {
	var s string
	for _, b := range r.Prompt {
		if b.Type == "text" || b.Type == "" {
			s += b.Text
		}
	}
	return s
}

// StopReason says why a turn ended (ACP vocabulary).
type StopReason string

const (
	StopEndTurn         StopReason = "end_turn"
	StopMaxTokens       StopReason = "max_tokens"
	StopMaxTurnRequests StopReason = "max_turn_requests"
	StopRefusal         StopReason = "refusal"
	StopCancelled       StopReason = "cancelled"
	// StopFailed is agenthost's addition: the turn ended with an error.
	StopFailed StopReason = "failed"
)
