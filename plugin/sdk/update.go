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
	// Content is what a client shows for the call: a diff of each file it
	// changes, or blocks of text.
	Content []ToolCallContent
	// Locations are the files (and lines) the call reads or changes, for
	// a client to follow along.
	Locations []Location
}

// ToolCallUpdate reports progress of a tool call (ACP tool_call_update).
// Fields left empty leave the call's as they were.
type ToolCallUpdate struct {
	ToolCallID string
	Status     string
	// Content adds plain blocks to the call's content (each shown as ACP
	// "content"); ToolContent, when set, replaces the call's content with
	// diffs and blocks, as ACP's tool_call_update does.
	Content       []ContentBlock
	ToolContent   []ToolCallContent
	RawOutputJSON string
	Locations     []Location
	Title         string
	Kind          string
	// OutputDelta is output the running tool produced since the last
	// update (a command's stdout and stderr as it runs).
	OutputDelta string
}

// ToolCallContent is one item of a tool call's content: a Diff or a Block.
type ToolCallContent struct {
	Block *ContentBlock
	Diff  *Diff
}

// Diff is one file's change, as a client renders it.
type Diff struct {
	Path string
	// OldText is the file's text before the change; nil for a new file.
	OldText *string
	NewText string
}

// DiffContent returns tool call content holding a diff of path; a nil
// oldText is a new file.
func DiffContent(path string, oldText *string, newText string) ToolCallContent {
	return ToolCallContent{Diff: &Diff{Path: path, OldText: oldText, NewText: newText}}
}

// TextContent returns tool call content holding text.
func TextContent(text string) ToolCallContent {
	b := TextBlock(text)
	return ToolCallContent{Block: &b}
}

// Location is a file (and optionally a 1-based line, 0 for none) a tool
// call touches.
type Location struct {
	Path string
	Line int
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
	// AlwaysScope names what an allow_always answer covers (a tool name,
	// a command prefix). The host remembers such an answer for the
	// session, durably across restarts, and answers later requests of the
	// same scope itself; the agent then sees the allow_always option
	// chosen. Empty: nothing is remembered by the host.
	AlwaysScope string
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
	// CurrentMode is the session's new mode id.
	CurrentMode *string
	// ConfigOptions are the session's config options after a change.
	ConfigOptions []ConfigOption
	// AvailableCommands are the agent's slash commands.
	AvailableCommands []Command
	// SessionInfo carries session metadata (a title).
	SessionInfo *SessionInfoUpdate

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
	// Error is set when StopReason is StopFailed, and says why when the
	// plugin cancelled the turn fencing itself (StopCancelled).
	Error string
	// AuthRequired: the failure was the provider refusing credentials.
	AuthRequired bool
}

// kinds counts the kind fields u sets.
func (u Update) kinds() int {
	n := 0
	for _, set := range []bool{
		u.AgentMessage != nil, u.AgentThought != nil, u.UserMessage != nil, u.ToolCall != nil,
		u.ToolCallUpdate != nil, u.Plan != nil, u.Usage != nil, u.HandleChanged != nil,
		u.CurrentMode != nil, u.ConfigOptions != nil, u.AvailableCommands != nil, u.SessionInfo != nil,
		u.permissionRequest != nil, u.permissionResolved != nil, u.turnStopped != nil,
	} {
		if set {
			n++
		}
	}
	return n
}

// sessionLevel reports whether u is of a kind that describes the session
// rather than a turn: journaled without a turn id wherever it comes from.
func (u Update) sessionLevel() bool {
	return u.CurrentMode != nil || u.ConfigOptions != nil || u.AvailableCommands != nil || u.SessionInfo != nil
}
