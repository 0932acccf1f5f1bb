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
	Kind          string          `json:"kind,omitempty"`
	RawInput      json.RawMessage `json:"rawInput,omitempty"`
	SessionUpdate UpdateKind      `json:"sessionUpdate,omitempty"`
	Status        string          `json:"status"`
	Title         string          `json:"title"`
	ToolCallID    string          `json:"toolCallId"`
}

type toolCallUpdateWire struct {
	Content       []toolCallContent `json:"content,omitempty"`
	RawOutput     json.RawMessage   `json:"rawOutput,omitempty"`
	SessionUpdate UpdateKind        `json:"sessionUpdate"`
	Status        string            `json:"status"`
	ToolCallID    string            `json:"toolCallId"`
}

// toolCallContent is ACP's tool call content of type "content": a block.
type toolCallContent struct {
	Content Content `json:"content"`
	Type    string  `json:"type"`
}

const toolCallContentType = "content"

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
	return toolCallWire{Kind: c.Kind, RawInput: c.RawInput, SessionUpdate: kind, Status: c.Status, Title: c.Title, ToolCallID: c.ToolCallID}
}

func (w toolCallWire) toolCall() ToolCall {
	return ToolCall{ToolCallID: w.ToolCallID, Title: w.Title, Kind: w.Kind, Status: w.Status, RawInput: w.RawInput}
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
	w := toolCallUpdateWire{RawOutput: u.RawOutput, SessionUpdate: KindToolCallUpdate, Status: u.Status, ToolCallID: u.ToolCallID}
	for _, c := range u.Content {
		w.Content = append(w.Content, toolCallContent{Content: c, Type: toolCallContentType})
	}
	return json.Marshal(w)
}

func (u *ToolCallUpdate) UnmarshalJSON(b []byte) error {
	var w toolCallUpdateWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*u = ToolCallUpdate{ToolCallID: w.ToolCallID, Status: w.Status, RawOutput: w.RawOutput}
	for i, c := range w.Content {
		if c.Type != toolCallContentType {
			// Diffs and terminals are not journaled yet; refusing them
			// keeps a decode and re-encode from dropping their members.
			return fmt.Errorf("tool call content %d has type %q; only %q is modelled", i, c.Type, toolCallContentType)
		}
		u.Content = append(u.Content, c.Content)
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
	return json.Marshal(permissionRequestWire{Options: u.Options, RequestID: u.RequestID,
		SessionUpdate: KindPermissionRequest, ToolCall: u.ToolCall.wire("")})
}

func (u *PermissionRequest) UnmarshalJSON(b []byte) error {
	var w permissionRequestWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*u = PermissionRequest{RequestID: w.RequestID, ToolCall: w.ToolCall.toolCall(), Options: w.Options}
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
