package journal

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	acp "github.com/coder/acp-go-sdk"
)

// UpdateKind is the sessionUpdate member of an update: an ACP kind, or one
// of agenthost's own, whose names begin with ExtensionPrefix.
type UpdateKind string

// The ACP update kinds the host journals.
const (
	KindAgentMessageChunk UpdateKind = "agent_message_chunk"
	KindAgentThoughtChunk UpdateKind = "agent_thought_chunk"
	KindUserMessageChunk  UpdateKind = "user_message_chunk"
	KindToolCall          UpdateKind = "tool_call"
	KindToolCallUpdate    UpdateKind = "tool_call_update"
	KindPlan              UpdateKind = "plan"
	KindUsageUpdate       UpdateKind = "usage_update"
	// The session-level kinds: an agent reports them between turns too,
	// journaled without a turn id.
	KindCurrentModeUpdate       UpdateKind = "current_mode_update"
	KindConfigOptionUpdate      UpdateKind = "config_option_update"
	KindAvailableCommandsUpdate UpdateKind = "available_commands_update"
	KindSessionInfoUpdate       UpdateKind = "session_info_update"
)

// ExtensionPrefix begins the name of every update kind of agenthost's own.
const ExtensionPrefix = "_agenthost/"

// agenthost's own update kinds. ACP clients never see them as
// session/update notifications; _agenthost/journal subscribers do.
const (
	// KindHandleChanged: the agent's provider handle changed (the store
	// records the handle itself in a KindHandle lifecycle entry).
	KindHandleChanged UpdateKind = ExtensionPrefix + "handle_changed"
	// KindPermissionRequest: the agent asks whether a tool call may run;
	// the local API asks the client with session/request_permission.
	KindPermissionRequest UpdateKind = ExtensionPrefix + "permission_request"
	// KindPermissionResolved: a permission request was answered.
	KindPermissionResolved UpdateKind = ExtensionPrefix + "permission_resolved"
	// KindUnknown: the plugin sent an update of a kind this host does not
	// know; it is journaled so the plugin's sequence stays without gaps.
	KindUnknown UpdateKind = ExtensionPrefix + "unknown"
)

// Extension reports whether k is no ACP kind: ACP reserves names that
// begin with an underscore for extensions, and clients do not know them.
func (k UpdateKind) Extension() bool { return strings.HasPrefix(string(k), "_") }

// SessionUpdate is the agent's update an Update record carries, in ACP's
// session/update shape. The set is closed: *Chunk, *ToolCall,
// *ToolCallUpdate, *Plan, *Usage, *CurrentMode, *ConfigOptions,
// *AvailableCommands, *SessionInfo, *HandleChanged, *PermissionRequest,
// *PermissionResolved, *Unknown and *Other.
type SessionUpdate interface {
	// UpdateKind is the update's sessionUpdate member.
	UpdateKind() UpdateKind
	isSessionUpdate()
}

// Chunk is a streamed piece of a message: the agent's reply
// (KindAgentMessageChunk), its reasoning (KindAgentThoughtChunk) or the
// user's message (KindUserMessageChunk).
type Chunk struct {
	Kind    UpdateKind
	Content Content
}

// ToolCall announces a tool invocation (ACP tool_call). It is also the tool
// call a PermissionRequest asks about.
type ToolCall struct {
	ToolCallID string
	Title      string
	// Kind is the ACP tool kind (read, edit, execute, …); "" leaves it out.
	Kind string
	// Status: pending, in_progress, completed, failed.
	Status string
	// RawInput is the tool's input as JSON; empty leaves it out.
	RawInput json.RawMessage
	// Content is what a client shows for the call (diffs, blocks); none
	// leaves it out.
	Content []ToolCallContent
	// Locations are the files the call touches; none leaves them out.
	Locations []Location
}

