package journal

import (
	"encoding/json"
	"fmt"

	acp "github.com/coder/acp-go-sdk"
)

// The wire forms of the update kinds. The host once built these objects as
// maps, which encoding/json writes with sorted keys; structs are written in
// field order, so every field below is declared in sorted member order.
// Reordering them changes the bytes API clients receive (see the package
// doc and testdata/golden).

type chunkWire struct {
	Content       Content    `json:"content"`
	SessionUpdate UpdateKind `json:"sessionUpdate"`
}

// toolCallWire is a tool_call, and without sessionUpdate the tool call of
// a permission request.
type toolCallWire struct {
	Content       []toolCallContent `json:"content,omitempty"`
	Kind          string            `json:"kind,omitempty"`
	Locations     []Location        `json:"locations,omitempty"`
	RawInput      json.RawMessage   `json:"rawInput,omitempty"`
	SessionUpdate UpdateKind        `json:"sessionUpdate,omitempty"`
	Status        string            `json:"status"`
	Title         string            `json:"title"`
	ToolCallID    string            `json:"toolCallId"`
}

type toolCallUpdateWire struct {
	Meta          *toolCallUpdateMeta `json:"_meta,omitempty"`
	Content       []toolCallContent   `json:"content,omitempty"`
	Kind          string              `json:"kind,omitempty"`
	Locations     []Location          `json:"locations,omitempty"`
	RawOutput     json.RawMessage     `json:"rawOutput,omitempty"`
	SessionUpdate UpdateKind          `json:"sessionUpdate"`
	Status        string              `json:"status"`
	Title         string              `json:"title,omitempty"`
	ToolCallID    string              `json:"toolCallId"`
}

// toolCallUpdateMeta carries a running tool's output delta the way
// codex-acp does.
type toolCallUpdateMeta struct {
	TerminalOutput *terminalOutput `json:"terminal_output,omitempty"`
}

type terminalOutput struct {
	Data       string `json:"data"`
	TerminalID string `json:"terminal_id"`
}

// toolCallContent is ACP's tool call content: a block (type "content") or
// a diff (type "diff"). A block encodes {"content","type"} as blocks
// always have; a diff encodes newText, oldText (when set), path, type.
type toolCallContent struct {
	block Content
	diff  *Diff
}

type blockWire struct {
	Content Content `json:"content"`
	Type    string  `json:"type"`
}

type diffWire struct {
	NewText string  `json:"newText"`
	OldText *string `json:"oldText,omitempty"`
	Path    string  `json:"path"`
	Type    string  `json:"type"`
}

func (c toolCallContent) MarshalJSON() ([]byte, error) {
	if c.diff != nil {
		return json.Marshal(diffWire{NewText: c.diff.NewText, OldText: c.diff.OldText, Path: c.diff.Path, Type: toolCallDiffType})
	}
	return json.Marshal(blockWire{Content: c.block, Type: toolCallContentType})
}

