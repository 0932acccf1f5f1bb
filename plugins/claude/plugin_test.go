package claude

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agenthost/agenthost/internal/agentpb"
	"github.com/agenthost/agenthost/plugin/sdk/sdktest"
	"github.com/agenthost/agenthost/plugins/internal/plugintest"
)

// openSession starts a plugin in a new fixture and opens a session with
// no options.
func openSession(t *testing.T) (*fixture, *plug) {
	t.Helper()
	f := newFixture(t)
	p := f.start()
	p.open(nil)
	return f, p
}

func TestConformance(t *testing.T) {
	f := newFixture(t)
	sdktest.Run(t, f.plugin,
		sdktest.WithEnv(
			EnvCLIPath+"="+f.fake,
			"HOME="+f.home,
			"CLAUDE_CONFIG_DIR="+f.configDir, // holds the fake's login
			raceOptions,
		),
		sdktest.WithPrompts(sdktest.Prompts{Stream: "count 3", Hold: "sleep 30s", Replay: "count 20 10ms"}))
}

// TestArgvAndEnvironment checks what the plugin starts: the SDK's argv,
// the workspace as cwd, the credential policy, and the lines it writes.
func TestArgvAndEnvironment(t *testing.T) {
	f := newFixture(t)
	p := f.start("ANTHROPIC_API_KEY=sk-ant-test", "AWS_SECRET_ACCESS_KEY=aws-secret", "CLAUDECODE=1", "KEEP_ME=yes")
	handle := p.open(map[string]string{
		OptModel: "sonnet", OptPermissionMode: "acceptEdits", OptAllowedTools: "Read,Bash(git log:*)",
		OptAppendSystemPrompt: "-be brief", "some_future_option": "x",
	})
	if _, stop := p.run("count 1"); stop.StopReason != "end_turn" {
		t.Fatalf("turn: %v", stop)
	}
	inv := f.sessions()
	if len(inv) != 1 {
		t.Fatalf("want one CLI started, got %d", len(inv))
	}
	want := []string{"-p", "--output-format", "stream-json", "--input-format", "stream-json", "--verbose",
		"--permission-prompt-tool", "stdio", "--model=sonnet", "--permission-mode=acceptEdits",
		"--allowedTools=Read,Bash(git log:*)", "--append-system-prompt=-be brief", "--session-id=" + handle}
	if !slices.Equal(inv[0].Args, want) {
		t.Errorf("argv:\n got %q\nwant %q", inv[0].Args, want)
	}
	if inv[0].Cwd != f.workspace {
		t.Errorf("cwd = %s, want the workspace %s", inv[0].Cwd, f.workspace)
	}
	env := strings.Join(inv[0].Env, "\n")
	for _, gone := range []string{"ANTHROPIC_API_KEY=", "AWS_SECRET_ACCESS_KEY=", "CLAUDECODE="} {
		if strings.Contains("\n"+env, "\n"+gone) {
			t.Errorf("the CLI's environment holds %s…; it must be stripped without allow_credentials", gone)
		}
	}
	for _, kept := range []string{"KEEP_ME=yes", "PWD=" + f.workspace, "HOME=" + f.home, markerVar + "=" + marker} {
		if !slices.Contains(inv[0].Env, kept) {
			t.Errorf("the CLI's environment lacks %s", kept)
		}
	}

	// What the plugin wrote: initialize, then the user turn, exactly.
	lines := f.stdinLines(inv[0].Pid)
	if len(lines) < 2 {
		t.Fatalf("stdin lines: %v", lines)
	}
	init := lines[0]
	req, _ := init["request"].(map[string]any)
	if init["type"] != "control_request" || req["subtype"] != "initialize" || req["hooks"] != nil {
		t.Errorf("first line = %v, want an initialize control request with hooks null", init)
	}
	if id, _ := init["request_id"].(string); !strings.HasPrefix(id, "req_1_") {
		t.Errorf("request_id = %q, want req_1_<hex> as the SDKs send", id)
	}
	user := lines[1]
	msg, _ := user["message"].(map[string]any)
	if user["type"] != "user" || msg["role"] != "user" || msg["content"] != "count 1" || user["session_id"] != "default" {
		t.Errorf("user line = %v", user)
	}
	if v, ok := user["parent_tool_use_id"]; !ok || v != nil {
		t.Errorf("user line parent_tool_use_id = %v (present %v), want null", v, ok)
	}

	// The agent reports the CLI's version in the plugin's identity.
	id, err := p.agent.Identify(p.ctx, &agentpb.IdentifyRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if id.AgentVersion != TestedVersion || id.Handle != handle {
		t.Errorf("Identify: version %q handle %q, want %q and %q", id.AgentVersion, id.Handle, TestedVersion, handle)
	}
}

func TestAllowCredentialsPassesThem(t *testing.T) {
	f := newFixture(t)
	os.Remove(filepath.Join(f.configDir, ".credentials.json"))
	p := f.start("ANTHROPIC_API_KEY=sk-ant-test")
	p.open(map[string]string{OptAllowCredentials: "true"})
	if ups, stop := p.run("count 2"); stop.StopReason != "end_turn" || !slices.Equal(texts(ups), []string{"1", "2"}) {
		t.Fatalf("turn: %v %s", stop, describe(ups))
	}
	if inv := f.sessions(); !slices.Contains(inv[0].Env, "ANTHROPIC_API_KEY=sk-ant-test") {
		t.Errorf("with allow_credentials=true the CLI's environment lacks ANTHROPIC_API_KEY")
	}
}

// TestTurnMapping checks how stdout maps to updates.
func TestTurnMapping(t *testing.T) {
	f, p := openSession(t)

	ups, stop := p.run("count 3")
	if stop.StopReason != "end_turn" || !slices.Equal(texts(ups), []string{"1", "2", "3"}) {
		t.Fatalf("count 3: %v %s", stop, describe(ups))
	}
	var usage *agentpb.Usage
	for _, u := range ups {
		if u.GetUsage() != nil {
			usage = u.GetUsage()
		}
	}
	// The fake's result: input 12 + cache creation 3 + cache read 100,
	// output 5, 2 thinking tokens, $0.0123.
	if usage == nil || usage.InputTokens != 115 || usage.CachedInputTokens != 100 || usage.OutputTokens != 5 ||
		usage.ReasoningTokens != 2 || usage.CostUsd != 0.0123 {
		t.Errorf("usage = %v", usage)
	}

	ups, stop = p.run("think")
	if stop.StopReason != "end_turn" {
		t.Fatalf("think: %v", stop)
	}
	if kind(ups[0]) != "agent_thought_chunk" || ups[0].GetAgentThoughtChunk().Content.GetText() != "Let me think about it." {
		t.Errorf("think: first update %s, want the thought", describe(ups))
	}
	if !slices.Equal(texts(ups), []string{"thought it through"}) {
		t.Errorf("think: messages %q", texts(ups))
	}

	ups, stop = p.run("todo")
	if stop.StopReason != "end_turn" {
		t.Fatalf("todo: %v", stop)
	}
	var call *agentpb.ToolCall
	var plan *agentpb.Plan
	var upd *agentpb.ToolCallUpdate
	for _, u := range ups {
		switch {
		case u.GetToolCall() != nil:
			call = u.GetToolCall()
		case u.GetPlan() != nil:
			plan = u.GetPlan()
		case u.GetToolCallUpdate() != nil:
			upd = u.GetToolCallUpdate()
		}
	}
	if call == nil || call.Title != "TodoWrite" || call.Kind != "think" || call.Status != "pending" || !strings.Contains(call.RawInputJson, "write the code") {
		t.Errorf("tool call = %v", call)
	}
	if plan == nil || len(plan.Entries) != 2 || plan.Entries[0].Content != "write the code" || plan.Entries[1].Status != "in_progress" {
		t.Errorf("plan = %v", plan)
	}
	if upd == nil || call == nil || upd.ToolCallId != call.ToolCallId || upd.Status != "completed" || !strings.HasPrefix(upd.Content[0].GetText(), "Todos have been modified") {
		t.Errorf("tool call update = %v", upd)
	}

	// max turns is a stop reason, not a failure.
	if _, stop := p.run("maxturns"); stop.StopReason != "max_turn_requests" {
		t.Errorf("maxturns: %v", stop)
	}
	// Everything ran on one CLI.
	if n := len(f.sessions()); n != 1 {
		t.Errorf("%d CLIs started, want 1", n)
	}
}

// TestPermissions answers can_use_tool requests and checks that the answer
// reaches the CLI.
func TestPermissions(t *testing.T) {
	f, p := openSession(t)
	for _, tt := range []struct {
		option, status, reply, behavior string
	}{
		{optAllow, "completed", "listed 2 files", "allow"},
		{optAllowAlways, "completed", "listed 2 files (1 permission rules saved)", "allow"},
		{optReject, "failed", "permission denied: The user denied this tool call.", "deny"},
	} {
		turn := p.prompt("tool")
		var call *agentpb.ToolCall
		u := p.waitFor("permission request", 10*time.Second, func(u *agentpb.Update) bool {
			if u.GetToolCall() != nil {
				call = u.GetToolCall()
			}
			return u.GetPermissionRequest() != nil
		})
		req := u.GetPermissionRequest()
		if call == nil || call.Title != "Bash ls" || call.Kind != "execute" || !strings.Contains(call.RawInputJson, `"command":"ls"`) {
			t.Errorf("tool call before the permission request = %v", call)
		}
		var opts []string
		for _, o := range req.Options {
			opts = append(opts, o.OptionId+"/"+o.Kind)
		}
		if want := []string{"allow/allow_once", "allow_always/allow_always", "reject/reject_once"}; !slices.Equal(opts, want) {
			t.Errorf("options = %v, want %v", opts, want)
		}
		if req.ToolCall.ToolCallId != call.GetToolCallId() || req.ToolCall.Title != "Claude wants to run ls" {
			t.Errorf("permission request tool call = %v", req.ToolCall)
		}
		p.answer(req.RequestId, tt.option)
		ups, stop := p.turn(turn, 10*time.Second)
		if stop.StopReason != "end_turn" || !slices.Equal(texts(ups), []string{tt.reply}) {
			t.Errorf("%s: %v %s, want the reply %q", tt.option, stop, describe(ups), tt.reply)
		}
		var upd *agentpb.ToolCallUpdate
		for _, u := range ups {
			if u.GetToolCallUpdate() != nil {
				upd = u.GetToolCallUpdate()
			}
		}
		if upd == nil || upd.Status != tt.status {
			t.Errorf("%s: tool call update %v, want status %s", tt.option, upd, tt.status)
		}
	}
	// The control responses, as the CLI read them.
	var got []string
	for _, l := range f.stdinLines(f.sessions()[0].Pid) {
		if l["type"] != "control_response" {
			continue
		}
		resp := l["response"].(map[string]any)
		body := resp["response"].(map[string]any)
		s := resp["subtype"].(string) + ":" + body["behavior"].(string)
		if body["behavior"] == "allow" {
			if in, _ := body["updatedInput"].(map[string]any); in["command"] != "ls" {
				t.Errorf("allow without the tool input: %v", body)
			}
			if _, ok := body["updatedPermissions"]; ok {
				s += "+rules"
			}
		}
		got = append(got, s)
	}
	if want := []string{"success:allow", "success:allow+rules", "success:deny"}; !slices.Equal(got, want) {
		t.Errorf("control responses = %v, want %v", got, want)
	}
}

func TestCancel(t *testing.T) {
	f, p := openSession(t)
	turn := p.prompt("sleep 30s")
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	p.cancel()
	if _, stop := p.turn(turn, 10*time.Second); stop.StopReason != "cancelled" || stop.Error != "" {
		t.Fatalf("cancelled turn: %v", stop)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("cancel took %s", d)
	}
	// The CLI got an interrupt request and stays for the next turn.
	inv := f.sessions()
	var interrupts int
	for _, l := range f.stdinLines(inv[0].Pid) {
		if r, _ := l["request"].(map[string]any); r["subtype"] == "interrupt" {
			interrupts++
		}
	}
	if interrupts != 1 {
		t.Errorf("%d interrupt requests, want 1", interrupts)
	}
	if ups, stop := p.run("count 1"); stop.StopReason != "end_turn" || !slices.Equal(texts(ups), []string{"1"}) {
		t.Fatalf("turn after the cancel: %v %s", stop, describe(ups))
	}
	if n := len(f.sessions()); n != 1 {
		t.Errorf("%d CLIs started, want 1: an interrupt keeps the CLI", n)
	}
}

// TestCancelDuringPermission cancels a turn that waits for the user: the
// request is resolved as cancelled and the CLI is interrupted.
func TestCancelDuringPermission(t *testing.T) {
	_, p := openSession(t)
	turn := p.prompt("tool")
	p.waitFor("permission request", 10*time.Second, func(u *agentpb.Update) bool { return u.GetPermissionRequest() != nil })
	p.cancel()
	ups, stop := p.turn(turn, 10*time.Second)
	if stop.StopReason != "cancelled" {
		t.Fatalf("turn: %v %s", stop, describe(ups))
	}
	var resolved *agentpb.PermissionResolved
	for _, u := range ups {
		if u.GetPermissionResolved() != nil {
			resolved = u.GetPermissionResolved()
		}
	}
	if resolved == nil || resolved.Outcome.GetOutcome() != "cancelled" {
		t.Errorf("permission resolved = %v, want cancelled", resolved)
	}
	if ups, stop := p.run("count 1"); stop.StopReason != "end_turn" {
		t.Fatalf("turn after the cancel: %v %s", stop, describe(ups))
	}
}

// TestStreamRobustness: non-JSON lines, blank lines, unknown message types
// and unknown fields are ignored; a slow stream still completes.
func TestStreamRobustness(t *testing.T) {
	for _, knob := range []string{"FAKECLAUDE_NOISE=1", "FAKECLAUDE_SLOW=10ms"} {
		t.Run(knob, func(t *testing.T) {
			f := newFixture(t)
			p := f.start(knob)
			p.open(nil)
			ups, stop := p.run("count 5")
			if stop.StopReason != "end_turn" || !slices.Equal(texts(ups), []string{"1", "2", "3", "4", "5"}) {
				t.Fatalf("%v %s", stop, describe(ups))
			}
		})
	}
}

// TestOpenErrors: every readiness failure says what to do.
func TestOpenErrors(t *testing.T) {
	for _, tt := range []struct {
		name    string
		env     []string
		opts    map[string]string
		noLogin bool
		want    []string
	}{
		{name: "explicit path missing", opts: map[string]string{OptCLIPath: "/nonexistent/claude"},
			want: []string{"claude CLI not found at /nonexistent/claude (from the session option cli_path)", "npm install -g @anthropic-ai/claude-code"}},
		{name: "env path missing", env: []string{EnvCLIPath + "=/nonexistent/claude"},
			want: []string{"claude CLI not found at /nonexistent/claude (from AGENTHOST_CLAUDE_PATH)"}},
		{name: "version too old", env: []string{"FAKECLAUDE_VERSION=1.0.128"},
			want: []string{"is version 1.0.128, too old: agenthost needs Claude Code 2.0.0 or later", "claude update"}},
		{name: "not claude", env: []string{"FAKECLAUDE_VERSION=banana"},
			want: []string{`printed an unexpected version "banana (Claude Code)"`}},
		{name: "no credentials", noLogin: true,
			want: []string{"claude has no credentials: log in with `claude auth login`", "ANTHROPIC_API_KEY and the session option allow_credentials=true", "skip_auth_check=true"}},
		{name: "credentials not allowed", noLogin: true, env: []string{"ANTHROPIC_API_KEY=sk-ant-test"},
			want: []string{"ANTHROPIC_API_KEY is set, but provider credentials are removed from claude's environment unless the session option allow_credentials=true"}},
		{name: "binary does not run", opts: map[string]string{OptCLIPath: "broken"},
			want: []string{"/broken does not run (`claude --version`: exit status 7, output \"boom\"); reinstall Claude Code (npm install -g @anthropic-ai/claude-code)"}},
		{name: "bad option", opts: map[string]string{OptStopGrace: "forever"},
			want: []string{`claude: session option stop_grace="forever" is invalid`}},
		{name: "session id not a UUID", opts: map[string]string{OptSessionID: "nope"},
			want: []string{"claude exited at startup (exit status 1; its stderr ended with: Error: Invalid session ID. Must be a valid UUID.)"}},
		{name: "bad permission mode", opts: map[string]string{OptPermissionMode: "bogus"},
			want: []string{"error: option '--permission-mode <mode>' argument 'bogus' is invalid"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			if tt.noLogin {
				os.Remove(filepath.Join(f.configDir, ".credentials.json"))
			}
			if tt.opts[OptCLIPath] == "broken" {
				broken := filepath.Join(f.dir, "broken")
				if err := os.WriteFile(broken, []byte("#!/bin/sh\necho boom >&2\nexit 7\n"), 0o755); err != nil {
					t.Fatal(err)
				}
				tt.opts = map[string]string{OptCLIPath: broken}
			}
			p := f.start(tt.env...)
			_, err := p.tryOpen(tt.opts)
			plugintest.ErrorContains(t, err, "NewSession", tt.want...)
		})
	}
}

func TestBinaryMissing(t *testing.T) {
	for _, p := range fallbackPaths {
		if _, err := os.Stat(p); filepath.IsAbs(p) && err == nil {
			t.Skipf("%s exists on this machine", p)
		}
	}
	f := newFixture(t)
	empty := t.TempDir()
	p := f.start(EnvCLIPath+"=", "PATH="+empty)
	_, err := p.tryOpen(nil)
	if err == nil {
		t.Fatal("NewSession succeeded without a claude binary")
	}
	for _, w := range []string{"claude CLI not found: it is not on PATH (" + empty + ")", filepath.Join(f.home, ".claude/local/claude"),
		"npm install -g @anthropic-ai/claude-code", "cli_path", EnvCLIPath} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q\nwant it to contain %q", err, w)
		}
	}
	// Found on PATH, it works.
	if err := os.Symlink(f.fake, filepath.Join(empty, "claude")); err != nil {
		t.Fatal(err)
	}
	p = f.start(EnvCLIPath+"=", "PATH="+empty)
	p.open(nil)
}

