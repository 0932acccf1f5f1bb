package scripted

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/agenthost/agenthost/plugin/sdk"
)

// Version is the agent version the plugin reports in its identity.
const Version = "1.0.0"

// errNoModel is the readiness failure of a session opened with
// require_model=true and no model.
var errNoModel = errors.New("scripted: no model configured: set the model option")

// Capabilities is what the scripted agent declares to the host (serve it
// with sdk.WithCapabilities(scripted.Capabilities())): the prompt blocks
// it describes, the MCP transport it records, and its session options.
// Audio is left out on purpose, so a host can be seen refusing a block the
// agent does not take.
func Capabilities() sdk.Capabilities {
	return sdk.Capabilities{
		Image: true, EmbeddedContext: true, ResourceLink: true,
		MCPStdio: true,
		Modes:    true, ConfigOptions: true,
		Options: optionSpecs(),
	}
}

// agent is the scripted sdk.Agent. It keeps no conversation: every turn is
// decided by its prompt alone. What it does keep are the session's
// settings (mode, model, effort, MCP servers), which SetMode and
// SetConfigOption change while a turn may be running: mu guards them.
type agent struct {
	log hclog.Logger
	// report sends session-level updates (commands, title, a mode the
	// agent left by itself); nil-safe, so an Environment built by hand
	// works.
	report *sdk.Reporter
	// sessionDir keeps what outlives the plugin process: a reject_always
	// answer.
	sessionDir string
	// tools numbers the tool calls of the session: tool-1, tool-2, …
	tools atomic.Uint64

	mu sync.Mutex
	s  settings
	// workspace is where edit writes.
	workspace string
	// mcp are the MCP servers the session was opened with.
	mcp []sdk.MCPServer
	// rejectEdits: the user answered reject_always to an edit.
	rejectEdits bool
	// handle is the open conversation's; history its prompts, oldest
	// first (see state.go).
	handle  string
	history []string
}

var (
	_ sdk.Agent              = (*agent)(nil)
	_ sdk.Describer          = (*agent)(nil)
	_ sdk.Closer             = (*agent)(nil)
	_ sdk.ModeSetter         = (*agent)(nil)
	_ sdk.ConfigOptionSetter = (*agent)(nil)
)

// New is the plugin's sdk.Factory. It cannot fail; a host that starts the
// plugin with the wrong options hears about it when it opens the session.
func New(ctx context.Context, env sdk.Environment) (sdk.Agent, error) {
	return &agent{log: env.Log(), report: env.Reporter, sessionDir: env.SessionDir}, nil
}

// AgentVersion implements sdk.Describer.
func (a *agent) AgentVersion() string { return Version }

// Close implements sdk.Closer. The agent holds nothing to release.
func (a *agent) Close(ctx context.Context) error {
	a.log.Info("closing the scripted agent")
	return nil
}

// NewSession opens a conversation with a fresh handle.
func (a *agent) NewSession(ctx context.Context, req sdk.NewSessionRequest) (sdk.SessionInfo, error) {
	handle := "scripted-" + rand.Text()
	info, err := a.open(handle, req.Workspace, req.Options, req.MCPServers)
	if err == nil {
		a.log.Info("new session", "handle", handle, "workspace", req.Workspace)
	}
	return info, err
}

// ResumeSession reopens the conversation under the handle it is given,
// with the options and MCP servers the host stored for it.
func (a *agent) ResumeSession(ctx context.Context, req sdk.ResumeSessionRequest) (sdk.SessionInfo, error) {
	info, err := a.open(req.Handle, req.Workspace, req.Options, req.MCPServers)
	if err != nil {
		return info, err
	}
	// What ImportState put in place, or what this machine holds.
	history, err := a.loadHistory(req.Handle)
	if err != nil {
		return sdk.SessionInfo{}, err
	}
	a.mu.Lock()
	if history != nil {
		a.history = history
	}
	a.mu.Unlock()
	a.log.Info("resumed session", "handle", req.Handle, "workspace", req.Workspace, "earlier_prompts", len(history))
	return info, nil
}

// open applies a session's options and servers, for a new session and a
// resumed one alike, and reports the slash commands (when asked to:
// report_commands): a client learns them when the session opens, before
// any turn.
func (a *agent) open(handle, workspace string, opts map[string]string, servers []sdk.MCPServer) (sdk.SessionInfo, error) {
	s, err := parseSettings(opts)
	if err != nil {
		return sdk.SessionInfo{}, err
	}
	for _, srv := range servers {
		if srv.Transport != "stdio" {
			return sdk.SessionInfo{}, &sdk.InvalidOptionError{Option: "mcpServers",
				Reason: fmt.Sprintf("server %q uses transport %q; the scripted agent takes stdio servers only", srv.Name, srv.Transport)}
		}
	}
	a.mu.Lock()
	a.s, a.workspace, a.mcp, a.handle = s, workspace, servers, handle
	a.rejectEdits = a.rejectEdits || a.rejectedForGood()
	info := sdk.SessionInfo{Handle: handle, Options: maps.Clone(opts), Modes: s.modeState(), ConfigOptions: s.configOptions()}
	a.mu.Unlock()
	if s.commands {
		a.report.Commands(commands())
	}
	return info, nil
}

// settings returns a copy of the session's settings.
func (a *agent) settings() settings {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.s
}

