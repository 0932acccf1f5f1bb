//go:build realclis

// Tests against the real codex CLI, offline. Opt in with the build tag
// realclis and the path of the CLI in AGENTHOST_REAL_CODEX (the npm
// launcher or the native binary), e.g. after
// `npm install --prefix DIR @openai/codex@0.171.0`:
//
//	AGENTHOST_REAL_CODEX=DIR/node_modules/.bin/codex go test -tags realclis ./plugins/codex/
//
// HOME and CODEX_HOME point at temporary directories; no test needs the
// network or a credential (a fake key and a local model provider stand in).

package codex

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/internal/logtest"
	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/plugin/sdk"
	"github.com/agenthost/agenthost/plugin/sdk/cliproc"
	"github.com/agenthost/agenthost/plugin/sdk/modelserver"
	"github.com/agenthost/agenthost/plugin/sdk/sdktest"
	"github.com/agenthost/agenthost/plugins/internal/plugintest"
)

// realCLI is the codex under test, or a skip.
func realCLI(t *testing.T) string {
	t.Helper()
	return plugintest.RealCLI(t, "AGENTHOST_REAL_CODEX")
}

// realHome is an isolated HOME with its CODEX_HOME and a workspace.
type realHome struct{ home, codexHome, workspace string }

func newRealHome(t *testing.T) realHome {
	t.Helper()
	// codex refuses some helpers under /tmp but works; keep paths short.
	dir := t.TempDir()
	h := realHome{home: dir, codexHome: filepath.Join(dir, ".codex"), workspace: filepath.Join(dir, "work")}
	for _, d := range []string{h.codexHome, h.workspace} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

func (h realHome) env(extra ...string) []string {
	return append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + h.home, "CODEX_HOME=" + h.codexHome, "RUST_LOG=error"}, extra...)
}

func TestRealVersion(t *testing.T) {
	native, _ := nativeCLI(realCLI(t))
	v, err := checkVersion(t.Context(), native, newRealHome(t).env())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("codex-cli %s at %s", v, native)
}

// rawServer starts `codex app-server` and a conn to it.
func rawServer(t *testing.T, h realHome) (*conn, *cliproc.Process) {
	t.Helper()
	native, _ := nativeCLI(realCLI(t))
	p, err := cliproc.Start(t.Context(), cliproc.Config{Path: native, Args: []string{"app-server"}, Dir: h.workspace, Env: h.env(), Grace: stopGrace})
	if err != nil {
		t.Fatal(err)
	}
	c := newConn(p, nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.readLoop(p.Stdout(), DefaultMaxMessageBytes, func(err error) error { return errors.Join(errProcessGone, err) })
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.Stop(ctx)
		<-done
	})
	return c, p
}

