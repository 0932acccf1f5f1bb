package journal

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	acp "github.com/coder/acp-go-sdk"

	"github.com/agenthost/agenthost/leasestore"
)

var updateGolden = flag.Bool("update-golden", false, "write testdata/golden files that do not exist yet")

// goldenRecords are the records whose bytes testdata/golden fixes. The
// files were written by the host's journal writer before this package
// owned the records (the usage_update ones after usage took ACP's shape);
// internal/pluginclient checks that the plugin updates they came from
// still convert to them.
var goldenRecords = map[string]Record{
	"update-agent-message-chunk": &Update{PluginSeq: 7, TurnID: "turn-1", PluginTime: 1700000000123456789,
		Update: &Chunk{Kind: KindAgentMessageChunk, Content: TextContent("Hello <world> & \"you\"\n")}},
	"update-agent-thought-chunk": &Update{PluginSeq: 8, TurnID: "turn-1", PluginTime: 5,
		Update: &Chunk{Kind: KindAgentThoughtChunk, Content: TextContent("hmm")}},
	"update-user-message-chunk": &Update{PluginSeq: 1,
		Update: &Chunk{Kind: KindUserMessageChunk, Content: TextContent("typed, no type")}},
	"update-chunk-nil-content": &Update{PluginSeq: 2, TurnID: "t",
		Update: &Chunk{Kind: KindAgentMessageChunk, Content: Content(`{"type":"text","text":""}`)}},
	"update-chunk-empty-text": &Update{PluginSeq: 3, TurnID: "t",
		Update: &Chunk{Kind: KindAgentMessageChunk, Content: TextContent("")}},
	"update-chunk-image-json": &Update{PluginSeq: 4, TurnID: "t",
		Update: &Chunk{Kind: KindAgentMessageChunk,
			Content: Content("{ \"type\": \"image\", \"mimeType\": \"image/png\",\n \"data\": \"iVBO<>&\", \"_meta\": {\"z\": 1, \"a\": [1, 2]} }")}},
	"update-chunk-invalid-json": &Update{PluginSeq: 5, TurnID: "t",
		Update: &Chunk{Kind: KindAgentMessageChunk, Content: TextContent("fallback")}},
	"update-chunk-nontext-no-json": &Update{PluginSeq: 6, TurnID: "t",
		Update: &Chunk{Kind: KindAgentThoughtChunk, Content: TextContent("only text")}},
	"update-chunk-untyped-json": &Update{PluginSeq: 7, TurnID: "t",
		Update: &Chunk{Kind: KindAgentMessageChunk, Content: TextContent("x")}},
	"update-tool-call": &Update{PluginSeq: 9, TurnID: "turn-2", PluginTime: 42,
		Update: &ToolCall{ToolCallID: "tool-1", Title: "list files", Kind: "execute", Status: "pending",
			RawInput: json.RawMessage("{\"command\": \"ls -l\", \"env\": {\"B\": \"2\", \"A\": \"1\"}}")}},
	"update-tool-call-minimal": &Update{PluginSeq: 10, TurnID: "turn-2",
		Update: &ToolCall{ToolCallID: "tool-2"}},
	"update-tool-call-invalid-input": &Update{PluginSeq: 11, TurnID: "turn-2",
		Update: &ToolCall{ToolCallID: "tool-3", Title: "t", Status: "in_progress"}},
	"update-tool-call-update": &Update{PluginSeq: 12, TurnID: "turn-2",
		Update: &ToolCallUpdate{ToolCallID: "tool-1", Status: "completed",
			Content:   []Content{TextContent("README.md\nmain.go\n"), Content(`{"type":"text","text":""}`), Content(`{"type":"image","data":"AA=="}`)},
			RawOutput: json.RawMessage(`{"exit": 0, "stdout": "a<b"}`)}},
	"update-tool-call-update-bare": &Update{PluginSeq: 13, TurnID: "turn-2",
		Update: &ToolCallUpdate{ToolCallID: "tool-1", Status: "in_progress"}},
	"update-plan": &Update{PluginSeq: 14, TurnID: "turn-3",
		Update: &Plan{Entries: []acp.PlanEntry{{Content: "read", Priority: "high", Status: "completed"}, {Content: "write", Status: "pending"}}}},
	"update-plan-empty": &Update{PluginSeq: 15, TurnID: "turn-3", Update: &Plan{}},
	"update-usage": &Update{PluginSeq: 25, TurnID: "turn-6",
		Update: &Usage{Used: 53000, Size: 200000, Cost: &acp.Cost{Amount: 0.0125, Currency: "USD"},
			Tokens: Tokens{InputTokens: 1200, OutputTokens: 300, CachedInputTokens: 1000, ReasoningTokens: 50}}},
	"update-usage-unknown-window": &Update{PluginSeq: 26, TurnID: "turn-6",
		Update: &Usage{Tokens: Tokens{InputTokens: 7}}},
	"update-handle-changed": &Update{PluginSeq: 16,
		Update: &HandleChanged{Handle: "claude-abc", Origin: "forked"}},
	"update-permission-request": &Update{PluginSeq: 17, TurnID: "turn-4",
		Update: &PermissionRequest{RequestID: "req-1",
			ToolCall: ToolCall{ToolCallID: "tool-5", Title: "write notes.txt", Kind: "edit", Status: "pending", RawInput: json.RawMessage(`{"path":"notes.txt"}`)},
			Options:  []acp.PermissionOption{{OptionId: "allow", Name: "Allow", Kind: "allow_once"}, {OptionId: "reject", Name: "Reject", Kind: "reject_once"}}}},
	"update-permission-request-bare": &Update{PluginSeq: 18, TurnID: "turn-4",
		Update: &PermissionRequest{RequestID: "req-2"}},
	"update-permission-resolved": &Update{PluginSeq: 19, TurnID: "turn-4",
		Update: &PermissionResolved{RequestID: "req-1", Outcome: PermissionOutcome{Outcome: "selected", OptionID: "allow"}}},
	"update-permission-resolved-bare": &Update{PluginSeq: 20, TurnID: "turn-4",
		Update: &PermissionResolved{RequestID: "req-2"}},
	"update-unknown":    &Update{PluginSeq: 21, TurnID: "turn-4", Update: &Unknown{}},
	"stop-plugin":       &Stop{PluginSeq: 22, TurnID: "turn-4", StopReason: "end_turn"},
	"stop-plugin-error": &Stop{PluginSeq: 23, TurnID: "turn-5", StopReason: "failed", Error: "out of <tokens>"},
	"stop-plugin-empty": &Stop{PluginSeq: 24},
	"stop-not-dispatched": &Stop{TurnID: "turn-x", StopReason: "failed",
		Error: "not dispatched: rpc error: code = Unavailable desc = <gone>"},
	"update-current-mode": &Update{PluginSeq: 27, Update: &CurrentMode{ModeID: "plan"}},
	"update-config-options": &Update{PluginSeq: 28, TurnID: "turn-7",
		Update: &ConfigOptions{Options: []ConfigOption{
			{ID: "model", Name: "Model", Description: "The <model> to use", Category: "model", CurrentValue: "sonnet",
				Values: []ConfigValue{{Value: "sonnet", Name: "Sonnet", Description: "fast"}, {Value: "opus", Name: "Opus"}}},
			{ID: "effort", Name: "Effort", CurrentValue: "low"},
		}}},
	"update-config-options-empty": &Update{PluginSeq: 29, Update: &ConfigOptions{}},
	"update-available-commands": &Update{PluginSeq: 30,
		Update: &AvailableCommands{Commands: []Command{{Name: "review", Description: "Review a change", InputHint: "a branch or commit"}, {Name: "clear", Description: "Start over"}}}},
	"update-available-commands-empty": &Update{PluginSeq: 31, Update: &AvailableCommands{}},
	"update-session-info":             &Update{PluginSeq: 32, Update: &SessionInfo{Title: "Fix the <parser> & tests"}},
	"update-tool-call-diff": &Update{PluginSeq: 33, TurnID: "turn-8",
		Update: &ToolCall{ToolCallID: "tool-9", Title: "Edit main.go", Kind: "edit", Status: "pending",
			Content: []ToolCallContent{
				{Diff: &Diff{Path: "/w/main.go", OldText: ptr("package main\n"), NewText: "package main\n\nfunc main() {}\n"}},
				{Diff: &Diff{Path: "/w/new.txt", NewText: ""}},
				{Block: TextContent("two files")},
			},
			Locations: []Location{{Path: "/w/main.go", Line: 3}, {Path: "/w/new.txt"}}}},
	"update-tool-call-update-rich": &Update{PluginSeq: 34, TurnID: "turn-8",
		Update: &ToolCallUpdate{ToolCallID: "tool-9", Status: "completed", Title: "Edited main.go", Kind: "edit",
			ToolContent: []ToolCallContent{{Diff: &Diff{Path: "/w/main.go", OldText: ptr(""), NewText: "x"}}},
			Locations:   []Location{{Path: "/w/main.go", Line: 1}}}},
	"update-tool-call-update-output": &Update{PluginSeq: 35, TurnID: "turn-8",
		Update: &ToolCallUpdate{ToolCallID: "tool-10", Status: "in_progress", OutputDelta: "building <x>...\n"}},
	"update-permission-request-always": &Update{PluginSeq: 36, TurnID: "turn-8",
		Update: &PermissionRequest{RequestID: "req-3", AlwaysScope: "edit",
			ToolCall: ToolCall{ToolCallID: "tool-9", Title: "Edit main.go", Kind: "edit", Status: "pending",
				Content:   []ToolCallContent{{Diff: &Diff{Path: "/w/main.go", OldText: ptr("a"), NewText: "b"}}},
				Locations: []Location{{Path: "/w/main.go"}}},
			Options: []acp.PermissionOption{{OptionId: "allow_always", Name: "Always allow", Kind: "allow_always"}}}},
	"stop-auth-required": &Stop{PluginSeq: 37, TurnID: "turn-9", StopReason: "failed", Error: "401: log in", AuthRequired: true},
	"prompt":             &Prompt{TurnID: "turn-1234567890abcdef", Prompt: []Content{TextContent("count 3 <fast> & \"now\"\n")}},
	"prompt-empty":       &Prompt{TurnID: "turn-1234567890abcdef", Prompt: []Content{TextContent("")}},
}