// Prompt describes the prompt's blocks other than text, then runs the
// command in its text.
func (a *agent) Prompt(ctx context.Context, req sdk.PromptRequest, turn *sdk.Turn) (sdk.StopReason, error) {
	described, err := describeBlocks(req.Prompt, turn)
	if err != nil {
		return "", err
	}
	cmd, err := parse(req.Text())
	if err != nil {
		return "", err
	}
	a.log.Debug("turn", "turn", turn.ID(), "op", cmd.op.String())
	a.mu.Lock()
	handle, earlier := a.handle, append([]string{}, a.history...)
	a.mu.Unlock()
	a.remember(handle, req.Text())
	switch cmd.op {
	case opHistory:
		turn.Message(historyMessage(earlier))
		return sdk.StopEndTurn, nil
	case opCount:
		return count(ctx, turn, cmd.n, cmd.d), nil
	case opSleep:
		if !wait(ctx, cmd.d) {
			return sdk.StopCancelled, nil
		}
		return sdk.StopEndTurn, nil
	case opWait:
		<-ctx.Done()
		return sdk.StopCancelled, nil
	case opFail:
		return "", errors.New(cmd.text)
	case opAuth:
		return "", fmt.Errorf("scripted: the provider refused the session's credentials: %w", sdk.ErrAuthRequired)
	case opTool:
		a.tool(turn)
		return sdk.StopEndTurn, nil
	case opAsk:
		return a.ask(ctx, turn)
	case opEdit:
		return a.edit(ctx, turn, cmd.path, cmd.text)
	case opUsage:
		// The provider's own count is the context itself: a one-shot
		// prompt of USED tokens.
		turn.Usage(sdk.Usage{InputTokens: cmd.used, ContextTokens: cmd.used, ContextWindow: cmd.size})
		return sdk.StopEndTurn, nil
	case opMCP:
		a.listMCP(turn)
		return sdk.StopEndTurn, nil
	case opSettings:
		turn.Message(a.settings().String())
		return sdk.StopEndTurn, nil
	case opTitle:
		a.report.Title(cmd.text)
		turn.Message("title: " + cmd.text)
		return sdk.StopEndTurn, nil
	case opExitPlan:
		a.exitPlan(turn)
		return sdk.StopEndTurn, nil
	default:
		// A prompt of blocks alone has been answered by their description.
		if cmd.text != "" || !described {
			turn.Message(cmd.text)
		}
		return sdk.StopEndTurn, nil
	}
}

// count streams the chunks "1" … "n", d apart.
func count(ctx context.Context, turn *sdk.Turn, n int, d time.Duration) sdk.StopReason {
	for i := 1; i <= n; i++ {
		if i > 1 && !wait(ctx, d) {
			return sdk.StopCancelled
		}
		if ctx.Err() != nil {
			return sdk.StopCancelled
		}
		turn.Message(strconv.Itoa(i))
	}
	return sdk.StopEndTurn
}

// wait sleeps for d and reports whether it did so without ctx ending.
func wait(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (a *agent) nextToolCallID() string {
	return fmt.Sprintf("tool-%d", a.tools.Add(1))
}

// tool reports a tool call through its whole life, as an agent that runs a
// command does.
func (a *agent) tool(turn *sdk.Turn) {
	id := a.nextToolCallID()
	turn.ToolCall(sdk.ToolCall{
		ToolCallID: id, Title: "list files", Kind: "execute", Status: "pending",
		RawInputJSON: `{"command":"ls"}`,
	})
	turn.ToolCallUpdate(sdk.ToolCallUpdate{ToolCallID: id, Status: "in_progress"})
	turn.ToolCallUpdate(sdk.ToolCallUpdate{
		ToolCallID: id, Status: "completed",
		Content: []sdk.ContentBlock{sdk.TextBlock("README.md\nmain.go\n")},
	})
	turn.Message("listed 2 files")
}

// ask asks for permission to run a tool call and reports the answer.
func (a *agent) ask(ctx context.Context, turn *sdk.Turn) (sdk.StopReason, error) {
	out, err := turn.RequestPermission(ctx, sdk.PermissionRequest{
		ToolCall: sdk.ToolCall{ToolCallID: a.nextToolCallID(), Title: "write notes.txt", Kind: "edit", Status: "pending"},
		Options: []sdk.PermissionOption{
			{OptionID: "allow", Name: "Allow", Kind: "allow_once"},
			{OptionID: "reject", Name: "Reject", Kind: "reject_once"},
		},
	})
	switch {
	case ctx.Err() != nil:
		return sdk.StopCancelled, nil
	case err != nil:
		return "", err
	case out.Cancelled():
		turn.Message("permission: cancelled")
	default:
		turn.Message("permission: selected " + out.OptionID)
	}
	return sdk.StopEndTurn, nil
}

// listMCP reports the MCP servers the session was opened with, one chunk
// each, so a test sees what reached the agent.
func (a *agent) listMCP(turn *sdk.Turn) {
	a.mu.Lock()
	servers := a.mcp
	a.mu.Unlock()
	if len(servers) == 0 {
		turn.Message("mcp: no servers\n")
		return
	}
	for _, s := range servers {
		line := fmt.Sprintf("mcp: %s (%s) %s", s.Name, s.Transport, s.Command)
		for _, arg := range s.Args {
			line += " " + arg
		}
		for _, e := range s.Env {
			line += " " + e.Name + "=" + e.Value
		}
		turn.Message(line + "\n")
	}
}

// exitPlan leaves plan mode by the agent's own decision, as claude does
// when its plan is approved: the agent, not the client, changed the mode,
// so it reports the change itself.
func (a *agent) exitPlan(turn *sdk.Turn) {
	a.mu.Lock()
	was := a.s.mode
	if was == ModePlan {
		a.s.mode = ModeDefault
	}
	s := a.s
	a.mu.Unlock()
	if was != ModePlan {
		turn.Message("not in plan mode (the mode is " + was + ")")
		return
	}
	a.report.CurrentMode(s.mode)
	a.report.ConfigOptions(s.configOptions())
	turn.Message("left plan mode: the mode is " + s.mode)
}
