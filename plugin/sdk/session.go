package sdk

import (
	"context"
	"errors"
	"fmt"
)

// Capabilities is what a plugin declares it can do, before any session
// opens: the host offers a client exactly this (ACP promptCapabilities,
// mcpCapabilities, authMethods) and refuses what it excludes rather than
// passing it to an agent that would drop it. Declare it with
// WithCapabilities; the zero value is a text-only agent without MCP
// servers, modes or declared options. The conformance kit checks that
// every capability declared here works.
type Capabilities struct {
	// Prompt content beyond text that Prompt accepts.
	Image, Audio, EmbeddedContext, ResourceLink bool
	// MCP server transports NewSession and ResumeSession accept.
	MCPStdio, MCPHTTP, MCPSSE bool
	// AuthMethods are the ways a user authenticates the agent's provider.
	AuthMethods []AuthMethod
	// Options are the session options the agent accepts. When set, the
	// host refuses any other option before the plugin sees it; an agent
	// must still refuse an invalid value with InvalidOptionError.
	Options []OptionSpec
	// Modes and ConfigOptions declare that the agent implements
	// ModeSetter and ConfigOptionSetter. The agent exists only once a
	// session opens, so this is how Identify reports them before; once it
	// exists, Identify reports what it implements, declared or not. An
	// agent lacking a declared interface fails its first NewSession or
	// ResumeSession (a plugin offering what it cannot do is a bug).
	Modes, ConfigOptions bool
}

// AuthMethod is one way to authenticate an agent's provider (ACP
// AuthMethod).
type AuthMethod struct {
	ID          string
	Name        string
	Description string
	// TerminalCommand is the command a user runs in a terminal to log in
	// (argv), for a terminal login.
	TerminalCommand []string
	// EnvVars carry an API key, for a key the operator provides (the
	// host strips provider credentials unless the operator opts in).
	EnvVars []string
}

// OptionSpec declares one session option. A Name ending in "." is a
// prefix: "env." accepts "env.FOO".
type OptionSpec struct {
	Name        string
	Description string
}

// WithCapabilities declares what the agent supports (see Capabilities).
func WithCapabilities(c Capabilities) ServeOption {
	return serveOptionFunc(func(cfg *serveConfig) { cfg.capabilities = c })
}

// MCPServer is an MCP server a client asks the agent to connect to (ACP
// McpServer). Transport says which fields are set.
type MCPServer struct {
	Name string
	// Transport is "stdio", "http" or "sse".
	Transport string
	// Command, Args and Env start a stdio server.
	Command string
	Args    []string
	Env     []NameValue
	// URL and Headers reach an http or sse server.
	URL     string
	Headers []NameValue
}

// NameValue is an environment variable or an HTTP header.
type NameValue struct{ Name, Value string }

// Mode is one mode a session can be in (ACP SessionMode): claude's
// permission modes, codex's approval presets.
type Mode struct {
	ID          string
	Name        string
	Description string
}

// ModeState is a session's modes and the current one.
type ModeState struct {
	CurrentModeID string
	Available     []Mode
}

// ConfigOption is one of a session's config options, a choice among
// values (ACP SessionConfigOption of type "select"). Its ID doubles as the
// name of the session option carrying its value, so the host stores the
// current value with the session and passes it again on every resume: an
// agent that offers config option "model" accepts session option "model".
type ConfigOption struct {
	ID          string
	Name        string
	Description string
	// Category is ACP's: CategoryMode, CategoryModel, CategoryThoughtLevel
	// or empty.
	Category     string
	CurrentValue string
	Values       []ConfigValue
}

// ACP's config option categories.
const (
	CategoryMode         = "mode"
	CategoryModel        = "model"
	CategoryThoughtLevel = "thought_level"
)

// ConfigValue is one value a ConfigOption offers.
type ConfigValue struct {
	Value       string
	Name        string
	Description string
}

// Command is one slash command the agent offers (ACP AvailableCommand).
type Command struct {
	// Name is the command without its slash.
	Name        string
	Description string
	// InputHint describes the command's argument; empty when it takes none.
	InputHint string
}

// ModeSetter is implemented by agents with modes. SetMode switches the
// open session's mode between turns or while one runs; a mode the agent
// does not offer is an InvalidOptionError. The SDK reports the change to
// the host (a current_mode update), so the agent need not.
type ModeSetter interface {
	SetMode(ctx context.Context, modeID string) error
}

// ConfigOptionSetter is implemented by agents with config options.
// SetConfigOption sets one and returns every config option as it now is;
// an unknown option or value is an InvalidOptionError. The SDK reports the
// result to the host (a config_options update).
type ConfigOptionSetter interface {
	SetConfigOption(ctx context.Context, id, value string) ([]ConfigOption, error)
}

// InvalidOptionError refuses a session option, mode or config option: the
// host answers the client's request with "invalid params" naming Option.
type InvalidOptionError struct {
	// Option names the setting: a session option's name, "mode", or a
	// config option's id.
	Option string
	// Reason says what is wrong and what to write instead.
	Reason string
}

func (e *InvalidOptionError) Error() string {
	return fmt.Sprintf("session option %s: %s", e.Option, e.Reason)
}

// ErrAuthRequired is wrapped by an agent's error when the provider refused
// or lacks credentials: the host answers "auth required" and offers the
// declared AuthMethods. Return it from NewSession or ResumeSession (as
// fmt.Errorf("…: %w", sdk.ErrAuthRequired)) or from Prompt.
var ErrAuthRequired = errors.New("authentication required")

// Reporter reports session-level updates: what changes outside any turn
// (slash commands, a title, a mode the agent switched to itself). Updates
// it reports are journaled like a turn's, without a turn id. It works from
// the moment the factory returns; reporting before a session is open
// queues the update for the host like any other.
type Reporter struct {
	srv *server
}

// Emit appends a session-level update built by hand.
func (r *Reporter) Emit(u Update) error {
	if r == nil || r.srv == nil {
		return errors.New("sdk: this Reporter is not connected to a plugin server")
	}
	if n := u.kinds(); n != 1 {
		return fmt.Errorf("sdk: an update must set exactly one kind, this one sets %d", n)
	}
	r.srv.emitSession(u)
	return nil
}

func (r *Reporter) emit(u Update) {
	if err := r.Emit(u); err != nil && r != nil && r.srv != nil {
		r.srv.log.Warn("session update dropped", "error", err)
	}
}

// CurrentMode reports the session's mode changed.
func (r *Reporter) CurrentMode(modeID string) { r.emit(Update{CurrentMode: &modeID}) }

// ConfigOptions reports the session's config options after a change.
func (r *Reporter) ConfigOptions(opts []ConfigOption) {
	if opts == nil {
		opts = []ConfigOption{}
	}
	r.emit(Update{ConfigOptions: opts})
}

// Commands reports the agent's slash commands.
func (r *Reporter) Commands(cmds []Command) {
	if cmds == nil {
		cmds = []Command{}
	}
	r.emit(Update{AvailableCommands: cmds})
}

// Title reports the session's title.
func (r *Reporter) Title(title string) { r.emit(Update{SessionInfo: &SessionInfoUpdate{Title: title}}) }

// HandleChanged reports a new provider handle outside a turn.
func (r *Reporter) HandleChanged(handle, origin string) {
	r.emit(Update{HandleChanged: &HandleChanged{Handle: handle, Origin: origin}})
}

// SessionInfoUpdate is session metadata (ACP session_info_update).
type SessionInfoUpdate struct {
	Title string
}
