package realcli_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/internal/apiclient"
	"github.com/agenthost/agenthost/internal/buildtest"
	"github.com/agenthost/agenthost/internal/logtest"
	"github.com/agenthost/agenthost/internal/realcli"
	"github.com/agenthost/agenthost/internal/serveproc"
	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/leasestore"
	"github.com/agenthost/agenthost/plugin/sdk/modelserver"
)

// These tests drive the real, pinned claude and codex CLIs through
// `agenthost serve` and its socket API, as a desktop app does, against a
// scripted model server on loopback. `make clis` installs the CLIs (make
// test runs it where npm exists); without them every test skips, saying
// how to install them.

var agenthostBin string

func TestMain(m *testing.M) {
	os.Exit(buildtest.Main(m, map[*string]string{&agenthostBin: "../../cmd/agenthost", &mcpEchoBin: "./testdata/mcpecho"}))
}

// cli is one of the two CLIs under test, and how to point it at a model
// server.
type cli struct {
	name  string // the built-in agent's name
	find  func() (string, error)
	setup func(t *testing.T, path, home string, srv *modelserver.Server) realcli.Setup
}

var claudeCLI = cli{
	name: "claude", find: realcli.Claude,
	setup: func(t *testing.T, path, home string, srv *modelserver.Server) realcli.Setup {
		return realcli.ClaudeSetup(path, home, srv.URL(), 1)
	},
}

var codexCLI = cli{
	name: "codex", find: realcli.Codex,
	setup: func(t *testing.T, path, home string, srv *modelserver.Server) realcli.Setup {
		s, err := realcli.CodexSetup(path, home, srv.OpenAIBaseURL(), 1)
		if err != nil {
			t.Fatal(err)
		}
		return s
	},
}

// rig is one test's world: a model server, a state directory with an
// agenthost.json opting the built-ins into credentials, a home directory
// for the CLI, a workspace, and the agenthost serve process.
type rig struct {
	t         *testing.T
	cli       cli
	srv       *modelserver.Server
	dir       string // state directory
	home      string // the CLI's HOME
	workspace string
	env       []string  // agenthost serve's environment
	serve     *server   // the newest agenthost serve
	served    []*server // every one started, oldest first
}

