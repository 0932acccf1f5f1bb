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

	"github.com/agenthost/agenthost/internal/agentpb"
	"github.com/agenthost/agenthost/plugin/sdk/cliproc"
	"github.com/agenthost/agenthost/plugins/codex/internal/codextest"
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

// realPlugin builds the plugin binary for one test (go build's cache makes
// the second build a link).
func realPlugin(t *testing.T) string {
	t.Helper()
	b, err := codextest.Build(t.TempDir(), map[string]string{"agenthost-plugin-codex": "./cmd/agenthost-plugin-codex"})
	if err != nil {
		t.Fatal(err)
	}
	return b["agenthost-plugin-codex"]
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

func startReal(t *testing.T, bin string, h realHome) *codextest.Plugin {
	t.Helper()
	return codextest.Start(t, bin, h.env("AGENTHOST_CODEX_PATH="+realCLI(t), "OPENAI_API_KEY=sk-agenthost-fake", "AGENTHOST_PLUGIN_LOG_LEVEL=debug"))
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
	bin := realPlugin(t)

	p := startReal(t, bin, h)
	handle, err := p.NewSession(h.workspace, opts)
	if err != nil {
		t.Fatalf("NewSession: %v\n%s", err, p.Stderr())
	}
	ups, st := p.Turn(p.Prompt("say hi"), 60*time.Second)
	if st.StopReason != "failed" || !strings.Contains(st.Error, "401 Unauthorized") || !strings.Contains(st.Error, "Incorrect API key") {
		t.Fatalf("turn stopped %v; updates %s", st, codextest.Describe(ups))
	}
	var reported bool
	for _, u := range ups {
		if hc := u.GetHandleChanged(); hc != nil && hc.Handle == handle && hc.Origin == "created" {
			reported = true
		}
	}
	if !reported {
		t.Errorf("the handle was not reported when the first turn started: %s", codextest.Describe(ups))
	}
	start := time.Now()
	if err := p.Close(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("Close took %s", time.Since(start))

	p2 := startReal(t, bin, h)
	got, err := p2.Resume(h.workspace, handle, opts)
	if err != nil || got != handle {
		t.Fatalf("resume: %q, %v\n%s", got, err, p2.Stderr())
	}
	_, st = p2.Turn(p2.Prompt("again"), 60*time.Second)
	if st.StopReason != "failed" || !strings.Contains(st.Error, "401") {
		t.Errorf("resumed turn %v", st)
	}

	p3 := startReal(t, bin, h)
	unused, err := p3.NewSession(h.workspace, opts)
	if err != nil {
		t.Fatal(err)
	}
	p3.Close(10 * time.Second)
	for _, tt := range []struct{ handle, want string }{
		{unused, "no saved conversation for thread " + unused},
		{"00000000-0000-0000-0000-000000000000", "no rollout found for thread id 00000000-0000-0000-0000-000000000000"},
	} {
		p4 := startReal(t, bin, h)
		if _, err := p4.Resume(h.workspace, tt.handle, opts); err == nil || !strings.Contains(err.Error(), tt.want) {
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
	bin := realPlugin(t)
	p := startReal(t, bin, h)
	if _, err := p.NewSession(h.workspace, provider(url, nil)); err != nil {
		t.Fatal(err)
	}
	turn := p.Prompt("say hi")
	p.Until(30*time.Second, "the turn's start", func(u *agentpb.Update) bool { return u.GetHandleChanged() != nil })
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	p.Cancel()
	ups, st := p.Turn(turn, 10*time.Second)
	if st.StopReason != "cancelled" {
		t.Fatalf("cancelled turn stopped %v: %s", st, codextest.Describe(ups))
	}
	t.Logf("turn/interrupt took %s", time.Since(start))

	p2 := startReal(t, bin, newRealHome(t))
	if _, err := p2.NewSession(h.workspace, provider(url, map[string]string{"model_retry_timeout": "2s"})); err != nil {
		t.Fatal(err)
	}
	_, st = p2.Turn(p2.Prompt("say hi"), 30*time.Second)
	if st.StopReason != "failed" || !strings.Contains(st.Error, "could not reach its model for 2s") || !strings.Contains(st.Error, "Reconnecting") {
		t.Errorf("turn stopped %v", st)
	}
}
