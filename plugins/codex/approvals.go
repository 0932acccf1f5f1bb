package codex

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/agenthost/agenthost/plugin/sdk"
)

// errWithdrawn is the cause of an approval request's end when codex
// withdrew it (serverRequest/resolved) or its turn ended.
var errWithdrawn = errors.New("codex withdrew the request")

// approvalOptions are the answers a codex approval offers the user; their
// ids are codex's decisions. Codex's fourth decision, "cancel" (deny and
// interrupt the turn), is the answer to a cancelled request.
var approvalOptions = []sdk.PermissionOption{
	{OptionID: "accept", Name: "Allow", Kind: "allow_once"},
	{OptionID: "acceptForSession", Name: "Allow for this session", Kind: "allow_always"},
	{OptionID: "decline", Name: "Deny", Kind: "reject_once"},
}

// request answers a request the app-server sends during the turn.
// Approvals ask the user (each in its own goroutine, so the turn keeps
// streaming); requests the plugin cannot serve get a JSON-RPC error or,
// for MCP elicitations, a decline, so codex never waits on them.
func (t *turnRun) request(m *message) {
	switch m.Method {
	case "item/commandExecution/requestApproval", "item/fileChange/requestApproval", "item/permissions/requestApproval",
		"execCommandApproval", "applyPatchApproval":
		ctx, cancel := context.WithCancelCause(t.approvalCtx)
		t.approvals[string(m.ID)] = cancel
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			defer cancel(nil)
			t.approve(ctx, m)
		}()
	case "mcpServer/elicitation/request":
		t.a.log.Info("declined an MCP elicitation: agenthost cannot show its form", "turn", t.turnID)
		_ = t.c.respond(m.ID, map[string]any{"action": "decline", "content": nil})
	default:
		t.a.log.Info("refused a codex request the plugin does not handle", "method", m.Method)
		_ = t.c.respondError(m.ID, codeMethodNotFound, "agenthost's codex plugin does not handle "+m.Method)
	}
}

// approve asks the user about one approval request and answers codex in
// the shape the request's method expects.
func (t *turnRun) approve(ctx context.Context, m *message) {
	var p approvalParams
	var legacy legacyApprovalParams
	_ = json.Unmarshal(m.Params, &p)
	call := sdk.ToolCall{ToolCallID: p.ItemID, Status: "pending"}
	switch m.Method {
	case "item/commandExecution/requestApproval":
		call.Kind, call.Title = "execute", deref(p.Command)
		if call.Title == "" {
			call.Title = "run a command"
		}
		call.RawInputJSON = marshal(map[string]any{"command": p.Command, "cwd": p.Cwd, "reason": p.Reason})
	case "item/fileChange/requestApproval":
		call.Kind, call.Title = "edit", "apply file changes"
		if it, ok := t.startedItem(p.ItemID); ok {
			call.Title = "edit " + paths(it.Changes)
		}
		call.RawInputJSON = marshal(map[string]any{"reason": p.Reason, "grantRoot": p.GrantRoot})
	case "item/permissions/requestApproval":
		call.Kind, call.Title = "other", "grant additional permissions"
		if r := deref(p.Reason); r != "" {
			call.Title += ": " + r
		}
		call.RawInputJSON = rawOrEmpty(p.Permissions)
	case "execCommandApproval", "applyPatchApproval":
		_ = json.Unmarshal(m.Params, &legacy)
		call.ToolCallID = legacy.CallID
		if m.Method == "execCommandApproval" {
			call.Kind, call.Title = "execute", strings.Join(legacy.Command, " ")
		} else {
			call.Kind, call.Title = "edit", "apply file changes"
		}
		call.RawInputJSON = string(m.Params)
	}
	out, err := t.turn.RequestPermission(ctx, sdk.PermissionRequest{ToolCall: call, Options: approvalOptions})
	if err != nil && errors.Is(context.Cause(ctx), errWithdrawn) {
		// Codex resolved the request itself (or the turn ended): nothing
		// waits for an answer.
		t.a.log.Info("approval withdrawn by codex", "method", m.Method, "item", call.ToolCallID)
		return
	}
	decision := "cancel"
	if err == nil && !out.Cancelled() {
		decision = "decline"
		for _, o := range approvalOptions {
			if o.OptionID == out.OptionID {
				decision = o.OptionID
			}
		}
	}
	t.a.log.Info("approval answered", "method", m.Method, "item", call.ToolCallID, "decision", decision)
	var result any
	switch m.Method {
	case "item/permissions/requestApproval":
		granted := json.RawMessage(`{}`)
		scope := "turn"
		switch decision {
		case "accept":
			granted = json.RawMessage(rawOrNull(p.Permissions))
		case "acceptForSession":
			granted, scope = json.RawMessage(rawOrNull(p.Permissions)), "session"
		}
		result = map[string]any{"permissions": granted, "scope": scope}
	case "execCommandApproval", "applyPatchApproval":
		result = map[string]any{"decision": map[string]string{
			"accept": "approved", "acceptForSession": "approved_for_session", "decline": "denied", "cancel": "abort",
		}[decision]}
	default:
		result = map[string]any{"decision": decision}
	}
	if err := t.c.respond(m.ID, result); err != nil {
		t.a.log.Warn("could not answer codex's approval request", "error", err)
	}
}

// startedItem is the tool item announced with id, if any. It is read from
// an approval's goroutine while the turn's goroutine writes the map, so
// it takes the turn's lock.
func (t *turnRun) startedItem(id string) (threadItem, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	it, ok := t.started[id]
	return it, ok
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
