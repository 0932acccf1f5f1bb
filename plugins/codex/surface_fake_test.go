package codex_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/plugin/sdk"
	"github.com/agenthost/agenthost/plugin/sdk/sdktest"
	"github.com/agenthost/agenthost/plugins/codex"
	"github.com/agenthost/agenthost/plugins/internal/plugintest"
)

// The ACP session surface through the SDK, against the fake in 0.171.0's
// live shapes; internal/realcli shows the same against the real CLI.

// fakeSettings is what the fake's "settings" prompt reports.
type fakeSettings struct {
	Model, Effort, ApprovalPolicy, Sandbox  string
	BaseInstructions, DeveloperInstructions string
	MCPServers                              []string
	WritableRoots                           []string
	MCPConfig                               map[string]any
}

func settingsOf(t *testing.T, p *sdktest.Harness) fakeSettings {
	t.Helper()
	ups, _ := run(t, p, "settings", "end_turn")
	var s fakeSettings
	if err := json.Unmarshal([]byte(sdktest.Messages(ups)), &s); err != nil {
		t.Fatalf("settings %q: %v", sdktest.Messages(ups), err)
	}
	return s
}

func openSurface(t *testing.T, h home, req sdk.NewSessionRequest) (*sdktest.Harness, sdk.SessionInfo) {
	t.Helper()
	h.setenv(t)
	p := sdktest.NewHarness(t, codex.New, sdktest.WithCapabilities(codex.Capabilities()))
	req.Workspace = h.workspace
	info, err := p.NewSession(t.Context(), req)
	if err != nil {
		t.Fatalf("NewSession: %v", err)
	}
	return p, info
}

// Every setting reaches codex: model, mode, effort and system prompts on
// the thread, writable roots and MCP servers as its config, env.NAME in
// its environment; the session acknowledges them all, with its modes and
// config options; set_mode and set_config_option apply from the next
// turn.
func TestSessionSettings(t *testing.T) {
	h := newHome(t, true)
	p, info := openSurface(t, h, sdk.NewSessionRequest{
		Options: map[string]string{"model": "gpt-fake-big", "mode": "auto", "effort": "xhigh", "system_prompt": "BASE",
			"append_system_prompt": "DEV", "add_dirs": "/data", "env.FAKE_VAR": "hello"},
		MCPServers: []sdk.MCPServer{{Name: "echo", Transport: "stdio", Command: "/bin/echo-mcp", Args: []string{"-x"}},
			{Name: "web", Transport: "http", URL: "http://127.0.0.1:9/mcp"}},
	})
	if info.Modes == nil || info.Modes.CurrentModeID != "auto" || len(info.Modes.Available) != 3 {
		t.Errorf("modes %+v", info.Modes)
	}
	ack := info.Options
	for k, v := range map[string]string{"model": "gpt-fake-big", "mode": "auto", "effort": "xhigh", "system_prompt": "BASE", "env.FAKE_VAR": "hello", "add_dirs": "/data"} {
		if ack[k] != v {
			t.Errorf("acknowledged %s=%q; want %q (all %v)", k, ack[k], v, ack)
		}
	}
	var ids []string
	for _, o := range info.ConfigOptions {
		ids = append(ids, o.ID+"="+o.CurrentValue)
	}
	if got := strings.Join(ids, ","); got != "mode=auto,model=gpt-fake-big,effort=xhigh" {
		t.Errorf("config options %s", got)
	}
	// The session-level commands were reported as the session opened.
	cmds := p.Until(turnWait, "available commands", func(u sdktest.Update) bool { return u.Kind == "available_commands" })
	if ac, ok := cmds[len(cmds)-1].SessionUpdate().(*journal.AvailableCommands); !ok || len(ac.Commands) != 3 || ac.Commands[0].Name != "new" {
		t.Errorf("available commands %s", sdktest.Describe(cmds))
	}

	s := settingsOf(t, p)
	if s.Model != "gpt-fake-big" || s.Effort != "xhigh" || s.ApprovalPolicy != "on-request" || s.Sandbox != "workspace-write" ||
		s.BaseInstructions != "BASE" || s.DeveloperInstructions != "DEV" || !slices.Equal(s.MCPServers, []string{"echo", "web"}) ||
		!slices.Equal(s.WritableRoots, []string{"/data"}) {
		t.Errorf("codex runs with %+v", s)
	}
	// update_plan is on by default: the model can make a plan.
	if s.MCPConfig["tools.update_plan.enabled"] != true {
		t.Errorf("the thread's config %v; want tools.update_plan.enabled true", s.MCPConfig)
	}
	if ups, _ := run(t, p, "env FAKE_VAR", "end_turn"); sdktest.Messages(ups) != "hello" {
		t.Errorf("env.FAKE_VAR reached codex as %q", sdktest.Messages(ups))
	}

	// Changes apply from the next turn.
	if _, err := p.SetConfigOption(t.Context(), "model", "gpt-fake"); err != nil {
		t.Fatal(err)
	}
	if err := p.SetMode(t.Context(), "full-access"); err != nil {
		t.Fatal(err)
	}
	s = settingsOf(t, p)
	// gpt-fake has no xhigh: it runs at its default, low.
	if s.Model != "gpt-fake" || s.ApprovalPolicy != "never" || s.Sandbox != "danger-full-access" || s.Effort != "low" {
		t.Errorf("after set_config_option model and set_mode full-access, codex runs with %+v", s)
	}
	var ioe *sdk.InvalidOptionError
	if err := p.SetMode(t.Context(), "yolo"); err == nil || !strings.Contains(err.Error(), "yolo") {
		t.Errorf("set_mode yolo: %v", err)
	} else if errors.As(err, &ioe) && ioe.Option != "mode" {
		t.Errorf("set_mode yolo names %q", ioe.Option)
	}
}

