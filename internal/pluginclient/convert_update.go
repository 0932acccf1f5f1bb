package pluginclient

import (
	"encoding/json"
	"slices"

	acp "github.com/coder/acp-go-sdk"

	"github.com/agenthost/agenthost/internal/agentpb"
	"github.com/agenthost/agenthost/journal"
)

// Update is one update of a plugin's stream, converted to the journal's
// record of it.
type Update struct {
	// Seq is the plugin's sequence number of the update.
	Seq uint64
	// TurnID is the turn the update belongs to.
	TurnID string
	// Kind names the update's kind as the protocol does
	// (agent_message_chunk, usage, turn_stopped, …); "none" when the
	// plugin set none.
	Kind string
	// Record is the journal's record of the update: a *journal.Stop for
	// turn_stopped, a *journal.Update for every other kind. It is nil when
	// the plugin set no kind, which breaks the protocol: a caller refuses
	// such an update rather than journal it.
	Record journal.Record
}

// Stop returns how the turn ended when the update is its turn_stopped,
// else nil.
func (u *Update) Stop() *journal.Stop {
	s, _ := u.Record.(*journal.Stop)
	return s
}

// SessionUpdate returns the agent update the record carries, nil for a
// turn_stopped or an update without a kind.
func (u *Update) SessionUpdate() journal.SessionUpdate {
	if r, ok := u.Record.(*journal.Update); ok {
		return r.Update
	}
	return nil
}

// updateFromProto converts one plugin update to the journal record of it.
// An update of a kind this host does not know becomes journal.Unknown, so
// the plugin's sequence stays without gaps in the journal.
//
// What the plugin sends as JSON (a content block of another type than
// text, a tool's raw input or output) is kept only when it is valid JSON;
// a block whose JSON is not falls back to its text, and invalid raw input
// or output is dropped. The record therefore always encodes.
func updateFromProto(u *agentpb.Update) *Update {
	out := &Update{Seq: u.GetSeq(), TurnID: u.GetTurnId(), Kind: "none"}
	m := u.ProtoReflect()
	fd := m.WhichOneof(m.Descriptor().Oneofs().ByName("kind"))
	if fd == nil {
		return out
	}
	out.Kind = string(fd.Name())
	if ts, ok := u.GetKind().(*agentpb.Update_TurnStopped); ok {
		out.Record = &journal.Stop{PluginSeq: u.GetSeq(), TurnID: u.GetTurnId(),
			StopReason: ts.TurnStopped.GetStopReason(), Error: ts.TurnStopped.GetError(), AuthRequired: ts.TurnStopped.GetAuthRequired()}
		return out
	}
	out.Record = &journal.Update{PluginSeq: u.GetSeq(), TurnID: u.GetTurnId(), PluginTime: u.GetTimeUnixNano(), Update: sessionUpdate(u)}
	return out
}

func sessionUpdate(u *agentpb.Update) journal.SessionUpdate {
	switch k := u.GetKind().(type) {
	case *agentpb.Update_AgentMessageChunk:
		return &journal.Chunk{Kind: journal.KindAgentMessageChunk, Content: content(k.AgentMessageChunk.GetContent())}
	case *agentpb.Update_AgentThoughtChunk:
		return &journal.Chunk{Kind: journal.KindAgentThoughtChunk, Content: content(k.AgentThoughtChunk.GetContent())}
	case *agentpb.Update_UserMessageChunk:
		return &journal.Chunk{Kind: journal.KindUserMessageChunk, Content: content(k.UserMessageChunk.GetContent())}
	case *agentpb.Update_ToolCall:
		tc := toolCall(k.ToolCall)
		return &tc
	case *agentpb.Update_ToolCallUpdate:
		c := k.ToolCallUpdate
		out := &journal.ToolCallUpdate{ToolCallID: c.GetToolCallId(), Status: c.GetStatus(), RawOutput: validJSON(c.GetRawOutputJson()),
			ToolContent: toolContent(c.GetToolContent()), Locations: locations(c.GetLocations()),
			Title: c.GetTitle(), Kind: c.GetKind(), OutputDelta: c.GetOutputDelta()}
		for _, b := range c.GetContent() {
			out.Content = append(out.Content, content(b))
		}
		if !slices.ContainsFunc(out.ToolContent, func(c journal.ToolCallContent) bool { return c.Diff != nil }) {
			// Blocks alone are Content, as the journal reads them back.
			for _, c := range out.ToolContent {
				out.Content = append(out.Content, c.Block)
			}
			out.ToolContent = nil
		}
		return out
	case *agentpb.Update_Plan:
		out := &journal.Plan{Entries: []acp.PlanEntry{}}
		for _, e := range k.Plan.GetEntries() {
			out.Entries = append(out.Entries, acp.PlanEntry{Content: e.GetContent(),
				Priority: acp.PlanEntryPriority(e.GetPriority()), Status: acp.PlanEntryStatus(e.GetStatus())})
		}
		return out
	case *agentpb.Update_Usage:
		return usage(k.Usage)
	case *agentpb.Update_CurrentMode:
		return &journal.CurrentMode{ModeID: k.CurrentMode.GetModeId()}
	case *agentpb.Update_ConfigOptions:
		out := &journal.ConfigOptions{}
		for _, o := range configOptionsFromProto(k.ConfigOptions.GetConfigOptions()) {
			jo := journal.ConfigOption{ID: o.ID, Name: o.Name, Description: o.Description, Category: o.Category, CurrentValue: o.CurrentValue}
			for _, v := range o.Values {
				jo.Values = append(jo.Values, journal.ConfigValue{Value: v.Value, Name: v.Name, Description: v.Description})
			}
			out.Options = append(out.Options, jo)
		}
		return out
	case *agentpb.Update_AvailableCommands:
		out := &journal.AvailableCommands{}
		for _, c := range k.AvailableCommands.GetCommands() {
			out.Commands = append(out.Commands, journal.Command{Name: c.GetName(), Description: c.GetDescription(), InputHint: c.GetInputHint()})
		}
		return out
	case *agentpb.Update_SessionInfo:
		return &journal.SessionInfo{Title: k.SessionInfo.GetTitle()}
	case *agentpb.Update_HandleChanged:
		return &journal.HandleChanged{Handle: k.HandleChanged.GetHandle(), Origin: k.HandleChanged.GetOrigin()}
	case *agentpb.Update_PermissionRequest:
		return permissionRequest(k.PermissionRequest)
	case *agentpb.Update_PermissionResolved:
		r := k.PermissionResolved
		return &journal.PermissionResolved{RequestID: r.GetRequestId(),
			Outcome: journal.PermissionOutcome{Outcome: r.GetOutcome().GetOutcome(), OptionID: r.GetOutcome().GetOptionId()}}
	}
	return &journal.Unknown{}
}