func newRig(t *testing.T, c cli) *rig {
	t.Helper()
	path, err := c.find()
	if err != nil {
		t.Skipf("skipping the real %s tests: %v", c.name, err)
	}
	srv, err := modelserver.Start(modelserver.Config{Logger: logtest.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	// Not t.TempDir: the state directory holds the API's unix socket,
	// whose path must stay short (108 bytes), and test names are long.
	dir, err := os.MkdirTemp("", "ahr-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	home := filepath.Join(dir, "home")
	workspace := filepath.Join(dir, "work")
	for _, d := range []string{home, workspace} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	env := realcli.IsolatedEnv(os.Environ(), home)
	guard, err := realcli.StartGuard()
	if err != nil {
		t.Fatal(err)
	}
	setup := c.setup(t, path, home, srv)
	setup.Env = append(setup.Env, guard.Env()...)
	config, err := realcli.Config(setup)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "agenthost.json"), config, 0o600); err != nil {
		t.Fatal(err)
	}
	env = append(env, "AGENTHOST_LOG_LEVEL=debug")
	env = append(env, setup.Credentials...)
	r := &rig{t: t, cli: c, srv: srv, dir: dir, home: home, workspace: workspace, env: env}
	t.Cleanup(func() {
		guard.Close()
		for _, h := range guard.Hosts() {
			if slices.Contains(backgroundHosts[c.name], h) {
				t.Logf("the %s CLI tried to reach %s in the background; the guard refused", c.name, h)
			} else {
				t.Errorf("the %s CLI tried to reach %s; the guard refused, but a test must need nothing beyond loopback", c.name, h)
			}
		}
	})
	t.Cleanup(func() {
		if r.serve != nil {
			r.serve.stop()
		}
		r.noProcessesLeft()
		if t.Failed() {
			for i, s := range r.served {
				t.Logf("agenthost serve (%d of %d)'s stderr:\n%s", i+1, len(r.served), s.Stderr())
			}
		}
	})
	return r
}

// backgroundHosts are what a CLI tries to reach on its own whatever the
// test does, and does without: codex 0.171.0 looks for a newer release
// and for its plugins and models catalogue. Anything else a CLI tries
// fails the test.
var backgroundHosts = map[string][]string{
	"codex": {"api.github.com:443", "chatgpt.com:443", "github.com:443"},
}

// server is an agenthost serve process.
type server struct {
	*serveproc.Server
	t      *testing.T
	socket string
}

// start starts agenthost serve, with args, and waits for its ready line.
// The rig stops it at the end of the test (shutting its sessions down).
func (r *rig) start(args ...string) *server {
	r.t.Helper()
	sp, err := serveproc.Start(serveproc.Config{Bin: agenthostBin, StateDir: r.dir, Env: r.env, Args: append([]string{"--shutdown-sessions"}, args...)})
	if err != nil {
		r.t.Fatal(err)
	}
	s := &server{Server: sp, t: r.t, socket: sp.Socket}
	r.serve = s
	r.served = append(r.served, s)
	return s
}

// stop sends SIGTERM and waits for the server to exit.
func (s *server) stop() {
	if err := s.Stop(30 * time.Second); err != nil {
		s.t.Error(err)
	}
}

// kill SIGKILLs the server, as a crash would.
func (s *server) kill() { s.Kill() }

// processes lists the live processes started for the rig: plugins, CLIs
// and whatever they ran all have the rig's home as HOME (agenthost serve
// itself is left out).
func (r *rig) processes() []int {
	pids := serveproc.ProcessesWith(func(kv string) bool { return kv == "HOME="+r.home })
	if r.serve != nil {
		pids = slices.DeleteFunc(pids, func(pid int) bool { return pid == r.serve.PID() })
	}
	return pids
}

// noProcessesLeft fails the test if a plugin or CLI of the rig still
// runs after its host shut its sessions down, and kills it.
func (r *rig) noProcessesLeft() {
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := r.processes()
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, pid := range left {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			r.t.Errorf("processes %v outlived the host that was told to shut its sessions down", left)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// client is a socket API client as a desktop app writes one: it keeps
// every session/update and answers permission requests with answer.
type client struct {
	t *testing.T
	c *apiclient.Client

	mu      sync.Mutex
	updates []received
	asked   []acp.RequestPermissionRequest
	answer  func(acp.RequestPermissionRequest) acp.PermissionOptionKind
}

// received is one session/update notification, decoded.
type received struct {
	Seq    uint64
	TurnID string
	Update journal.SessionUpdate
}

func (r *rig) dial(s *server) *client {
	r.t.Helper()
	c := &client{t: r.t}
	ac, err := apiclient.Dial(ctxFor(r.t, 30*time.Second), s.socket, apiclient.Options{OnNotification: c.note, OnRequest: c.request})
	if err != nil {
		r.t.Fatal(err)
	}
	c.c = ac
	r.t.Cleanup(func() { ac.Close() })
	if err := ac.Call(ctxFor(r.t, 30*time.Second), api.MethodInitialize, acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber}, nil); err != nil {
		r.t.Fatal(err)
	}
	return c
}

func (c *client) note(m *apiclient.Message) {
	if m.Method != api.MethodSessionUpdate {
		return
	}
	var p api.SessionUpdateParams
	if err := json.Unmarshal(m.Params, &p); err != nil {
		c.t.Errorf("session/update %s: %v", m.Params, err)
		return
	}
	u, err := journal.DecodeUpdate(p.Update)
	if err != nil {
		c.t.Errorf("session/update %s: %v", m.Params, err)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.updates = append(c.updates, received{Seq: p.Meta.Agenthost.Seq, TurnID: p.Meta.Agenthost.TurnID, Update: u})
}

func (c *client) request(method string, params json.RawMessage) (any, error) {
	if method != api.MethodRequestPermission {
		return nil, errors.New("not served")
	}
	var req acp.RequestPermissionRequest
	if err := json.Unmarshal(params, &req); err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.asked = append(c.asked, req)
	answer := c.answer
	c.mu.Unlock()
	kind := acp.PermissionOptionKindRejectOnce
	if answer != nil {
		kind = answer(req)
	}
	for _, o := range req.Options {
		if o.Kind == kind {
			return acp.RequestPermissionResponse{Outcome: acp.RequestPermissionOutcome{Selected: &acp.RequestPermissionOutcomeSelected{OptionId: o.OptionId}}}, nil
		}
	}
	return acp.RequestPermissionResponse{Outcome: acp.RequestPermissionOutcome{Cancelled: &acp.RequestPermissionOutcomeCancelled{}}}, nil
}

// received returns the updates so far.
func (c *client) received() []received {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.updates)
}

// permissionRequests returns the permission requests so far.
func (c *client) permissionRequests() []acp.RequestPermissionRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.asked)
}