// TestTurnErrors: turns that fail say why.
func TestTurnErrors(t *testing.T) {
	t.Run("auth failure", func(t *testing.T) {
		f := newFixture(t)
		os.Remove(filepath.Join(f.configDir, ".credentials.json"))
		p := f.start()
		p.open(map[string]string{OptSkipAuthCheck: "true"})
		ups, stop := p.run("count 3")
		want := "claude could not authenticate (Not logged in · Please run /login): run `claude auth login`, or set ANTHROPIC_API_KEY and allow it for this session with the session option allow_credentials=true"
		if stop.StopReason != "failed" || stop.Error != want {
			t.Errorf("turn: %v\nwant failed with %q", stop, want)
		}
		if len(texts(ups)) != 0 {
			t.Errorf("the synthetic auth message was reported as the agent's: %q", texts(ups))
		}
	})
	t.Run("noauth answer with a login", func(t *testing.T) {
		f := newFixture(t)
		p := f.start()
		p.open(nil)
		if _, stop := p.run("noauth"); stop.StopReason != "failed" || !strings.HasPrefix(stop.Error, "claude could not authenticate") {
			t.Errorf("turn: %v", stop)
		}
		// The session goes on.
		if _, stop := p.run("count 1"); stop.StopReason != "end_turn" {
			t.Errorf("next turn: %v", stop)
		}
	})
	t.Run("api error", func(t *testing.T) {
		f := newFixture(t)
		p := f.start()
		p.open(nil)
		_, stop := p.run("fail")
		if want := `claude failed the turn: API Error: 500 {"type":"error","error":{"type":"api_error","message":"Internal server error"}}`; stop.StopReason != "failed" || stop.Error != want {
			t.Errorf("turn: %v\nwant failed with %q", stop, want)
		}
	})
	t.Run("dies mid-turn", func(t *testing.T) {
		f := newFixture(t)
		p := f.start()
		handle := p.open(nil)
		ups, stop := p.run("die")
		want := "claude exited during the turn (exit status 3; its stderr ended with: fakeclaude: dying mid-turn as asked); the next turn restarts it"
		if stop.StopReason != "failed" || stop.Error != want {
			t.Errorf("turn: %v\nwant failed with %q", stop, want)
		}
		if !slices.Equal(texts(ups), []string{"dying"}) {
			t.Errorf("messages before the death: %q", texts(ups))
		}
		// The next turn resumes the conversation in a new CLI.
		if ups, stop := p.run("count 1"); stop.StopReason != "end_turn" || !slices.Equal(texts(ups), []string{"1"}) {
			t.Fatalf("turn after the death: %v %s", stop, describe(ups))
		}
		inv := f.sessions()
		if len(inv) != 2 || !slices.Contains(inv[1].Args, "--resume="+handle) {
			t.Errorf("CLIs started: %v, want a second one with --resume=%s", inv, handle)
		}
	})
	t.Run("line over the cap", func(t *testing.T) {
		f := newFixture(t)
		p := f.start()
		p.open(map[string]string{OptMaxLineBytes: "100000"})
		_, stop := p.run("huge 200000")
		if stop.StopReason != "failed" || !strings.Contains(stop.Error, "over the plugin's cap of 100000 bytes (session option max_line_bytes)") {
			t.Errorf("turn: %v", stop)
		}
		// A line just under the cap is fine, in a new CLI.
		if ups, stop := p.run("huge 90000"); stop.StopReason != "end_turn" || len(texts(ups)) != 1 || len(texts(ups)[0]) != 90000 {
			t.Errorf("turn under the cap: %v %s", stop, describe(ups))
		}
	})
}

