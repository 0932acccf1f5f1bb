//go:build realclis

package claude

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/internal/logtest"
	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/plugin/sdk"
	"github.com/agenthost/agenthost/plugin/sdk/modelserver"
	"github.com/agenthost/agenthost/plugin/sdk/sdktest"
	"github.com/agenthost/agenthost/plugins/internal/plugintest"
)

// These tests drive the real claude CLI, offline: everything but a model
// call works without a network. `make test-real-clis` installs the pinned
// release and runs them; by hand:
//
//	AGENTHOST_REAL_CLAUDE=/path/to/claude go test -tags realclis -run Real ./plugins/claude/
//
// HOME and CLAUDE_CONFIG_DIR are temporary directories, so no login of the
// machine is used and nothing is written outside them.

// realFixture returns a fixture whose agent runs the real CLI, with no
// login in its config dir, and the environment that selects it.
func realFixture(t *testing.T) (*fixture, []string) {
	t.Helper()
	abs := plugintest.RealCLI(t, "AGENTHOST_REAL_CLAUDE")
	f := newFixture(t)
	os.Remove(filepath.Join(f.configDir, ".credentials.json"))
	return f, []string{
		EnvCLIPath + "=" + abs,
		"DISABLE_AUTOUPDATER=1",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"DISABLE_TELEMETRY=1",
	}
}

// noLogin opens sessions without credentials: the readiness check would
// refuse them, the CLI starts anyway.
var noLogin = map[string]string{OptSkipAuthCheck: "true"}