// An unknown option or a bad value is refused, naming it.
func TestInvalidOptions(t *testing.T) {
	h := newHome(t, true)
	for opt, want := range map[string]string{"colour": "no such option", "mode": `"yolo" is invalid`, "add_dirs": "absolute"} {
		p := start(t, h)
		val := map[string]string{"colour": "red", "mode": "yolo", "add_dirs": "rel"}[opt]
		_, err := p.NewSession(t.Context(), sdk.NewSessionRequest{Workspace: h.workspace, Options: map[string]string{opt: val}})
		if err == nil || !strings.Contains(err.Error(), opt) || !strings.Contains(err.Error(), want) {
			t.Errorf("option %s=%s: %v; want it refused with %q", opt, val, err, want)
		}
	}
}

// Images, embedded resources and resource links reach codex as its
// input items.
func TestRichPrompt(t *testing.T) {
	h := newHome(t, true)
	p, _ := openSurface(t, h, sdk.NewSessionRequest{})
	turn, err := p.PromptBlocks(t.Context(), sdk.TextBlock("echo look"),
		sdk.ContentBlock{Type: "image", JSON: `{"type":"image","mimeType":"image/png","data":"iVBORw0KGgo="}`},
		sdk.ContentBlock{Type: "resource", JSON: `{"type":"resource","resource":{"uri":"file:///w/n.md","text":"NOTES"}}`},
		sdk.ContentBlock{Type: "resource_link", JSON: `{"type":"resource_link","uri":"file:///w/main.go","name":"main.go"}`})
	if err != nil {
		t.Fatal(err)
	}
	ups, st := p.Turn(turn, turnWait)
	stopOf(t, ups, st, "end_turn")
	want := "echo look\n[image data:image/png;base64,iVBORw0KGgo=]\n<resource uri=\"file:///w/n.md\">\nNOTES\n</resource>\n[@main.go](file:///w/main.go)"
	if got := sdktest.Messages(ups); got != want {
		t.Errorf("codex got\n%s\nwant\n%s", got, want)
	}
}

