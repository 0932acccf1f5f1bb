package sdktest

import (
	"time"

	"github.com/agenthost/agenthost/internal/agentpb"
	"github.com/agenthost/agenthost/internal/pluginclient"
	"github.com/agenthost/agenthost/plugin/sdk"
)

// The harness hands a test the updates its agent emitted in the SDK's own
// types; these functions invert plugin/sdk's conversion to the protocol.

func updateFromProto(u *pluginclient.Update) sdk.Update {
	out := sdk.Update{Seq: u.Seq, TurnID: u.TurnId, Time: time.Unix(0, u.TimeUnixNano)}
	switch k := u.Kind.(type) {
	case *agentpb.Update_AgentMessageChunk:
		b := blockFromProto(k.AgentMessageChunk.GetContent())
		out.AgentMessage = &b
	case *agentpb.Update_AgentThoughtChunk:
		b := blockFromProto(k.AgentThoughtChunk.GetContent())
		out.AgentThought = &b
	case *agentpb.Update_UserMessageChunk:
		b := blockFromProto(k.UserMessageChunk.GetContent())
		out.UserMessage = &b
	case *agentpb.Update_ToolCall:
		c := toolCallFromProto(k.ToolCall)
		out.ToolCall = &c
	case *agentpb.Update_ToolCallUpdate:
		c := k.ToolCallUpdate
		out.ToolCallUpdate = &sdk.ToolCallUpdate{ToolCallID: c.GetToolCallId(), Status: c.GetStatus(),
			Content: blocksFromProto(c.GetContent()), RawOutputJSON: c.GetRawOutputJson()}
	case *agentpb.Update_Plan:
		out.Plan = []sdk.PlanEntry{}
		for _, e := range k.Plan.GetEntries() {
			out.Plan = append(out.Plan, sdk.PlanEntry{Content: e.GetContent(), Priority: e.GetPriority(), Status: e.GetStatus()})
		}
	case *agentpb.Update_Usage:
		x := k.Usage
		out.Usage = &sdk.Usage{InputTokens: x.GetInputTokens(), OutputTokens: x.GetOutputTokens(),
			CachedInputTokens: x.GetCachedInputTokens(), ReasoningTokens: x.GetReasoningTokens(), CostUSD: x.GetCostUsd(),
			ContextTokens: x.GetContextTokens(), ContextWindow: x.GetContextWindow()}
	case *agentpb.Update_HandleChanged:
		out.HandleChanged = &sdk.HandleChanged{Handle: k.HandleChanged.GetHandle(), Origin: k.HandleChanged.GetOrigin()}
	case *agentpb.Update_PermissionRequest:
		r := k.PermissionRequest
		req := &sdk.PermissionRequest{RequestID: r.GetRequestId(), ToolCall: toolCallFromProto(r.GetToolCall())}
		for _, o := range r.GetOptions() {
			req.Options = append(req.Options, sdk.PermissionOption{OptionID: o.GetOptionId(), Name: o.GetName(), Kind: o.GetKind()})
		}
		out.PermissionRequest = req
	case *agentpb.Update_PermissionResolved:
		r := k.PermissionResolved
		out.PermissionResolved = &sdk.PermissionResolved{RequestID: r.GetRequestId(),
			Outcome: sdk.PermissionOutcome{Outcome: r.GetOutcome().GetOutcome(), OptionID: r.GetOutcome().GetOptionId()}}
	case *agentpb.Update_TurnStopped:
		out.TurnStopped = &sdk.TurnStopped{StopReason: sdk.StopReason(k.TurnStopped.GetStopReason()), Error: k.TurnStopped.GetError()}
	}
	return out
}

func blockFromProto(b *agentpb.ContentBlock) sdk.ContentBlock {
	return sdk.ContentBlock{Type: b.GetType(), Text: b.GetText(), JSON: b.GetJson()}
}

func blocksFromProto(bs []*agentpb.ContentBlock) []sdk.ContentBlock {
	if len(bs) == 0 {
		return nil
	}
	out := make([]sdk.ContentBlock, len(bs))
	for i, b := range bs {
		out[i] = blockFromProto(b)
	}
	return out
}

func toolCallFromProto(c *agentpb.ToolCall) sdk.ToolCall {
	return sdk.ToolCall{ToolCallID: c.GetToolCallId(), Title: c.GetTitle(), Kind: c.GetKind(), Status: c.GetStatus(),
		RawInputJSON: c.GetRawInputJson()}
}
