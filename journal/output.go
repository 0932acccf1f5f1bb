package journal

// ToolOutputs turns running tools' output deltas into what an ACP client
// without terminals can show: ACP's tool_call_update replaces a call's
// content, so each delta becomes a text block of the output so far (as
// codex-acp does for such clients). The journal keeps each delta alone
// (ToolCallUpdate.OutputDelta) so it replays exactly; a reader that sends
// updates to such a client keeps one ToolOutputs per session and renders
// every update through it, in journal order. The zero value is ready; it
// is not safe for concurrent use.
type ToolOutputs struct {
	so map[string]string
}

// Render returns u as a client without terminals shows it: a
// ToolCallUpdate carrying an OutputDelta gets, in place of the delta, a
// text block of the tool's output so far (and keeps its _meta delta for
// clients that show terminals). A call's output is forgotten when it
// completes or fails. Other updates pass unchanged; u itself is never
// modified.
func (o *ToolOutputs) Render(u SessionUpdate) SessionUpdate {
	c, ok := u.(*ToolCallUpdate)
	if !ok {
		return u
	}
	if c.Status == "completed" || c.Status == "failed" {
		defer delete(o.so, c.ToolCallID)
	}
	if c.OutputDelta == "" {
		return u
	}
	if o.so == nil {
		o.so = map[string]string{}
	}
	o.so[c.ToolCallID] += c.OutputDelta
	out := *c
	if len(c.Content) == 0 && len(c.ToolContent) == 0 {
		out.Content = []Content{TextContent(o.so[c.ToolCallID])}
	}
	return &out
}