func TestResume(t *testing.T) {
	f := newFixture(t)
	p := f.start()
	handle := p.open(nil)
	if _, stop := p.run("count 1"); stop.StopReason != "end_turn" {
		t.Fatal(stop)
	}
	if err := p.close(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	// A second CLI cannot take the same id.
	p = f.start()
	if _, err := p.tryOpen(map[string]string{OptSessionID: handle}); err == nil ||
		!strings.Contains(err.Error(), "Error: Session ID "+handle+" is already in use.") {
		t.Errorf("NewSession with a session id in use: %v", err)
	}

	// resume resumes handle in a new plugin and runs a turn there.
	resume := func(t *testing.T, extra ...string) (*plug, []*agentpb.Update) {
		t.Helper()
		p := f.start(extra...)
		resp, err := p.tryResume(handle, nil)
		if err != nil || resp.Handle != handle {
			t.Fatalf("ResumeSession: %v %v", resp, err)
		}
		ups, stop := p.run("count 1")
		if stop.StopReason != "end_turn" {
			t.Fatal(stop)
		}
		return p, ups
	}
	t.Run("same id", func(t *testing.T) {
		p, ups := resume(t)
		for _, u := range ups {
			if u.GetHandleChanged() != nil {
				t.Errorf("unexpected handle change %v", u.GetHandleChanged())
			}
		}
		inv := f.sessions()
		if last := inv[len(inv)-1]; !slices.Contains(last.Args, "--resume="+handle) || slices.ContainsFunc(last.Args, func(a string) bool { return strings.HasPrefix(a, "--session-id") }) {
			t.Errorf("argv %q, want --resume=%s and no --session-id", last.Args, handle)
		}
		p.close(10 * time.Second)
	})
	t.Run("rotating id", func(t *testing.T) {
		p, ups := resume(t, "FAKECLAUDE_ROTATE_ON_RESUME=1")
		var changes []*agentpb.HandleChanged
		for _, u := range ups {
			if u.GetHandleChanged() != nil {
				changes = append(changes, u.GetHandleChanged())
			}
		}
		if len(changes) != 1 || changes[0].Handle == handle || changes[0].Origin != "resumed" {
			t.Fatalf("handle changes %v, want one new handle with origin resumed", changes)
		}
		// The CLI dies; the replacement resumes the new handle.
		if _, stop := p.run("die"); stop.StopReason != "failed" {
			t.Fatal(stop)
		}
		if _, stop := p.run("count 1"); stop.StopReason != "end_turn" {
			t.Fatal(stop)
		}
		inv := f.sessions()
		if last := inv[len(inv)-1]; !slices.Contains(last.Args, "--resume="+changes[0].Handle) {
			t.Errorf("argv %q, want --resume=%s", last.Args, changes[0].Handle)
		}
	})
	t.Run("unknown id", func(t *testing.T) {
		p := f.start()
		const unknown = "11111111-2222-4333-8444-555555555555"
		_, err := p.tryResume(unknown, nil)
		if err == nil || !strings.Contains(err.Error(), "claude could not resume session "+unknown+": No conversation found with session ID: "+unknown) {
			t.Errorf("ResumeSession(unknown): %v", err)
		}
	})
	t.Run("not a UUID", func(t *testing.T) {
		p := f.start()
		_, err := p.tryResume("nope", nil)
		if err == nil || !strings.Contains(err.Error(), `Error: --resume requires a valid session ID or session title when used with --print`) {
			t.Errorf("ResumeSession(nope): %v", err)
		}
	})
}

func TestClose(t *testing.T) {
	t.Run("stdin EOF", func(t *testing.T) {
		f := newFixture(t)
		p := f.start()
		p.open(nil)
		p.run("count 1")
		pid := f.sessions()[0].Pid
		start := time.Now()
		if err := p.close(10 * time.Second); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("Close took %s for a CLI that exits on EOF", d)
		}
		if alive(pid) || slices.Contains(children(p.pid), pid) {
			t.Errorf("CLI %d still there after Close", pid)
		}
	})
	t.Run("ignores SIGTERM", func(t *testing.T) {
		f := newFixture(t)
		p := f.start("FAKECLAUDE_IGNORE_SIGTERM=1")
		p.open(map[string]string{OptStopGrace: "200ms"})
		p.run("count 1")
		pid := f.sessions()[0].Pid
		start := time.Now()
		if err := p.close(10 * time.Second); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d < 400*time.Millisecond || d > 4*time.Second {
			t.Errorf("Close took %s, want about two 200ms graces", d)
		}
		if alive(pid) {
			t.Errorf("CLI %d ignoring SIGTERM survived Close", pid)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		f := newFixture(t)
		p := f.start("FAKECLAUDE_IGNORE_SIGTERM=1")
		p.open(nil) // default 5s graces
		p.run("count 1")
		pid := f.sessions()[0].Pid
		start := time.Now()
		err := p.close(time.Second)
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("Close with a 1s deadline took %s (%v)", d, err)
		}
		if !eventually(2*time.Second, func() bool { return !alive(pid) }) {
			t.Errorf("CLI %d survived a Close that ran out of time", pid)
		}
	})
}

