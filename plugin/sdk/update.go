package sdk

import "time"

// ContentBlock is an ACP content block. Type "text" carries Text; any other
// type carries its ACP JSON in JSON.
type ContentBlock struct {
	Type string
	Text string
	JSON string
}

// TextBlock returns a text content block.
func TextBlock(text string) ContentBlock { return ContentBlock{Type: "text", Text: text} }

// ToolCall announces a tool invocation (ACP tool_call).
type ToolCall struct {
	ToolCallID string
	Title      string
	// Kind is the ACP tool kind: read, edit, delete, move, search, execute,
	// think, fetch, other.
	Kind string
	// Status: pending, in_progress, completed, failed.
	Status       string
	RawInputJSON string
}

// ToolCallUpdate reports progress of a tool call (ACP tool_call_update).
type ToolCallUpdate struct {
	ToolCallID    string
	Status        string
	Content       []ContentBlock
	RawOutputJSON string
}

// PlanEntry is one step of an agent's plan.
type PlanEntry struct {
	Content  string
	Priority string // high, medium, low
	Status   string // pending, in_progress, completed
}

// Usage reports token usage and cost. The token counts are the provider's
// own for the turn (or the step that reported them); ContextTokens and
// ContextWindow are what a client shows as "context used of size".
type Usage struct {
	InputTokens       int64
	OutputTokens      int64
	CachedInputTokens int64
	ReasoningTokens   int64
	CostUSD           float64
	// ContextTokens is how many tokens the conversation's context holds
	// now; 0 when the agent cannot tell.
	ContextTokens int64
	// ContextWindow is the model's context window in tokens; 0 when
	// unknown.
	ContextWindow int64
}

// PermissionOption is one answer a permission request offers.
type PermissionOption struct {
	OptionID string
	Name     string
	// Kind: allow_once, allow_always, reject_once, reject_always.
	Kind string
}

// PermissionRequest asks the user whether a tool call may run.
type PermissionRequest struct {
	// RequestID is assigned by the SDK when empty.
	RequestID string
	ToolCall  ToolCall
	Options   []PermissionOption
}

// PermissionOutcome is the answer to a permission request.
type PermissionOutcome struct {
	// Outcome is "selected" (OptionID names the choice) or "cancelled".
	Outcome  string
	OptionID string
}

// Cancelled reports whether the request was cancelled rather than answered.
func (o PermissionOutcome) Cancelled() bool { return o.Outcome != "selected" }

// Update is one event of a session, as the host journals it; Emit takes one
// built by hand. Exactly one of the kind fields is set. The SDK assigns the
// turn id and the sequence number, and it alone produces turn ends and
// permission requests and answers (from Prompt's return and
// RequestPermission), so those are no fields a plugin can set.
type Update struct {
	// Time is when the update happened; zero means when it is emitted.
	Time time.Time

	AgentMessage   *ContentBlock
	AgentThought   *ContentBlock
	UserMessage    *ContentBlock
	ToolCall       *ToolCall
	ToolCallUpdate *ToolCallUpdate
	Plan           []PlanEntry
	Usage          *Usage
	HandleChanged  *HandleChanged

	// Set by the SDK only.
	turnID             string
	permissionRequest  *PermissionRequest
	permissionResolved *permissionResolved
	turnStopped        *turnStopped
}

// HandleChanged reports a new provider handle for the session.
type HandleChanged struct {
	Handle string
	Origin string // created, resumed, forked
}

// permissionResolved reports how a permission request was answered.
type permissionResolved struct {
	RequestID string
	Outcome   PermissionOutcome
}

// turnStopped ends a turn.
type turnStopped struct {
	StopReason StopReason
	// Error is set when StopReason is StopFailed.
	Error string
}

// kinds counts the kind fields u sets.
func (u Update) kinds() int {
	n := 0
	for _, set := range []bool{
		u.AgentMessage != nil, u.AgentThought != nil, u.UserMessage != nil, u.ToolCall != nil,
		u.ToolCallUpdate != nil, u.Plan != nil, u.Usage != nil, u.HandleChanged != nil,
		u.permissionRequest != nil, u.permissionResolved != nil, u.turnStopped != nil,
	} {
		if set {
			n++
		}
	}
	return n
}