// A file change's tool call and its permission request carry the diff
// (whole old and new text) and the file's location; allowing it for the
// session offers the "patch" scope; the final update says it completed.
func TestPatchDiff(t *testing.T) {
	h := newHome(t, true)
	path := filepath.Join(h.workspace, "a.txt")
	if err := os.WriteFile(path, []byte("line1\nline2\nline3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, _ := openSurface(t, h, sdk.NewSessionRequest{Options: map[string]string{"approval_policy": "untrusted"}})
	turn := plugintest.Prompt(t, p, "patch")
	ups := p.Until(turnWait, "a permission request", func(u sdktest.Update) bool { return u.Kind == "permission_request" })
	req := ups[len(ups)-1].SessionUpdate().(*journal.PermissionRequest)
	calls := kinds(ups, "tool_call")
	if len(calls) != 1 {
		t.Fatalf("tool calls %s", sdktest.Describe(ups))
	}
	for who, tc := range map[string]journal.ToolCall{"tool call": *calls[0].SessionUpdate().(*journal.ToolCall), "permission request": req.ToolCall} {
		if len(tc.Content) != 1 || tc.Content[0].Diff == nil {
			t.Errorf("%s content %+v; want one diff", who, tc.Content)
			continue
		}
		d := tc.Content[0].Diff
		if d.Path != path || d.OldText == nil || *d.OldText != "line1\nline2\nline3\n" || d.NewText != "line1\nLINE2\nline3\n" {
			t.Errorf("%s diff %+v", who, d)
		}
		if len(tc.Locations) != 1 || tc.Locations[0].Path != path || tc.Locations[0].Line != 1 {
			t.Errorf("%s locations %+v", who, tc.Locations)
		}
	}
	if req.AlwaysScope != "patch" {
		t.Errorf("always scope %q", req.AlwaysScope)
	}
	plugintest.Answer(t, p, req.RequestID, "acceptForSession")
	rest, st := p.Turn(turn, turnWait)
	stopOf(t, rest, st, "end_turn")
	if b, _ := os.ReadFile(path); string(b) != "line1\nLINE2\nline3\n" {
		t.Errorf("a.txt %q", b)
	}
	if fin := finalUpdates(rest); len(fin) != 1 || fin[0].SessionUpdate().(*journal.ToolCallUpdate).Status != "completed" {
		t.Errorf("final updates %s", sdktest.Describe(rest))
	}
}

// A patch whose approval asks for grantRoot (writes beyond the writable
// roots) has no "patch" scope and offers no acceptForSession, which
// would grant codex the root for the session; an acceptForSession sent
// anyway is answered to codex as accept.
func TestPatchGrantRootHasNoAlwaysScope(t *testing.T) {
	h := newHome(t, true)
	path := filepath.Join(h.workspace, "a.txt")
	if err := os.WriteFile(path, []byte("line1\nline2\nline3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, _ := openSurface(t, h, sdk.NewSessionRequest{Options: map[string]string{"approval_policy": "untrusted"}})
	turn := plugintest.Prompt(t, p, "patchroot")
	ups := p.Until(turnWait, "a permission request", func(u sdktest.Update) bool { return u.Kind == "permission_request" })
	req := ups[len(ups)-1].SessionUpdate().(*journal.PermissionRequest)
	var opts []string
	for _, o := range req.Options {
		opts = append(opts, string(o.OptionId))
	}
	if req.AlwaysScope != "" || strings.Join(opts, ",") != "accept,decline" {
		t.Errorf("grantRoot patch: scope %q options %v; want no scope, accept and decline", req.AlwaysScope, opts)
	}
	plugintest.Answer(t, p, req.RequestID, "acceptForSession")
	rest, st := p.Turn(turn, turnWait)
	stopOf(t, rest, st, "end_turn")
	if msg := sdktest.Messages(rest); msg != "approval: accept" {
		t.Errorf("codex was answered %q, want approval: accept", msg)
	}
}

// A command's output arrives as it runs, before its final update; the
// permission request's always-scope is the program.
func TestCommandOutputAndScope(t *testing.T) {
	h := newHome(t, true)
	p, _ := openSurface(t, h, sdk.NewSessionRequest{Options: map[string]string{"approval_policy": "untrusted"}})
	turn := plugintest.Prompt(t, p, "tool")
	ups := p.Until(turnWait, "a permission request", func(u sdktest.Update) bool { return u.Kind == "permission_request" })
	req := ups[len(ups)-1].SessionUpdate().(*journal.PermissionRequest)
	if req.AlwaysScope != "exec:ls" {
		t.Errorf("always scope %q", req.AlwaysScope)
	}
	plugintest.Answer(t, p, req.RequestID, "accept")
	rest, _ := p.Turn(turn, turnWait)
	delta, final := -1, -1
	for i, u := range rest {
		if tu, ok := u.SessionUpdate().(*journal.ToolCallUpdate); ok {
			if tu.OutputDelta != "" && delta < 0 {
				delta = i
			}
			if tu.Status == "completed" {
				final = i
			}
		}
	}
	if delta < 0 || final < 0 || delta > final {
		t.Errorf("output delta at %d, final update at %d: %s", delta, final, sdktest.Describe(rest))
	}
}

// /new starts a fresh thread, saved at once: the new handle is reported
// and resumes; /compact runs codex's compaction, /review its review.
func TestNewAndCompactCommands(t *testing.T) {
	h := newHome(t, true)
	p, info := openSurface(t, h, sdk.NewSessionRequest{})
	run(t, p, "hello", "end_turn")
	ups, _ := run(t, p, "/new", "end_turn")
	hc := kinds(ups, "handle_changed")
	if len(hc) != 1 {
		t.Fatalf("/new: %s", sdktest.Describe(ups))
	}
	newHandle := hc[0].SessionUpdate().(*journal.HandleChanged).Handle
	if newHandle == info.Handle || newHandle == "" {
		t.Errorf("/new reported handle %q (old %q)", newHandle, info.Handle)
	}
	if ups, _ := run(t, p, "/compact", "end_turn"); !strings.Contains(sdktest.Messages(ups), "compacted") {
		t.Errorf("/compact: %s", sdktest.Describe(ups))
	}
	if ups, _ := run(t, p, "/review the tests only", "end_turn"); sdktest.Messages(ups) != "reviewed the tests only: no findings" {
		t.Errorf("/review: %s", sdktest.Describe(ups))
	}
	// A fresh plugin resumes the new thread, though it has had no turn.
	p2 := start(t, h)
	if got, err := resume(t, p2, h, newHandle); err != nil || got != newHandle {
		t.Errorf("resume of the /new thread: %q, %v", got, err)
	}
}

// A 401 in a turn is "auth required".
func TestAuthRequired(t *testing.T) {
	p, _ := open(t, newHome(t, true), nil)
	ups, st := p.Turn(plugintest.Prompt(t, p, "http 401 Incorrect API key provided"), turnWait)
	if st.StopReason != "failed" || !st.AuthRequired {
		t.Errorf("stop %+v: %s", st, sdktest.Describe(ups))
	}
}

// A name codex gives the thread is the session's title; the name /new
// gives its thread to save it is not.
func TestThreadNameIsTheTitle(t *testing.T) {
	h := newHome(t, true)
	p, _ := openSurface(t, h, sdk.NewSessionRequest{})
	ups, _ := run(t, p, "/new", "end_turn")
	more, _ := run(t, p, "name Fixing the parser", "end_turn")
	ups = append(ups, more...)
	var titles []string
	for _, u := range kinds(ups, "session_info") {
		titles = append(titles, u.SessionUpdate().(*journal.SessionInfo).Title)
	}
	if !slices.Equal(titles, []string{"Fixing the parser"}) {
		t.Errorf("titles %q; want codex's name only", titles)
	}
}