func TestRealVersion(t *testing.T) {
	f, env := realFixture(t)
	v, err := checkVersion(context.Background(), strings.TrimPrefix(env[0], EnvCLIPath+"="), os.Environ())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("claude %s", v)
	h := f.start(t, env...)
	f.open(t, h, noLogin)
	id, err := h.Identify(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if id.AgentVersion != v.String() {
		t.Errorf("Identify reports version %q, want %q", id.AgentVersion, v)
	}
}

// TestRealNewSessionAndAuthError opens a session (the initialize
// handshake), runs a turn that cannot reach its model for want of
// credentials, and resumes the session in a new agent.
func TestRealNewSessionAndAuthError(t *testing.T) {
	f, env := realFixture(t)
	h := f.start(t, env...)
	handle := f.open(t, h, noLogin)
	ups, stop := h.Run("say hi", wait)
	if stop.StopReason != "failed" || !strings.HasPrefix(stop.Error, "claude: authentication failed (Not logged in") {
		t.Fatalf("turn without credentials: %v %s", stop, sdktest.Describe(ups))
	}
	if strings.Contains(strings.Join(texts(ups), ""), "Not logged in") {
		t.Errorf("the synthetic auth message was reported as the agent's: %q", texts(ups))
	}
	// The turn reached the CLI, so the conversation has a transcript.
	matches, _ := filepath.Glob(filepath.Join(f.configDir, "projects", "*", handle+".jsonl"))
	if len(matches) != 1 {
		t.Errorf("no transcript for %s under %s", handle, f.configDir)
	}
	if err := plugintest.CloseWithin(h, 15*time.Second); err != nil {
		t.Fatal(err)
	}

	h = f.start(t, env...)
	info, err := f.tryResume(t, h, handle, noLogin)
	if err != nil || info.Handle != handle {
		t.Fatalf("ResumeSession(%s): %+v %v", handle, info, err)
	}
	ups, stop = h.Run("say hi again", wait)
	if stop.StopReason != "failed" || !strings.HasPrefix(stop.Error, "claude: authentication failed") {
		t.Fatalf("resumed turn: %v %s", stop, sdktest.Describe(ups))
	}
	for _, u := range ups {
		if c, ok := u.SessionUpdate().(*journal.HandleChanged); ok {
			t.Errorf("claude %s changed the session id on resume: %+v", TestedVersion, c)
		}
	}
	if err := plugintest.CloseWithin(h, 15*time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestRealResumeUnknown(t *testing.T) {
	f, env := realFixture(t)
	h := f.start(t, env...)
	const unknown = "11111111-2222-4333-8444-555555555555"
	_, err := f.tryResume(t, h, unknown, noLogin)
	if err == nil || !strings.Contains(err.Error(), "No conversation found with session ID: "+unknown) {
		t.Fatalf("ResumeSession(unknown): %v", err)
	}
}

func TestRealSessionIDInUse(t *testing.T) {
	f, env := realFixture(t)
	h := f.start(t, env...)
	handle := f.open(t, h, noLogin)
	h.Run("say hi", wait) // writes the transcript
	plugintest.CloseWithin(h, 15*time.Second)
	h = f.start(t, env...)
	_, err := f.tryOpen(t, h, map[string]string{OptSkipAuthCheck: "true", OptSessionID: handle})
	if err == nil || !strings.Contains(err.Error(), "Error: Session ID "+handle+" is already in use.") {
		t.Fatalf("NewSession with a used id: %v", err)
	}
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestRealInterrupt runs a turn whose model calls are refused (a fake key,
// an API address nothing listens on): the CLI retries until interrupted.
func TestRealInterrupt(t *testing.T) {
	f, env := realFixture(t)
	env = append(env, "ANTHROPIC_API_KEY=sk-ant-agenthost-test", "ANTHROPIC_BASE_URL=http://"+closedPort(t))
	h := f.start(t, env...)
	f.open(t, h, map[string]string{OptAllowCredentials: "true"})
	turn := plugintest.Prompt(t, h, "write a poem")
	var early []sdktest.Update
	for deadline := time.Now().Add(1500 * time.Millisecond); ; {
		u, ok := h.Next(time.Until(deadline))
		if !ok {
			break
		}
		if early = append(early, u); u.Stop() != nil && u.TurnID == turn {
			t.Fatalf("the turn ended by itself: %v %s", *u.Stop(), sdktest.Describe(early))
		}
	}
	start := time.Now()
	plugintest.Cancel(t, h)
	_, stop := h.Turn(turn, 10*time.Second)
	if stop.StopReason != "cancelled" {
		t.Fatalf("after Cancel: %v", stop)
	}
	t.Logf("the interrupted turn ended %s after Cancel", time.Since(start).Round(time.Millisecond))
	// One CLI did it all: the interrupt kept it. The agent runs in the
	// test process, so the CLI is the test's child.
	if n := len(plugintest.Children(os.Getpid())); n != 1 {
		t.Errorf("the test process has %d children, want the agent's one CLI", n)
	}
	if err := plugintest.CloseWithin(h, 15*time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestRealPluginKilled: the real CLI dies with its plugin, which runs as a
// process of its own for the test to kill.
func TestRealPluginKilled(t *testing.T) {
	f, env := realFixture(t)
	f.setenv(t, env...)
	h := sdktest.NewProcessHarness(t, f.plugin)
	f.open(t, h, noLogin)
	pid := plugintest.PluginPID(t, h)
	plugintest.KillPlugin(t, pid, plugintest.OnlyChild(t, pid))
}

// TestRealStateAcrossMachines moves a conversation between two
// "machines" (a config dir, a home and a workspace each, the workspaces
// at different paths with the same files): machine A runs a turn against
// the scripted model server and exports the session's state while its
// CLI still runs; machine B, which never saw the session, imports it,
// resumes the handle and runs a second turn, and the model receives the
// first turn's question and answer.
func TestRealStateAcrossMachines(t *testing.T) {
	srv, err := modelserver.Start(modelserver.Config{Logger: logtest.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	creds := []string{"ANTHROPIC_BASE_URL=" + srv.URL(), "ANTHROPIC_API_KEY=sk-agenthost-modelserver", "CLAUDE_CODE_MAX_RETRIES=1"}
	opts := map[string]string{OptAllowCredentials: "true"}
	const question, answer = "QUESTION-ONE: remember the word aubergine", "ANSWER-ONE: aubergine noted"

	a, env := realFixture(t)
	writeFile(t, filepath.Join(a.workspace, "README.md"), "the project\n")
	a.setenv(t, append(env, creds...)...)
	ha := sdktest.NewHarness(t, New)
	handle := a.open(t, ha, opts)
	// A Bash output too large for the conversation: the CLI keeps it in
	// the session's directory and names that file's path to the model.
	if err := srv.Script(modelserver.Tool("Bash", `{"command":"seq 1 60000","description":"count"}`), modelserver.Text(answer)); err != nil {
		t.Fatal(err)
	}
	ups, stop := ha.Run(question, 60*time.Second)
	if stop.StopReason != "end_turn" || !strings.Contains(strings.Join(texts(ups), ""), answer) {
		t.Fatalf("machine A's turn: %v %s", stop, sdktest.Describe(ups))
	}
	// As a host does after the turn's stop: ExportState through the SDK.
	exported, state, err := ha.ExportState(t.Context())
	if err != nil || exported != handle {
		t.Fatalf("ExportState: %q, %v", exported, err)
	}
	t.Logf("claude %s: the state after one turn is %d bytes", TestedVersion, len(state))
	if err := plugintest.CloseWithin(ha, 15*time.Second); err != nil {
		t.Fatal(err)
	}

	b, _ := realFixture(t)
	writeFile(t, filepath.Join(b.workspace, "README.md"), "the project\n")
	if a.workspace == b.workspace || a.configDir == b.configDir {
		t.Fatalf("the machines share %s or %s", a.workspace, a.configDir)
	}
	b.setenv(t, append(env, creds...)...)
	hb := sdktest.NewHarness(t, New)
	// B cannot resume what it never saw.
	if _, err := b.tryResume(t, hb, handle, opts); err == nil || !strings.Contains(err.Error(), "No conversation found") {
		t.Fatalf("resume on B before the import: %v", err)
	}
	plugintest.CloseWithin(hb, 15*time.Second)
	// As a host on another machine resumes: the SDK imports the state
	// before ResumeSession.
	hb = sdktest.NewHarness(t, New)
	info, err := hb.ResumeSessionWithState(t.Context(), sdk.ResumeSessionRequest{Workspace: b.workspace, Options: opts, Handle: handle}, state)
	if err != nil || info.Handle != handle {
		t.Fatalf("resume on B: %+v %v", info, err)
	}
	if err := srv.Script(modelserver.Text("ANSWER-TWO")); err != nil {
		t.Fatal(err)
	}
	ups, stop = hb.Run("QUESTION-TWO: which word?", 60*time.Second)
	if stop.StopReason != "end_turn" {
		t.Fatalf("machine B's turn: %v %s", stop, sdktest.Describe(ups))
	}
	reqs := srv.ModelRequests()
	last := reqs[len(reqs)-1]
	var user, assistant bool
	for _, m := range last.Messages {
		for _, p := range m.Parts {
			user = user || (m.Role == "user" && p.Type == modelserver.TextPart && strings.Contains(p.Text, question))
			assistant = assistant || (m.Role == "assistant" && p.Type == modelserver.TextPart && strings.Contains(p.Text, answer))
		}
	}
	if !user || !assistant || !strings.Contains(last.LastUserText(), "QUESTION-TWO") {
		t.Fatalf("machine B's model request lacks the first turn (user %v, assistant %v): %+v", user, assistant, last.Messages)
	}
	// The large output's path names B's config dir, where the file is.
	var saved string
	for _, p := range last.ToolResults() {
		if _, rest, ok := strings.Cut(p.Text, "Full output saved to: "); ok {
			saved, _, _ = strings.Cut(rest, "\n")
		}
	}
	if !strings.HasPrefix(saved, filepath.Join(b.configDir, "projects")+"/") {
		t.Errorf("machine B's model request names the large output at %q, not under B's %s", saved, b.configDir)
	} else if st, err := os.Stat(saved); err != nil || st.Size() < 300000 {
		t.Errorf("the large output on B: %v", err)
	}
	// The CLI told the model of the new workspace itself.
	if !strings.Contains(string(last.Body), b.workspace) {
		t.Errorf("machine B's model request does not name B's workspace %s", b.workspace)
	}
	matches, _ := filepath.Glob(filepath.Join(b.configDir, "projects", "*", handle+".jsonl"))
	if len(matches) != 1 {
		t.Errorf("B holds %d transcripts of the session: %v", len(matches), matches)
	}
	if err := plugintest.CloseWithin(hb, 15*time.Second); err != nil {
		t.Fatal(err)
	}
}

// A cancelled turn's state exports too: the transcript holds the last
// line the CLI printed, the interrupt marker included.
func TestRealStateAfterCancel(t *testing.T) {
	srv, err := modelserver.Start(modelserver.Config{Logger: logtest.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	f, env := realFixture(t)
	f.setenv(t, append(env, "ANTHROPIC_BASE_URL="+srv.URL(), "ANTHROPIC_API_KEY=sk-agenthost-modelserver", "CLAUDE_CODE_MAX_RETRIES=1")...)
	h := sdktest.NewHarness(t, New)
	handle := f.open(t, h, map[string]string{OptAllowCredentials: "true"})
	if err := srv.Script(modelserver.Reply{Text: strings.Repeat("slow words ", 200), Delay: 50 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	id := plugintest.Prompt(t, h, "write at length")
	h.Until(30*time.Second, "the first chunk", func(u sdktest.Update) bool { return u.Kind == "agent_message_chunk" })
	plugintest.Cancel(t, h)
	if ups, stop := h.Turn(id, 10*time.Second); stop.StopReason != "cancelled" {
		t.Fatalf("cancelled turn stopped %v: %s", stop, sdktest.Describe(ups))
	}
	exported, state, err := h.ExportState(t.Context())
	if err != nil || exported != handle || len(state) == 0 {
		t.Fatalf("export after a cancelled turn: %q, %d bytes, %v", exported, len(state), err)
	}
	t.Logf("the state after a cancelled turn is %d bytes", len(state))
}