func ptr(s string) *string { return &s }

// goldenPath is where the bytes of a golden record are kept.
func goldenPath(name string) string { return filepath.Join("testdata", "golden", name+".json") }

func TestEncodeReproducesGoldenBytes(t *testing.T) {
	for name, r := range goldenRecords {
		e, err := Encode(r)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if e.Kind != kindOfGolden(name) {
			t.Errorf("%s: entry kind %q", name, e.Kind)
		}
		path := goldenPath(name)
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) && *updateGolden {
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
			t.Errorf("%s: encoded\n%s\nwant\n%s", name, e.Payload, want)
		}
	}
}

// Every golden file has its record: none is left untested.
func TestEveryGoldenFileHasARecord(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "golden", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if name := strings.TrimSuffix(filepath.Base(f), ".json"); goldenRecords[name] == nil {
			t.Errorf("%s has no golden record", f)
		}
	}
}

// Decoding the golden bytes gives back the records, and encoding those
// gives back the bytes: a reader that decodes and passes a record on
// changes nothing.
func TestDecodeRoundTripsGoldenBytes(t *testing.T) {
	for name, want := range goldenRecords {
		b, err := os.ReadFile(goldenPath(name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(leasestore.Entry{Seq: 3, Kind: kindOfGolden(name), Payload: b})
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		again, err := Encode(got)
		if err != nil || !bytes.Equal(again.Payload, b) {
			t.Errorf("%s: decoded and encoded again: %s, %v\nwant %s", name, again.Payload, err, b)
		}
		if !sameRecord(got, want) {
			t.Errorf("%s: decoded %#v\nwant %#v", name, got, want)
		}
	}
}

// sameRecord compares records through their bytes where raw JSON is
// compacted by the encoder, and by value otherwise.
func sameRecord(a, b Record) bool {
	ea, err1 := Encode(a)
	eb, err2 := Encode(b)
	if err1 != nil || err2 != nil || !bytes.Equal(ea.Payload, eb.Payload) {
		return false
	}
	ua, ok := a.(*Update)
	if !ok {
		return reflect.DeepEqual(a, b)
	}
	ub := b.(*Update)
	return reflect.TypeOf(ua.Update) == reflect.TypeOf(ub.Update) && ua.Update.UpdateKind() == ub.Update.UpdateKind()
}

func kindOfGolden(name string) leasestore.EntryKind {
	kind, _, _ := strings.Cut(name, "-")
	return leasestore.EntryKind(kind)
}

func TestUsageIsACPShaped(t *testing.T) {
	e, err := Encode(goldenRecords["update-usage"])
	if err != nil {
		t.Fatal(err)
	}
	r, err := Decode(leasestore.Entry{Kind: e.Kind, Payload: e.Payload})
	if err != nil {
		t.Fatal(err)
	}
	u, ok := ACP(r.(*Update).Update)
	if !ok || u.UsageUpdate == nil {
		t.Fatalf("usage as ACP: %+v, %v", u, ok)
	}
	got := u.UsageUpdate
	if got.Used != 53000 || got.Size != 200000 || got.Cost == nil || got.Cost.Amount != 0.0125 || got.Cost.Currency != "USD" {
		t.Errorf("ACP usage_update %+v (cost %+v)", got, got.Cost)
	}
	meta, _ := got.Meta["agenthost"].(map[string]any)
	if meta["inputTokens"] != float64(1200) || meta["outputTokens"] != float64(300) ||
		meta["cachedInputTokens"] != float64(1000) || meta["reasoningTokens"] != float64(50) {
		t.Errorf("ACP usage_update _meta %v", got.Meta)
	}
	// Usage journaled before it took ACP's shape reads as unknown usage.
	old := `{"pluginSeq":3,"update":{"cachedInputTokens":1,"costUsd":0.5,"inputTokens":2,"outputTokens":3,"reasoningTokens":4,"sessionUpdate":"usage_update"}}`
	r, err = DecodePayload(leasestore.KindUpdate, []byte(old))
	if err != nil {
		t.Fatal(err)
	}
	if got := r.(*Update).Update; !reflect.DeepEqual(got, &Usage{}) {
		t.Errorf("old usage decoded as %+v", got)
	}
}

func TestACPSkipsAgenthostKinds(t *testing.T) {
	for name, r := range goldenRecords {
		u, ok := r.(*Update)
		if !ok {
			continue
		}
		_, isACP := ACP(u.Update)
		if want := !strings.HasPrefix(string(u.Update.UpdateKind()), ExtensionPrefix); isACP != want {
			t.Errorf("%s: ACP(%s) = %v", name, u.Update.UpdateKind(), isACP)
		}
	}
}

// An update of a kind this build does not model passes through unchanged.
func TestOtherKindsPassThrough(t *testing.T) {
	raw := `{"pluginSeq":4,"update":{"sessionUpdate":"from_a_newer_acp","items":[{"name":"init","description":"x"}]}}`
	r, err := DecodePayload(leasestore.KindUpdate, []byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	other, ok := r.(*Update).Update.(*Other)
	if !ok || other.Kind != "from_a_newer_acp" {
		t.Fatalf("decoded %#v", r.(*Update).Update)
	}
	e, err := Encode(r)
	if err != nil || string(e.Payload) != raw {
		t.Errorf("encoded again: %s, %v", e.Payload, err)
	}
}

func TestDecodeRefusesWhatItCannotRead(t *testing.T) {
	for _, tt := range []struct {
		kind    leasestore.EntryKind
		payload string
	}{
		{leasestore.KindUpdate, `not json`},
		{leasestore.KindUpdate, `{"pluginSeq":1}`},
		{leasestore.KindUpdate, `{"pluginSeq":1,"update":{}}`},
		{leasestore.KindUpdate, `{"pluginSeq":1,"update":{"sessionUpdate":"tool_call","toolCallId":7}}`},
		{leasestore.KindUpdate, `{"pluginSeq":1,"update":{"sessionUpdate":"tool_call_update","toolCallId":"t","content":[{"type":"diff","path":"a"}]}}`},
		{leasestore.KindUpdate, `{"pluginSeq":"one","update":{"sessionUpdate":"plan","entries":[]}}`},
		{leasestore.KindUpdate, `{"pluginSeq":1,"update":{"sessionUpdate":"tool_call","toolCallId":"t","content":[{"type":"terminal","terminalId":"x"}]}}`},
		{leasestore.KindUpdate, `{"pluginSeq":1,"update":{"sessionUpdate":"tool_call","toolCallId":"t","content":[{"type":"diff","newText":"x"}]}}`},
		{leasestore.KindUpdate, `{"pluginSeq":1,"update":{"sessionUpdate":"tool_call_update","toolCallId":"t","_meta":{"terminal_output":{"terminal_id":"u","data":"x"}}}}`},
		{leasestore.KindUpdate, `{"pluginSeq":1,"update":{"sessionUpdate":"config_option_update","configOptions":[{"type":"boolean","id":"x","currentValue":true}]}}`},
		{leasestore.KindUpdate, `{"pluginSeq":1,"update":{"sessionUpdate":"available_commands_update","availableCommands":[{"name":"x","input":{}}]}}`},
		{leasestore.KindUpdate, `{"pluginSeq":1,"update":{"sessionUpdate":"current_mode_update","currentModeId":7}}`},
		{leasestore.KindStop, `{"turnId":"t","authRequired":"yes"}`},
		{leasestore.KindStop, `{"turnId":3}`},
		{leasestore.KindPrompt, `{"prompt":"text"}`},
		{leasestore.KindLifecycle, `[]`},
	} {
		_, err := DecodePayload(tt.kind, []byte(tt.payload))
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("%s %s: %v, want ErrMalformed", tt.kind, tt.payload, err)
		}
	}
	if _, err := Decode(leasestore.Entry{Seq: 9, Kind: "mystery", Payload: []byte(`{}`)}); !errors.Is(err, ErrUnknownKind) {
		t.Errorf("unknown kind: %v", err)
	}
}

func TestLifecycleKeepsItsEntryKind(t *testing.T) {
	ev := leasestore.LifecycleEvent{Event: "handle-changed", Fence: 2, Claim: leasestore.ClaimLive, Handle: "h"}
	for _, kind := range []leasestore.EntryKind{leasestore.KindLifecycle, leasestore.KindHandle} {
		b, _ := json.Marshal(ev)
		r, err := Decode(leasestore.Entry{Kind: kind, Payload: b})
		if err != nil {
			t.Fatal(err)
		}
		l := r.(*Lifecycle)
		if l.LifecycleEvent != ev || l.EntryKind() != kind {
			t.Errorf("%s: decoded %+v", kind, l)
		}
		e, err := Encode(l)
		if err != nil || e.Kind != kind || !bytes.Equal(e.Payload, b) {
			t.Errorf("%s: encoded again %s %s, %v", kind, e.Kind, e.Payload, err)
		}
	}
}

// The update object of a session/update notification, as the ACP library
// writes it (members reordered), decodes to the same update.
func TestDecodeUpdateReadsNotifications(t *testing.T) {
	for _, name := range []string{"update-agent-message-chunk", "update-tool-call", "update-tool-call-update", "update-plan", "update-usage"} {
		want := goldenRecords[name].(*Update).Update
		up, ok := ACP(want)
		if !ok {
			t.Fatalf("%s: no ACP form", name)
		}
		b, err := json.Marshal(acp.SessionNotification{SessionId: "s", Update: up})
		if err != nil {
			t.Fatal(err)
		}
		var n struct {
			Update json.RawMessage `json:"update"`
		}
		if err := json.Unmarshal(b, &n); err != nil {
			t.Fatal(err)
		}
		got, err := DecodeUpdate(n.Update)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got.UpdateKind() != want.UpdateKind() {
			t.Errorf("%s: kind %s", name, got.UpdateKind())
		}
		switch g := got.(type) {
		case *Chunk:
			if g.Content.Text() != want.(*Chunk).Content.Text() || g.Content.Type() != "text" {
				t.Errorf("%s: %s", name, g.Content)
			}
		case *ToolCall:
			w := want.(*ToolCall)
			if g.ToolCallID != w.ToolCallID || g.Title != w.Title || g.Kind != w.Kind || g.Status != w.Status {
				t.Errorf("%s: %+v", name, g)
			}
		case *ToolCallUpdate:
			if len(g.Content) != 3 || g.Content[0].Text() != "README.md\nmain.go\n" || g.Content[2].Type() != "image" {
				t.Errorf("%s: %+v", name, g)
			}
		case *Plan:
			if !reflect.DeepEqual(g.Entries, want.(*Plan).Entries) {
				t.Errorf("%s: %+v", name, g)
			}
		case *Usage:
			if *g.Cost != *want.(*Usage).Cost || g.Used != 53000 || g.Size != 200000 || g.Tokens != want.(*Usage).Tokens {
				t.Errorf("%s: %+v", name, g)
			}
		}
	}
}

func TestContent(t *testing.T) {
	for _, tt := range []struct {
		c          Content
		typ, text  string
		encodes    string
		encodeFail bool
	}{
		{TextContent("hi"), "text", "hi", `{"type":"text","text":"hi"}`, false},
		{TextContent(""), "text", "", `{"type":"text"}`, false},
		{Content(`{"type":"image","data":"x"}`), "image", "", `{"type":"image","data":"x"}`, false},
		{nil, "", "", `null`, false},
		{Content(`[1]`), "", "", `[1]`, false},
		{Content(`{oops`), "", "", ``, true},
	} {
		if tt.c.Type() != tt.typ || tt.c.Text() != tt.text {
			t.Errorf("%s: type %q text %q", tt.c, tt.c.Type(), tt.c.Text())
		}
		b, err := json.Marshal(tt.c)
		if (err != nil) != tt.encodeFail || (!tt.encodeFail && string(b) != tt.encodes) {
			t.Errorf("%s: encodes %s, %v", tt.c, b, err)
		}
	}
	var c Content
	if err := json.Unmarshal([]byte(`{"type":"text","text":"a"}`), &c); err != nil || c.Text() != "a" {
		t.Errorf("decoded %s, %v", c, err)
	}
	if _, err := Encode(&Update{}); err == nil {
		t.Error("an update record without its update encoded")
	}
	if _, err := Encode(&Update{Update: &Chunk{Kind: KindAgentMessageChunk, Content: Content(`{oops`)}}); err == nil {
		t.Error("a chunk whose content is not JSON encoded")
	}
}

// The tool call and session-level shapes survive the ACP library:
// journaled, read as an acp.SessionUpdate (what the local API sends),
// written by the library and decoded again, they mean what the journal
// wrote. (Content blocks are not compared: the library rewrites a block
// into its own member order and drops members it does not model.)
func TestACPRoundTripsEveryKind(t *testing.T) {
	for _, name := range []string{"update-tool-call", "update-tool-call-minimal", "update-tool-call-diff",
		"update-tool-call-update-bare", "update-tool-call-update-rich", "update-tool-call-update-output",
		"update-plan", "update-usage", "update-current-mode", "update-config-options", "update-config-options-empty",
		"update-available-commands", "update-available-commands-empty", "update-session-info"} {
		u := goldenRecords[name].(*Update)
		want, err := json.Marshal(u.Update)
		if err != nil {
			t.Fatal(err)
		}
		up, ok := ACP(u.Update)
		if !ok {
			t.Errorf("%s: no ACP form", name)
			continue
		}
		b, err := json.Marshal(up)
		if err != nil {
			t.Fatalf("%s: the ACP library cannot write %+v: %v", name, up, err)
		}
		got, err := DecodeUpdate(b)
		if err != nil {
			t.Errorf("%s: %s: %v", name, b, err)
			continue
		}
		again, err := json.Marshal(got)
		if err != nil || !jsonEqual(again, want) {
			t.Errorf("%s: through the ACP library\n%s\nwant\n%s (%v)", name, again, want, err)
		}
	}
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

// The new kinds read as the ACP library's own types, member by member.
func TestACPShapesOfTheSessionSurface(t *testing.T) {
	get := func(name string) acp.SessionUpdate {
		t.Helper()
		up, ok := ACP(goldenRecords[name].(*Update).Update)
		if !ok {
			t.Fatalf("%s: no ACP form", name)
		}
		return up
	}
	if u := get("update-current-mode").CurrentModeUpdate; u == nil || u.CurrentModeId != "plan" {
		t.Errorf("current_mode_update %+v", u)
	}
	if u := get("update-config-options").ConfigOptionUpdate; u == nil || len(u.ConfigOptions) != 2 ||
		u.ConfigOptions[0].Select == nil || u.ConfigOptions[0].Select.CurrentValue != "sonnet" ||
		u.ConfigOptions[0].Select.Category == nil || *u.ConfigOptions[0].Select.Category != "model" ||
		u.ConfigOptions[0].Select.Options.Ungrouped == nil || len(*u.ConfigOptions[0].Select.Options.Ungrouped) != 2 ||
		(*u.ConfigOptions[0].Select.Options.Ungrouped)[1].Value != "opus" {
		t.Errorf("config_option_update %+v", u)
	}
	if u := get("update-available-commands").AvailableCommandsUpdate; u == nil || len(u.AvailableCommands) != 2 ||
		u.AvailableCommands[0].Input == nil || u.AvailableCommands[0].Input.Unstructured == nil ||
		u.AvailableCommands[0].Input.Unstructured.Hint != "a branch or commit" || u.AvailableCommands[1].Input != nil {
		t.Errorf("available_commands_update %+v", u)
	}
	if u := get("update-session-info").SessionInfoUpdate; u == nil || u.Title == nil || *u.Title != "Fix the <parser> & tests" {
		t.Errorf("session_info_update %+v", u)
	}
	tc := get("update-tool-call-diff").ToolCall
	if tc == nil || len(tc.Content) != 3 || tc.Content[0].Diff == nil || tc.Content[0].Diff.OldText == nil ||
		tc.Content[1].Diff == nil || tc.Content[1].Diff.OldText != nil || tc.Content[2].Content == nil ||
		len(tc.Locations) != 2 || tc.Locations[0].Line == nil || *tc.Locations[0].Line != 3 || tc.Locations[1].Line != nil {
		t.Fatalf("tool_call %+v", tc)
	}
	cu := get("update-tool-call-update-rich").ToolCallUpdate
	if cu == nil || cu.Title == nil || *cu.Title != "Edited main.go" || cu.Kind == nil || *cu.Kind != "edit" ||
		len(cu.Content) != 1 || cu.Content[0].Diff == nil || cu.Content[0].Diff.NewText != "x" || len(cu.Locations) != 1 {
		t.Errorf("tool_call_update %+v", cu)
	}
	out := get("update-tool-call-update-output").ToolCallUpdate
	term, _ := out.Meta["terminal_output"].(map[string]any)
	if term["data"] != "building <x>...\n" || term["terminal_id"] != "tool-10" {
		t.Errorf("output delta as ACP: %+v", out.Meta)
	}
}
