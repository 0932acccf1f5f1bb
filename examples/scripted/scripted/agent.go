package scripted

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"strconv"
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

// agent is the scripted sdk.Agent. It keeps no conversation: every turn is
// decided by its prompt alone.
type agent struct {
	log hclog.Logger
	// tools numbers the tool calls of the session: tool-1, tool-2, …
	tools atomic.Uint64
}

var (
	_ sdk.Agent     = (*agent)(nil)
	_ sdk.Describer = (*agent)(nil)
	_ sdk.Closer    = (*agent)(nil)
)

// New is the plugin's sdk.Factory. It cannot fail; a host that starts the
// plugin with the wrong options hears about it when it opens the session.
func New(ctx context.Context, env sdk.Environment) (sdk.Agent, error) {
	log := env.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &agent{log: log}, nil
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
	if err := checkOptions(req.Options); err != nil {
		return sdk.SessionInfo{}, err
	}
	handle := "scripted-" + rand.Text()
	a.log.Info("new session", "handle", handle, "workspace", req.Workspace)
	return sdk.SessionInfo{Handle: handle, Options: maps.Clone(req.Options)}, nil
}

// ResumeSession reopens the conversation under the handle it is given.
func (a *agent) ResumeSession(ctx context.Context, req sdk.ResumeSessionRequest) (sdk.SessionInfo, error) {
	if err := checkOptions(req.Options); err != nil {
		return sdk.SessionInfo{}, err
	}
	a.log.Info("resumed session", "handle", req.Handle, "workspace", req.Workspace)
	return sdk.SessionInfo{Handle: req.Handle, Options: maps.Clone(req.Options)}, nil
}

// checkOptions is the readiness check: a host that sets require_model=true
// and no model gets the error a real agent gives for a missing model.
func checkOptions(opts map[string]string) error {
	if opts["require_model"] == "true" && opts["model"] == "" {
		return errNoModel
	}
	return nil
}

// Prompt runs the command in the prompt's text.
func (a *agent) Prompt(ctx context.Context, req sdk.PromptRequest, turn *sdk.Turn) (sdk.StopReason, error) {
	cmd, err := parse(req.Text())
	if err != nil {
		return "", err
	}
	a.log.Debug("turn", "turn", turn.ID(), "op", cmd.op.String())
	switch cmd.op {
	case opCount:
		return count(ctx, turn, cmd.n, cmd.d), nil
	case opSleep:
		if !wait(ctx, cmd.d) {
			return sdk.StopCancelled, nil
		}
		return sdk.StopEndTurn, nil
	case opFail:
		return "", errors.New(cmd.text)
	case opTool:
		a.tool(turn)
		return sdk.StopEndTurn, nil
	case opAsk:
		return a.ask(ctx, turn)
	case opUsage:
		// The provider's own count is the context itself: a one-shot
		// prompt of USED tokens.
		turn.Usage(sdk.Usage{InputTokens: cmd.used, ContextTokens: cmd.used, ContextWindow: cmd.size})
		return sdk.StopEndTurn, nil
	default:
		turn.Message(cmd.text)
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
