package host

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/agenthost/agenthost/internal/agentpb"
	"github.com/agenthost/agenthost/leasestore"
)

var updateGolden = flag.Bool("update-golden", false, "rewrite ../journal/testdata/golden from this host's journal writer")

// goldenUpdates are the plugin updates whose journal bytes
// ../journal/testdata/golden fixes: API clients receive the stored bytes
// raw, so the encoder that replaces this file must reproduce them.
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
	"update-unknown": {Seq: 21, TurnId: "turn-4"},
	"stop-plugin": {Seq: 22, TurnId: "turn-4",
		Kind: &agentpb.Update_TurnStopped{TurnStopped: &agentpb.TurnStopped{StopReason: "end_turn"}}},
	"stop-plugin-error": {Seq: 23, TurnId: "turn-5",
		Kind: &agentpb.Update_TurnStopped{TurnStopped: &agentpb.TurnStopped{StopReason: "failed", Error: "out of <tokens>"}}},
	"stop-plugin-empty": {Seq: 24,
		Kind: &agentpb.Update_TurnStopped{TurnStopped: &agentpb.TurnStopped{}}},
}

// goldenHostRecords are the records the host writes itself (session.go).
func goldenHostRecords() map[string]leasestore.EntryInput {
	prompt := func(text string) leasestore.EntryInput {
		block, _ := json.Marshal(acpContent{Type: "text", Text: text})
		rec, _ := json.Marshal(PromptRecord{TurnID: "turn-1234567890abcdef", Prompt: []json.RawMessage{block}})
		return leasestore.EntryInput{Kind: leasestore.KindPrompt, Payload: rec}
	}
	stop, _ := json.Marshal(StopRecord{TurnID: "turn-x", StopReason: "failed", Error: "not dispatched: rpc error: code = Unavailable desc = <gone>"})
	return map[string]leasestore.EntryInput{
		"prompt":              prompt("count 3 <fast> & \"now\"\n"),
		"prompt-empty":        prompt(""),
		"stop-not-dispatched": {Kind: leasestore.KindStop, Payload: stop},
	}
}

func TestJournalGoldenBytes(t *testing.T) {
	dir := filepath.Join("..", "journal", "testdata", "golden")
	all := goldenHostRecords()
	for name, u := range goldenUpdates {
		all[name] = journalEntry(u)
	}
	for name, e := range all {
		path := filepath.Join(dir, name+".json")
		if *updateGolden {
			if err := os.WriteFile(path, e.Payload, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(e.Payload, want) {
			t.Errorf("%s: journaled\n%s\nwant\n%s", name, e.Payload, want)
		}
	}
}
