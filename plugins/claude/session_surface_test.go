package claude

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/plugin/sdk"
	"github.com/agenthost/agenthost/plugin/sdk/sdktest"
	"github.com/agenthost/agenthost/plugins/internal/plugintest"
)

// The session surface through the plugin protocol, against the fake CLI
// (which mirrors what 2.1.332 was seen doing): settings, modes and config
// options, tool calls with diffs, permissions, plan exit, /clear, rich
// prompts.

// stdinRequests are the control requests of subtype the plugin wrote to

// set_mode reports the "mode" config option that changed with it, and
// set_config_option of mode the current mode, as session-level updates:
// a client following either sees every change (codex reports both too).
func TestModeChangesReportBoth(t *testing.T) {
	_, h := openSession(t)
	modeOption := func(u sdktest.Update) string {
		if x, ok := u.SessionUpdate().(*journal.ConfigOptions); ok && u.TurnID == "" {
			for _, o := range x.Options {
				if o.ID == "mode" {
					return o.CurrentValue
				}
			}
		}
		return ""
	}
	if err := h.SetMode(t.Context(), "acceptEdits"); err != nil {
		t.Fatal(err)
	}
	h.Until(10*time.Second, "config options with mode acceptEdits", func(u sdktest.Update) bool { return modeOption(u) == "acceptEdits" })
	if _, err := h.SetConfigOption(t.Context(), "mode", "plan"); err != nil {
		t.Fatal(err)
	}
	h.Until(10*time.Second, "current mode plan", func(u sdktest.Update) bool {
		x, ok := u.SessionUpdate().(*journal.CurrentMode)
		return ok && u.TurnID == "" && x.ModeID == "plan"
	})
}

