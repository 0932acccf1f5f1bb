package scripted_test

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/examples/scripted/scripted"
	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/plugin/sdk"
	"github.com/agenthost/agenthost/plugin/sdk/sdktest"
)

const wait = 20 * time.Second

// as returns the update u carries as a T, failing the test otherwise.
func as[T journal.SessionUpdate](t *testing.T, u sdktest.Update) T {
	t.Helper()
	v, ok := u.SessionUpdate().(T)
	if !ok {
		t.Fatalf("update %d is a %s (%T), not a %T", u.Seq, u.Kind, u.SessionUpdate(), v)
	}
	return v
}

func kinds(ups []sdktest.Update) string {
	var out []string
	for _, u := range ups {
		out = append(out, u.Kind)
	}
	return strings.Join(out, ",")
}

// open starts the scripted agent in a harness, declaring what the plugin
// binary declares, and opens a session in a fresh workspace.
func open(t *testing.T, opts map[string]string, mcp ...sdk.MCPServer) (*sdktest.Harness, sdk.SessionInfo, string) {
	t.Helper()
	h := sdktest.NewHarness(t, scripted.New, sdktest.WithCapabilities(scripted.Capabilities()))
	ws := t.TempDir()
	opts = maps.Clone(opts)
	if opts == nil {
		opts = map[string]string{}
	}
	opts["report_commands"] = "true"
	info, err := h.NewSession(t.Context(), sdk.NewSessionRequest{Workspace: ws, Options: opts, MCPServers: mcp})
	if err != nil {
		t.Fatal(err)
	}
	ups := h.Until(wait, "available_commands", func(u sdktest.Update) bool { return u.Kind == "available_commands" })
	if u := ups[len(ups)-1]; u.TurnID != "" || len(as[*journal.AvailableCommands](t, u).Commands) < 10 {
		t.Errorf("the commands reported as the session opened: %s", sdktest.Describe(ups))
	}
	return h, info, ws
}

