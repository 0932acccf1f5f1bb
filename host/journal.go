package host

import (
	"encoding/json"

	"github.com/agenthost/agenthost/internal/agentpb"
	"github.com/agenthost/agenthost/leasestore"
)

// Journal payloads. Agent updates are stored in the Agent Client Protocol's
// session/update shape, so an API client can replay them as-is; the plugin's
// own sequence number travels along, so a host that restarts knows which
// updates are already journaled.

// UpdateRecord is the payload of a KindUpdate journal entry.
type UpdateRecord struct {
	PluginSeq uint64 `json:"pluginSeq"`
	TurnID    string `json:"turnId,omitempty"`
	// PluginTime is when the plugin produced the update (Unix nanoseconds).
	PluginTime int64           `json:"pluginTime,omitempty"`
	Update     json.RawMessage `json:"update"`
}

// StopRecord is the payload of a KindStop journal entry: a turn ended.
// PluginSeq is 0 when the host wrote it (a prompt it could not dispatch).
type StopRecord struct {
	PluginSeq  uint64 `json:"pluginSeq,omitempty"`
	TurnID     string `json:"turnId"`
	StopReason string `json:"stopReason"`
	Error      string `json:"error,omitempty"`
}

// PromptRecord is the payload of a KindPrompt journal entry, written before
// the prompt is dispatched to the plugin.
type PromptRecord struct {
	TurnID string            `json:"turnId"`
	Prompt []json.RawMessage `json:"prompt"`
}

type acpContent struct {
	Type string `json:"type"`
	Text string `json:"text,omitempty"`
}

func contentJSON(b *agentpb.ContentBlock) json.RawMessage {
	if b == nil {
		return json.RawMessage(`{"type":"text","text":""}`)
	}
	if b.Type != "text" && b.Type != "" && b.Json != "" && json.Valid([]byte(b.Json)) {
		return json.RawMessage(b.Json)
	}
	out, _ := json.Marshal(acpContent{Type: "text", Text: b.Text})
	return out
}

func toolCallJSON(c *agentpb.ToolCall) map[string]any {
	m := map[string]any{"toolCallId": c.GetToolCallId(), "title": c.GetTitle(), "status": c.GetStatus()}
	if c.GetKind() != "" {
		m["kind"] = c.GetKind()
	}
	if raw := c.GetRawInputJson(); raw != "" && json.Valid([]byte(raw)) {
		m["rawInput"] = json.RawMessage(raw)
	}
	return m
}

// acpUpdate renders a plugin update as an ACP session/update "update"
// object. ok is false for turn_stopped, which is journaled as a stop.
func acpUpdate(u *agentpb.Update) (json.RawMessage, bool) {
	var m map[string]any
	switch k := u.Kind.(type) {
	case *agentpb.Update_AgentMessageChunk:
		m = map[string]any{"sessionUpdate": "agent_message_chunk", "content": contentJSON(k.AgentMessageChunk.GetContent())}
	case *agentpb.Update_AgentThoughtChunk:
		m = map[string]any{"sessionUpdate": "agent_thought_chunk", "content": contentJSON(k.AgentThoughtChunk.GetContent())}
	case *agentpb.Update_UserMessageChunk:
		m = map[string]any{"sessionUpdate": "user_message_chunk", "content": contentJSON(k.UserMessageChunk.GetContent())}
	case *agentpb.Update_ToolCall:
		m = toolCallJSON(k.ToolCall)
		m["sessionUpdate"] = "tool_call"
	case *agentpb.Update_ToolCallUpdate:
		c := k.ToolCallUpdate
		m = map[string]any{"sessionUpdate": "tool_call_update", "toolCallId": c.GetToolCallId(), "status": c.GetStatus()}
		if len(c.GetContent()) > 0 {
			var content []any
			for _, b := range c.GetContent() {
				content = append(content, map[string]any{"type": "content", "content": contentJSON(b)})
			}
			m["content"] = content
		}
		if raw := c.GetRawOutputJson(); raw != "" && json.Valid([]byte(raw)) {
			m["rawOutput"] = json.RawMessage(raw)
		}
	case *agentpb.Update_Plan:
		entries := []any{}
		for _, e := range k.Plan.GetEntries() {
			entries = append(entries, map[string]any{"content": e.GetContent(), "priority": e.GetPriority(), "status": e.GetStatus()})
		}
		m = map[string]any{"sessionUpdate": "plan", "entries": entries}
	case *agentpb.Update_Usage:
		x := k.Usage
		m = map[string]any{"sessionUpdate": "usage_update", "inputTokens": x.GetInputTokens(), "outputTokens": x.GetOutputTokens(),
			"cachedInputTokens": x.GetCachedInputTokens(), "reasoningTokens": x.GetReasoningTokens(), "costUsd": x.GetCostUsd()}
	case *agentpb.Update_HandleChanged:
		m = map[string]any{"sessionUpdate": "_agenthost/handle_changed", "handle": k.HandleChanged.GetHandle(), "origin": k.HandleChanged.GetOrigin()}
	case *agentpb.Update_PermissionRequest:
		r := k.PermissionRequest
		var opts []any
		for _, o := range r.GetOptions() {
			opts = append(opts, map[string]any{"optionId": o.GetOptionId(), "name": o.GetName(), "kind": o.GetKind()})
		}
		m = map[string]any{"sessionUpdate": "_agenthost/permission_request", "requestId": r.GetRequestId(),
			"toolCall": toolCallJSON(r.GetToolCall()), "options": opts}
	case *agentpb.Update_PermissionResolved:
		r := k.PermissionResolved
		m = map[string]any{"sessionUpdate": "_agenthost/permission_resolved", "requestId": r.GetRequestId(),
			"outcome": map[string]any{"outcome": r.GetOutcome().GetOutcome(), "optionId": r.GetOutcome().GetOptionId()}}
	case *agentpb.Update_TurnStopped:
		return nil, false
	default:
		m = map[string]any{"sessionUpdate": "_agenthost/unknown"}
	}
	out, _ := json.Marshal(m)
	return out, true
}

// journalEntry converts one plugin update to the journal entry recording it.
func journalEntry(u *agentpb.Update) leasestore.EntryInput {
	if ts, ok := u.Kind.(*agentpb.Update_TurnStopped); ok {
		b, _ := json.Marshal(StopRecord{PluginSeq: u.Seq, TurnID: u.TurnId,
			StopReason: ts.TurnStopped.GetStopReason(), Error: ts.TurnStopped.GetError()})
		return leasestore.EntryInput{Kind: leasestore.KindStop, Payload: b}
	}
	upd, _ := acpUpdate(u)
	b, _ := json.Marshal(UpdateRecord{PluginSeq: u.Seq, TurnID: u.TurnId, PluginTime: u.TimeUnixNano, Update: upd})
	return leasestore.EntryInput{Kind: leasestore.KindUpdate, Payload: b}
}