// The handshake, its errors, an ephemeral thread, and the resume errors,
// straight over JSON-RPC.
func TestRealHandshake(t *testing.T) {
	h := newRealHome(t)
	c, _ := rawServer(t, h)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	var re *rpcError
	if err := c.call(ctx, "thread/start", map[string]any{}, nil); !errors.As(err, &re) || re.Code != codeInvalidRequest || re.Message != "Not initialized" {
		t.Fatalf("a request before initialize: %v", err)
	}
	title := clientName
	params := initializeParams{ClientInfo: clientInfo{Name: clientName, Title: &title, Version: Version}, Capabilities: initializeCapabilities{OptOutNotificationMethods: optOut}}
	var init initializeResult
	if err := c.call(ctx, "initialize", params, &init); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(init.UserAgent, clientName+"/") || init.CodexHome != h.codexHome {
		t.Errorf("initialize result %+v", init)
	}
	if err := c.call(ctx, "initialize", params, nil); !errors.As(err, &re) || re.Message != "Already initialized" {
		t.Errorf("a second initialize: %v", err)
	}
	if err := c.notify("initialized", nil); err != nil {
		t.Fatal(err)
	}
	var res threadResult
	if err := c.call(ctx, "thread/start", threadStartParams{Cwd: h.workspace, Ephemeral: true}, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Thread.ID) != 36 || !res.Thread.Ephemeral || res.Thread.Path != nil {
		t.Errorf("ephemeral thread %+v", res.Thread)
	}
	const unknown = "00000000-0000-0000-0000-000000000000"
	err := c.call(ctx, "thread/resume", threadResumeParams{ThreadID: unknown, ExcludeTurns: true}, nil)
	if !errors.As(err, &re) || re.Code != codeInvalidRequest || re.Message != "no rollout found for thread id "+unknown {
		t.Fatalf("resume of an unknown id: %v", err)
	}
	if msg := resumeError(unknown, init.CodexHome, err, err).Error(); !strings.Contains(msg, "no saved conversation for thread "+unknown) {
		t.Errorf("mapped error %q", msg)
	}
	err = c.call(ctx, "thread/resume", threadResumeParams{ThreadID: "bogus", ExcludeTurns: true}, nil)
	if msg := resumeError("bogus", init.CodexHome, err, err).Error(); !strings.Contains(msg, `"bogus" is not a codex thread id`) {
		t.Errorf("resume of a non-id: %v", msg)
	}
}

// provider returns session options pointing codex at a model provider at
// url, with a fake key passed through.
func provider(url string, extra map[string]string) map[string]string {
	opts := map[string]string{
		"allow_credentials": "true",
		"config": `{"model_provider":"agenthost-test","model_providers":{"agenthost-test":{"name":"agenthost test","base_url":"` + url +
			`","env_key":"OPENAI_API_KEY","wire_api":"responses","request_max_retries":0,"stream_max_retries":0}}}`,
	}
	for k, v := range extra {
		opts[k] = v
	}
	return opts
}

// startReal makes h, the real CLI and a fake key the agent's environment
// for the rest of the test, and serves the agent in-process.
func startReal(t *testing.T, h realHome) *sdktest.Harness {
	t.Helper()
	plugintest.Unsetenv(t, credentialVars...)
	plugintest.Setenv(t, h.env(EnvCodexPath+"="+realCLI(t), "OPENAI_API_KEY=sk-agenthost-fake")...)
	return sdktest.NewHarness(t, New)
}

// openReal opens a new session in h's workspace.
func openReal(t *testing.T, p *sdktest.Harness, h realHome, opts map[string]string) (string, error) {
	info, err := p.NewSession(t.Context(), sdk.NewSessionRequest{Workspace: h.workspace, Options: opts})
	return info.Handle, err
}

// resumeReal resumes handle in h's workspace.
func resumeReal(t *testing.T, p *sdktest.Harness, h realHome, handle string, opts map[string]string) (string, error) {
	info, err := p.ResumeSession(t.Context(), sdk.ResumeSessionRequest{Workspace: h.workspace, Handle: handle, Options: opts})
	return info.Handle, err
}