func TestCapabilitiesAreDeclared(t *testing.T) {
	h := sdktest.NewHarness(t, scripted.New, sdktest.WithCapabilities(scripted.Capabilities()))
	id, err := h.Identify(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if c := id.Capabilities; !c.Image || !c.EmbeddedContext || !c.ResourceLink || c.Audio || !c.MCPStdio || c.MCPHTTP ||
		!c.SetMode || !c.SetConfigOption || len(c.Options) != 7 {
		t.Errorf("capabilities %+v", c)
	}
}

// The settings a session opens with reach the agent and come back as its
// modes and config options; the MCP servers are recorded.
func TestSessionSettings(t *testing.T) {
	srv := sdk.MCPServer{Name: "files", Transport: "stdio", Command: "mcp-files", Args: []string{"--root", "/w"}, Env: []sdk.NameValue{{Name: "K", Value: "v"}}}
	h, info, _ := open(t, map[string]string{"model": "fast", "mode": "acceptEdits", "effort": "high"}, srv)
	if info.Modes == nil || info.Modes.CurrentModeID != "acceptEdits" || len(info.Modes.Available) != 3 {
		t.Errorf("modes %+v", info.Modes)
	}
	got := map[string]string{}
	for _, o := range info.ConfigOptions {
		got[o.ID] = o.Category + "=" + o.CurrentValue
	}
	if want := map[string]string{"mode": "mode=acceptEdits", "model": "model=fast", "effort": "thought_level=high"}; !reflect.DeepEqual(got, want) {
		t.Errorf("config options %v, want %v", got, want)
	}
	if info.Options["model"] != "fast" || info.Options["mode"] != "acceptEdits" {
		t.Errorf("acknowledged options %v", info.Options)
	}
	if ups, _ := h.Run("mcp", wait); sdktest.Messages(ups) != "mcp: files (stdio) mcp-files --root /w K=v\n" {
		t.Errorf("mcp: %s", sdktest.Describe(ups))
	}
	if ups, _ := h.Run("/settings", wait); sdktest.Messages(ups) != "mode acceptEdits, model fast, effort high" {
		t.Errorf("settings: %s", sdktest.Describe(ups))
	}
}

// Without report_commands, opening a session reports nothing: the first
// update is the first turn's.
func TestCommandsOnlyWhenAsked(t *testing.T) {
	h := sdktest.NewHarness(t, scripted.New)
	if _, err := h.NewSession(t.Context(), sdk.NewSessionRequest{Workspace: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	if ups, _ := h.Run("count 1", wait); kinds(ups) != "agent_message_chunk,turn_stopped" {
		t.Errorf("the first updates of a session without report_commands: %s", sdktest.Describe(ups))
	}
}

func TestBadSettingsAreRefusedByName(t *testing.T) {
	for opts, option := range map[string]map[string]string{
		"mode":        {"mode": "yolo"},
		"effort":      {"effort": "max"},
		"temperature": {"temperature": "0.2"},
	} {
		h := sdktest.NewHarness(t, scripted.New)
		_, err := h.NewSession(t.Context(), sdk.NewSessionRequest{Workspace: t.TempDir(), Options: option})
		var bad *sdktest.InvalidOptionError
		if !errors.As(err, &bad) || bad.Option != opts {
			t.Errorf("options %v: %v, want an invalid option %s", option, err, opts)
		}
	}
	h := sdktest.NewHarness(t, scripted.New)
	_, err := h.NewSession(t.Context(), sdk.NewSessionRequest{Workspace: t.TempDir(),
		MCPServers: []sdk.MCPServer{{Name: "web", Transport: "http", URL: "http://127.0.0.1:9"}}})
	if bad := (*sdktest.InvalidOptionError)(nil); !errors.As(err, &bad) || bad.Option != "mcpServers" {
		t.Errorf("an http MCP server: %v", err)
	}
	h = sdktest.NewHarness(t, scripted.New)
	if _, err := h.NewSession(t.Context(), sdk.NewSessionRequest{Workspace: t.TempDir(), Options: map[string]string{"require_auth": "true"}}); !errors.Is(err, sdktest.ErrAuthRequired) {
		t.Errorf("require_auth: %v, want auth required", err)
	}
}

// Modes and config options change between turns; the agent leaves plan
// mode by itself and says so.
func TestModesAndConfigOptions(t *testing.T) {
	h, _, ws := open(t, nil)
	ctx := t.Context()
	if err := h.SetMode(ctx, "plan"); err != nil {
		t.Fatal(err)
	}
	// The agent reports its config options as it switches; the SDK the
	// mode once SetMode returns.
	ups := h.Until(wait, "current_mode", func(u sdktest.Update) bool { return u.Kind == "current_mode" })
	if kinds(ups) != "config_options,current_mode" || as[*journal.ConfigOptions](t, ups[0]).Options[0].CurrentValue != "plan" ||
		as[*journal.CurrentMode](t, ups[1]).ModeID != "plan" {
		t.Errorf("after SetMode plan: %s", sdktest.Describe(ups))
	}
	if ups, _ := h.Run("edit plan.txt x", wait); !strings.HasPrefix(sdktest.Messages(ups), "plan mode: plan.txt not edited") {
		t.Errorf("an edit in plan mode: %s", sdktest.Describe(ups))
	}
	if _, err := os.Stat(filepath.Join(ws, "plan.txt")); err == nil {
		t.Error("plan mode wrote plan.txt")
	}
	ups, _ = h.Run("exitplan", wait)
	if kinds(ups) != "current_mode,config_options,agent_message_chunk,turn_stopped" || ups[0].TurnID != "" ||
		as[*journal.CurrentMode](t, ups[0]).ModeID != "default" {
		t.Errorf("exitplan: %s", sdktest.Describe(ups))
	}

	opts, err := h.SetConfigOption(ctx, "model", "smart")
	if err != nil || opts[1].ID != "model" || opts[1].CurrentValue != "smart" {
		t.Fatalf("SetConfigOption model: %+v, %v", opts, err)
	}
	if _, err := h.SetConfigOption(ctx, "mode", "acceptEdits"); err != nil {
		t.Fatal(err)
	}
	h.Until(wait, "current_mode acceptEdits", func(u sdktest.Update) bool {
		m, ok := u.SessionUpdate().(*journal.CurrentMode)
		return ok && m.ModeID == "acceptEdits"
	})
	if ups, _ := h.Run("settings", wait); sdktest.Messages(ups) != "mode acceptEdits, model smart, effort medium" {
		t.Errorf("settings: %s", sdktest.Describe(ups))
	}
	var bad *sdktest.InvalidOptionError
	if _, err := h.SetConfigOption(ctx, "model", "gpt-9"); !errors.As(err, &bad) || bad.Option != "model" {
		t.Errorf("an unknown model: %v", err)
	}
	if err := h.SetMode(ctx, "bypass"); !errors.As(err, &bad) || bad.Option != "mode" {
		t.Errorf("an unknown mode: %v", err)
	}
}

// An edit shows its diff and location, asks with the four options and
// scope "edit", and writes the file once allowed; in acceptEdits it does
// not ask; reject_always refuses the later edits unasked.
func TestEdit(t *testing.T) {
	h, _, ws := open(t, nil)
	ctx := t.Context()
	file := filepath.Join(ws, "notes.txt")
	if err := os.WriteFile(file, []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	turn, err := h.Prompt(ctx, "edit notes.txt hello there")
	if err != nil {
		t.Fatal(err)
	}
	ups := h.Until(wait, "permission_request", func(u sdktest.Update) bool { return u.Kind == "permission_request" })
	call := as[*journal.ToolCall](t, ups[0])
	req := as[*journal.PermissionRequest](t, ups[len(ups)-1])
	for _, c := range []journal.ToolCall{*call, req.ToolCall} {
		if c.Kind != "edit" || len(c.Content) != 1 || c.Content[0].Diff == nil || c.Content[0].Diff.Path != file ||
			*c.Content[0].Diff.OldText != "old\n" || c.Content[0].Diff.NewText != "hello there\n" ||
			!reflect.DeepEqual(c.Locations, []journal.Location{{Path: file, Line: 1}}) {
			t.Errorf("tool call %+v", c)
		}
	}
	var optionKinds []string
	for _, o := range req.Options {
		optionKinds = append(optionKinds, string(o.Kind))
	}
	if req.AlwaysScope != scripted.EditScope || strings.Join(optionKinds, ",") != "allow_once,allow_always,reject_once,reject_always" {
		t.Errorf("permission request: scope %q, options %v", req.AlwaysScope, optionKinds)
	}
	if b, _ := os.ReadFile(file); string(b) != "old\n" {
		t.Errorf("the file changed before the answer: %q", b)
	}
	if err := h.AnswerPermission(ctx, req.RequestID, "allow_always"); err != nil {
		t.Fatal(err)
	}
	ups, stop := h.Turn(turn, wait)
	if stop.StopReason != "end_turn" || sdktest.Messages(ups) != "edited notes.txt" {
		t.Errorf("after allow_always: %s", sdktest.Describe(ups))
	}
	if b, _ := os.ReadFile(file); string(b) != "hello there\n" {
		t.Errorf("notes.txt after the edit: %q", b)
	}

	// A new file: no old text. acceptEdits: no question.
	if err := h.SetMode(ctx, "acceptEdits"); err != nil {
		t.Fatal(err)
	}
	h.Until(wait, "current_mode", func(u sdktest.Update) bool { return u.Kind == "current_mode" })
	ups, _ = h.Run("edit sub/new.txt fresh", wait)
	if kinds(ups) != "tool_call,tool_call_update,tool_call_update,agent_message_chunk,turn_stopped" || sdktest.Messages(ups) != "edited sub/new.txt" {
		t.Errorf("an edit in acceptEdits: %s", sdktest.Describe(ups))
	} else if d := as[*journal.ToolCall](t, ups[0]).Content[0].Diff; d.OldText != nil || d.NewText != "fresh\n" {
		t.Errorf("the diff of a new file: %+v", d)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "sub", "new.txt")); string(b) != "fresh\n" {
		t.Errorf("sub/new.txt: %q", b)
	}
}

func TestEditRejectAlways(t *testing.T) {
	h, _, ws := open(t, nil)
	ctx := t.Context()
	turn, err := h.Prompt(ctx, "edit a.txt one")
	if err != nil {
		t.Fatal(err)
	}
	ups := h.Until(wait, "permission_request", func(u sdktest.Update) bool { return u.Kind == "permission_request" })
	if err := h.AnswerPermission(ctx, as[*journal.PermissionRequest](t, ups[len(ups)-1]).RequestID, "reject_always"); err != nil {
		t.Fatal(err)
	}
	if ups, _ := h.Turn(turn, wait); !strings.HasPrefix(sdktest.Messages(ups), "not edited a.txt: rejected") {
		t.Errorf("after reject_always: %s", sdktest.Describe(ups))
	}
	ups, _ = h.Run("edit a.txt two", wait)
	if strings.Contains(kinds(ups), "permission_request") || !strings.HasPrefix(sdktest.Messages(ups), "not edited a.txt: edits were rejected") {
		t.Errorf("an edit after reject_always: %s", sdktest.Describe(ups))
	}
	if _, err := os.Stat(filepath.Join(ws, "a.txt")); err == nil {
		t.Error("a.txt was written")
	}
	if _, stop := h.Run("edit ../escape.txt x", wait); stop.StopReason != "failed" || !strings.Contains(stop.Error, "outside the workspace") {
		t.Errorf("an edit outside the workspace: %+v", stop)
	}
}

// Rich blocks are described as they arrived; a block the agent does not
// declare fails the turn.
func TestRichPrompt(t *testing.T) {
	h, _, _ := open(t, nil)
	ctx := t.Context()
	turn, err := h.PromptBlocks(ctx, sdk.TextBlock("what is this"),
		sdk.ContentBlock{Type: sdk.BlockImage, JSON: `{"type":"image","mimeType":"image/png","data":"iVBORw0KGgo="}`},
		sdk.ContentBlock{Type: sdk.BlockResource, JSON: `{"type":"resource","resource":{"uri":"file:///w/a.md","mimeType":"text/markdown","text":"# A"}}`},
		sdk.ContentBlock{Type: sdk.BlockResourceLink, JSON: `{"type":"resource_link","uri":"file:///w/b.log","name":"b.log"}`})
	if err != nil {
		t.Fatal(err)
	}
	want := "received image image/png, 8 bytes\n" +
		"received resource file:///w/a.md (text/markdown), 3 characters: \"# A\"\n" +
		"received resource_link file:///w/b.log (b.log)\n" +
		"what is this"
	if ups, _ := h.Turn(turn, wait); sdktest.Messages(ups) != want {
		t.Errorf("rich prompt: %s, want %q", sdktest.Describe(ups), want)
	}
	turn, err = h.PromptBlocks(ctx, sdk.ContentBlock{Type: sdk.BlockAudio, JSON: `{"type":"audio","mimeType":"audio/wav","data":"AA=="}`})
	if err != nil {
		t.Fatal(err)
	}
	if _, stop := h.Turn(turn, wait); stop.StopReason != "failed" || !strings.Contains(stop.Error, "cannot take a audio block") {
		t.Errorf("an audio block: %+v", stop)
	}
}

func TestTitleAndAuth(t *testing.T) {
	h, _, _ := open(t, nil)
	ups, _ := h.Run("title Fix the flaky test", wait)
	if kinds(ups) != "session_info,agent_message_chunk,turn_stopped" || ups[0].TurnID != "" ||
		as[*journal.SessionInfo](t, ups[0]).Title != "Fix the flaky test" {
		t.Errorf("title: %s", sdktest.Describe(ups))
	}
	if _, stop := h.Run("auth", wait); stop.StopReason != "failed" || !stop.AuthRequired {
		t.Errorf("auth: %+v", stop)
	}
	if _, stop := h.Run("fail plainly", wait); stop.AuthRequired {
		t.Errorf("a plain failure is auth required: %+v", stop)
	}
}