// UnmarshalJSON reads a block or a diff. A diff without its path or new
// text, and any other type (a terminal), are refused: a decode and
// re-encode would drop or invent members.
func (c *toolCallContent) UnmarshalJSON(b []byte) error {
	var w struct {
		Type    string  `json:"type"`
		Content Content `json:"content"`
		NewText *string `json:"newText"`
		OldText *string `json:"oldText"`
		Path    *string `json:"path"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	switch {
	case w.Type == toolCallContentType:
		*c = toolCallContent{block: w.Content}
	case w.Type == toolCallDiffType && w.NewText != nil && w.Path != nil:
		*c = toolCallContent{diff: &Diff{Path: *w.Path, OldText: w.OldText, NewText: *w.NewText}}
	default:
		return fmt.Errorf("tool call content of type %q is not a %q block nor a %q with path and newText",
			w.Type, toolCallContentType, toolCallDiffType)
	}
	return nil
}

const (
	toolCallContentType = "content"
	toolCallDiffType    = "diff"
)

func blockContent(c Content) toolCallContent { return toolCallContent{block: c} }

func toolContentWire(cs []ToolCallContent) []toolCallContent {
	var out []toolCallContent
	for _, c := range cs {
		out = append(out, toolCallContent{block: c.Block, diff: c.Diff})
	}
	return out
}

func toolContentFromWire(ws []toolCallContent) []ToolCallContent {
	var out []ToolCallContent
	for _, w := range ws {
		out = append(out, ToolCallContent{Block: w.block, Diff: w.diff})
	}
	return out
}

type planWire struct {
	Entries       []acp.PlanEntry `json:"entries"`
	SessionUpdate UpdateKind      `json:"sessionUpdate"`
}

type usageWire struct {
	Meta          *usageMeta `json:"_meta,omitempty"`
	Cost          *acp.Cost  `json:"cost,omitempty"`
	SessionUpdate UpdateKind `json:"sessionUpdate"`
	Size          int64      `json:"size"`
	Used          int64      `json:"used"`
}

type usageMeta struct {
	Agenthost Tokens `json:"agenthost"`
}

type handleChangedWire struct {
	Handle        string     `json:"handle"`
	Origin        string     `json:"origin"`
	SessionUpdate UpdateKind `json:"sessionUpdate"`
}

type permissionRequestWire struct {
	AlwaysScope   string                 `json:"alwaysScope,omitempty"`
	Options       []acp.PermissionOption `json:"options"`
	RequestID     string                 `json:"requestId"`
	SessionUpdate UpdateKind             `json:"sessionUpdate"`
	ToolCall      toolCallWire           `json:"toolCall"`
}

type permissionResolvedWire struct {
	Outcome       PermissionOutcome `json:"outcome"`
	RequestID     string            `json:"requestId"`
	SessionUpdate UpdateKind        `json:"sessionUpdate"`
}

type unknownWire struct {
	SessionUpdate UpdateKind `json:"sessionUpdate"`
}

func (u *Chunk) MarshalJSON() ([]byte, error) {
	return json.Marshal(chunkWire{Content: u.Content, SessionUpdate: u.Kind})
}

func (u *Chunk) UnmarshalJSON(b []byte) error {
	var w chunkWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*u = Chunk{Kind: w.SessionUpdate, Content: w.Content}
	return nil
}

func (c ToolCall) wire(kind UpdateKind) toolCallWire {
	return toolCallWire{Content: toolContentWire(c.Content), Kind: c.Kind, Locations: c.Locations, RawInput: c.RawInput,
		SessionUpdate: kind, Status: c.Status, Title: c.Title, ToolCallID: c.ToolCallID}
}

func (w toolCallWire) toolCall() ToolCall {
	return ToolCall{ToolCallID: w.ToolCallID, Title: w.Title, Kind: w.Kind, Status: w.Status, RawInput: w.RawInput,
		Content: toolContentFromWire(w.Content), Locations: w.Locations}
}

func (u *ToolCall) MarshalJSON() ([]byte, error) { return json.Marshal(u.wire(KindToolCall)) }

func (u *ToolCall) UnmarshalJSON(b []byte) error {
	var w toolCallWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*u = w.toolCall()
	return nil
}

func (u *ToolCallUpdate) MarshalJSON() ([]byte, error) {
	w := toolCallUpdateWire{Kind: u.Kind, Locations: u.Locations, RawOutput: u.RawOutput, SessionUpdate: KindToolCallUpdate,
		Status: u.Status, Title: u.Title, ToolCallID: u.ToolCallID}
	for _, c := range u.Content {
		w.Content = append(w.Content, blockContent(c))
	}
	w.Content = append(w.Content, toolContentWire(u.ToolContent)...)
	if u.OutputDelta != "" {
		w.Meta = &toolCallUpdateMeta{TerminalOutput: &terminalOutput{Data: u.OutputDelta, TerminalID: u.ToolCallID}}
	}
	return json.Marshal(w)
}

func (u *ToolCallUpdate) UnmarshalJSON(b []byte) error {
	var w toolCallUpdateWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	content := toolContentFromWire(w.Content)
	*u = ToolCallUpdate{ToolCallID: w.ToolCallID, Status: w.Status, RawOutput: w.RawOutput, Locations: w.Locations,
		Title: w.Title, Kind: w.Kind}
	if w.Meta != nil && w.Meta.TerminalOutput != nil {
		if w.Meta.TerminalOutput.TerminalID != w.ToolCallID || w.Meta.TerminalOutput.Data == "" {
			// Encoding writes the tool call id and only a non-empty delta.
			return fmt.Errorf("terminal_output of terminal %q (%d bytes) in tool call %q",
				w.Meta.TerminalOutput.TerminalID, len(w.Meta.TerminalOutput.Data), w.ToolCallID)
		}
		u.OutputDelta = w.Meta.TerminalOutput.Data
	}
	blocksOnly := true
	for _, c := range content {
		blocksOnly = blocksOnly && c.Diff == nil
	}
	if blocksOnly {
		for _, c := range content {
			u.Content = append(u.Content, c.Block)
		}
	} else {
		u.ToolContent = content
	}
	return nil
}

func (u *Plan) MarshalJSON() ([]byte, error) {
	entries := u.Entries
	if entries == nil {
		entries = []acp.PlanEntry{} // an empty plan is [], never null
	}
	return json.Marshal(planWire{Entries: entries, SessionUpdate: KindPlan})
}

func (u *Plan) UnmarshalJSON(b []byte) error {
	var w planWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*u = Plan{Entries: w.Entries}
	return nil
}

func (u *Usage) MarshalJSON() ([]byte, error) {
	return json.Marshal(usageWire{Meta: &usageMeta{Agenthost: u.Tokens}, Cost: u.Cost, SessionUpdate: KindUsageUpdate, Size: u.Size, Used: u.Used})
}

// UnmarshalJSON reads a usage_update; one journaled before usage took
// ACP's shape (provider counts only) reads as zero usage.
func (u *Usage) UnmarshalJSON(b []byte) error {
	var w usageWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*u = Usage{Used: w.Used, Size: w.Size, Cost: w.Cost}
	if w.Meta != nil {
		u.Tokens = w.Meta.Agenthost
	}
	return nil
}

func (u *HandleChanged) MarshalJSON() ([]byte, error) {
	return json.Marshal(handleChangedWire{Handle: u.Handle, Origin: u.Origin, SessionUpdate: KindHandleChanged})
}

func (u *HandleChanged) UnmarshalJSON(b []byte) error {
	var w handleChangedWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*u = HandleChanged{Handle: w.Handle, Origin: w.Origin}
	return nil
}

func (u *PermissionRequest) MarshalJSON() ([]byte, error) {
	return json.Marshal(permissionRequestWire{AlwaysScope: u.AlwaysScope, Options: u.Options, RequestID: u.RequestID,
		SessionUpdate: KindPermissionRequest, ToolCall: u.ToolCall.wire("")})
}

func (u *PermissionRequest) UnmarshalJSON(b []byte) error {
	var w permissionRequestWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*u = PermissionRequest{RequestID: w.RequestID, ToolCall: w.ToolCall.toolCall(), Options: w.Options, AlwaysScope: w.AlwaysScope}
	return nil
}

func (u *PermissionResolved) MarshalJSON() ([]byte, error) {
	return json.Marshal(permissionResolvedWire{Outcome: u.Outcome, RequestID: u.RequestID, SessionUpdate: KindPermissionResolved})
}

func (u *PermissionResolved) UnmarshalJSON(b []byte) error {
	var w permissionResolvedWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*u = PermissionResolved{RequestID: w.RequestID, Outcome: w.Outcome}
	return nil
}

func (*Unknown) MarshalJSON() ([]byte, error) {
	return json.Marshal(unknownWire{SessionUpdate: KindUnknown})
}

func (u *Other) MarshalJSON() ([]byte, error) {
	if len(u.JSON) == 0 {
		return nil, fmt.Errorf("journal: %s update without its JSON", u.Kind)
	}
	return u.JSON, nil
}
