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
	return &agentpb.ToolCall{ToolCallId: c.ToolCallID, Title: c.Title, Kind: c.Kind, Status: c.Status, RawInputJson: c.RawInputJSON,
		Content: toolContentToProto(c.Content), Locations: locationsToProto(c.Locations)}
}

func outcomeToProto(o PermissionOutcome) *agentpb.PermissionOutcome {
	return &agentpb.PermissionOutcome{Outcome: o.Outcome, OptionId: o.OptionID}
}

// permissionRequestToProto is r as the update that asks it carries it,
// and as Identify reports it while it is pending.
func permissionRequestToProto(r *PermissionRequest) *agentpb.PermissionRequest {
	pr := &agentpb.PermissionRequest{RequestId: r.RequestID, ToolCall: toolCallToProto(r.ToolCall), AlwaysScope: r.AlwaysScope}
	for _, o := range r.Options {
		pr.Options = append(pr.Options, &agentpb.PermissionOption{OptionId: o.OptionID, Name: o.Name, Kind: o.Kind})
	}
	return pr
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
			ToolCallId: c.ToolCallID, Status: c.Status, Content: blocksToProto(c.Content), RawOutputJson: c.RawOutputJSON,
			ToolContent: toolContentToProto(c.ToolContent), Locations: locationsToProto(c.Locations), Title: c.Title, Kind: c.Kind,
			OutputDelta: c.OutputDelta}}
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
	case u.CurrentMode != nil:
		p.Kind = &agentpb.Update_CurrentMode{CurrentMode: &agentpb.CurrentMode{ModeId: *u.CurrentMode}}
	case u.ConfigOptions != nil:
		p.Kind = &agentpb.Update_ConfigOptions{ConfigOptions: &agentpb.ConfigOptions{ConfigOptions: configOptionsToProto(u.ConfigOptions)}}
	case u.AvailableCommands != nil:
		cmds := &agentpb.AvailableCommands{}
		for _, c := range u.AvailableCommands {
			cmds.Commands = append(cmds.Commands, &agentpb.Command{Name: c.Name, Description: c.Description, InputHint: c.InputHint})
		}
		p.Kind = &agentpb.Update_AvailableCommands{AvailableCommands: cmds}
	case u.SessionInfo != nil:
		p.Kind = &agentpb.Update_SessionInfo{SessionInfo: &agentpb.SessionInfo{Title: u.SessionInfo.Title}}
	case u.permissionRequest != nil:
		p.Kind = &agentpb.Update_PermissionRequest{PermissionRequest: permissionRequestToProto(u.permissionRequest)}
	case u.permissionResolved != nil:
		p.Kind = &agentpb.Update_PermissionResolved{PermissionResolved: &agentpb.PermissionResolved{
			RequestId: u.permissionResolved.RequestID, Outcome: outcomeToProto(u.permissionResolved.Outcome)}}
	case u.turnStopped != nil:
		p.Kind = &agentpb.Update_TurnStopped{TurnStopped: &agentpb.TurnStopped{
			StopReason: string(u.turnStopped.StopReason), Error: u.turnStopped.Error, AuthRequired: u.turnStopped.AuthRequired}}
	}
	return p
}

func capabilitiesToProto(c Capabilities, setMode, setConfig bool) *agentpb.AgentCapabilities {
	p := &agentpb.AgentCapabilities{PromptImage: c.Image, PromptAudio: c.Audio, PromptEmbeddedContext: c.EmbeddedContext,
		PromptResourceLink: c.ResourceLink, McpStdio: c.MCPStdio, McpHttp: c.MCPHTTP, McpSse: c.MCPSSE,
		SetMode: setMode, SetConfigOption: setConfig}
	for _, m := range c.AuthMethods {
		p.AuthMethods = append(p.AuthMethods, &agentpb.AuthMethod{Id: m.ID, Name: m.Name, Description: m.Description,
			TerminalCommand: m.TerminalCommand, EnvVars: m.EnvVars})
	}
	for _, o := range c.Options {
		p.Options = append(p.Options, &agentpb.OptionSpec{Name: o.Name, Description: o.Description})
	}
	return p
}

func nameValuesFromProto(nv []*agentpb.NameValue) []NameValue {
	var out []NameValue
	for _, x := range nv {
		out = append(out, NameValue{Name: x.GetName(), Value: x.GetValue()})
	}
	return out
}

// mcpServersFromProto converts the servers of a request; one without a
// transport (a host breaking the protocol) is left out.
func mcpServersFromProto(ss []*agentpb.McpServer) []MCPServer {
	var out []MCPServer
	for _, s := range ss {
		m := MCPServer{Name: s.GetName()}
		switch t := s.GetTransport().(type) {
		case *agentpb.McpServer_Stdio:
			m.Transport, m.Command, m.Args, m.Env = "stdio", t.Stdio.GetCommand(), t.Stdio.GetArgs(), nameValuesFromProto(t.Stdio.GetEnv())
		case *agentpb.McpServer_Http:
			m.Transport, m.URL, m.Headers = "http", t.Http.GetUrl(), nameValuesFromProto(t.Http.GetHeaders())
		case *agentpb.McpServer_Sse:
			m.Transport, m.URL, m.Headers = "sse", t.Sse.GetUrl(), nameValuesFromProto(t.Sse.GetHeaders())
		default:
			continue
		}
		out = append(out, m)
	}
	return out
}

func modesToProto(m *ModeState) *agentpb.ModeState {
	if m == nil {
		return nil
	}
	p := &agentpb.ModeState{CurrentModeId: m.CurrentModeID}
	for _, x := range m.Available {
		p.Available = append(p.Available, &agentpb.SessionMode{Id: x.ID, Name: x.Name, Description: x.Description})
	}
	return p
}

func configOptionsToProto(opts []ConfigOption) []*agentpb.ConfigOption {
	var out []*agentpb.ConfigOption
	for _, o := range opts {
		p := &agentpb.ConfigOption{Id: o.ID, Name: o.Name, Description: o.Description, Category: o.Category, CurrentValue: o.CurrentValue}
		for _, v := range o.Values {
			p.Values = append(p.Values, &agentpb.ConfigValue{Value: v.Value, Name: v.Name, Description: v.Description})
		}
		out = append(out, p)
	}
	return out
}

func toolContentToProto(cs []ToolCallContent) []*agentpb.ToolCallContent {
	var out []*agentpb.ToolCallContent
	for _, c := range cs {
		switch {
		case c.Diff != nil:
			out = append(out, &agentpb.ToolCallContent{Kind: &agentpb.ToolCallContent_Diff{Diff: &agentpb.Diff{
				Path: c.Diff.Path, OldText: c.Diff.OldText, NewText: c.Diff.NewText}}})
		case c.Block != nil:
			out = append(out, &agentpb.ToolCallContent{Kind: &agentpb.ToolCallContent_Block{Block: blockToProto(*c.Block)}})
		}
	}
	return out
}

func locationsToProto(ls []Location) []*agentpb.Location {
	var out []*agentpb.Location
	for _, l := range ls {
		out = append(out, &agentpb.Location{Path: l.Path, Line: uint32(max(l.Line, 0))})
	}
	return out
}
