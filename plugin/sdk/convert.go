package sdk

import "github.com/agenthost/agenthost/internal/agentpb"

// The generated protocol types stay internal; these functions are the only
// place the SDK's hand-written types meet them.

func blockToProto(b ContentBlock) *agentpb.ContentBlock {
	t := b.Type
	if t == "" {
		t = "text"
	}
	return &agentpb.ContentBlock{Type: t, Text: b.Text, Json: b.JSON}
}

func blocksToProto(bs []ContentBlock) []*agentpb.ContentBlock {
	out := make([]*agentpb.ContentBlock, len(bs))
	for i, b := range bs {
		out[i] = blockToProto(b)
	}
	return out
}

func blocksFromProto(bs []*agentpb.ContentBlock) []ContentBlock {
	out := make([]ContentBlock, len(bs))
	for i, b := range bs {
		out[i] = ContentBlock{Type: b.GetType(), Text: b.GetText(), JSON: b.GetJson()}
	}
	return out
}

func toolCallToProto(c ToolCall) *agentpb.ToolCall {
	return &agentpb.ToolCall{ToolCallId: c.ToolCallID, Title: c.Title, Kind: c.Kind, Status: c.Status, RawInputJson: c.RawInputJSON}
}

func outcomeToProto(o PermissionOutcome) *agentpb.PermissionOutcome {
	return &agentpb.PermissionOutcome{Outcome: o.Outcome, OptionId: o.OptionID}
}

func updateToProto(u Update) *agentpb.Update {
	p := &agentpb.Update{TurnId: u.turnID, TimeUnixNano: u.Time.UnixNano()}
	switch {
	case u.AgentMessage != nil:
		p.Kind = &agentpb.Update_AgentMessageChunk{AgentMessageChunk: &agentpb.ContentChunk{Content: blockToProto(*u.AgentMessage)}}
	case u.AgentThought != nil:
		p.Kind = &agentpb.Update_AgentThoughtChunk{AgentThoughtChunk: &agentpb.ContentChunk{Content: blockToProto(*u.AgentThought)}}
	case u.UserMessage != nil:
		p.Kind = &agentpb.Update_UserMessageChunk{UserMessageChunk: &agentpb.ContentChunk{Content: blockToProto(*u.UserMessage)}}
	case u.ToolCall != nil:
		p.Kind = &agentpb.Update_ToolCall{ToolCall: toolCallToProto(*u.ToolCall)}
	case u.ToolCallUpdate != nil:
		c := u.ToolCallUpdate
		p.Kind = &agentpb.Update_ToolCallUpdate{ToolCallUpdate: &agentpb.ToolCallUpdate{
			ToolCallId: c.ToolCallID, Status: c.Status, Content: blocksToProto(c.Content), RawOutputJson: c.RawOutputJSON}}
	case u.Plan != nil:
		plan := &agentpb.Plan{}
		for _, e := range u.Plan {
			plan.Entries = append(plan.Entries, &agentpb.PlanEntry{Content: e.Content, Priority: e.Priority, Status: e.Status})
		}
		p.Kind = &agentpb.Update_Plan{Plan: plan}
	case u.Usage != nil:
		x := u.Usage
		p.Kind = &agentpb.Update_Usage{Usage: &agentpb.Usage{InputTokens: x.InputTokens, OutputTokens: x.OutputTokens,
			CachedInputTokens: x.CachedInputTokens, ReasoningTokens: x.ReasoningTokens, CostUsd: x.CostUSD,
			ContextTokens: x.ContextTokens, ContextWindow: x.ContextWindow}}
	case u.HandleChanged != nil:
		p.Kind = &agentpb.Update_HandleChanged{HandleChanged: &agentpb.HandleChanged{Handle: u.HandleChanged.Handle, Origin: u.HandleChanged.Origin}}
	case u.permissionRequest != nil:
		r := u.permissionRequest
		pr := &agentpb.PermissionRequest{RequestId: r.RequestID, ToolCall: toolCallToProto(r.ToolCall)}
		for _, o := range r.Options {
			pr.Options = append(pr.Options, &agentpb.PermissionOption{OptionId: o.OptionID, Name: o.Name, Kind: o.Kind})
		}
		p.Kind = &agentpb.Update_PermissionRequest{PermissionRequest: pr}
	case u.permissionResolved != nil:
		p.Kind = &agentpb.Update_PermissionResolved{PermissionResolved: &agentpb.PermissionResolved{
			RequestId: u.permissionResolved.RequestID, Outcome: outcomeToProto(u.permissionResolved.Outcome)}}
	case u.turnStopped != nil:
		p.Kind = &agentpb.Update_TurnStopped{TurnStopped: &agentpb.TurnStopped{
			StopReason: string(u.turnStopped.StopReason), Error: u.turnStopped.Error}}
	}
	return p
}