// Through the plugin: a turn whose model answers 401 fails with codex's
// own message; the thread is then saved and resumes in a new process; a
// never-used thread and an unknown id do not resume.
func TestRealPluginTurnsAndResume(t *testing.T) {
	realCLI(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		w.Write([]byte(`{"error":{"message":"Incorrect API key provided: sk-agenthost-fake.","type":"invalid_request_error","code":"invalid_api_key"}}`))
	}))
	defer srv.Close()
	h := newRealHome(t)
	opts := provider(srv.URL+"/v1", nil)

	p := startReal(t, h)
	handle, err := openReal(t, p, h, opts)
	if err != nil {
		t.Fatalf("NewSession: %v", err)
	}
	ups, st := p.Turn(plugintest.Prompt(t, p, "say hi"), 60*time.Second)
	if st.StopReason != "failed" || !strings.Contains(st.Error, "401 Unauthorized") || !strings.Contains(st.Error, "Incorrect API key") {
		t.Fatalf("turn stopped %v; updates %s", st, sdktest.Describe(ups))
	}
	var reported bool
	for _, u := range ups {
		if hc, ok := u.SessionUpdate().(*journal.HandleChanged); ok && hc.Handle == handle && hc.Origin == "created" {
			reported = true
		}
	}
	if !reported {
		t.Errorf("the handle was not reported when the first turn started: %s", sdktest.Describe(ups))
	}
	start := time.Now()
	if err := plugintest.CloseWithin(p, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("Close took %s", time.Since(start))

	p2 := startReal(t, h)
	got, err := resumeReal(t, p2, h, handle, opts)
	if err != nil || got != handle {
		t.Fatalf("resume: %q, %v", got, err)
	}
	_, st = p2.Turn(plugintest.Prompt(t, p2, "again"), 60*time.Second)
	if st.StopReason != "failed" || !strings.Contains(st.Error, "401") {
		t.Errorf("resumed turn %v", st)
	}

	p3 := startReal(t, h)
	unused, err := openReal(t, p3, h, opts)
	if err != nil {
		t.Fatal(err)
	}
	plugintest.CloseWithin(p3, 10*time.Second)
	for _, tt := range []struct{ handle, want string }{
		{unused, "no saved conversation for thread " + unused},
		{"00000000-0000-0000-0000-000000000000", "no rollout found for thread id 00000000-0000-0000-0000-000000000000"},
	} {
		p4 := startReal(t, h)
		if _, err := resumeReal(t, p4, h, tt.handle, opts); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("resume %s: %v, want %q", tt.handle, err, tt.want)
		}
	}
}