// TestPluginKilled: when the plugin is SIGKILLed mid-turn, its CLI dies
// too (Pdeathsig), although nobody signals the process group.
func TestPluginKilled(t *testing.T) {
	f, p := openSession(t)
	p.prompt("sleep 30s")
	var cli int
	if !eventually(5*time.Second, func() bool {
		kids := children(p.pid)
		if len(kids) == 1 {
			cli = kids[0]
		}
		return cli != 0
	}) {
		t.Fatal("no CLI child of the plugin")
	}
	if inv := f.sessions(); len(inv) != 1 || inv[0].Pid != cli {
		t.Fatalf("the plugin's child %d is not the CLI the fake recorded (%v)", cli, inv)
	}
	if err := syscall.Kill(p.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !eventually(5*time.Second, func() bool { return !alive(cli) }) {
		t.Fatalf("CLI %d still alive after its plugin %d was SIGKILLed", cli, p.pid)
	}
}

// TestWorkspaceMustExist: a session needs an existing workspace.
func TestWorkspaceMustExist(t *testing.T) {
	f := newFixture(t)
	p := f.start()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := p.agent.NewSession(ctx, &agentpb.NewSessionRequest{Fence: 1, Workspace: filepath.Join(f.dir, "missing")})
	if err == nil || !strings.Contains(err.Error(), "workspace") {
		t.Errorf("NewSession in a missing workspace: %v", err)
	}
}
