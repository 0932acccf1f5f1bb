package pluginclient

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/internal/agentpb"
	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/leasestore"
)

// goldenUpdates are the plugin updates whose journal bytes
// journal/testdata/golden fixes. API clients receive the stored bytes raw,
// so each must journal exactly as the host has always journaled it; only
// usage_update changed, to ACP's shape.
var goldenUpdates = map[string]*agentpb.Update{
	"update-agent-message-chunk": {Seq: 7, TurnId: "turn-1", TimeUnixNano: 1700000000123456789,
		Kind: &agentpb.Update_AgentMessageChunk{AgentMessageChunk: &agentpb.ContentChunk{Content: &agentpb.ContentBlock{Type: "text", Text: "Hello <world> & \"you\"\n"}}}},
	"update-agent-thought-chunk": {Seq: 8, TurnId: "turn-1", TimeUnixNano: 5,
		Kind: &agentpb.Update_AgentThoughtChunk{AgentThoughtChunk: &agentpb.ContentChunk{Content: &agentpb.ContentBlock{Type: "text", Text: "hmm"}}}},
	"update-user-message-chunk": {Seq: 1,
		Kind: &agentpb.Update_UserMessageChunk{UserMessageChunk: &agentpb.ContentChunk{Content: &agentpb.ContentBlock{Text: "typed, no type"}}}},
	"update-chunk-nil-content": {Seq: 2, TurnId: "t",
		Kind: &agentpb.Update_AgentMessageChunk{AgentMessageChunk: &agentpb.ContentChunk{}}},
	"update-chunk-empty-text": {Seq: 3, TurnId: "t",
		Kind: &agentpb.Update_AgentMessageChunk{AgentMessageChunk: &agentpb.ContentChunk{Content: &agentpb.ContentBlock{Type: "text"}}}},
	"update-chunk-image-json": {Seq: 4, TurnId: "t",
		Kind: &agentpb.Update_AgentMessageChunk{AgentMessageChunk: &agentpb.ContentChunk{Content: &agentpb.ContentBlock{Type: "image", Text: "ignored",
			Json: "{ \"type\": \"image\", \"mimeType\": \"image/png\",\n \"data\": \"iVBO<>&\", \"_meta\": {\"z\": 1, \"a\": [1, 2]} }"}}}},
	"update-chunk-invalid-json": {Seq: 5, TurnId: "t",
		Kind: &agentpb.Update_AgentMessageChunk{AgentMessageChunk: &agentpb.ContentChunk{Content: &agentpb.ContentBlock{Type: "image", Text: "fallback", Json: "{not json"}}}},
	"update-chunk-nontext-no-json": {Seq: 6, TurnId: "t",
		Kind: &agentpb.Update_AgentThoughtChunk{AgentThoughtChunk: &agentpb.ContentChunk{Content: &agentpb.ContentBlock{Type: "resource_link", Text: "only text"}}}},
	"update-chunk-untyped-json": {Seq: 7, TurnId: "t",
		Kind: &agentpb.Update_AgentMessageChunk{AgentMessageChunk: &agentpb.ContentChunk{Content: &agentpb.ContentBlock{Text: "x", Json: `{"type":"image"}`}}}},
	"update-tool-call": {Seq: 9, TurnId: "turn-2", TimeUnixNano: 42,
		Kind: &agentpb.Update_ToolCall{ToolCall: &agentpb.ToolCall{ToolCallId: "tool-1", Title: "list files", Kind: "execute", Status: "pending",
			RawInputJson: "{\"command\": \"ls -l\", \"env\": {\"B\": \"2\", \"A\": \"1\"}}"}}},
	"update-tool-call-minimal": {Seq: 10, TurnId: "turn-2",
		Kind: &agentpb.Update_ToolCall{ToolCall: &agentpb.ToolCall{ToolCallId: "tool-2"}}},
	"update-tool-call-invalid-input": {Seq: 11, TurnId: "turn-2",
		Kind: &agentpb.Update_ToolCall{ToolCall: &agentpb.ToolCall{ToolCallId: "tool-3", Title: "t", Status: "in_progress", RawInputJson: "{oops"}}},
	"update-tool-call-update": {Seq: 12, TurnId: "turn-2",
		Kind: &agentpb.Update_ToolCallUpdate{ToolCallUpdate: &agentpb.ToolCallUpdate{ToolCallId: "tool-1", Status: "completed",
			Content:       []*agentpb.ContentBlock{{Type: "text", Text: "README.md\nmain.go\n"}, nil, {Type: "image", Json: `{"type":"image","data":"AA=="}`}},
			RawOutputJson: `{"exit": 0, "stdout": "a<b"}`}}},
	"update-tool-call-update-bare": {Seq: 13, TurnId: "turn-2",
		Kind: &agentpb.Update_ToolCallUpdate{ToolCallUpdate: &agentpb.ToolCallUpdate{ToolCallId: "tool-1", Status: "in_progress", RawOutputJson: "not json"}}},
	"update-plan": {Seq: 14, TurnId: "turn-3",
		Kind: &agentpb.Update_Plan{Plan: &agentpb.Plan{Entries: []*agentpb.PlanEntry{
			{Content: "read", Priority: "high", Status: "completed"}, {Content: "write", Status: "pending"}}}}},
	"update-plan-empty": {Seq: 15, TurnId: "turn-3",
		Kind: &agentpb.Update_Plan{Plan: &agentpb.Plan{}}},
	"update-handle-changed": {Seq: 16,
		Kind: &agentpb.Update_HandleChanged{HandleChanged: &agentpb.HandleChanged{Handle: "claude-abc", Origin: "forked"}}},
	"update-permission-request": {Seq: 17, TurnId: "turn-4",
		Kind: &agentpb.Update_PermissionRequest{PermissionRequest: &agentpb.PermissionRequest{RequestId: "req-1",
			ToolCall: &agentpb.ToolCall{ToolCallId: "tool-5", Title: "write notes.txt", Kind: "edit", Status: "pending", RawInputJson: `{"path":"notes.txt"}`},
			Options:  []*agentpb.PermissionOption{{OptionId: "allow", Name: "Allow", Kind: "allow_once"}, {OptionId: "reject", Name: "Reject", Kind: "reject_once"}}}}},
	"update-permission-request-bare": {Seq: 18, TurnId: "turn-4",
		Kind: &agentpb.Update_PermissionRequest{PermissionRequest: &agentpb.PermissionRequest{RequestId: "req-2"}}},
	"update-permission-resolved": {Seq: 19, TurnId: "turn-4",
		Kind: &agentpb.Update_PermissionResolved{PermissionResolved: &agentpb.PermissionResolved{RequestId: "req-1",
			Outcome: &agentpb.PermissionOutcome{Outcome: "selected", OptionId: "allow"}}}},
	"update-permission-resolved-bare": {Seq: 20, TurnId: "turn-4",
		Kind: &agentpb.Update_PermissionResolved{PermissionResolved: &agentpb.PermissionResolved{RequestId: "req-2"}}},
	"update-usage": {Seq: 25, TurnId: "turn-6",
		Kind: &agentpb.Update_Usage{Usage: &agentpb.Usage{InputTokens: 1200, OutputTokens: 300, CachedInputTokens: 1000, ReasoningTokens: 50,
			CostUsd: 0.0125, ContextTokens: 53000, ContextWindow: 200000}}},
	"update-usage-unknown-window": {Seq: 26, TurnId: "turn-6",
		Kind: &agentpb.Update_Usage{Usage: &agentpb.Usage{InputTokens: 7}}},
	"stop-plugin": {Seq: 22, TurnId: "turn-4",
		Kind: &agentpb.Update_TurnStopped{TurnStopped: &agentpb.TurnStopped{StopReason: "end_turn"}}},
	"stop-plugin-error": {Seq: 23, TurnId: "turn-5",
		Kind: &agentpb.Update_TurnStopped{TurnStopped: &agentpb.TurnStopped{StopReason: "failed", Error: "out of <tokens>"}}},
	"stop-plugin-empty": {Seq: 24,
		Kind: &agentpb.Update_TurnStopped{TurnStopped: &agentpb.TurnStopped{}}},
	"update-current-mode": {Seq: 27, Kind: &agentpb.Update_CurrentMode{CurrentMode: &agentpb.CurrentMode{ModeId: "plan"}}},
	"update-config-options": {Seq: 28, TurnId: "turn-7", Kind: &agentpb.Update_ConfigOptions{ConfigOptions: &agentpb.ConfigOptions{
		ConfigOptions: []*agentpb.ConfigOption{
			{Id: "model", Name: "Model", Description: "The <model> to use", Category: "model", CurrentValue: "sonnet",
				Values: []*agentpb.ConfigValue{{Value: "sonnet", Name: "Sonnet", Description: "fast"}, {Value: "opus", Name: "Opus"}}},
			{Id: "effort", Name: "Effort", CurrentValue: "low"},
		}}}},
	"update-config-options-empty": {Seq: 29, Kind: &agentpb.Update_ConfigOptions{ConfigOptions: &agentpb.ConfigOptions{}}},
	"update-available-commands": {Seq: 30, Kind: &agentpb.Update_AvailableCommands{AvailableCommands: &agentpb.AvailableCommands{
		Commands: []*agentpb.Command{{Name: "review", Description: "Review a change", InputHint: "a branch or commit"}, {Name: "clear", Description: "Start over"}}}}},
	"update-available-commands-empty": {Seq: 31, Kind: &agentpb.Update_AvailableCommands{AvailableCommands: &agentpb.AvailableCommands{}}},
	"update-session-info":             {Seq: 32, Kind: &agentpb.Update_SessionInfo{SessionInfo: &agentpb.SessionInfo{Title: "Fix the <parser> & tests"}}},
	"update-tool-call-diff": {Seq: 33, TurnId: "turn-8", Kind: &agentpb.Update_ToolCall{ToolCall: &agentpb.ToolCall{
		ToolCallId: "tool-9", Title: "Edit main.go", Kind: "edit", Status: "pending",
		Content: []*agentpb.ToolCallContent{
			{Kind: &agentpb.ToolCallContent_Diff{Diff: &agentpb.Diff{Path: "/w/main.go", OldText: ptr("package main\n"), NewText: "package main\n\nfunc main() {}\n"}}},
			{Kind: &agentpb.ToolCallContent_Diff{Diff: &agentpb.Diff{Path: "/w/new.txt"}}},
			{}, // no kind: dropped
			{Kind: &agentpb.ToolCallContent_Block{Block: &agentpb.ContentBlock{Type: "text", Text: "two files"}}},
		},
		Locations: []*agentpb.Location{{Path: "/w/main.go", Line: 3}, {Path: "/w/new.txt"}}}}},
	"update-tool-call-update-rich": {Seq: 34, TurnId: "turn-8", Kind: &agentpb.Update_ToolCallUpdate{ToolCallUpdate: &agentpb.ToolCallUpdate{
		ToolCallId: "tool-9", Status: "completed", Title: "Edited main.go", Kind: "edit",
		ToolContent: []*agentpb.ToolCallContent{{Kind: &agentpb.ToolCallContent_Diff{Diff: &agentpb.Diff{Path: "/w/main.go", OldText: ptr(""), NewText: "x"}}}},
		Locations:   []*agentpb.Location{{Path: "/w/main.go", Line: 1}}}}},
	"update-tool-call-update-output": {Seq: 35, TurnId: "turn-8", Kind: &agentpb.Update_ToolCallUpdate{ToolCallUpdate: &agentpb.ToolCallUpdate{
		ToolCallId: "tool-10", Status: "in_progress", OutputDelta: "building <x>...\n"}}},
	"update-permission-request-always": {Seq: 36, TurnId: "turn-8", Kind: &agentpb.Update_PermissionRequest{PermissionRequest: &agentpb.PermissionRequest{
		RequestId: "req-3", AlwaysScope: "edit",
		ToolCall: &agentpb.ToolCall{ToolCallId: "tool-9", Title: "Edit main.go", Kind: "edit", Status: "pending",
			Content:   []*agentpb.ToolCallContent{{Kind: &agentpb.ToolCallContent_Diff{Diff: &agentpb.Diff{Path: "/w/main.go", OldText: ptr("a"), NewText: "b"}}}},
			Locations: []*agentpb.Location{{Path: "/w/main.go"}}},
		Options: []*agentpb.PermissionOption{{OptionId: "allow_always", Name: "Always allow", Kind: "allow_always"}}}}},
	"stop-auth-required": {Seq: 37, TurnId: "turn-9",
		Kind: &agentpb.Update_TurnStopped{TurnStopped: &agentpb.TurnStopped{StopReason: "failed", Error: "401: log in", AuthRequired: true}}},
}

