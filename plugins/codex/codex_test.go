package codex_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/agenthost/agenthost/internal/logtest"
	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/plugin/sdk"
	"github.com/agenthost/agenthost/plugin/sdk/sdktest"
	"github.com/agenthost/agenthost/plugins/codex"
	"github.com/agenthost/agenthost/plugins/internal/plugintest"
)

// The tests drive the agent in the test process with sdktest.NewHarness,
// against the fake codex in testdata/fakecodex, which is then a child of
// the test process; the agent reads its configuration from the process
// environment, so the tests set it with t.Setenv and do not run in
// parallel. What needs a plugin process of its own (its SIGKILL,
// conformance) runs the plugin binary.

// The plugin and the fake CLI, built on first use (not in TestMain: fuzz
// workers run TestMain too) and removed after the run.
var (
	buildOnce sync.Once
	binDir    string
	bins      struct{ plugin, fake string }
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// built builds the plugin and the fake codex.
func built(t *testing.T) {
	t.Helper()
	buildOnce.Do(func() {
		if binDir, buildErr = os.MkdirTemp("", "codex-plugin-test-"); buildErr != nil {
			return
		}
		if bins.plugin, buildErr = plugintest.BuildPlugin(binDir, "./cmd/agenthost-plugin-codex"); buildErr != nil {
			return
		}
		bins.fake, buildErr = plugintest.Build(binDir, "./testdata/fakecodex")
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
}

// home is a fresh HOME with a CODEX_HOME holding an auth.json, and a
// workspace.
type home struct {
	dir, codexHome, workspace string
}

func newHome(t *testing.T, auth bool) home {
	t.Helper()
	built(t)
	dir := t.TempDir()
	h := home{dir: dir, codexHome: filepath.Join(dir, ".codex"), workspace: filepath.Join(dir, "work")}
	for _, d := range []string{h.codexHome, h.workspace} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if auth {
		if err := os.WriteFile(filepath.Join(h.codexHome, "auth.json"), []byte(`{"OPENAI_API_KEY":null}`), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

// setenv makes h the agent's environment for the rest of test t (the
// agent takes it when its first session opens): the fake CLI, the home,
// then extra (KEY=VALUE), which wins; none of the provider credentials the
// test process inherited.
func (h home) setenv(t *testing.T, extra ...string) {
	t.Helper()
	plugintest.Unsetenv(t, codex.CredentialVariables()...)
	plugintest.Setenv(t, "HOME="+h.dir, "CODEX_HOME="+h.codexHome, codex.EnvCodexPath+"="+bins.fake)
	plugintest.Setenv(t, extra...)
}

// start sets h's environment plus extra for test t and serves the agent
// in-process.
func start(t *testing.T, h home, extra ...string) *sdktest.Harness {
	t.Helper()
	h.setenv(t, extra...)
	return sdktest.NewHarness(t, codex.New)
}

// open serves the agent and opens a new session.
func open(t *testing.T, h home, opts map[string]string, extra ...string) (*sdktest.Harness, string) {
	t.Helper()
	p := start(t, h, extra...)
	info, err := p.NewSession(t.Context(), sdk.NewSessionRequest{Workspace: h.workspace, Options: opts})
	if err != nil {
		t.Fatalf("NewSession: %v", err)
	}
	return p, info.Handle
}

func resume(t *testing.T, p *sdktest.Harness, h home, handle string) (string, error) {
	info, err := p.ResumeSession(t.Context(), sdk.ResumeSessionRequest{Workspace: h.workspace, Handle: handle})
	return info.Handle, err
}

const turnWait = 10 * time.Second

func stopOf(t *testing.T, ups []sdktest.Update, st journal.Stop, reason string) {
	t.Helper()
	if st.StopReason != reason {
		t.Fatalf("turn stopped with %q (error %q), want %q; updates %s", st.StopReason, st.Error, reason, sdktest.Describe(ups))
	}
}

func kinds(ups []sdktest.Update, kind string) []sdktest.Update {
	var out []sdktest.Update
	for _, u := range ups {
		if u.Kind == kind {
			out = append(out, u)
		}
	}
	return out
}

// run runs one turn of text and checks that it ends with reason.
func run(t *testing.T, p *sdktest.Harness, text, reason string) ([]sdktest.Update, journal.Stop) {
	t.Helper()
	ups, st := p.Turn(plugintest.Prompt(t, p, text), turnWait)
	stopOf(t, ups, st, reason)
	return ups, st
}

// finalUpdates are the tool call updates of ups that set a status (not
// a command's output as it runs).
func finalUpdates(ups []sdktest.Update) []sdktest.Update {
	var out []sdktest.Update
	for _, u := range kinds(ups, "tool_call_update") {
		if u.SessionUpdate().(*journal.ToolCallUpdate).Status != "" {
			out = append(out, u)
		}
	}
	return out
}

// noHandleChange fails the test if ups report the handle (again).
func noHandleChange(t *testing.T, ups []sdktest.Update, who string) {
	t.Helper()
	if hc := kinds(ups, "handle_changed"); len(hc) != 0 {
		t.Errorf("%s reported its handle again: %s", who, sdktest.Describe(hc))
	}
}

func TestConformance(t *testing.T) {
	h := newHome(t, true)
	sdktest.Run(t, bins.plugin,
		sdktest.WithEnv("AGENTHOST_CODEX_PATH="+bins.fake, "HOME="+h.dir, "CODEX_HOME="+h.codexHome),
		sdktest.WithPrompts(sdktest.Prompts{Stream: "count 3", Hold: "sleep 30s", Replay: "count 20 10ms"}))
}

// A turn streams its deltas as message chunks and its token usage; the
// handle is reported again, as created, when the first turn starts (the
// thread is saved then), and not at later turns.
func TestStreamUsageAndHandle(t *testing.T) {
	h := newHome(t, true)
	p, handle := open(t, h, nil)
	if len(handle) != 36 || handle[14] != '7' {
		t.Errorf("handle %q is not a UUIDv7 thread id", handle)
	}
	ups, _ := run(t, p, "count 3", "end_turn")
	var chunks []string
	for _, u := range kinds(ups, "agent_message_chunk") {
		chunks = append(chunks, u.SessionUpdate().(*journal.Chunk).Content.Text())
	}
	if strings.Join(chunks, ",") != "1,2,3" {
		t.Errorf("message chunks %q, want 1,2,3", chunks)
	}
	hc := kinds(ups, "handle_changed")
	if len(hc) != 1 || hc[0].SessionUpdate().(*journal.HandleChanged).Handle != handle || hc[0].SessionUpdate().(*journal.HandleChanged).Origin != "created" {
		t.Errorf("handle changes %s, want one (%s, created)", sdktest.Describe(hc), handle)
	}
	us := kinds(ups, "usage")
	if len(us) != 1 {
		t.Fatalf("usage updates: %s", sdktest.Describe(ups))
	}
	if u := us[0].SessionUpdate().(*journal.Usage).Tokens; u.InputTokens != 100 || u.OutputTokens != 3 || u.CachedInputTokens != 20 || u.ReasoningTokens != 5 {
		t.Errorf("usage %+v, want input 100, output 3, cached 20, reasoning 5", u)
	}
	// The last request's total (input 100 + cached 20 + output 3 +
	// reasoning 5) is what the context holds, of the model's window.
	if u := us[0].SessionUpdate().(*journal.Usage); u.Used != 128 || u.Size != 272000 {
		t.Errorf("usage_update used %d of %d, want 128 of 272000", u.Used, u.Size)
	}
	// The rollout exists now, named after the thread.
	if m, _ := filepath.Glob(filepath.Join(h.codexHome, "sessions", "*", "*", "*", "rollout-*-"+handle+".jsonl")); len(m) != 1 {
		t.Errorf("rollout files for %s: %v", handle, m)
	}

	ups, _ = run(t, p, "count 1", "end_turn")
	noHandleChange(t, ups, "the second turn")
}

// A session whose thread ran a turn resumes under the same handle in a
// new plugin process.
func TestResumeAfterFirstTurn(t *testing.T) {
	h := newHome(t, true)
	p, handle := open(t, h, nil)
	run(t, p, "hello", "end_turn")
	if err := plugintest.CloseWithin(p, 5*time.Second); err != nil {
		t.Fatal(err)
	}

	p2 := start(t, h)
	got, err := resume(t, p2, h, handle)
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	if got != handle {
		t.Errorf("resumed handle %q, want %q", got, handle)
	}
	ups, _ := run(t, p2, "again", "end_turn")
	if msg := sdktest.Messages(ups); msg != "again" {
		t.Errorf("message %q", msg)
	}
	noHandleChange(t, ups, "a resumed thread")
}

func TestResumeErrors(t *testing.T) {
	h := newHome(t, true)
	// A thread that never ran a turn was never saved.
	p, handle := open(t, h, nil)
	if err := plugintest.CloseWithin(p, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, handle string
		env          []string
		want         []string
	}{
		{"never used", handle, nil, []string{"no saved conversation for thread " + handle, "first turn", "start a new session"}},
		{"unknown", "00000000-0000-0000-0000-000000000000", nil, []string{"no rollout found for thread id 00000000-0000-0000-0000-000000000000", "start a new session"}},
		{"not an id", "bogus", nil, []string{`"bogus" is not a codex thread id`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := start(t, h, tt.env...)
			_, err := resume(t, p, h, tt.handle)
			plugintest.ErrorContains(t, err, "Resume", tt.want...)
		})
	}
}

// A resume reply naming another thread is refused.
func TestResumeReplyNamesAnotherThread(t *testing.T) {
	h := newHome(t, true)
	p, handle := open(t, h, nil)
	_, st := p.Turn(plugintest.Prompt(t, p, "hello"), turnWait)
	if st.StopReason != "end_turn" {
		t.Fatal(st)
	}
	plugintest.CloseWithin(p, 5*time.Second)
	p2 := start(t, h, "FAKECODEX_RESUME_OTHER=1")
	_, err := resume(t, p2, h, handle)
	if err == nil || !strings.Contains(err.Error(), "asked to resume thread "+handle+", codex resumed thread") ||
		!strings.Contains(err.Error(), "refusing to continue a different conversation") {
		t.Fatalf("resume error %v", err)
	}
}

func TestReadinessFailures(t *testing.T) {
	empty := t.TempDir()
	for _, tt := range []struct {
		name string
		auth bool
		opts map[string]string
		env  []string
		want []string
	}{
		{"missing explicit path", true, nil, []string{"AGENTHOST_CODEX_PATH=/nonexistent/codex"},
			[]string{"/nonexistent/codex", "AGENTHOST_CODEX_PATH", "npm install -g @openai/codex"}},
		{"missing cli_path", true, map[string]string{"cli_path": "/nonexistent/codex2"}, nil,
			[]string{"/nonexistent/codex2", "session option cli_path"}},
		{"not found anywhere", true, nil, []string{"AGENTHOST_CODEX_PATH=", "PATH=" + empty},
			[]string{"codex CLI not found", "PATH", "/usr/local/bin/codex", "npm install -g @openai/codex"}},
		{"too old", true, nil, []string{"FAKECODEX_VERSION=0.170.9"},
			[]string{"codex-cli 0.170.9", "older than 0.171.0", "npm install -g @openai/codex@latest"}},
		{"no credentials", false, nil, nil,
			[]string{"codex has no credentials", "auth.json", "codex login", "OPENAI_API_KEY", `"credentials": "inherit"`, "allow_credentials=true", "skip_auth_check=true"}},
		{"credential withheld", false, nil, []string{"OPENAI_API_KEY=sk-test"},
			[]string{"OPENAI_API_KEY is set but withheld from codex by the credential policy", "allow_credentials=true"}},
		{"bad option", true, map[string]string{"approval_policy": "sometimes"}, nil,
			[]string{`approval_policy: "sometimes" is invalid`, "on-request"}},
		// Whether the initialize write or the exit comes first, the error
		// quotes how the app-server ended.
		{"app-server exits at startup", true, nil, []string{"FAKECODEX_FAIL_START=Error loading config.toml: bad key"},
			[]string{"codex: initialize failed", "exit status 1", "Error loading config.toml: bad key"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHome(t, tt.auth)
			p := start(t, h, tt.env...)
			_, err := p.NewSession(t.Context(), sdk.NewSessionRequest{Workspace: h.workspace, Options: tt.opts})
			plugintest.ErrorContains(t, err, "NewSession", tt.want...)
		})
	}
}

// The credential variables are stripped from the CLI's environment unless
// the session allows them; a key allowed through satisfies the auth check.
func TestCredentialPolicy(t *testing.T) {
	h := newHome(t, true)
	if err := os.WriteFile(filepath.Join(h.codexHome, "config.toml"), []byte("[model_providers.mine]\nname = \"mine\"\nenv_key = \"MY_PROVIDER_KEY\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	keys := []string{"OPENAI_API_KEY=sk-test", "CODEX_ACCESS_TOKEN=tok", "MY_PROVIDER_KEY=mine", "UNRELATED=kept"}
	ask := func(p *sdktest.Harness, name string) string {
		ups, _ := run(t, p, "env "+name, "end_turn")
		return sdktest.Messages(ups)
	}
	p, _ := open(t, h, nil, keys...)
	for _, k := range []string{"OPENAI_API_KEY", "CODEX_ACCESS_TOKEN", "MY_PROVIDER_KEY"} {
		if v := ask(p, k); v != "<unset>" {
			t.Errorf("%s reached codex as %q, want it stripped", k, v)
		}
	}
	if v := ask(p, "UNRELATED"); v != "kept" {
		t.Errorf("UNRELATED = %q", v)
	}

	noAuth := newHome(t, false)
	p2, _ := open(t, noAuth, map[string]string{"allow_credentials": "true"}, keys...)
	if v := ask(p2, "OPENAI_API_KEY"); v != "sk-test" {
		t.Errorf("allowed OPENAI_API_KEY reached codex as %q", v)
	}
	// A model provider's env_key, allowed through, is a credential too.
	providerOnly := newHome(t, false)
	if err := os.WriteFile(filepath.Join(providerOnly.codexHome, "config.toml"), []byte("model_provider = \"mine\"\n[model_providers.mine]\nname = \"mine\"\nenv_key = \"MY_PROVIDER_KEY\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	plugintest.Unsetenv(t, "OPENAI_API_KEY", "CODEX_ACCESS_TOKEN")
	p4, _ := open(t, providerOnly, map[string]string{"allow_credentials": "true"}, "MY_PROVIDER_KEY=mine")
	if v := ask(p4, "MY_PROVIDER_KEY"); v != "mine" {
		t.Errorf("allowed MY_PROVIDER_KEY reached codex as %q", v)
	}
	// The last agent's environment holds none of the keys.
	plugintest.Unsetenv(t, "OPENAI_API_KEY", "CODEX_ACCESS_TOKEN", "MY_PROVIDER_KEY", "UNRELATED")
	p3, _ := open(t, newHome(t, false), map[string]string{"skip_auth_check": "true"})
	if v := ask(p3, "OPENAI_API_KEY"); v != "<unset>" {
		t.Errorf("OPENAI_API_KEY = %q", v)
	}
}

func TestCancel(t *testing.T) {
	p, _ := open(t, newHome(t, true), nil)
	cancelSleep(t, p)
	// The session goes on.
	run(t, p, "count 2", "end_turn")
}

// A codex that accepts turn/interrupt but never ends the turn does not
// hold the cancel: the turn ends cancelled within the 2 s session/cancel
// promises.
func TestCancelUnconfirmed(t *testing.T) {
	p, _ := open(t, newHome(t, true), nil, "FAKECODEX_IGNORE_INTERRUPT=1")
	cancelSleep(t, p)
}

// cancelSleep starts a long turn, cancels it once it runs, and fails the
// test unless it ends cancelled within 2 s of the cancel.
func cancelSleep(t *testing.T, p *sdktest.Harness) {
	t.Helper()
	turn := plugintest.Prompt(t, p, "sleep 30s")
	p.Until(turnWait, "the turn's first update", func(u sdktest.Update) bool { return u.TurnID == turn })
	begun := time.Now()
	plugintest.Cancel(t, p)
	ups, st := p.Turn(turn, turnWait)
	stopOf(t, ups, st, "cancelled")
	if d := time.Since(begun); d > 2*time.Second {
		t.Errorf("cancel took %s", d)
	}
}

func TestApprovals(t *testing.T) {
	h := newHome(t, true)
	p, _ := open(t, h, map[string]string{"approval_policy": "on-request"})
	for _, tt := range []struct {
		prompt, answer, toolStatus, reply string
	}{
		{"tool", "accept", "completed", "approval: accept"},
		{"tool", "decline", "failed", "approval: decline"},
		{"edit", "acceptForSession", "completed", "approval: acceptForSession"},
	} {
		turn := plugintest.Prompt(t, p, tt.prompt)
		ups := p.Until(turnWait, "a permission request", func(u sdktest.Update) bool { return u.Kind == "permission_request" })
		req := ups[len(ups)-1].SessionUpdate().(*journal.PermissionRequest)
		calls := kinds(ups, "tool_call")
		if len(calls) != 1 || calls[0].SessionUpdate().(*journal.ToolCall).ToolCallID != req.ToolCall.ToolCallID {
			t.Fatalf("%s: tool calls before the request %s; request for %q", tt.prompt, sdktest.Describe(ups), req.ToolCall.ToolCallID)
		}
		wantKind, wantTitle := "execute", "ls"
		if tt.prompt == "edit" {
			wantKind, wantTitle = "edit", "edit "
		}
		if req.ToolCall.Kind != wantKind || !strings.HasPrefix(req.ToolCall.Title, wantTitle) {
			t.Errorf("%s: permission tool call %+v", tt.prompt, req.ToolCall)
		}
		// rawInput decodes as the plugin's contract types say.
		if tt.prompt == "edit" {
			var in codex.PatchInput
			err := json.Unmarshal(req.ToolCall.RawInput, &in)
			if err != nil || len(in.Changes) != 1 || in.Changes[0].Path != filepath.Join(h.workspace, "notes.txt") || in.Changes[0].Diff != "hello\n" {
				t.Errorf("edit: the permission's rawInput %s (%v); want the change it asks about", req.ToolCall.RawInput, err)
			}
		} else {
			var in codex.CommandInput
			err := json.Unmarshal(req.ToolCall.RawInput, &in)
			if err != nil || in.Command != "/bin/bash -lc ls" || in.Cwd != h.workspace {
				t.Errorf("tool: the permission's rawInput %s (%v); want the command and where it runs", req.ToolCall.RawInput, err)
			}
		}
		var opts []string
		for _, o := range req.Options {
			opts = append(opts, string(o.OptionId)+"/"+string(o.Kind))
		}
		if got := strings.Join(opts, ","); got != "accept/allow_once,acceptForSession/allow_always,decline/reject_once" {
			t.Errorf("options %s", got)
		}
		plugintest.Answer(t, p, req.RequestID, tt.answer)
		rest, st := p.Turn(turn, turnWait)
		stopOf(t, rest, st, "end_turn")
		if msg := sdktest.Messages(rest); msg != tt.reply {
			t.Errorf("%s answered %s: the fake replied %q, want %q", tt.prompt, tt.answer, msg, tt.reply)
		}
		upd := finalUpdates(rest)
		if len(upd) != 1 || upd[0].SessionUpdate().(*journal.ToolCallUpdate).Status != tt.toolStatus {
			t.Errorf("%s answered %s: tool call updates %s, want status %s", tt.prompt, tt.answer, sdktest.Describe(upd), tt.toolStatus)
		}
		if tt.answer == "accept" && tt.prompt == "tool" && len(upd) == 1 {
			if c := upd[0].SessionUpdate().(*journal.ToolCallUpdate).Content; len(c) != 1 || c[0].Text() != "README.md\nmain.go\n" {
				t.Errorf("command output %v", c)
			}
		}
	}

	// Cancelling the turn while the user is asked: codex gets "cancel".
	turn := plugintest.Prompt(t, p, "tool")
	p.Until(turnWait, "a permission request", func(u sdktest.Update) bool { return u.Kind == "permission_request" })
	plugintest.Cancel(t, p)
	ups, st := p.Turn(turn, turnWait)
	stopOf(t, ups, st, "cancelled")
	if r := kinds(ups, "permission_resolved"); len(r) != 1 || r[0].SessionUpdate().(*journal.PermissionResolved).Outcome.Outcome != "cancelled" {
		t.Errorf("permission resolution %s", sdktest.Describe(ups))
	}

	// The permissions request echoes what was asked for, or grants nothing.
	turn = plugintest.Prompt(t, p, "perm")
	ups = p.Until(turnWait, "a permission request", func(u sdktest.Update) bool { return u.Kind == "permission_request" })
	plugintest.Answer(t, p, ups[len(ups)-1].SessionUpdate().(*journal.PermissionRequest).RequestID, "accept")
	ups, _ = p.Turn(turn, turnWait)
	if msg := sdktest.Messages(ups); msg != `permissions: {"permissions":{"network":{"enabled":true}},"scope":"turn"}` {
		t.Errorf("perm reply %q", msg)
	}
}

func TestNoApprovalWhenPolicyNever(t *testing.T) {
	p, _ := open(t, newHome(t, true), map[string]string{"approval_policy": "never"})
	ups, _ := run(t, p, "tool", "end_turn")
	if r := kinds(ups, "permission_request"); len(r) != 0 {
		t.Errorf("asked for permission: %s", sdktest.Describe(ups))
	}
	if msg := sdktest.Messages(ups); msg != "approval: not asked" {
		t.Errorf("reply %q", msg)
	}
}

func TestThoughtsAndPlans(t *testing.T) {
	p, _ := open(t, newHome(t, true), nil)
	ups, _ := run(t, p, "think", "end_turn")
	var thought string
	for _, u := range kinds(ups, "agent_thought_chunk") {
		thought += u.SessionUpdate().(*journal.Chunk).Content.Text()
	}
	if thought != "thinking hard" {
		t.Errorf("thought %q (%s)", thought, sdktest.Describe(ups))
	}
	ups, _ = run(t, p, "plan", "end_turn")
	plans := kinds(ups, "plan")
	if len(plans) != 1 {
		t.Fatalf("plans: %s", sdktest.Describe(ups))
	}
	e := plans[0].SessionUpdate().(*journal.Plan).Entries
	if len(e) != 2 || e[0].Content != "read the code" || e[0].Status != "completed" || e[1].Status != "in_progress" {
		t.Errorf("plan %+v", e)
	}
}

func TestTurnFailures(t *testing.T) {
	p, _ := open(t, newHome(t, true), map[string]string{"model_retry_timeout": "300ms"})
	_, st := run(t, p, "fail out of tokens", "failed")
	if st.Error != "out of tokens" {
		t.Errorf("error %q", st.Error)
	}
	_, st = run(t, p, "offline", "failed")
	for _, w := range []string{"could not reach its model for 300ms", "Reconnecting... waiting for network", "Connection failed", "model_retry_timeout"} {
		if !strings.Contains(st.Error, w) {
			t.Errorf("error %q lacks %q", st.Error, w)
		}
	}
	// The provider's failures, after codex's retries, say what they mean.
	for text, want := range map[string][]string{
		"http 401 Incorrect API key provided":   {"authentication failed", "Incorrect API key provided", "OPENAI_API_KEY", "codex login", `"credentials": "inherit"`},
		"http 529 overloaded right now":         {"overloaded", "overloaded right now"},
		"http 500 database on fire":             {"server error", "high demand"},
		"http 429 slow down":                    {"rate limiting", "slow down"},
		"http 400 The model `m` does not exist": {"the model provider refused the request: The model `m` does not exist"},
	} {
		_, st = run(t, p, text, "failed")
		for _, w := range want {
			if !strings.Contains(st.Error, w) {
				t.Errorf("%s: error %q lacks %q", text, st.Error, w)
			}
		}
	}
	// The session goes on.
	run(t, p, "count 1", "end_turn")
}

// A CLI that dies mid-turn fails the turn with its exit status and stderr,
// and later turns say the app-server is gone.
func TestCLIDiesMidTurn(t *testing.T) {
	p, _ := open(t, newHome(t, true), nil)
	_, st := run(t, p, "die", "failed")
	for _, w := range []string{"exited unexpectedly (exit status 3)", "asked to die", "resume it"} {
		if !strings.Contains(st.Error, w) {
			t.Errorf("error %q lacks %q", st.Error, w)
		}
	}
	_, st = run(t, p, "count 1", "failed")
	if !strings.Contains(st.Error, "codex app-server is not running") {
		t.Errorf("next turn error %q", st.Error)
	}
}

// A line over the cap ends the app-server with an error naming the cap;
// one under it passes.
func TestHugeLine(t *testing.T) {
	p, _ := open(t, newHome(t, true), map[string]string{"max_message_bytes": "100000"})
	ups, _ := run(t, p, "huge 100000", "end_turn")
	if msg := sdktest.Messages(ups); len(msg) < 99000 || !strings.HasSuffix(msg, "huge done") {
		t.Errorf("message of %d bytes", len(msg))
	}
	// The agent runs in the test process: the app-server is its child.
	kids := plugintest.Children(os.Getpid())
	_, st := run(t, p, "huge 100001", "failed")
	for _, w := range []string{"line too long", "over the limit of 100000 bytes", "max_message_bytes"} {
		if !strings.Contains(st.Error, w) {
			t.Errorf("error %q lacks %q", st.Error, w)
		}
	}
	for _, k := range kids {
		if !plugintest.WaitGone(k, 5*time.Second) {
			t.Errorf("app-server %d still running after the oversized line", k)
		}
	}
}

// Non-JSON lines, unknown notifications, items and fields are ignored, and
// an unknown request gets a JSON-RPC error; a slow stream completes.
func TestNoiseAndSlowStream(t *testing.T) {
	p, _ := open(t, newHome(t, true), nil, "FAKECODEX_SLOW=10ms")
	ups, _ := run(t, p, "noise", "end_turn")
	if msg := sdktest.Messages(ups); !strings.Contains(msg, `"code":-32601`) || !strings.Contains(msg, "does not handle fake/unknownRequest") {
		t.Errorf("reply %q", msg)
	}
	if n := len(kinds(ups, "tool_call")); n != 0 {
		t.Errorf("an unknown item became %d tool calls", n)
	}
	ups, _ = run(t, p, "count 5", "end_turn")
	if msg := sdktest.Messages(ups); msg != "12345" {
		t.Errorf("slow stream %q", msg)
	}
}

// Close stops an app-server that ignores stdin EOF and SIGTERM, within its
// deadline, and reaps it.
func TestCloseKillsStubbornCLI(t *testing.T) {
	h := newHome(t, true)
	h.setenv(t, "FAKECODEX_IGNORE_SIGTERM=1")
	logs := &logtest.Buffer{}
	p := sdktest.NewHarness(t, codex.New, sdktest.WithAgentLogger(hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Debug})))
	if _, err := p.NewSession(t.Context(), sdk.NewSessionRequest{Workspace: h.workspace}); err != nil {
		t.Fatalf("NewSession: %v", err)
	}
	// The agent runs in the test process: the app-server is its child.
	kids := plugintest.Children(os.Getpid())
	if len(kids) != 1 {
		t.Fatalf("children of the test process: %v", kids)
	}
	begun := time.Now()
	if err := plugintest.CloseWithin(p, 1500*time.Millisecond); err != nil {
		t.Fatalf("close: %v", err)
	}
	// Within its deadline, give or take the scheduling of a busy machine;
	// the graces it would wait without one add up to 4s.
	if d := time.Since(begun); d > 2500*time.Millisecond {
		t.Errorf("close with a 1.5s deadline took %s", d)
	}
	if plugintest.Alive(kids[0]) {
		t.Errorf("app-server %d survived Close", kids[0])
	}
	// The agent logs how the app-server ended.
	for deadline := time.Now().Add(3 * time.Second); !strings.Contains(logs.String(), "signal: killed"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the agent did not log a SIGKILL: %s", logs)
		}
	}
}

// SIGKILL of the plugin during a turn takes the app-server with it, even
// one that ignores stdin EOF (which the plugin's death also causes). The
// plugin runs as a process of its own, which the test kills.
func TestPluginSIGKILLTakesCLI(t *testing.T) {
	h := newHome(t, true)
	h.setenv(t, "FAKECODEX_IGNORE_SIGTERM=1")
	p := sdktest.NewProcessHarness(t, bins.plugin)
	if _, err := p.NewSession(t.Context(), sdk.NewSessionRequest{Workspace: h.workspace}); err != nil {
		t.Fatalf("NewSession: %v", err)
	}
	pid := plugintest.PluginPID(t, p)
	turn := plugintest.Prompt(t, p, "sleep 30s")
	p.Until(turnWait, "the turn's first update", func(u sdktest.Update) bool { return u.TurnID == turn })
	plugintest.KillPlugin(t, pid, plugintest.OnlyChild(t, pid))
}

// A cancel that arrives before codex has answered turn/start interrupts
// the turn once its id is known: the next turn is not refused as "already
// in progress".
func TestCancelBeforeTurnStarts(t *testing.T) {
	p, _ := open(t, newHome(t, true), nil, "FAKECODEX_SLOW=50ms")
	turn := plugintest.Prompt(t, p, "sleep 30s")
	plugintest.Cancel(t, p)
	ups, st := p.Turn(turn, turnWait)
	stopOf(t, ups, st, "cancelled")
	run(t, p, "count 1", "end_turn")
}
