package pluginclient

import (
	"context"
	"errors"

	"github.com/agenthost/agenthost/internal/agentpb"
)

// Capabilities is what a plugin declares it supports (see
// sdk.Capabilities). The zero value, which a plugin built before
// capabilities existed reports, is a text-only agent.
type Capabilities struct {
	Image, Audio, EmbeddedContext, ResourceLink bool
	MCPStdio, MCPHTTP, MCPSSE                   bool
	AuthMethods                                 []AuthMethod
	// Options are the session options the agent accepts; empty when it
	// declares none.
	Options []OptionSpec
	// SetMode and SetConfigOption: the agent implements the call.
	SetMode, SetConfigOption bool
}

// AuthMethod is one way to authenticate an agent's provider.
type AuthMethod struct {
	ID, Name, Description string
	TerminalCommand       []string
	EnvVars               []string
}

// OptionSpec declares a session option; a Name ending in "." is a prefix.
type OptionSpec struct{ Name, Description string }

// MCPServer is an MCP server for the agent (ACP McpServer); Transport is
// "stdio", "http" or "sse".
type MCPServer struct {
	Name      string
	Transport string
	Command   string
	Args      []string
	Env       []NameValue
	URL       string
	Headers   []NameValue
}

// NameValue is an environment variable or an HTTP header.
type NameValue struct{ Name, Value string }

// Mode is one session mode.
type Mode struct{ ID, Name, Description string }

// ModeState is a session's modes and the current one.
type ModeState struct {
	CurrentModeID string
	Available     []Mode
}

// ConfigOption is one of a session's config options.
type ConfigOption struct {
	ID, Name, Description, Category string
	CurrentValue                    string
	Values                          []ConfigValue
}

// ConfigValue is one value a ConfigOption offers.
type ConfigValue struct{ Value, Name, Description string }

// SetMode switches the session's mode. ErrNotImplemented when the agent
// has none; an invalid mode matches ErrInvalidArgument.
func (a *Attachment) SetMode(ctx context.Context, modeID string) error {
	_, err := a.rpc.SetMode(ctx, &agentpb.SetModeRequest{Fence: a.fence, ModeId: modeID})
	return classify(ctx, err)
}

// SetConfigOption sets one config option and returns all of them as they
// now are. Errors as SetMode's.
func (a *Attachment) SetConfigOption(ctx context.Context, id, value string) ([]ConfigOption, error) {
	r, err := a.rpc.SetConfigOption(ctx, &agentpb.SetConfigOptionRequest{Fence: a.fence, ConfigId: id, Value: value})
	if err != nil {
		return nil, classify(ctx, err)
	}
	return configOptionsFromProto(r.ConfigOptions), nil
}

func capabilitiesFromProto(c *agentpb.AgentCapabilities) Capabilities {
	if c == nil {
		return Capabilities{}
	}
	out := Capabilities{Image: c.PromptImage, Audio: c.PromptAudio, EmbeddedContext: c.PromptEmbeddedContext,
		ResourceLink: c.PromptResourceLink, MCPStdio: c.McpStdio, MCPHTTP: c.McpHttp, MCPSSE: c.McpSse,
		SetMode: c.SetMode, SetConfigOption: c.SetConfigOption}
	for _, m := range c.AuthMethods {
		out.AuthMethods = append(out.AuthMethods, AuthMethod{ID: m.Id, Name: m.Name, Description: m.Description,
			TerminalCommand: m.TerminalCommand, EnvVars: m.EnvVars})
	}
	for _, o := range c.Options {
		out.Options = append(out.Options, OptionSpec{Name: o.Name, Description: o.Description})
	}
	return out
}

func nameValuesToProto(nv []NameValue) []*agentpb.NameValue {
	var out []*agentpb.NameValue
	for _, x := range nv {
		out = append(out, &agentpb.NameValue{Name: x.Name, Value: x.Value})
	}
	return out
}

func mcpServersToProto(ss []MCPServer) []*agentpb.McpServer {
	var out []*agentpb.McpServer
	for _, s := range ss {
		p := &agentpb.McpServer{Name: s.Name}
		switch s.Transport {
		case "http":
			p.Transport = &agentpb.McpServer_Http{Http: &agentpb.McpRemote{Url: s.URL, Headers: nameValuesToProto(s.Headers)}}
		case "sse":
			p.Transport = &agentpb.McpServer_Sse{Sse: &agentpb.McpRemote{Url: s.URL, Headers: nameValuesToProto(s.Headers)}}
		default:
			p.Transport = &agentpb.McpServer_Stdio{Stdio: &agentpb.McpStdio{Command: s.Command, Args: s.Args, Env: nameValuesToProto(s.Env)}}
		}
		out = append(out, p)
	}
	return out
}

func sessionInfoFromProto(r *agentpb.SessionResponse) SessionInfo {
	out := SessionInfo{Handle: r.Handle, Options: r.Options, ConfigOptions: configOptionsFromProto(r.ConfigOptions)}
	if m := r.Modes; m != nil {
		out.Modes = &ModeState{CurrentModeID: m.CurrentModeId}
		for _, x := range m.Available {
			out.Modes.Available = append(out.Modes.Available, Mode{ID: x.Id, Name: x.Name, Description: x.Description})
		}
	}
	return out
}

func configOptionsFromProto(opts []*agentpb.ConfigOption) []ConfigOption {
	var out []ConfigOption
	for _, o := range opts {
		c := ConfigOption{ID: o.Id, Name: o.Name, Description: o.Description, Category: o.Category, CurrentValue: o.CurrentValue}
		for _, v := range o.Values {
			c.Values = append(c.Values, ConfigValue{Value: v.Value, Name: v.Name, Description: v.Description})
		}
		out = append(out, c)
	}
	return out
}

// ErrAuthRequired: the agent's provider refused or lacks credentials (a
// NewSession, ResumeSession or turn failure). The user must log in or the
// operator configure a key. It is the Reason of an *Error whose refusal
// carries wire.ReasonAuthRequired; a turn's stop says so in
// journal.Stop.AuthRequired instead.
var ErrAuthRequired = errors.New("the agent's provider needs authentication")

// ErrInvalidOption is matched by an *InvalidOptionError.
var ErrInvalidOption = errors.New("invalid session setting")

// InvalidOptionError is the agent refusing a session option, mode or
// config option; Option names it. It is the Reason of an *Error whose
// refusal carries wire.ReasonInvalidSetting (so errors.As finds it through
// the *Error), and it matches ErrInvalidOption and ErrInvalidArgument.
type InvalidOptionError struct {
	Option string
	Reason string
}

func (e *InvalidOptionError) Error() string {
	return "session option " + e.Option + ": " + e.Reason
}

// Is makes errors.Is(err, ErrInvalidOption) true.
func (e *InvalidOptionError) Is(target error) bool {
	return target == ErrInvalidOption || target == ErrInvalidArgument
}