// ToolCallUpdate reports progress of a tool call (ACP tool_call_update).
type ToolCallUpdate struct {
	ToolCallID string
	Status     string
	// Content is the tool's output so far, each block journaled as ACP's
	// {"type":"content"} tool call content; none leaves it out.
	Content []Content
	// RawOutput is the tool's output as JSON; empty leaves it out.
	RawOutput json.RawMessage
	// ToolContent replaces the call's content with diffs and blocks. It is
	// journaled after Content's blocks in the one ACP content array; a
	// decoded array that holds anything but blocks is read into
	// ToolContent whole, so Content is set only by arrays of blocks.
	ToolContent []ToolCallContent
	// Locations replace the call's locations; none leaves them out.
	Locations []Location
	// Title and Kind change the call's, when set.
	Title, Kind string
	// OutputDelta is output the running tool produced since the last
	// update. It is journaled as codex-acp sends it, under
	// _meta.terminal_output ({"terminal_id": the tool call id, "data":
	// the delta}): each record holds its own delta, so replaying the
	// journal replays the output exactly.
	OutputDelta string
}

// ToolCallContent is one item of a tool call's content (ACP
// ToolCallContent): a content block (ACP type "content") or a Diff (type
// "diff"). Exactly one is set.
type ToolCallContent struct {
	Block Content
	Diff  *Diff
}

// Diff is one file's change (ACP's "diff" tool call content).
type Diff struct {
	Path string
	// OldText is the text before; nil for a new file (left out).
	OldText *string
	NewText string
}

// Location is a file a tool call touches (ACP ToolCallLocation).
type Location struct {
	Path string `json:"path"`
	// Line is 1-based; 0 leaves it out.
	Line int `json:"line,omitempty"`
}

// Plan is the agent's plan (ACP plan): the whole list every time.
type Plan struct {
	Entries []acp.PlanEntry
}

// Usage is ACP's usage_update: how full the context window is, and what
// the session cost.
type Usage struct {
	// Used is how many tokens the context holds; 0 when the agent cannot
	// tell.
	Used int64
	// Size is the context window in tokens; 0 when unknown.
	Size int64
	// Cost is left out when the agent reported none.
	Cost *acp.Cost
	// Tokens are the provider's own counts, journaled under
	// _meta.agenthost.
	Tokens Tokens
}

// Tokens are a provider's raw token counts for a turn or a step of one.
type Tokens struct {
	CachedInputTokens int64 `json:"cachedInputTokens"`
	InputTokens       int64 `json:"inputTokens"`
	OutputTokens      int64 `json:"outputTokens"`
	ReasoningTokens   int64 `json:"reasoningTokens"`
}

// HandleChanged reports the agent's new provider handle
// (KindHandleChanged).
type HandleChanged struct {
	Handle string
	// Origin: created, resumed, forked.
	Origin string
}

// PermissionRequest asks whether a tool call may run
// (KindPermissionRequest). Options is journaled as null when there are
// none.
type PermissionRequest struct {
	RequestID string
	ToolCall  ToolCall
	Options   []acp.PermissionOption
	// AlwaysScope is what an allow_always answer covers (see
	// sdk.PermissionRequest); empty leaves it out.
	AlwaysScope string
}

// PermissionResolved reports the answer to a permission request
// (KindPermissionResolved).
type PermissionResolved struct {
	RequestID string
	Outcome   PermissionOutcome
}

// PermissionOutcome is the answer to a permission request.
type PermissionOutcome struct {
	OptionID string `json:"optionId"`
	// Outcome: selected (OptionID names the choice) or cancelled.
	Outcome string `json:"outcome"`
}

// Unknown stands for a plugin update of a kind this host does not know
// (KindUnknown).
type Unknown struct{}

// Other is an update of a kind this build does not model: journaled by a
// newer host, or an ACP kind agenthost never writes. It encodes as the
// JSON it was decoded from.
type Other struct {
	Kind UpdateKind
	JSON json.RawMessage
}