// newSession starts a session of the rig's agent in its workspace with
// options.
func (c *client) newSession(r *rig, options map[string]string) string {
	c.t.Helper()
	var res acp.NewSessionResponse
	meta := map[string]any{api.MetaKey: api.NewSessionMeta{Agent: r.cli.name, Options: options}}
	if err := c.c.Call(ctxFor(c.t, 60*time.Second), api.MethodSessionNew, acp.NewSessionRequest{Cwd: r.workspace, McpServers: []acp.McpServer{}, Meta: meta}, &res); err != nil {
		c.t.Fatalf("session/new: %v", err)
	}
	return string(res.SessionId)
}

// prompt runs a turn and returns its stop reason, or the error it failed
// with.
func (c *client) prompt(ctx context.Context, id, text string) (acp.StopReason, error) {
	var res acp.PromptResponse
	err := c.c.Call(ctx, api.MethodSessionPrompt, acp.PromptRequest{SessionId: acp.SessionId(id), Prompt: []acp.ContentBlock{acp.TextBlock(text)}}, &res)
	return res.StopReason, err
}

// mustPrompt runs a turn that must end with want.
func (c *client) mustPrompt(id, text string, want acp.StopReason) {
	c.t.Helper()
	got, err := c.prompt(ctxFor(c.t, 90*time.Second), id, text)
	if err != nil || got != want {
		c.t.Fatalf("prompt %q: stop reason %q, error %v; want %q", text, got, err, want)
	}
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// entry is one journal entry as a subscriber reads it, decoded.
type entry struct {
	Seq    uint64
	Record journal.Record
}

// journal reads the session's whole journal through the API, on a
// connection of its own: every entry up to the newest when it subscribed.
func (r *rig) journal(s *server, id string) []entry {
	r.t.Helper()
	var mu sync.Mutex
	var got []entry
	note := func(m *apiclient.Message) {
		if m.Method != api.MethodJournal {
			return
		}
		var e api.JournalEntry
		if err := json.Unmarshal(m.Params, &e); err != nil {
			r.t.Errorf("%s %s: %v", api.MethodJournal, m.Params, err)
			return
		}
		rec, err := journal.DecodePayload(leasestore.EntryKind(e.Kind), e.Payload)
		if err != nil {
			r.t.Errorf("journal entry %d (%s) %s: %v", e.Seq, e.Kind, e.Payload, err)
			return
		}
		mu.Lock()
		got = append(got, entry{Seq: e.Seq, Record: rec})
		mu.Unlock()
	}
	ctx := ctxFor(r.t, 30*time.Second)
	c, err := apiclient.Dial(ctx, s.socket, apiclient.Options{OnNotification: note})
	if err != nil {
		r.t.Fatal(err)
	}
	defer c.Close()
	var sub api.SubscribeResult
	if err := c.Call(ctx, api.MethodSubscribe, api.Params{SessionID: id, FromSeq: 1}, &sub); err != nil {
		r.t.Fatal(err)
	}
	if err := c.WaitFor(ctx, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) > 0 && got[len(got)-1].Seq >= sub.LastSeq
	}); err != nil {
		r.t.Fatalf("reading the journal of %s up to %d: %v", id, sub.LastSeq, err)
	}
	mu.Lock()
	defer mu.Unlock()
	return slices.Clone(got)
}