// An edit of a file outside the workspace and add_dirs (a dotfile in the
// home directory, say) has no "always" scope: allowing it always would
// let the host approve every later edit anywhere. The request offers only
// the once answers, and an "always" answer sent anyway counts once.
func TestEditOutsideWorkspaceHasNoAlwaysScope(t *testing.T) {
	f, h := openSession(t)
	target := filepath.Join(t.TempDir(), ".bashrc")
	if err := os.WriteFile(target, []byte("old\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	turn := plugintest.Prompt(t, h, "edit "+target+" old new")
	ups := h.Until(10*time.Second, "permission request", func(u sdktest.Update) bool { return u.Kind == "permission_request" })
	req := ups[len(ups)-1].SessionUpdate().(*journal.PermissionRequest)
	var kinds []string
	for _, o := range req.Options {
		kinds = append(kinds, string(o.Kind))
	}
	if req.AlwaysScope != "" || !slices.Equal(kinds, []string{"allow_once", "reject_once"}) {
		t.Errorf("outside edit: scope %q options %v; want no scope and only the once answers", req.AlwaysScope, kinds)
	}
	plugintest.Answer(t, h, req.RequestID, optAllowAlways)
	h.Turn(turn, 10*time.Second)
	if b, _ := os.ReadFile(target); string(b) != "new\n" {
		t.Errorf("the file holds %q; the edit allowed once should have run", b)
	}
	// The workspace's files still share "edit".
	inside := filepath.Join(f.workspace, "in.txt")
	if err := os.WriteFile(inside, []byte("old\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	turn = plugintest.Prompt(t, h, "edit "+inside+" old new")
	ups = h.Until(10*time.Second, "permission request", func(u sdktest.Update) bool { return u.Kind == "permission_request" })
	if req := ups[len(ups)-1].SessionUpdate().(*journal.PermissionRequest); req.AlwaysScope != "edit" {
		t.Errorf("workspace edit: scope %q, want edit", req.AlwaysScope)
	} else {
		plugintest.Answer(t, h, req.RequestID, optAllow)
	}
	h.Turn(turn, 10*time.Second)
}

// the CLI with pid.
func (f *fixture) stdinRequests(pid int, subtype string) []map[string]any {
	var out []map[string]any
	for _, l := range f.stdinLines(pid) {
		if req, ok := l["request"].(map[string]any); ok && l["type"] == "control_request" && req["subtype"] == subtype {
			out = append(out, req)
		}
	}
	return out
}

func TestSettingsModesAndConfigOptions(t *testing.T) {
	f := newFixture(t)
	h := f.start(t)
	opts := map[string]string{OptModel: "sonnet", OptMode: "plan", OptEffort: "high", OptEnvPrefix + "FOO": "bar"}
	servers := []sdk.MCPServer{{Name: "echosrv", Transport: "stdio", Command: "/bin/echosrv", Args: []string{"-q"}}}
	info, err := h.NewSession(t.Context(), sdk.NewSessionRequest{Workspace: f.workspace, Options: opts, MCPServers: servers})
	if err != nil {
		t.Fatal(err)
	}
	// Every option is acknowledged; the modes and config options are
	// the session's, from the CLI's initialize response.
	if !mapsEqual(info.Options, opts) {
		t.Errorf("acknowledged %v, want %v", info.Options, opts)
	}
	if info.Modes == nil || info.Modes.CurrentModeID != "plan" || !slices.Contains(modeIDs(info.Modes.Available), "acceptEdits") {
		t.Errorf("modes %+v", info.Modes)
	}
	current := map[string]string{}
	for _, o := range info.ConfigOptions {
		current[o.ID] = o.CurrentValue
	}
	if want := map[string]string{"mode": "plan", "model": "sonnet", "effort": "high"}; !mapsEqual(current, want) {
		t.Errorf("config options %v, want %v", current, want)
	}
	// The slash commands arrive outside any turn, without those a
	// client cannot use.
	ups := h.Until(10*time.Second, "available commands", func(u sdktest.Update) bool { return u.Kind == "available_commands" })
	cmds := ups[len(ups)-1]
	var names []string
	for _, c := range cmds.SessionUpdate().(*journal.AvailableCommands).Commands {
		names = append(names, c.Name)
	}
	if cmds.TurnID != "" || !slices.Equal(names, []string{"code-review", "clear", "compact"}) {
		t.Errorf("available commands %v (turn %q), want code-review, clear, compact outside a turn", names, cmds.TurnID)
	}
	inv := f.sessions()[0]
	if !slices.Contains(inv.Args, `--mcp-config={"mcpServers":{"echosrv":{"args":["-q"],"command":"/bin/echosrv","env":{},"type":"stdio"}}}`) ||
		!slices.Contains(inv.Env, "FOO=bar") {
		t.Errorf("argv %q env has FOO=bar %v: want the MCP server and the env option", inv.Args, slices.Contains(inv.Env, "FOO=bar"))
	}

	// Mid-session changes reach the CLI as control requests.
	if err := h.SetMode(t.Context(), "acceptEdits"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.SetConfigOption(t.Context(), "model", "opus"); err != nil {
		t.Fatal(err)
	}
	all, err := h.SetConfigOption(t.Context(), "effort", "max")
	if err != nil {
		t.Fatal(err)
	}
	if got := all[2]; got.ID != "effort" || got.CurrentValue != "max" {
		t.Errorf("effort after the change: %+v", got)
	}
	if r := f.stdinRequests(inv.Pid, "set_permission_mode"); len(r) != 1 || r[0]["mode"] != "acceptEdits" {
		t.Errorf("set_permission_mode requests %v", r)
	}
	if r := f.stdinRequests(inv.Pid, "set_model"); len(r) != 1 || r[0]["model"] != "opus" {
		t.Errorf("set_model requests %v", r)
	}
	if r := f.stdinRequests(inv.Pid, "apply_flag_settings"); len(r) != 1 || r[0]["settings"].(map[string]any)["effortLevel"] != "max" {
		t.Errorf("apply_flag_settings requests %v", r)
	}
	// Refused by name: a mode or value the session lacks.
	var inv2 *sdktest.InvalidOptionError
	if err := h.SetMode(t.Context(), "yolo"); !errors.As(err, &inv2) || inv2.Option != "mode" {
		t.Errorf("SetMode(yolo): %v, want an invalid option naming mode", err)
	}
	if _, err := h.SetConfigOption(t.Context(), "model", "gpt-9"); !errors.As(err, &inv2) || inv2.Option != "model" {
		t.Errorf("SetConfigOption(model, gpt-9): %v, want an invalid option naming model", err)
	}
	if _, err := h.SetConfigOption(t.Context(), "temperature", "1"); !errors.As(err, &inv2) || inv2.Option != "temperature" {
		t.Errorf("SetConfigOption(temperature): %v", err)
	}
	// The CLI's own report of the mode it was set to is no change of its
	// own: the turn reports none.
	turnUps, stop := h.Run("count 1", wait)
	if stop.StopReason != "end_turn" {
		t.Fatalf("turn: %v", stop)
	}
	for _, u := range turnUps {
		if u.Kind == "current_mode" && u.TurnID != "" {
			t.Errorf("the turn reported a mode change nobody made: %s", sdktest.Describe(turnUps))
		}
	}

	// A resume with the options as the host stores them after the changes
	// starts the CLI with them.
	f2 := *f
	h2 := f2.start(t)
	stored := map[string]string{OptModel: "opus", OptMode: "acceptEdits", OptEffort: "max"}
	if _, err := h2.ResumeSession(t.Context(), sdk.ResumeSessionRequest{Workspace: f.workspace, Options: stored, Handle: info.Handle, MCPServers: servers}); err != nil {
		t.Fatal(err)
	}
	last := f.sessions()[len(f.sessions())-1]
	for _, want := range []string{"--model=opus", "--permission-mode=acceptEdits", "--effort=max", "--resume=" + info.Handle} {
		if !slices.Contains(last.Args, want) {
			t.Errorf("resumed argv %q lacks %s", last.Args, want)
		}
	}
}

func TestEditDiffsAndPermissions(t *testing.T) {
	f, h := openSession(t)
	target := filepath.Join(f.workspace, "hello.txt")
	if err := os.WriteFile(target, []byte("line one\nhello old world\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	turn := plugintest.Prompt(t, h, "edit "+target+" old new")
	var call *journal.ToolCall
	ups := h.Until(10*time.Second, "permission request", func(u sdktest.Update) bool {
		if x, ok := u.SessionUpdate().(*journal.ToolCall); ok {
			call = x
		}
		return u.Kind == "permission_request"
	})
	diffOf := func(c []journal.ToolCallContent) string {
		var parts []string
		for _, x := range c {
			if x.Diff != nil {
				old := "<new file>"
				if x.Diff.OldText != nil {
					old = *x.Diff.OldText
				}
				parts = append(parts, x.Diff.Path+": "+old+" -> "+x.Diff.NewText)
			}
		}
		return strings.Join(parts, "; ")
	}
	wantDiff := target + ": old -> new"
	if call == nil || call.Kind != "edit" || diffOf(call.Content) != wantDiff || len(call.Locations) != 1 || call.Locations[0].Path != target {
		t.Errorf("tool call %+v, want the edit's diff %q and its location", call, wantDiff)
	}
	req := ups[len(ups)-1].SessionUpdate().(*journal.PermissionRequest)
	var kinds []string
	for _, o := range req.Options {
		kinds = append(kinds, string(o.Kind))
	}
	if req.AlwaysScope != "edit" || diffOf(req.ToolCall.Content) != wantDiff || len(req.ToolCall.Locations) != 1 ||
		!slices.Equal(kinds, []string{"allow_once", "allow_always", "reject_once", "reject_always"}) {
		t.Errorf("permission request scope %q diff %q locations %v options %v", req.AlwaysScope, diffOf(req.ToolCall.Content), req.ToolCall.Locations, kinds)
	}
	plugintest.Answer(t, h, req.RequestID, optAllowAlways)
	ups, stop := h.Turn(turn, 10*time.Second)
	if stop.StopReason != "end_turn" {
		t.Fatalf("edit turn: %v %s", stop, sdktest.Describe(ups))
	}
	var upd *journal.ToolCallUpdate
	for _, u := range ups {
		if x, ok := u.SessionUpdate().(*journal.ToolCallUpdate); ok {
			upd = x
		}
		if u.Kind == "current_mode" {
			t.Errorf("allow always switched the mode: the CLI's setMode suggestion must not be passed back")
		}
	}
	// The result's structured patch: the hunk with its context and line.
	if upd == nil || upd.Status != "completed" || diffOf(upd.ToolContent) != target+": line one\nhello old world -> line one\nhello new world" ||
		len(upd.Locations) != 1 || upd.Locations[0].Line != 1 || !strings.Contains(string(upd.RawOutput), `"originalFile"`) {
		t.Errorf("tool call update %+v", upd)
	}
	if b, _ := os.ReadFile(target); string(b) != "line one\nhello new world\n" {
		t.Errorf("the file holds %q", b)
	}
	// A new file's diff has no old text, before and after.
	created := filepath.Join(f.workspace, "new.txt")
	turn = plugintest.Prompt(t, h, "write "+created+" fresh")
	ups = h.Until(10*time.Second, "permission request", func(u sdktest.Update) bool { return u.Kind == "permission_request" })
	req = ups[len(ups)-1].SessionUpdate().(*journal.PermissionRequest)
	if diffOf(req.ToolCall.Content) != created+": <new file> -> fresh\n" {
		t.Errorf("write permission diff %q", diffOf(req.ToolCall.Content))
	}
	plugintest.Answer(t, h, req.RequestID, optAllow)
	ups, _ = h.Turn(turn, 10*time.Second)
	for _, u := range ups {
		if x, ok := u.SessionUpdate().(*journal.ToolCallUpdate); ok && diffOf(x.ToolContent) != created+": <new file> -> fresh\n" {
			t.Errorf("write result diff %q", diffOf(x.ToolContent))
		}
	}

	// Reject always: the scope is refused from then on without asking.
	turn = plugintest.Prompt(t, h, "tool")
	ups = h.Until(10*time.Second, "permission request", func(u sdktest.Update) bool { return u.Kind == "permission_request" })
	req = ups[len(ups)-1].SessionUpdate().(*journal.PermissionRequest)
	if req.AlwaysScope != "Bash(ls)" {
		t.Errorf("Bash scope %q, want Bash(ls)", req.AlwaysScope)
	}
	plugintest.Answer(t, h, req.RequestID, optRejectAlways)
	h.Turn(turn, 10*time.Second)
	ups, stop = h.Run("tool", wait)
	for _, u := range ups {
		if u.Kind == "permission_request" {
			t.Errorf("asked again after reject always")
		}
	}
	if !slices.Contains(texts(ups), "permission denied: The user denied tool calls of Bash(ls) for this session.") {
		t.Errorf("second tool turn: %v %s", stop, sdktest.Describe(ups))
	}
}

func TestPlanExit(t *testing.T) {
	f := newFixture(t)
	h := f.start(t)
	f.open(t, h, map[string]string{OptMode: "plan"})
	turn := plugintest.Prompt(t, h, "exitplan")
	ups := h.Until(10*time.Second, "permission request", func(u sdktest.Update) bool { return u.Kind == "permission_request" })
	req := ups[len(ups)-1].SessionUpdate().(*journal.PermissionRequest)
	var opts []string
	for _, o := range req.Options {
		opts = append(opts, string(o.OptionId)+"/"+string(o.Kind))
	}
	want := []string{"acceptEdits/allow_always", "default/allow_once", "plan/reject_once"}
	if bypassAllowed(os.Environ()) {
		want = append([]string{"bypassPermissions/allow_always"}, want...)
	}
	var plan string
	for _, c := range req.ToolCall.Content {
		plan += c.Block.Text()
	}
	if !slices.Equal(opts, want) || req.ToolCall.Kind != "switch_mode" || plan != "1. write the code" {
		t.Errorf("plan exit request: options %v kind %q plan %q; want %v, switch_mode, the plan", opts, req.ToolCall.Kind, plan, want)
	}
	plugintest.Answer(t, h, req.RequestID, "acceptEdits")
	ups, stop := h.Turn(turn, 10*time.Second)
	if stop.StopReason != "end_turn" || !slices.Equal(texts(ups), []string{"coding in acceptEdits"}) {
		t.Fatalf("plan exit turn: %v %s", stop, sdktest.Describe(ups))
	}
	// The agent's own mode change is reported in the turn: the mode and
	// the config options.
	var mode string
	var optMode string
	for _, u := range ups {
		switch x := u.SessionUpdate().(type) {
		case *journal.CurrentMode:
			mode = x.ModeID
		case *journal.ConfigOptions:
			optMode = x.Options[0].CurrentValue
		}
	}
	if mode != "acceptEdits" || optMode != "acceptEdits" {
		t.Errorf("reported mode %q, config option mode %q; want acceptEdits", mode, optMode)
	}
}

func TestClearStartsANewHandle(t *testing.T) {
	f, h := openSession(t)
	id, _ := h.Identify(t.Context())
	first := id.Handle
	h.Run("count 1", wait)
	ups, stop := h.Run("/clear", wait)
	if stop.StopReason != "end_turn" {
		t.Fatalf("/clear: %v %s", stop, sdktest.Describe(ups))
	}
	var hc *journal.HandleChanged
	for _, u := range ups {
		if x, ok := u.SessionUpdate().(*journal.HandleChanged); ok {
			hc = x
		}
	}
	if hc == nil || hc.Handle == first || hc.Origin != "created" {
		t.Fatalf("after /clear: handle change %+v, want a new handle created", hc)
	}
	// A new plugin resumes the new conversation.
	if err := plugintest.CloseWithin(h, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	h2 := f.start(t)
	if _, err := f.tryResume(t, h2, hc.Handle, nil); err != nil {
		t.Fatal(err)
	}
	if last := f.sessions()[len(f.sessions())-1]; !slices.Contains(last.Args, "--resume="+hc.Handle) {
		t.Errorf("resumed with %q, want --resume=%s", last.Args, hc.Handle)
	}
}

func TestRichPromptReachesTheCLI(t *testing.T) {
	f, h := openSession(t)
	turn, err := h.PromptBlocks(t.Context(), sdk.TextBlock("echo this"),
		sdk.ContentBlock{Type: sdk.BlockImage, JSON: `{"type":"image","mimeType":"image/png","data":"aGk="}`},
		sdk.ContentBlock{Type: sdk.BlockResource, JSON: `{"type":"resource","resource":{"uri":"file:///w/a.go","text":"package a"}}`},
		sdk.ContentBlock{Type: sdk.BlockResource, JSON: `{"type":"resource","resource":{"uri":"file:///w/d.pdf","mimeType":"application/pdf","blob":"JVBERg=="}}`})
	if err != nil {
		t.Fatal(err)
	}
	if _, stop := h.Turn(turn, wait); stop.StopReason != "end_turn" {
		t.Fatalf("turn: %v", stop)
	}
	lines := f.stdinLines(f.sessions()[0].Pid)
	var content []map[string]any
	for _, l := range lines {
		if l["type"] == "user" {
			b, _ := json.Marshal(l["message"].(map[string]any)["content"])
			_ = json.Unmarshal(b, &content)
		}
	}
	var types []string
	for _, c := range content {
		types = append(types, c["type"].(string))
	}
	if !slices.Equal(types, []string{"text", "image", "text", "document"}) || !strings.Contains(content[2]["text"].(string), `<context ref="file:///w/a.go">`) {
		t.Errorf("the user line's content %v", content)
	}
	// A block the CLI cannot take fails the prompt rather than vanish.
	turn, err = h.PromptBlocks(t.Context(), sdk.ContentBlock{Type: sdk.BlockAudio, JSON: `{"type":"audio","mimeType":"audio/wav","data":"UklG"}`})
	if err == nil {
		if _, stop := h.Turn(turn, wait); stop.StopReason != "failed" {
			t.Errorf("an audio prompt ended %v, want failed", stop)
		}
	}
}