// A model that cannot be reached keeps codex retrying: Cancel interrupts
// the turn, and model_retry_timeout fails it with a clear message.
func TestRealPluginUnreachableModel(t *testing.T) {
	realCLI(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String() + "/v1"
	l.Close() // nothing listens: connections are refused

	h := newRealHome(t)
	p := startReal(t, h)
	if _, err := openReal(t, p, h, provider(url, nil)); err != nil {
		t.Fatal(err)
	}
	id := plugintest.Prompt(t, p, "say hi")
	p.Until(30*time.Second, "the turn's start", func(u sdktest.Update) bool { return u.Kind == "handle_changed" })
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	plugintest.Cancel(t, p)
	ups, st := p.Turn(id, 10*time.Second)
	if st.StopReason != "cancelled" {
		t.Fatalf("cancelled turn stopped %v: %s", st, sdktest.Describe(ups))
	}
	t.Logf("turn/interrupt took %s", time.Since(start))

	p2 := startReal(t, newRealHome(t))
	if _, err := openReal(t, p2, h, provider(url, map[string]string{"model_retry_timeout": "2s"})); err != nil {
		t.Fatal(err)
	}
	_, st = p2.Turn(plugintest.Prompt(t, p2, "say hi"), 30*time.Second)
	if st.StopReason != "failed" || !strings.Contains(st.Error, "could not reach its model for 2s") || !strings.Contains(st.Error, "Reconnecting") {
		t.Errorf("turn stopped %v", st)
	}
}

// TestRealStateAcrossMachines moves a thread between two "machines" (a
// HOME, CODEX_HOME and workspace each, the workspaces at different paths
// with the same files): machine A runs a turn against the scripted model
// server and exports the thread's state while its app-server still runs;
// machine B, which never saw the thread, imports it, resumes the handle
// and runs a second turn, and the model receives the first turn's
// question and answer.
func TestRealStateAcrossMachines(t *testing.T) {
	realCLI(t)
	srv, err := modelserver.Start(modelserver.Config{Logger: logtest.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	opts := provider(srv.OpenAIBaseURL(), nil)
	const question, answer = "QUESTION-ONE: remember the word aubergine", "ANSWER-ONE: aubergine noted"

	a := newRealHome(t)
	os.WriteFile(filepath.Join(a.workspace, "README.md"), []byte("the project\n"), 0o600)
	pa := startReal(t, a)
	handle, err := openReal(t, pa, a, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Script(modelserver.Text(answer)); err != nil {
		t.Fatal(err)
	}
	ups, st := pa.Turn(plugintest.Prompt(t, pa, question), 60*time.Second)
	if st.StopReason != "end_turn" {
		t.Fatalf("machine A's turn: %v %s", st, sdktest.Describe(ups))
	}
	// As a host does after the turn's stop: ExportState through the SDK.
	exported, state, err := pa.ExportState(t.Context())
	if err != nil || exported != handle {
		t.Fatalf("ExportState: %q, %v", exported, err)
	}
	t.Logf("the state after one turn is %d bytes", len(state))
	if err := plugintest.CloseWithin(pa, 10*time.Second); err != nil {
		t.Fatal(err)
	}

	b := newRealHome(t)
	os.WriteFile(filepath.Join(b.workspace, "README.md"), []byte("the project\n"), 0o600)
	pb := startReal(t, b)
	if _, err := resumeReal(t, pb, b, handle, opts); err == nil || !strings.Contains(err.Error(), "no rollout found") {
		t.Fatalf("resume on B before the import: %v", err)
	}
	plugintest.CloseWithin(pb, 10*time.Second)
	// As a host on another machine resumes: the SDK imports the state
	// before ResumeSession.
	pb = startReal(t, b)
	info, err := pb.ResumeSessionWithState(t.Context(), sdk.ResumeSessionRequest{Workspace: b.workspace, Handle: handle, Options: opts}, state)
	if err != nil || info.Handle != handle {
		t.Fatalf("resume on B: %+v %v", info, err)
	}
	if err := srv.Script(modelserver.Text("ANSWER-TWO")); err != nil {
		t.Fatal(err)
	}
	ups, st = pb.Turn(plugintest.Prompt(t, pb, "QUESTION-TWO: which word?"), 60*time.Second)
	if st.StopReason != "end_turn" {
		t.Fatalf("machine B's turn: %v %s", st, sdktest.Describe(ups))
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
	// Codex told the model of the new workspace itself.
	if !strings.Contains(string(last.Body), "<cwd>"+b.workspace+"</cwd>") {
		t.Errorf("machine B's model request does not name B's workspace %s", b.workspace)
	}
	if found := findRollouts(b.codexHome, handle); len(found) != 1 {
		t.Errorf("B holds rollouts %v", found)
	}
	if err := plugintest.CloseWithin(pb, 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

// A cancelled turn's state exports too: codex records the interrupted
// turn's end (turn_aborted) in the rollout, which ExportState waits for.
func TestRealStateAfterCancel(t *testing.T) {
	realCLI(t)
	srv, err := modelserver.Start(modelserver.Config{Logger: logtest.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	h := newRealHome(t)
	p := startReal(t, h)
	handle, err := openReal(t, p, h, provider(srv.OpenAIBaseURL(), nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Script(modelserver.Reply{Text: strings.Repeat("slow words ", 200), Delay: 50 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	id := plugintest.Prompt(t, p, "write at length")
	p.Until(30*time.Second, "the first chunk", func(u sdktest.Update) bool { return u.Kind == "agent_message_chunk" })
	plugintest.Cancel(t, p)
	if ups, st := p.Turn(id, 10*time.Second); st.StopReason != "cancelled" {
		t.Fatalf("cancelled turn stopped %v: %s", st, sdktest.Describe(ups))
	}
	exported, state, err := p.ExportState(t.Context())
	if err != nil || exported != handle || len(state) == 0 {
		t.Fatalf("export after a cancelled turn: %q, %d bytes, %v", exported, len(state), err)
	}
	t.Logf("the state after a cancelled turn is %d bytes", len(state))
}