// emptyText is the block journaled for a chunk without content: unlike
// journal.TextContent("") it spells out the empty text, as the host always
// has.
const emptyText = `{"type":"text","text":""}`

// permissionRequest is r as the journal records it: from the update that
// asks it, or from Identify while the plugin waits on it.
func permissionRequest(r *agentpb.PermissionRequest) *journal.PermissionRequest {
	out := &journal.PermissionRequest{RequestID: r.GetRequestId(), ToolCall: toolCall(r.GetToolCall()), AlwaysScope: r.GetAlwaysScope()}
	for _, o := range r.GetOptions() {
		out.Options = append(out.Options, acp.PermissionOption{OptionId: acp.PermissionOptionId(o.GetOptionId()),
			Name: o.GetName(), Kind: acp.PermissionOptionKind(o.GetKind())})
	}
	return out
}

// content is a block's ACP JSON: the plugin's own for a typed non-text
// block whose JSON is valid, else a text block of its text.
func content(b *agentpb.ContentBlock) journal.Content {
	if b == nil {
		return journal.Content(emptyText)
	}
	if b.GetType() != "text" && b.GetType() != "" && b.GetJson() != "" && json.Valid([]byte(b.GetJson())) {
		return journal.Content(b.GetJson())
	}
	return journal.TextContent(b.GetText())
}

func toolCall(c *agentpb.ToolCall) journal.ToolCall {
	return journal.ToolCall{ToolCallID: c.GetToolCallId(), Title: c.GetTitle(), Kind: c.GetKind(), Status: c.GetStatus(),
		RawInput: validJSON(c.GetRawInputJson()), Content: toolContent(c.GetContent()), Locations: locations(c.GetLocations())}
}

// toolContent is a tool call's content: blocks as content does them, and
// diffs. An item with neither (a plugin breaking the protocol) is dropped.
func toolContent(cs []*agentpb.ToolCallContent) []journal.ToolCallContent {
	var out []journal.ToolCallContent
	for _, c := range cs {
		switch k := c.GetKind().(type) {
		case *agentpb.ToolCallContent_Block:
			out = append(out, journal.ToolCallContent{Block: content(k.Block)})
		case *agentpb.ToolCallContent_Diff:
			d := &journal.Diff{Path: k.Diff.GetPath(), NewText: k.Diff.GetNewText()}
			if k.Diff.OldText != nil {
				old := k.Diff.GetOldText()
				d.OldText = &old
			}
			out = append(out, journal.ToolCallContent{Diff: d})
		}
	}
	return out
}

func locations(ls []*agentpb.Location) []journal.Location {
	var out []journal.Location
	for _, l := range ls {
		out = append(out, journal.Location{Path: l.GetPath(), Line: int(l.GetLine())})
	}
	return out
}

// usage is ACP's usage_update: the context's tokens used of its window,
// the cost when the agent reported one, and the provider's counts.
func usage(x *agentpb.Usage) *journal.Usage {
	out := &journal.Usage{Used: x.GetContextTokens(), Size: x.GetContextWindow(), Tokens: journal.Tokens{
		InputTokens: x.GetInputTokens(), OutputTokens: x.GetOutputTokens(),
		CachedInputTokens: x.GetCachedInputTokens(), ReasoningTokens: x.GetReasoningTokens(),
	}}
	if c := x.GetCostUsd(); c > 0 {
		out.Cost = &acp.Cost{Amount: c, Currency: "USD"}
	}
	return out
}

// validJSON is s as raw JSON, or nil when s is empty or not JSON.
func validJSON(s string) json.RawMessage {
	if s == "" || !json.Valid([]byte(s)) {
		return nil
	}
	return json.RawMessage(s)
}
