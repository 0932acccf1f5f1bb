// Command minimal-plugin is a small but complete agenthost plugin, served
// under the name "minimal": an agent that echoes its prompt word by word,
// holds a turn on "wait" until it is cancelled, and writes a file on
// "write PATH TEXT" the way a coding agent edits: a tool call with the
// diff and the file's location, and a permission request first unless the
// session is in mode "auto". It reports its modes, its slash commands and
// its diffs, and passes the conformance kit (main_test.go). Copy it and
// replace the echo with your provider; README.md explains the rest.
package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/agenthost/agenthost/plugin/sdk"
)

// agent is the plugin's sdk.Agent. One plugin process serves one session,
// so this is where the conversation's state goes.
type agent struct {
	report *sdk.Reporter

	mu        sync.Mutex // SetMode may run while a turn does
	mode      string
	workspace string
}

var modes = []sdk.Mode{
	{ID: "ask", Name: "Ask", Description: "Ask before writing a file"},
	{ID: "auto", Name: "Auto", Description: "Write files without asking"},
}

// newAgent is the sdk.Factory: it runs once, when the host first opens or
// resumes the session. Its error is the plugin's readiness failure.
func newAgent(ctx context.Context, env sdk.Environment) (sdk.Agent, error) {
	return &agent{report: env.Reporter, mode: "ask"}, nil
}

func (a *agent) NewSession(ctx context.Context, req sdk.NewSessionRequest) (sdk.SessionInfo, error) {
	return a.open("minimal-"+rand.Text(), req.Workspace, req.Options)
}

func (a *agent) ResumeSession(ctx context.Context, req sdk.ResumeSessionRequest) (sdk.SessionInfo, error) {
	return a.open(req.Handle, req.Workspace, req.Options)
}

// open takes the session's options (the host passes a resume the ones the
// session was opened with, and the mode SetMode chose last), reports the
// slash commands, and returns the modes.
func (a *agent) open(handle, workspace string, opts map[string]string) (sdk.SessionInfo, error) {
	mode := "ask"
	for name, v := range opts {
		if name != "mode" {
			return sdk.SessionInfo{}, &sdk.InvalidOptionError{Option: name, Reason: "the minimal agent takes only mode"}
		}
		mode = v
	}
	if err := a.SetMode(context.Background(), mode); err != nil {
		return sdk.SessionInfo{}, err
	}
	a.mu.Lock()
	a.workspace = workspace
	a.mu.Unlock()
	a.report.Commands([]sdk.Command{
		{Name: "write", Description: "Write a file of the workspace", InputHint: "PATH TEXT"},
		{Name: "wait", Description: "Hold the turn until it is cancelled"},
	})
	return sdk.SessionInfo{Handle: handle, Options: opts, Modes: &sdk.ModeState{CurrentModeID: mode, Available: modes}}, nil
}

// SetMode implements sdk.ModeSetter; the SDK reports the change.
func (a *agent) SetMode(ctx context.Context, mode string) error {
	if mode != "ask" && mode != "auto" {
		return &sdk.InvalidOptionError{Option: "mode", Reason: fmt.Sprintf("no mode %q: the modes are ask and auto", mode)}
	}
	a.mu.Lock()
	a.mode = mode
	a.mu.Unlock()
	return nil
}

func (a *agent) Prompt(ctx context.Context, req sdk.PromptRequest, turn *sdk.Turn) (sdk.StopReason, error) {
	words := strings.Fields(req.Text())
	switch {
	case len(words) == 1 && words[0] == "wait":
		<-ctx.Done()
		return sdk.StopCancelled, nil
	case len(words) >= 3 && words[0] == "write":
		return a.write(ctx, turn, words[1], strings.Join(words[2:], " ")+"\n")
	}
	for _, w := range words {
		select {
		case <-ctx.Done():
			return sdk.StopCancelled, nil
		case <-time.After(20 * time.Millisecond):
		}
		turn.Message(w + " ")
	}
	return sdk.StopEndTurn, nil
}

// write reports the edit with its diff, asks unless the mode is auto, and
// writes the file.
func (a *agent) write(ctx context.Context, turn *sdk.Turn, path, text string) (sdk.StopReason, error) {
	a.mu.Lock()
	workspace, mode := a.workspace, a.mode
	a.mu.Unlock()
	if !filepath.IsLocal(path) {
		return "", fmt.Errorf("minimal: %s is outside the workspace", path)
	}
	abs := filepath.Join(workspace, path)
	var old *string // nil: a new file
	if b, err := os.ReadFile(abs); err == nil {
		s := string(b)
		old = &s
	}
	call := sdk.ToolCall{ToolCallID: "write-" + rand.Text()[:8], Title: "write " + path, Kind: "edit", Status: "pending",
		Content:   []sdk.ToolCallContent{sdk.DiffContent(abs, old, text)},
		Locations: []sdk.Location{{Path: abs, Line: 1}}}
	turn.ToolCall(call)
	if mode == "ask" {
		out, err := turn.RequestPermission(ctx, sdk.PermissionRequest{ToolCall: call, AlwaysScope: "write", Options: []sdk.PermissionOption{
			{OptionID: "yes", Name: "Allow", Kind: "allow_once"},
			{OptionID: "always", Name: "Always allow writes", Kind: "allow_always"},
			{OptionID: "no", Name: "Reject", Kind: "reject_once"},
		}})
		switch {
		case ctx.Err() != nil:
			return sdk.StopCancelled, nil
		case err != nil:
			return "", err
		case out.Cancelled() || out.OptionID == "no":
			turn.ToolCallUpdate(sdk.ToolCallUpdate{ToolCallID: call.ToolCallID, Status: "failed"})
			turn.Message("not written")
			return sdk.StopEndTurn, nil
		}
	}
	if err := os.WriteFile(abs, []byte(text), 0o644); err != nil {
		return "", err
	}
	turn.ToolCallUpdate(sdk.ToolCallUpdate{ToolCallID: call.ToolCallID, Status: "completed"})
	turn.Message("wrote " + path)
	return sdk.StopEndTurn, nil
}

func main() {
	err := sdk.Serve("minimal", newAgent, sdk.WithCapabilities(sdk.Capabilities{
		Modes:   true, // the agent is an sdk.ModeSetter
		Options: []sdk.OptionSpec{{Name: "mode", Description: "ask (the default) or auto"}},
	}))
	if err != nil {
		fmt.Fprintln(os.Stderr, "minimal-plugin:", err)
		os.Exit(1)
	}
}