func ptr(s string) *string { return &s }

// Every golden journal file has the plugin update it came from, so every
// kind the journal models is produced by this converter.
func TestEveryGoldenUpdateHasItsPluginUpdate(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "journal", "testdata", "golden", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		if _, ok := goldenUpdates[name]; !ok && !strings.HasPrefix(name, "prompt") && name != "stop-not-dispatched" && name != "update-unknown" {
			t.Errorf("%s has no plugin update in goldenUpdates", name)
		}
	}
}

func TestUpdateRecordKeepsTheJournalsBytes(t *testing.T) {
	for name, u := range goldenUpdates {
		want, err := os.ReadFile(filepath.Join("..", "..", "journal", "testdata", "golden", name+".json"))
		if err != nil {
			t.Fatal(err)
		}
		e, err := journal.Encode(updateFromProto(u).Record)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		kind, _, _ := strings.Cut(name, "-")
		if e.Kind != leasestore.EntryKind(kind) {
			t.Errorf("%s: journaled as a %s entry", name, e.Kind)
		}
		if !bytes.Equal(e.Payload, want) {
			t.Errorf("%s: journaled\n%s\nwant\n%s", name, e.Payload, want)
		}
	}
}

// An update without a kind has no record: the host refuses it as a breach
// of the protocol instead of journaling it.
func TestUpdateWithoutAKindHasNoRecord(t *testing.T) {
	u := updateFromProto(&agentpb.Update{Seq: 21, TurnId: "turn-4"})
	if u.Record != nil || u.Kind != "none" || u.Seq != 21 || u.TurnID != "turn-4" || u.Stop() != nil || u.SessionUpdate() != nil {
		t.Errorf("kindless update: %+v", u)
	}
}

