package scripted

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/agenthost/agenthost/plugin/sdk"
)

// EditScope is the AlwaysScope of every edit's permission request: one
// allow_always answer covers every later edit of the session, as claude's
// "edit" scope does. The host remembers it, durably, and answers later
// requests itself; the agent remembers nothing of it.
const EditScope = "edit"

// The options an edit's permission request offers, the four ACP kinds.
var editOptions = []sdk.PermissionOption{
	{OptionID: "allow", Name: "Allow", Kind: "allow_once"},
	{OptionID: "allow_always", Name: "Always allow edits", Kind: "allow_always"},
	{OptionID: "reject", Name: "Reject", Kind: "reject_once"},
	{OptionID: "reject_always", Name: "Never allow edits", Kind: "reject_always"},
}

// rejectedFile, in the session directory, records a reject_always answer,
// so that it holds across plugin restarts as the host's allow_always
// grants do. (The host keeps no rejections: refusing is the agent's.)
const rejectedFile = "edits-rejected"

// edit writes text (and a newline) to path, a file of the workspace, the
// way a coding agent's file edit goes: the tool call shows the diff and
// the file's location, the user is asked unless the mode says otherwise,
// and the file is written only when allowed.
func (a *agent) edit(ctx context.Context, turn *sdk.Turn, path, text string) (sdk.StopReason, error) {
	a.mu.Lock()
	workspace, mode, rejected := a.workspace, a.s.mode, a.rejectEdits
	a.mu.Unlock()
	abs, err := workspacePath(workspace, path)
	if err != nil {
		return "", err
	}
	if mode == ModePlan {
		turn.Message("plan mode: " + path + " not edited (exitplan leaves plan mode)")
		return sdk.StopEndTurn, nil
	}
	var old *string
	switch b, err := os.ReadFile(abs); {
	case err == nil:
		s := string(b)
		old = &s
	case !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("scripted: read %s: %w", path, err)
	}
	newText := text + "\n"
	input, _ := json.Marshal(map[string]string{"path": abs, "content": newText})
	call := sdk.ToolCall{
		ToolCallID: a.nextToolCallID(), Title: "edit " + path, Kind: "edit", Status: "pending",
		RawInputJSON: string(input),
		Content:      []sdk.ToolCallContent{sdk.DiffContent(abs, old, newText)},
		Locations:    []sdk.Location{{Path: abs, Line: 1}},
	}
	turn.ToolCall(call)
	if rejected {
		return a.refuseEdit(turn, call.ToolCallID, path, "edits were rejected for this session")
	}
	if mode != ModeAcceptEdits {
		out, err := turn.RequestPermission(ctx, sdk.PermissionRequest{ToolCall: call, Options: editOptions, AlwaysScope: EditScope})
		switch {
		case ctx.Err() != nil:
			return sdk.StopCancelled, nil
		case err != nil:
			return "", err
		case out.Cancelled():
			return a.refuseEdit(turn, call.ToolCallID, path, "the permission request was cancelled")
		case out.OptionID == "reject_always":
			a.rejectForGood()
			return a.refuseEdit(turn, call.ToolCallID, path, "rejected, and every later edit with it")
		case out.OptionID != "allow" && out.OptionID != "allow_always":
			return a.refuseEdit(turn, call.ToolCallID, path, "rejected")
		}
	}
	turn.ToolCallUpdate(sdk.ToolCallUpdate{ToolCallID: call.ToolCallID, Status: "in_progress"})
	err = os.MkdirAll(filepath.Dir(abs), 0o755)
	if err == nil {
		err = os.WriteFile(abs, []byte(newText), 0o644)
	}
	if err != nil {
		turn.ToolCallUpdate(sdk.ToolCallUpdate{ToolCallID: call.ToolCallID, Status: "failed",
			ToolContent: []sdk.ToolCallContent{sdk.TextContent(err.Error())}})
		return "", fmt.Errorf("scripted: write %s: %w", path, err)
	}
	turn.ToolCallUpdate(sdk.ToolCallUpdate{ToolCallID: call.ToolCallID, Status: "completed",
		RawOutputJSON: fmt.Sprintf(`{"bytes":%d}`, len(newText))})
	turn.Message("edited " + path)
	return sdk.StopEndTurn, nil
}

// refuseEdit ends an edit that was not allowed.
func (a *agent) refuseEdit(turn *sdk.Turn, id, path, why string) (sdk.StopReason, error) {
	turn.ToolCallUpdate(sdk.ToolCallUpdate{ToolCallID: id, Status: "failed",
		ToolContent: []sdk.ToolCallContent{sdk.TextContent(why)}})
	turn.Message("not edited " + path + ": " + why)
	return sdk.StopEndTurn, nil
}

// workspacePath resolves path, relative to the workspace or absolute
// within it; an edit never leaves the workspace.
func workspacePath(workspace, path string) (string, error) {
	if workspace == "" {
		return "", errors.New("scripted: the session has no workspace to edit in")
	}
	rel := path
	if filepath.IsAbs(path) {
		var err error
		if rel, err = filepath.Rel(workspace, path); err != nil {
			rel = path
		}
	}
	if !filepath.IsLocal(rel) {
		return "", fmt.Errorf("scripted: cannot edit %q: the path is outside the workspace %s", path, workspace)
	}
	return filepath.Join(workspace, rel), nil
}

// rejectForGood records a reject_always answer, in memory and, where the
// session has a directory, on disk.
func (a *agent) rejectForGood() {
	a.mu.Lock()
	a.rejectEdits = true
	a.mu.Unlock()
	if a.sessionDir == "" {
		return
	}
	if err := os.WriteFile(filepath.Join(a.sessionDir, rejectedFile), nil, 0o600); err != nil {
		a.log.Warn("the reject_always answer will not outlive the plugin", "error", err)
	}
}

// rejectedForGood reports whether an earlier plugin of the session
// recorded a reject_always answer.
func (a *agent) rejectedForGood() bool {
	if a.sessionDir == "" {
		return false
	}
	_, err := os.Stat(filepath.Join(a.sessionDir, rejectedFile))
	return err == nil
}