func (u *Chunk) UpdateKind() UpdateKind            { return u.Kind }
func (*ToolCall) UpdateKind() UpdateKind           { return KindToolCall }
func (*ToolCallUpdate) UpdateKind() UpdateKind     { return KindToolCallUpdate }
func (*Plan) UpdateKind() UpdateKind               { return KindPlan }
func (*CurrentMode) UpdateKind() UpdateKind        { return KindCurrentModeUpdate }
func (*ConfigOptions) UpdateKind() UpdateKind      { return KindConfigOptionUpdate }
func (*AvailableCommands) UpdateKind() UpdateKind  { return KindAvailableCommandsUpdate }
func (*SessionInfo) UpdateKind() UpdateKind        { return KindSessionInfoUpdate }
func (*Usage) UpdateKind() UpdateKind              { return KindUsageUpdate }
func (*HandleChanged) UpdateKind() UpdateKind      { return KindHandleChanged }
func (*PermissionRequest) UpdateKind() UpdateKind  { return KindPermissionRequest }
func (*PermissionResolved) UpdateKind() UpdateKind { return KindPermissionResolved }
func (*Unknown) UpdateKind() UpdateKind            { return KindUnknown }
func (u *Other) UpdateKind() UpdateKind            { return u.Kind }
func (*Chunk) isSessionUpdate()                    {}
func (*ToolCall) isSessionUpdate()                 {}
func (*ToolCallUpdate) isSessionUpdate()           {}
func (*Plan) isSessionUpdate()                     {}
func (*CurrentMode) isSessionUpdate()              {}
func (*ConfigOptions) isSessionUpdate()            {}
func (*AvailableCommands) isSessionUpdate()        {}
func (*SessionInfo) isSessionUpdate()              {}
func (*Usage) isSessionUpdate()                    {}
func (*HandleChanged) isSessionUpdate()            {}
func (*PermissionRequest) isSessionUpdate()        {}
func (*PermissionResolved) isSessionUpdate()       {}
func (*Unknown) isSessionUpdate()                  {}
func (*Other) isSessionUpdate()                    {}

// ErrMalformed is wrapped by every failure to decode a record or an
// update.
var ErrMalformed = errors.New("journal: malformed record")

// DecodeUpdate decodes an ACP update object: the update member of an
// Update record, or of a session/update notification (whose members the
// ACP library may have reordered). A kind this package does not model is
// an *Other.
func DecodeUpdate(b []byte) (SessionUpdate, error) {
	var head struct {
		SessionUpdate UpdateKind `json:"sessionUpdate"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return nil, fmt.Errorf("%w: update: %w", ErrMalformed, err)
	}
	var u SessionUpdate
	switch head.SessionUpdate {
	case "":
		return nil, fmt.Errorf("%w: update without a sessionUpdate kind", ErrMalformed)
	case KindAgentMessageChunk, KindAgentThoughtChunk, KindUserMessageChunk:
		u = &Chunk{}
	case KindToolCall:
		u = &ToolCall{}
	case KindToolCallUpdate:
		u = &ToolCallUpdate{}
	case KindPlan:
		u = &Plan{}
	case KindUsageUpdate:
		u = &Usage{}
	case KindCurrentModeUpdate:
		u = &CurrentMode{}
	case KindConfigOptionUpdate:
		u = &ConfigOptions{}
	case KindAvailableCommandsUpdate:
		u = &AvailableCommands{}
	case KindSessionInfoUpdate:
		u = &SessionInfo{}
	case KindHandleChanged:
		u = &HandleChanged{}
	case KindPermissionRequest:
		u = &PermissionRequest{}
	case KindPermissionResolved:
		u = &PermissionResolved{}
	case KindUnknown:
		return &Unknown{}, nil
	default:
		return &Other{Kind: head.SessionUpdate, JSON: append(json.RawMessage(nil), b...)}, nil
	}
	if err := json.Unmarshal(b, u); err != nil {
		return nil, fmt.Errorf("%w: %s update: %w", ErrMalformed, head.SessionUpdate, err)
	}
	return u, nil
}

// ACP returns u as the ACP library's session update, for a session/update
// notification. It is false for agenthost's own kinds, which ACP clients
// do not know, and for an update the library cannot read.
func ACP(u SessionUpdate) (acp.SessionUpdate, bool) {
	if u == nil || u.UpdateKind().Extension() {
		return acp.SessionUpdate{}, false
	}
	b, err := json.Marshal(u)
	if err != nil {
		return acp.SessionUpdate{}, false
	}
	var out acp.SessionUpdate
	if err := json.Unmarshal(b, &out); err != nil {
		return acp.SessionUpdate{}, false
	}
	return out, true
}