// The usage an agent reports reaches ACP's usage_update: the context's
// tokens used of its window, and the cost only when there is one.
func TestUsageTakesACPsShape(t *testing.T) {
	u := updateFromProto(goldenUpdates["update-usage"]).Record.(*journal.Update).Update.(*journal.Usage)
	if u.Used != 53000 || u.Size != 200000 || u.Cost == nil || u.Cost.Amount != 0.0125 || u.Cost.Currency != "USD" {
		t.Errorf("usage %+v", u)
	}
	if want := (journal.Tokens{InputTokens: 1200, OutputTokens: 300, CachedInputTokens: 1000, ReasoningTokens: 50}); u.Tokens != want {
		t.Errorf("provider tokens %+v, want %+v", u.Tokens, want)
	}
	free := updateFromProto(&agentpb.Update{Kind: &agentpb.Update_Usage{Usage: &agentpb.Usage{CostUsd: -1}}}).Record.(*journal.Update).Update.(*journal.Usage)
	if free.Cost != nil {
		t.Errorf("a cost of %v was journaled", free.Cost)
	}
}

// Every kind of the protocol converts to a record of its own, never to
// journal.Unknown: a kind added to the proto without its conversion would
// otherwise be journaled as unknown.
func TestEveryProtocolKindConverts(t *testing.T) {
	kinds := (&agentpb.Update{}).ProtoReflect().Descriptor().Oneofs().ByName("kind").Fields()
	for i := range kinds.Len() {
		fd := kinds.Get(i)
		u := &agentpb.Update{Seq: 1}
		m := u.ProtoReflect()
		m.Set(fd, m.NewField(fd))
		got := updateFromProto(u)
		if got.Kind != string(fd.Name()) || got.Record == nil {
			t.Errorf("%s: %+v", fd.Name(), got)
			continue
		}
		if _, unknown := got.SessionUpdate().(*journal.Unknown); unknown {
			t.Errorf("%s converts to journal.Unknown", fd.Name())
		}
		if _, err := journal.Encode(got.Record); err != nil {
			t.Errorf("%s: the record does not encode: %v", fd.Name(), err)
		}
	}
}
