package claude

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/plugin/sdk"
	"github.com/agenthost/agenthost/plugin/sdk/cliproc"
	"github.com/agenthost/agenthost/plugin/sdk/sdktest"
	"github.com/agenthost/agenthost/plugins/internal/plugintest"
)

// openSession serves the agent in a new fixture and opens a session with
// no options.
func openSession(t *testing.T) (*fixture, *sdktest.Harness) {
	t.Helper()
	f := newFixture(t)
	h := f.start(t)
	f.open(t, h, nil)
	return f, h
}

func TestConformance(t *testing.T) {
	f := newFixture(t)
	sdktest.Run(t, f.plugin,
		sdktest.WithEnv(
			EnvCLIPath+"="+f.fake,
			"HOME="+f.home,
			"CLAUDE_CONFIG_DIR="+f.configDir, // holds the fake's login
		),
		sdktest.WithPrompts(sdktest.Prompts{Stream: "count 3", Hold: "sleep 30s", Replay: "count 20 10ms"}))
}

// TestArgvAndEnvironment checks what the plugin starts: the SDK's argv,
// the workspace as cwd, the credential policy, and the lines it writes.
func TestArgvAndEnvironment(t *testing.T) {
	f := newFixture(t)
	h := f.start(t, "ANTHROPIC_API_KEY=sk-ant-test", "AWS_SECRET_ACCESS_KEY=aws-secret", "CLAUDECODE=1", "KEEP_ME=yes")
	handle := f.open(t, h, map[string]string{
		OptModel: "sonnet", OptMode: "acceptEdits", OptEffort: "high", OptAllowedTools: "Read,Bash(git log:*)",
		OptAddDirs: f.dir + ":" + f.home, OptEnvPrefix + "EXTRA_VAR": "extra",
		OptAppendSystemPrompt: "-be brief",
	})
	if _, stop := h.Run("count 1", wait); stop.StopReason != "end_turn" {
		t.Fatalf("turn: %v", stop)
	}
	inv := f.sessions()
	if len(inv) != 1 {
		t.Fatalf("want one CLI started, got %d", len(inv))
	}
	want := []string{"-p", "--output-format", "stream-json", "--input-format", "stream-json", "--verbose",
		"--include-partial-messages", "--permission-prompt-tool", "stdio", "--model=sonnet", "--permission-mode=acceptEdits", "--effort=high",
		"--allowedTools=Read,Bash(git log:*)", "--add-dir=" + f.dir, "--add-dir=" + f.home, "--append-system-prompt=-be brief", "--session-id=" + handle}
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
	for _, kept := range []string{"KEEP_ME=yes", "EXTRA_VAR=extra", "PWD=" + f.workspace, "HOME=" + f.home, markerVar + "=" + marker} {
		if !slices.Contains(inv[0].Env, kept) {
			t.Errorf("the CLI's environment lacks %s", kept)
		}
	}
	// By default the CLI offers TodoWrite (a plan), not its task tools.
	assertVars(t, inv[0].Env, "CLAUDE_CODE_ENABLE_TASKS=false", "CLAUDE_CODE_ENABLE_TODO_TOOLS=true")

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
	id, err := h.Identify(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if id.AgentVersion != TestedVersion || id.Handle != handle {
		t.Errorf("Identify: version %q handle %q, want %q and %q", id.AgentVersion, id.Handle, TestedVersion, handle)
	}
}

// TestPlanToolVariablesOverridable: the variables that turn TodoWrite on
// are defaults; the plugin's environment (the operator's) overrides them,
// and a session's env.NAME option overrides both.
func TestPlanToolVariablesOverridable(t *testing.T) {
	f := newFixture(t)
	h := f.start(t, "CLAUDE_CODE_ENABLE_TASKS=1", "CLAUDE_CODE_ENABLE_TODO_TOOLS=false")
	f.open(t, h, map[string]string{OptEnvPrefix + "CLAUDE_CODE_ENABLE_TASKS": "true"})
	if _, stop := h.Run("count 1", wait); stop.StopReason != "end_turn" {
		t.Fatalf("turn: %v", stop)
	}
	inv := f.sessions()
	if len(inv) != 1 {
		t.Fatalf("want one CLI started, got %d", len(inv))
	}
	assertVars(t, inv[0].Env, "CLAUDE_CODE_ENABLE_TASKS=true", "CLAUDE_CODE_ENABLE_TODO_TOOLS=false")
}

// assertVars fails the test unless env sets each NAME of want exactly
// once, to want's value.
func assertVars(t *testing.T, env []string, want ...string) {
	t.Helper()
	for _, kv := range want {
		name, _, _ := strings.Cut(kv, "=")
		var got []string
		for _, e := range env {
			if strings.HasPrefix(e, name+"=") {
				got = append(got, e)
			}
		}
		if !slices.Equal(got, []string{kv}) {
			t.Errorf("the CLI's environment sets %s as %q; want exactly %s", name, got, kv)
		}
	}
}

func TestAllowCredentialsPassesThem(t *testing.T) {
	f := newFixture(t)
	os.Remove(filepath.Join(f.configDir, ".credentials.json"))
	h := f.start(t, "ANTHROPIC_API_KEY=sk-ant-test")
	f.open(t, h, map[string]string{OptAllowCredentials: "true"})
	if ups, stop := h.Run("count 2", wait); stop.StopReason != "end_turn" || !slices.Equal(texts(ups), []string{"1", "2"}) {
		t.Fatalf("turn: %v %s", stop, sdktest.Describe(ups))
	}
	if inv := f.sessions(); !slices.Contains(inv[0].Env, "ANTHROPIC_API_KEY=sk-ant-test") {
		t.Errorf("with allow_credentials=true the CLI's environment lacks ANTHROPIC_API_KEY")
	}
}

// TestTurnMapping checks how stdout maps to updates.
func TestTurnMapping(t *testing.T) {
	f, h := openSession(t)

	ups, stop := h.Run("count 3", wait)
	if stop.StopReason != "end_turn" || !slices.Equal(texts(ups), []string{"1", "2", "3"}) {
		t.Fatalf("count 3: %v %s", stop, sdktest.Describe(ups))
	}
	usage := lastUsage(ups)
	// The fake's result: input 12 + cache creation 3 + cache read 100,
	// output 5, 2 thinking tokens, $0.0123, a 200000-token window. The
	// context then holds all it read and wrote: 120 tokens.
	if usage == nil || usage.Tokens.InputTokens != 115 || usage.Tokens.CachedInputTokens != 100 || usage.Tokens.OutputTokens != 5 ||
		usage.Tokens.ReasoningTokens != 2 || usage.Cost == nil || usage.Cost.Amount != 0.0123 {
		t.Errorf("usage = %+v", usage)
	} else if usage.Used != 120 || usage.Size != 200000 {
		t.Errorf("usage_update used %d of %d, want 120 of 200000", usage.Used, usage.Size)
	}

	ups, stop = h.Run("think", wait)
	if stop.StopReason != "end_turn" {
		t.Fatalf("think: %v", stop)
	}
	if c, ok := ups[0].SessionUpdate().(*journal.Chunk); ups[0].Kind != "agent_thought_chunk" || !ok || c.Content.Text() != "Let me think about it." {
		t.Errorf("think: first update %s, want the thought", sdktest.Describe(ups))
	}
	if !slices.Equal(texts(ups), []string{"thought it through"}) {
		t.Errorf("think: messages %q", texts(ups))
	}

	// Partial messages: every delta is a chunk as it arrives, and the
	// assistant lines completing the blocks add nothing.
	const said = "streamed in many small pieces"
	ups, stop = h.Run("stream "+said, wait)
	if got := texts(ups); stop.StopReason != "end_turn" || strings.Join(got, "") != said || len(got) != 10 {
		t.Errorf("stream: %v, messages %q; want %q once, in 10 chunks", stop, got, said)
	}
	var thought strings.Builder
	for _, u := range ups {
		if c, ok := u.SessionUpdate().(*journal.Chunk); ok && c.Kind == journal.KindAgentThoughtChunk {
			thought.WriteString(c.Content.Text())
		}
	}
	if thought.String() != "Thinking about "+said {
		t.Errorf("stream: thought %q", thought.String())
	}

	ups, stop = h.Run("todo", wait)
	if stop.StopReason != "end_turn" {
		t.Fatalf("todo: %v", stop)
	}
	var call *journal.ToolCall
	var plan *journal.Plan
	var upd *journal.ToolCallUpdate
	for _, u := range ups {
		switch x := u.SessionUpdate().(type) {
		case *journal.ToolCall:
			call = x
		case *journal.Plan:
			plan = x
		case *journal.ToolCallUpdate:
			upd = x
		}
	}
	if call == nil || call.Title != "TodoWrite" || call.Kind != "think" || call.Status != "pending" || !strings.Contains(string(call.RawInput), "write the code") {
		t.Errorf("tool call = %+v", call)
	}
	if plan == nil || len(plan.Entries) != 2 || plan.Entries[0].Content != "write the code" || plan.Entries[1].Status != "in_progress" {
		t.Errorf("plan = %+v", plan)
	}
	if upd == nil || call == nil || upd.ToolCallID != call.ToolCallID || upd.Status != "completed" || len(upd.Content) == 0 ||
		!strings.HasPrefix(upd.Content[0].Text(), "Todos have been modified") {
		t.Errorf("tool call update = %+v", upd)
	}

	// max turns is a stop reason, not a failure.
	if _, stop := h.Run("maxturns", wait); stop.StopReason != "max_turn_requests" {
		t.Errorf("maxturns: %v", stop)
	}
	// Everything ran on one CLI.
	if n := len(f.sessions()); n != 1 {
		t.Errorf("%d CLIs started, want 1", n)
	}
}

// lastUsage is the last usage update of ups, nil without one.
func lastUsage(ups []sdktest.Update) *journal.Usage {
	var usage *journal.Usage
	for _, u := range ups {
		if x, ok := u.SessionUpdate().(*journal.Usage); ok {
			usage = x
		}
	}
	return usage
}

// TestContextUsage: the usage update's context is what the main agent's
// last model call read and wrote. A message_delta that carries only
// output_tokens (a gateway, Bedrock, Vertex) completes message_start's
// counts rather than replacing them; a Task call's sub-agent, streaming in
// the background while the main agent's next message streams, is reported
// as its assistant lines are, each text once, and its usage is not the
// main conversation's.
func TestContextUsage(t *testing.T) {
	f := newFixture(t)
	h := f.start(t, "FAKECLAUDE_CLASSIC_USAGE=1")
	f.open(t, h, nil)
	// Every main call: message_start input 12, cache creation 3, cache
	// read 100; its delta output 5.
	run := func(prompt string) []sdktest.Update {
		t.Helper()
		ups, stop := h.Run(prompt, wait)
		if stop.StopReason != "end_turn" {
			t.Fatalf("%s: %v %s", prompt, stop, sdktest.Describe(ups))
		}
		if u := lastUsage(ups); u == nil || u.Used != 120 {
			t.Errorf("%s: usage = %+v, want 120 tokens used", prompt, u)
		}
		return ups
	}
	run("count 2")

	ups := run("subagent")
	if got, want := strings.Join(texts(ups), ""), "waiting for it"+"the sub-agent looked"+" done"; got != want {
		t.Errorf("subagent: messages %q, want %q", got, want)
	}
	var calls []string
	for _, u := range ups {
		if c, ok := u.SessionUpdate().(*journal.ToolCall); ok {
			calls = append(calls, c.Title+"/"+c.Kind)
		}
	}
	if !slices.Equal(calls, []string{"Task Look around/think"}) {
		t.Errorf("subagent: tool calls %q, want the Task call", calls)
	}
}

// TestPermissions answers can_use_tool requests and checks that the answer
// reaches the CLI.
func TestPermissions(t *testing.T) {
	f, h := openSession(t)
	for _, tt := range []struct {
		option, status, reply, behavior string
	}{
		{optAllow, "completed", "listed 2 files", "allow"},
		{optAllowAlways, "completed", "listed 2 files (1 permission rules saved)", "allow"},
		{optReject, "failed", "permission denied: The user denied this tool call.", "deny"},
	} {
		turn := plugintest.Prompt(t, h, "tool")
		var call *journal.ToolCall
		ups := h.Until(10*time.Second, "permission request", func(u sdktest.Update) bool {
			if x, ok := u.SessionUpdate().(*journal.ToolCall); ok {
				call = x
			}
			return u.Kind == "permission_request"
		})
		req := ups[len(ups)-1].SessionUpdate().(*journal.PermissionRequest)
		if call == nil || call.Title != "Bash ls" || call.Kind != "execute" || !strings.Contains(string(call.RawInput), `"command":"ls"`) {
			t.Errorf("tool call before the permission request = %+v", call)
		}
		var opts []string
		for _, o := range req.Options {
			opts = append(opts, string(o.OptionId)+"/"+string(o.Kind))
		}
		if want := []string{"allow/allow_once", "allow_always/allow_always", "reject/reject_once", "reject_always/reject_always"}; !slices.Equal(opts, want) {
			t.Errorf("options = %v, want %v", opts, want)
		}
		if call == nil || req.ToolCall.ToolCallID != call.ToolCallID || req.ToolCall.Title != "Bash ls" {
			t.Errorf("permission request tool call = %+v", req.ToolCall)
		}
		plugintest.Answer(t, h, req.RequestID, tt.option)
		ups, stop := h.Turn(turn, 10*time.Second)
		if stop.StopReason != "end_turn" || !slices.Equal(texts(ups), []string{tt.reply}) {
			t.Errorf("%s: %v %s, want the reply %q", tt.option, stop, sdktest.Describe(ups), tt.reply)
		}
		var upd *journal.ToolCallUpdate
		for _, u := range ups {
			if x, ok := u.SessionUpdate().(*journal.ToolCallUpdate); ok {
				upd = x
			}
		}
		if upd == nil || upd.Status != tt.status {
			t.Errorf("%s: tool call update %+v, want status %s", tt.option, upd, tt.status)
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
	f, h := openSession(t)
	turn := plugintest.Prompt(t, h, "sleep 30s")
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	plugintest.Cancel(t, h)
	if _, stop := h.Turn(turn, 10*time.Second); stop.StopReason != "cancelled" || stop.Error != "" {
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
	if ups, stop := h.Run("count 1", wait); stop.StopReason != "end_turn" || !slices.Equal(texts(ups), []string{"1"}) {
		t.Fatalf("turn after the cancel: %v %s", stop, sdktest.Describe(ups))
	}
	if n := len(f.sessions()); n != 1 {
		t.Errorf("%d CLIs started, want 1: an interrupt keeps the CLI", n)
	}
}

// TestCancelUnacknowledged cancels a turn whose CLI takes the interrupt
// request but never ends the turn: the turn still ends cancelled within
// the 2 s a cancel promises, the CLI is stopped, and the next turn resumes
// the conversation in a new one.
func TestCancelUnacknowledged(t *testing.T) {
	f := newFixture(t)
	h := f.start(t, "FAKECLAUDE_DEAF_TO_INTERRUPT=1")
	handle := f.open(t, h, nil)
	turn := plugintest.Prompt(t, h, "sleep 30s")
	pid := f.sessions()[0].Pid
	// Cancel once the CLI has the prompt, so that the interrupt is what
	// the turn waits on.
	if !plugintest.Eventually(5*time.Second, func() bool {
		return slices.ContainsFunc(f.stdinLines(pid), func(l map[string]any) bool { return l["type"] == "user" })
	}) {
		t.Fatal("the prompt never reached the CLI")
	}
	start := time.Now()
	plugintest.Cancel(t, h)
	if _, stop := h.Turn(turn, 10*time.Second); stop.StopReason != "cancelled" || stop.Error != "" {
		t.Fatalf("cancelled turn: %v", stop)
	}
	// Not before the grace: the CLI was given its chance to end the turn.
	if d := time.Since(start); d > 2*time.Second || d < interruptGrace {
		t.Errorf("cancel took %s, want between the %s grace and 2s", d, interruptGrace)
	}
	if !plugintest.WaitGone(pid, 5*time.Second) {
		t.Errorf("CLI %d that ignored the interrupt is still running", pid)
	}
	if ups, stop := h.Run("count 1", wait); stop.StopReason != "end_turn" || !slices.Equal(texts(ups), []string{"1"}) {
		t.Fatalf("turn after the cancel: %v %s", stop, sdktest.Describe(ups))
	}
	if inv := f.sessions(); len(inv) != 2 || !slices.Contains(inv[1].Args, "--resume="+handle) {
		t.Errorf("CLIs started: %v, want a second one with --resume=%s", inv, handle)
	}
}

// TestCancelDuringPermission cancels a turn that waits for the user: the
// request is resolved as cancelled and the CLI is interrupted.
func TestCancelDuringPermission(t *testing.T) {
	_, h := openSession(t)
	turn := plugintest.Prompt(t, h, "tool")
	h.Until(10*time.Second, "permission request", func(u sdktest.Update) bool { return u.Kind == "permission_request" })
	plugintest.Cancel(t, h)
	ups, stop := h.Turn(turn, 10*time.Second)
	if stop.StopReason != "cancelled" {
		t.Fatalf("turn: %v %s", stop, sdktest.Describe(ups))
	}
	var resolved *journal.PermissionResolved
	for _, u := range ups {
		if x, ok := u.SessionUpdate().(*journal.PermissionResolved); ok {
			resolved = x
		}
	}
	if resolved == nil || resolved.Outcome.Outcome != "cancelled" {
		t.Errorf("permission resolved = %+v, want cancelled", resolved)
	}
	if ups, stop := h.Run("count 1", wait); stop.StopReason != "end_turn" {
		t.Fatalf("turn after the cancel: %v %s", stop, sdktest.Describe(ups))
	}
}

// TestStreamRobustness: non-JSON lines, blank lines, unknown message types
// and unknown fields are ignored; a slow stream still completes.
func TestStreamRobustness(t *testing.T) {
	for _, knob := range []string{"FAKECLAUDE_NOISE=1", "FAKECLAUDE_SLOW=10ms"} {
		t.Run(knob, func(t *testing.T) {
			f := newFixture(t)
			h := f.start(t, knob)
			f.open(t, h, nil)
			ups, stop := h.Run("count 5", wait)
			if stop.StopReason != "end_turn" || !slices.Equal(texts(ups), []string{"1", "2", "3", "4", "5"}) {
				t.Fatalf("%v %s", stop, sdktest.Describe(ups))
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
			want: []string{"claude has no credentials: log in with `claude auth login`", "ANTHROPIC_API_KEY and pass it to the agent with \"credentials\": \"inherit\" in its agenthost.json entry (or the session option allow_credentials=true)", "skip_auth_check=true"}},
		{name: "credentials not allowed", noLogin: true, env: []string{"ANTHROPIC_API_KEY=sk-ant-test"},
			want: []string{"ANTHROPIC_API_KEY is set, but provider credentials are removed from claude's environment unless the session option allow_credentials=true"}},
		{name: "binary does not run", opts: map[string]string{OptCLIPath: "broken"},
			want: []string{"/broken does not run (`claude --version`: exit status 7, output \"boom\"); reinstall Claude Code (npm install -g @anthropic-ai/claude-code)"}},
		{name: "bad option", opts: map[string]string{OptStopGrace: "forever"},
			want: []string{`session option stop_grace: "forever" is invalid`}},
		{name: "unknown option", opts: map[string]string{"some_future_option": "x"},
			want: []string{"session option some_future_option: the claude agent has no such option (it takes model, mode, effort"}},
		{name: "renamed option", opts: map[string]string{"permission_mode": "plan"},
			want: []string{`session option permission_mode: the option is now called "mode"`}},
		{name: "credential through env", opts: map[string]string{OptEnvPrefix + "ANTHROPIC_API_KEY": "k"},
			want: []string{"session option env.ANTHROPIC_API_KEY:", "carries a provider credential"}},
		{name: "bad effort", opts: map[string]string{OptEffort: "huge"},
			want: []string{`session option effort: "huge" is invalid: want one of low, medium, high, xhigh, max, or default`}},
		{name: "relative add_dirs", opts: map[string]string{OptAddDirs: "rel/dir"},
			want: []string{`session option add_dirs: "rel/dir" is invalid: "rel/dir" is not an absolute path`}},
		{name: "session id not a UUID", opts: map[string]string{OptSessionID: "nope"},
			want: []string{"claude exited at startup (exit status 1; its stderr ended with: Error: Invalid session ID. Must be a valid UUID.)"}},
		{name: "bad mode", opts: map[string]string{OptMode: "bogus"},
			want: []string{`session option mode: "bogus" is invalid: want one of default, acceptEdits, plan, bypassPermissions`}},
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
			h := f.start(t, tt.env...)
			_, err := f.tryOpen(t, h, tt.opts)
			plugintest.ErrorContains(t, err, "NewSession", tt.want...)
		})
	}
}

func TestBinaryMissing(t *testing.T) {
	for _, p := range fallbackPaths {
		if filepath.IsAbs(p) && cliproc.CheckExecutable(p) == nil {
			t.Skipf("%s exists on this machine", p)
		}
	}
	f := newFixture(t)
	empty := t.TempDir()
	h := f.start(t, EnvCLIPath+"=", "PATH="+empty)
	_, err := f.tryOpen(t, h, nil)
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
	f.open(t, f.start(t, EnvCLIPath+"=", "PATH="+empty), nil)
}

// TestTurnErrors: turns that fail say why.
func TestTurnErrors(t *testing.T) {
	t.Run("auth failure", func(t *testing.T) {
		f := newFixture(t)
		os.Remove(filepath.Join(f.configDir, ".credentials.json"))
		h := f.start(t)
		f.open(t, h, map[string]string{OptSkipAuthCheck: "true"})
		ups, stop := h.Run("count 3", wait)
		want := "claude: authentication failed (Not logged in · Please run /login): claude has no usable credential: log in with `claude auth login`, " +
			"or set ANTHROPIC_API_KEY and pass it to the agent with \"credentials\": \"inherit\" in its agenthost.json entry (or the session option allow_credentials=true)"
		if stop.StopReason != "failed" || stop.Error != want {
			t.Errorf("turn: %v\nwant failed with %q", stop, want)
		}
		if len(texts(ups)) != 0 {
			t.Errorf("the synthetic auth message was reported as the agent's: %q", texts(ups))
		}
	})
	t.Run("noauth answer with a login", func(t *testing.T) {
		f := newFixture(t)
		h := f.start(t)
		f.open(t, h, nil)
		if _, stop := h.Run("noauth", wait); stop.StopReason != "failed" || !strings.HasPrefix(stop.Error, "claude: authentication failed") {
			t.Errorf("turn: %v", stop)
		}
		// The session goes on.
		if _, stop := h.Run("count 1", wait); stop.StopReason != "end_turn" {
			t.Errorf("next turn: %v", stop)
		}
	})
	t.Run("api error", func(t *testing.T) {
		f := newFixture(t)
		h := f.start(t)
		f.open(t, h, nil)
		_, stop := h.Run("fail", wait)
		if want := "claude failed the turn: API Error: 500 Internal server error. This is a server-side issue, usually temporary — try again in a moment. If it persists, check your inference gateway (127.0.0.1:8080)."; stop.StopReason != "failed" || stop.Error != want {
			t.Errorf("turn: %v\nwant failed with %q", stop, want)
		}
	})
	t.Run("model not found", func(t *testing.T) {
		f := newFixture(t)
		h := f.start(t)
		f.open(t, h, map[string]string{OptModel: "claude-x-bad"})
		_, stop := h.Run("nomodel", wait)
		want := "claude: the provider does not serve the model claude-x-bad (There's an issue with the selected model (claude-x-bad). " +
			"It may not exist or you may not have access to it. Run --model to pick a different model.): choose another with the session option model"
		if stop.StopReason != "failed" || stop.Error != want {
			t.Errorf("turn: %v\nwant failed with %q", stop, want)
		}
	})
	t.Run("dies mid-turn", func(t *testing.T) {
		f := newFixture(t)
		h := f.start(t)
		handle := f.open(t, h, nil)
		ups, stop := h.Run("die", wait)
		want := "claude exited during the turn (exit status 3; its stderr ended with: fakeclaude: dying mid-turn as asked); the next turn restarts it"
		if stop.StopReason != "failed" || stop.Error != want {
			t.Errorf("turn: %v\nwant failed with %q", stop, want)
		}
		if !slices.Equal(texts(ups), []string{"dying"}) {
			t.Errorf("messages before the death: %q", texts(ups))
		}
		// The next turn resumes the conversation in a new CLI.
		if ups, stop := h.Run("count 1", wait); stop.StopReason != "end_turn" || !slices.Equal(texts(ups), []string{"1"}) {
			t.Fatalf("turn after the death: %v %s", stop, sdktest.Describe(ups))
		}
		inv := f.sessions()
		if len(inv) != 2 || !slices.Contains(inv[1].Args, "--resume="+handle) {
			t.Errorf("CLIs started: %v, want a second one with --resume=%s", inv, handle)
		}
	})
	t.Run("gone before the prompt", func(t *testing.T) {
		// The CLI exits on reading the second prompt, before it prints
		// anything of the turn: the prompt goes to a new CLI on the same
		// conversation, and the turn runs there.
		f := newFixture(t)
		h := f.start(t, "FAKECLAUDE_EXIT_ON_PROMPT=2")
		handle := f.open(t, h, nil)
		if _, stop := h.Run("count 1", wait); stop.StopReason != "end_turn" {
			t.Fatalf("first turn: %v", stop)
		}
		if ups, stop := h.Run("count 2", wait); stop.StopReason != "end_turn" || !slices.Equal(texts(ups), []string{"1", "2"}) {
			t.Fatalf("turn after the CLI left: %v %s", stop, sdktest.Describe(ups))
		}
		inv := f.sessions()
		if len(inv) != 2 || !slices.Contains(inv[1].Args, "--resume="+handle) {
			t.Errorf("CLIs started: %v, want a second one with --resume=%s", inv, handle)
		}
	})
	t.Run("line over the cap", func(t *testing.T) {
		f := newFixture(t)
		h := f.start(t)
		f.open(t, h, map[string]string{OptMaxLineBytes: "100000"})
		_, stop := h.Run("huge 200000", wait)
		if stop.StopReason != "failed" || !strings.Contains(stop.Error, "over the plugin's cap of 100000 bytes (session option max_line_bytes)") {
			t.Errorf("turn: %v", stop)
		}
		// A line just under the cap is fine, in a new CLI.
		if ups, stop := h.Run("huge 90000", wait); stop.StopReason != "end_turn" || len(texts(ups)) != 1 || len(texts(ups)[0]) != 90000 {
			t.Errorf("turn under the cap: %v %s", stop, sdktest.Describe(ups))
		}
	})
}

func TestResume(t *testing.T) {
	f := newFixture(t)
	h := f.start(t)
	handle := f.open(t, h, nil)
	if _, stop := h.Run("count 1", wait); stop.StopReason != "end_turn" {
		t.Fatal(stop)
	}
	if err := plugintest.CloseWithin(h, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	// A second CLI cannot take the same id.
	h = f.start(t)
	if _, err := f.tryOpen(t, h, map[string]string{OptSessionID: handle}); err == nil ||
		!strings.Contains(err.Error(), "Error: Session ID "+handle+" is already in use.") {
		t.Errorf("NewSession with a session id in use: %v", err)
	}

	// resume resumes handle in a new agent and runs a turn there.
	resume := func(t *testing.T, extra ...string) (*sdktest.Harness, []sdktest.Update) {
		t.Helper()
		h := f.start(t, extra...)
		info, err := f.tryResume(t, h, handle, nil)
		if err != nil || info.Handle != handle {
			t.Fatalf("ResumeSession: %+v %v", info, err)
		}
		ups, stop := h.Run("count 1", wait)
		if stop.StopReason != "end_turn" {
			t.Fatal(stop)
		}
		return h, ups
	}
	t.Run("same id", func(t *testing.T) {
		h, ups := resume(t)
		for _, u := range ups {
			if c, ok := u.SessionUpdate().(*journal.HandleChanged); ok {
				t.Errorf("unexpected handle change %+v", c)
			}
		}
		inv := f.sessions()
		if last := inv[len(inv)-1]; !slices.Contains(last.Args, "--resume="+handle) || slices.ContainsFunc(last.Args, func(a string) bool { return strings.HasPrefix(a, "--session-id") }) {
			t.Errorf("argv %q, want --resume=%s and no --session-id", last.Args, handle)
		}
		plugintest.CloseWithin(h, 10*time.Second)
	})
	t.Run("rotating id", func(t *testing.T) {
		h, ups := resume(t, "FAKECLAUDE_ROTATE_ON_RESUME=1")
		var changes []*journal.HandleChanged
		for _, u := range ups {
			if c, ok := u.SessionUpdate().(*journal.HandleChanged); ok {
				changes = append(changes, c)
			}
		}
		if len(changes) != 1 || changes[0].Handle == handle || changes[0].Origin != "resumed" {
			t.Fatalf("handle changes %+v, want one new handle with origin resumed", changes)
		}
		// The CLI dies; the replacement resumes the new handle.
		if _, stop := h.Run("die", wait); stop.StopReason != "failed" {
			t.Fatal(stop)
		}
		if _, stop := h.Run("count 1", wait); stop.StopReason != "end_turn" {
			t.Fatal(stop)
		}
		inv := f.sessions()
		if last := inv[len(inv)-1]; !slices.Contains(last.Args, "--resume="+changes[0].Handle) {
			t.Errorf("argv %q, want --resume=%s", last.Args, changes[0].Handle)
		}
	})
	t.Run("unknown id", func(t *testing.T) {
		h := f.start(t)
		const unknown = "11111111-2222-4333-8444-555555555555"
		_, err := f.tryResume(t, h, unknown, nil)
		if err == nil || !strings.Contains(err.Error(), "claude could not resume session "+unknown+": No conversation found with session ID: "+unknown) {
			t.Errorf("ResumeSession(unknown): %v", err)
		}
	})
	t.Run("not a UUID", func(t *testing.T) {
		h := f.start(t)
		_, err := f.tryResume(t, h, "nope", nil)
		if err == nil || !strings.Contains(err.Error(), `Error: --resume requires a valid session ID or session title when used with --print`) {
			t.Errorf("ResumeSession(nope): %v", err)
		}
	})
}

func TestClose(t *testing.T) {
	t.Run("stdin EOF", func(t *testing.T) {
		f := newFixture(t)
		h := f.start(t)
		f.open(t, h, nil)
		h.Run("count 1", wait)
		pid := f.sessions()[0].Pid
		start := time.Now()
		if err := plugintest.CloseWithin(h, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("Close took %s for a CLI that exits on EOF", d)
		}
		// The agent runs in the test process: the CLI is its child.
		if plugintest.Alive(pid) || slices.Contains(plugintest.Children(os.Getpid()), pid) {
			t.Errorf("CLI %d still there after Close", pid)
		}
	})
	t.Run("ignores SIGTERM", func(t *testing.T) {
		f := newFixture(t)
		h := f.start(t, "FAKECLAUDE_IGNORE_SIGTERM=1")
		f.open(t, h, map[string]string{OptStopGrace: "200ms"})
		h.Run("count 1", wait)
		pid := f.sessions()[0].Pid
		start := time.Now()
		if err := plugintest.CloseWithin(h, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d < 400*time.Millisecond || d > 4*time.Second {
			t.Errorf("Close took %s, want about two 200ms graces", d)
		}
		if plugintest.Alive(pid) {
			t.Errorf("CLI %d ignoring SIGTERM survived Close", pid)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		f := newFixture(t)
		h := f.start(t, "FAKECLAUDE_IGNORE_SIGTERM=1")
		f.open(t, h, nil) // default 5s graces
		h.Run("count 1", wait)
		pid := f.sessions()[0].Pid
		start := time.Now()
		err := plugintest.CloseWithin(h, time.Second)
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("Close with a 1s deadline took %s (%v)", d, err)
		}
		if !plugintest.WaitGone(pid, 2*time.Second) {
			t.Errorf("CLI %d survived a Close that ran out of time", pid)
		}
	})
}

// TestPluginKilled: when the plugin is SIGKILLed mid-turn, its CLI dies
// too (Pdeathsig), although nobody signals the process group. The plugin
// runs as a process of its own, which the test kills.
func TestPluginKilled(t *testing.T) {
	f := newFixture(t)
	f.setenv(t)
	h := sdktest.NewProcessHarness(t, f.plugin)
	f.open(t, h, nil)
	pid := plugintest.PluginPID(t, h)
	plugintest.Prompt(t, h, "sleep 30s")
	var cli int
	if !plugintest.Eventually(5*time.Second, func() bool {
		kids := plugintest.Children(pid)
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
	plugintest.KillPlugin(t, pid, cli)
}

// TestWorkspaceMustExist: a session needs an existing workspace.
func TestWorkspaceMustExist(t *testing.T) {
	f := newFixture(t)
	h := f.start(t)
	_, err := h.NewSession(t.Context(), sdk.NewSessionRequest{Workspace: filepath.Join(f.dir, "missing")})
	if err == nil || !strings.Contains(err.Error(), "workspace") {
		t.Errorf("NewSession in a missing workspace: %v", err)
	}
}
