package localapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/localapi"
	"github.com/agenthost/agenthost/internal/logtest"
	"github.com/agenthost/agenthost/leasestore"
	"github.com/agenthost/agenthost/leasestore/badgerstore"
)

// The ACP session surface, through the surface test agent
// (host/internal/surfaceagent), which declares all of it and logs what it
// receives.

// surfaceHost is a host with the surface agent serving its API; reopen
// opens another on the same state directory, as a restart does.
type surfaceHost struct {
	t    *testing.T
	dir  string
	log  string
	cfg  func(*host.Config)
	srv  func(*localapi.Server)
	h    *host.Host
	sock string
	stop func(shutdown bool)
	n    int
}

func newSurface(t *testing.T, cfg func(*host.Config), srv func(*localapi.Server)) *surfaceHost {
	t.Helper()
	dir, err := os.MkdirTemp("", "ah-surface-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sh := &surfaceHost{t: t, dir: dir, log: filepath.Join(dir, "surface.log"), cfg: cfg, srv: srv}
	sh.open()
	t.Cleanup(func() { sh.stop(true) })
	return sh
}

func (sh *surfaceHost) open() {
	t := sh.t
	t.Helper()
	store, err := badgerstore.Open(context.Background(), sh.dir, badgerstore.Options{Logger: logtest.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	cfg := host.Config{StateDir: sh.dir, Store: store, Logger: logtest.New(t),
		Agents: map[string]host.AgentPlugin{"surface": {Path: surface, Env: []string{"SURFACE_LOG=" + sh.log}}}}
	if sh.cfg != nil {
		sh.cfg(&cfg)
	}
	h, err := host.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	sh.n++
	sock := filepath.Join(sh.dir, fmt.Sprintf("api-%d.sock", sh.n))
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv := &localapi.Server{Host: h, DefaultAgent: "surface", Version: "test", Logger: logtest.New(t)}
	if sh.srv != nil {
		sh.srv(srv)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	var once sync.Once
	sh.h, sh.sock = h, sock
	sh.stop = func(shutdown bool) {
		once.Do(func() {
			cancel()
			<-done
			if shutdown {
				_ = h.Shutdown(context.Background())
			} else {
				_ = h.Close(context.Background())
			}
		})
	}
}

// restart stops the host (its plugins too, when shutdown) and opens a new
// one on the same state directory.
func (sh *surfaceHost) restart(shutdown bool) {
	sh.t.Helper()
	sh.stop(shutdown)
	sh.open()
}

// events returns what the agent logged of one kind, oldest first.
func (sh *surfaceHost) events(kind string) []json.RawMessage {
	sh.t.Helper()
	f, err := os.Open(sh.log)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []json.RawMessage
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e struct {
			Event string          `json:"event"`
			Data  json.RawMessage `json:"data"`
		}
		if json.Unmarshal(sc.Bytes(), &e) == nil && e.Event == kind {
			out = append(out, e.Data)
		}
	}
	return out
}

// opened is what the agent logged of the latest new or resume.
type opened struct {
	Options    map[string]string `json:"options"`
	MCPServers []struct {
		Name, Transport, Command, URL string
		Args                          []string
	} `json:"mcpServers"`
}

func (sh *surfaceHost) lastOpen(kind string) opened {
	sh.t.Helper()
	es := sh.events(kind)
	if len(es) == 0 {
		sh.t.Fatalf("the agent logged no %s", kind)
	}
	var o opened
	if err := json.Unmarshal(es[len(es)-1], &o); err != nil {
		sh.t.Fatal(err)
	}
	return o
}

type sessionResult struct {
	SessionID string `json:"sessionId"`
	Modes     *struct {
		CurrentModeID  string `json:"currentModeId"`
		AvailableModes []struct {
			ID string `json:"id"`
		} `json:"availableModes"`
	} `json:"modes"`
	ConfigOptions []struct {
		Type         string `json:"type"`
		ID           string `json:"id"`
		CurrentValue string `json:"currentValue"`
		Category     string `json:"category"`
		Options      []struct {
			Value string `json:"value"`
		} `json:"options"`
	} `json:"configOptions"`
}

func (r sessionResult) config(id string) string {
	for _, o := range r.ConfigOptions {
		if o.ID == id {
			return o.CurrentValue
		}
	}
	return ""
}

func (r sessionResult) mode() string {
	if r.Modes == nil {
		return ""
	}
	return r.Modes.CurrentModeID
}

func newParams(cwd string, options map[string]string, servers ...any) map[string]any {
	if servers == nil {
		servers = []any{}
	}
	return map[string]any{"cwd": cwd, "mcpServers": servers, "_meta": map[string]any{"agenthost": map[string]any{"options": options}}}
}

func textPrompt(id, text string) map[string]any {
	return map[string]any{"sessionId": id, "prompt": []any{map[string]any{"type": "text", "text": text}}}
}

func stdioServer(name string) map[string]any {
	return map[string]any{"name": name, "command": "/bin/" + name, "args": []string{"--root", "/w"}, "env": []any{map[string]any{"name": "K", "value": "V"}}}
}

func httpServer(name string) map[string]any {
	return map[string]any{"type": "http", "name": name, "url": "http://127.0.0.1:9/" + name, "headers": []any{}}
}

// storedSession is the session record as _agenthost/session shows it.
func storedSession(t *testing.T, c *rpcClient, id string) api.Session {
	t.Helper()
	var r api.SessionResult
	c.mustCall(api.MethodSession, map[string]any{"sessionId": id}, &r)
	return r.Session
}

// agentTexts are the agent_message_chunk texts the client received.
func agentTexts(c *rpcClient) []string {
	var out []string
	for _, n := range c.notesOf(api.MethodSessionUpdate) {
		var p struct {
			Update struct {
				SessionUpdate string `json:"sessionUpdate"`
				Content       struct{ Text string }
			} `json:"update"`
		}
		if json.Unmarshal(n.Params, &p) == nil && p.Update.SessionUpdate == "agent_message_chunk" {
			out = append(out, p.Update.Content.Text)
		}
	}
	return out
}

// updatesOf are the session/update payloads of one kind the client
// received.
func updatesOf(c *rpcClient, kind string) []json.RawMessage {
	var out []json.RawMessage
	for _, n := range c.notesOf(api.MethodSessionUpdate) {
		var p struct {
			Update json.RawMessage `json:"update"`
		}
		var head struct {
			SessionUpdate string `json:"sessionUpdate"`
		}
		if json.Unmarshal(n.Params, &p) == nil && json.Unmarshal(p.Update, &head) == nil && head.SessionUpdate == kind {
			out = append(out, p.Update)
		}
	}
	return out
}

// A session created with options, a mode and MCP servers keeps all of them
// (as the agent acknowledged them, and as set_config_option changed them)
// across a host restart: the resume after it, which names none, passes
// the stored ones.
func TestSettingsSurviveRestart(t *testing.T) {
	sh := newSurface(t, nil, nil)
	ws := t.TempDir()
	c := dial(t, sh.sock)
	var created sessionResult
	c.mustCall(api.MethodSessionNew, newParams(ws, map[string]string{"model": "m2", "mode": "plan", "env.FOO": "bar"},
		stdioServer("fs"), httpServer("web")), &created)
	got := sh.lastOpen("new")
	if want := map[string]string{"model": "m2", "mode": "plan", "env.FOO": "bar"}; !reflect.DeepEqual(got.Options, want) {
		t.Errorf("the plugin got options %v, want %v", got.Options, want)
	}
	if len(got.MCPServers) != 2 || got.MCPServers[0].Transport != "stdio" || got.MCPServers[0].Command != "/bin/fs" ||
		got.MCPServers[1].Transport != "http" || got.MCPServers[1].URL != "http://127.0.0.1:9/web" {
		t.Errorf("the plugin got MCP servers %+v", got.MCPServers)
	}
	if created.mode() != "plan" || created.config("model") != "m2" {
		t.Errorf("session/new result: mode %q, model %q", created.mode(), created.config("model"))
	}
	var set struct {
		ConfigOptions []struct {
			ID           string `json:"id"`
			CurrentValue string `json:"currentValue"`
		} `json:"configOptions"`
	}
	c.mustCall("session/set_config_option", map[string]any{"sessionId": created.SessionID, "configId": "model", "value": "m1"}, &set)

	sh.restart(true)
	c = dial(t, sh.sock)
	var resumed sessionResult
	c.mustCall(api.MethodSessionResume, map[string]any{"sessionId": created.SessionID, "cwd": ws}, &resumed)
	got = sh.lastOpen("resume")
	if want := map[string]string{"model": "m1", "mode": "plan", "env.FOO": "bar"}; !reflect.DeepEqual(got.Options, want) {
		t.Errorf("the resume after a restart got options %v, want %v", got.Options, want)
	}
	if len(got.MCPServers) != 2 || got.MCPServers[0].Name != "fs" || !slices.Equal(got.MCPServers[0].Args, []string{"--root", "/w"}) ||
		got.MCPServers[1].Name != "web" {
		t.Errorf("the resume after a restart got MCP servers %+v", got.MCPServers)
	}
	if resumed.mode() != "plan" || resumed.config("model") != "m1" {
		t.Errorf("session/resume result: mode %q, model %q", resumed.mode(), resumed.config("model"))
	}
}

// A prompt, or a setting, after the plugin died resumes the session with
// its stored settings.
func TestSettingsSurvivePluginDeath(t *testing.T) {
	sh := newSurface(t, nil, nil)
	c := dial(t, sh.sock)
	var created sessionResult
	c.mustCall(api.MethodSessionNew, newParams(t.TempDir(), map[string]string{"model": "m2"}, stdioServer("fs")), &created)
	c.mustCall("session/set_mode", map[string]any{"sessionId": created.SessionID, "modeId": "plan"}, nil)
	s, ok := sh.h.Session(created.SessionID)
	if !ok {
		t.Fatal("the session does not run")
	}
	if err := syscall.Kill(s.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-s.Done()
	c.mustCall(api.MethodSessionPrompt, textPrompt(created.SessionID, "hello"), nil)
	got := sh.lastOpen("resume")
	if want := map[string]string{"model": "m2", "mode": "plan"}; !reflect.DeepEqual(got.Options, want) {
		t.Errorf("the resume after the plugin died got options %v, want %v", got.Options, want)
	}
	if len(got.MCPServers) != 1 || got.MCPServers[0].Name != "fs" {
		t.Errorf("the resume after the plugin died got MCP servers %+v", got.MCPServers)
	}
	// A config option set after another death resumes the session too.
	s, ok = sh.h.Session(created.SessionID)
	if !ok {
		t.Fatal("the session does not run")
	}
	if err := syscall.Kill(s.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-s.Done()
	c.mustCall("session/set_config_option", map[string]any{"sessionId": created.SessionID, "configId": "model", "value": "m1"}, nil)
	if n := len(sh.events("resume")); n != 2 {
		t.Errorf("%d resumes, want 2", n)
	}
	if got := storedSession(t, c, created.SessionID).Options; got["model"] != "m1" || got["mode"] != "plan" {
		t.Errorf("stored options %v", got)
	}
}

// A readopted session (its plugin outlived the host) answers load with the
// modes and config options its agent last reported.
func TestModesSurviveReadoption(t *testing.T) {
	sh := newSurface(t, nil, nil)
	ws := t.TempDir()
	c := dial(t, sh.sock)
	var created sessionResult
	c.mustCall(api.MethodSessionNew, newParams(ws, nil), &created)
	c.mustCall("session/set_config_option", map[string]any{"sessionId": created.SessionID, "configId": "model", "value": "m2"}, nil)
	c.mustCall(api.MethodSessionPrompt, textPrompt(created.SessionID, "plan"), nil) // the agent switches to plan itself
	sh.restart(false)
	if d := sh.h.Decisions()[created.SessionID]; d.Action != host.ActionReadopted {
		t.Fatalf("decision %+v, want readopted", d)
	}
	c = dial(t, sh.sock)
	var loaded sessionResult
	c.mustCall(api.MethodSessionLoad, map[string]any{"sessionId": created.SessionID, "cwd": ws, "mcpServers": []any{}}, &loaded)
	if loaded.mode() != "plan" || loaded.config("model") != "m2" || loaded.config("mode") != "plan" {
		t.Errorf("session/load of a readopted session: mode %q, model %q, mode option %q", loaded.mode(), loaded.config("model"), loaded.config("mode"))
	}
	if n := len(sh.events("resume")); n != 0 {
		t.Errorf("the readopted plugin was resumed %d times", n)
	}
}

// A setting the agent does not declare, or refuses, is -32602 naming it,
// and no session is created.
func TestSettingsRefusedNamingTheSetting(t *testing.T) {
	sh := newSurface(t, nil, nil)
	c := dial(t, sh.sock)
	cases := []struct {
		name    string
		params  map[string]any
		setting string
	}{
		{"undeclared option", newParams(t.TempDir(), map[string]string{"colour": "red"}), "colour"},
		{"undeclared transport", newParams(t.TempDir(), nil, map[string]any{"type": "sse", "name": "events", "url": "http://127.0.0.1:9", "headers": []any{}}), "mcpServers.events"},
		{"refused by the plugin", newParams(t.TempDir(), map[string]string{"model": "m9"}), "model"},
	}
	for _, tc := range cases {
		m := c.call(api.MethodSessionNew, tc.params)
		var data api.ErrorData
		if m.Error != nil {
			_ = json.Unmarshal(m.Error.Data, &data)
		}
		if m.Error == nil || m.Error.Code != api.CodeInvalidParams || data.Setting != tc.setting {
			t.Errorf("%s: error %+v, data %+v; want -32602 naming %q", tc.name, m.Error, data, tc.setting)
		}
	}
	sessions, err := sh.h.Store().List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The plugin's refusal comes after the session was reserved: it is
	// recorded, released, and no plugin runs it.
	for _, s := range sessions {
		if s.Lease.Claim != leasestore.ClaimReleased {
			t.Errorf("session %s after a refused setting: %+v", s.ID, s.Lease)
		}
	}
	var created sessionResult
	c.mustCall(api.MethodSessionNew, newParams(t.TempDir(), nil), &created)
	m := c.call("session/set_mode", map[string]any{"sessionId": created.SessionID, "modeId": "yolo"})
	if m.Error == nil || m.Error.Code != api.CodeInvalidParams || !strings.Contains(string(m.Error.Data), `"setting":"mode"`) {
		t.Errorf("an unknown mode: %+v", m.Error)
	}
	m = c.call("session/set_config_option", map[string]any{"sessionId": created.SessionID, "configId": "model", "value": "m9"})
	if m.Error == nil || m.Error.Code != api.CodeInvalidParams || !strings.Contains(string(m.Error.Data), `"setting":"model"`) {
		t.Errorf("an unknown model: %+v", m.Error)
	}
}

// Modes and config options: in the session/new result; set between turns
// and during one; each change sent as current_mode_update /
// config_option_update and stored as the session's options, including a
// mode the agent switched to itself.
func TestModesAndConfigOptions(t *testing.T) {
	sh := newSurface(t, nil, nil)
	c := dial(t, sh.sock)
	var created sessionResult
	c.mustCall(api.MethodSessionNew, newParams(t.TempDir(), nil), &created)
	if created.mode() != "default" || len(created.Modes.AvailableModes) != 2 || created.config("model") != "m1" ||
		created.ConfigOptions[0].Type != "select" || created.ConfigOptions[0].Category != "model" || len(created.ConfigOptions[0].Options) != 2 {
		t.Fatalf("session/new result %+v", created)
	}
	id := created.SessionID
	// During a turn.
	turn := make(chan message, 1)
	go func() { turn <- c.call(api.MethodSessionPrompt, textPrompt(id, "sleep 20s")) }()
	c.waitNotes(api.MethodSessionUpdate, 1)
	c.mustCall("session/set_mode", map[string]any{"sessionId": id, "modeId": "plan"}, nil)
	var set struct {
		ConfigOptions []struct {
			ID           string `json:"id"`
			CurrentValue string `json:"currentValue"`
		} `json:"configOptions"`
	}
	c.mustCall("session/set_config_option", map[string]any{"sessionId": id, "configId": "model", "value": "m2"}, &set)
	if len(set.ConfigOptions) != 2 || set.ConfigOptions[0].CurrentValue != "m2" || set.ConfigOptions[1].CurrentValue != "plan" {
		t.Errorf("set_config_option result %+v", set.ConfigOptions)
	}
	c.send(map[string]any{"jsonrpc": "2.0", "method": api.MethodSessionCancel, "params": map[string]any{"sessionId": id}})
	if r := <-turn; r.Error != nil || !strings.Contains(string(r.Result), "cancelled") {
		t.Fatalf("the turn: %s %+v", r.Result, r.Error)
	}
	if got := storedSession(t, c, id).Options; got["mode"] != "plan" || got["model"] != "m2" {
		t.Errorf("stored options after set_mode and set_config_option: %v", got)
	}
	// Between turns, and the agent's own switch.
	c.mustCall("session/set_mode", map[string]any{"sessionId": id, "modeId": "default"}, nil)
	c.mustCall(api.MethodSessionPrompt, textPrompt(id, "plan"), nil)
	if got := storedSession(t, c, id).Options; got["mode"] != "plan" {
		t.Errorf("stored options after the agent switched to plan: %v", got)
	}
	var modesSeen []string
	for _, u := range updatesOf(c, "current_mode_update") {
		var x struct {
			CurrentModeID string `json:"currentModeId"`
		}
		_ = json.Unmarshal(u, &x)
		modesSeen = append(modesSeen, x.CurrentModeID)
	}
	if !slices.Equal(modesSeen, []string{"plan", "default", "plan"}) {
		t.Errorf("current_mode_update sent for modes %q, want plan, default, plan", modesSeen)
	}
	if n := len(updatesOf(c, "config_option_update")); n == 0 {
		t.Error("no config_option_update sent")
	}
	if evs := sh.events("set_mode"); len(evs) != 2 {
		t.Errorf("the plugin's set_mode calls: %s", evs)
	}
}

// Prompt blocks beyond text reach the plugin as ACP JSON; a block type the
// agent does not declare is refused naming it, not journaled; load
// replays every block of a prompt. Initialize declares the agent's
// prompt and MCP capabilities.
func TestRichPrompt(t *testing.T) {
	sh := newSurface(t, nil, nil)
	ws := t.TempDir()
	c := dial(t, sh.sock)
	var init struct {
		AgentCapabilities struct {
			PromptCapabilities struct{ Image, Audio, EmbeddedContext bool } `json:"promptCapabilities"`
			McpCapabilities    struct{ HTTP, SSE bool }                     `json:"mcpCapabilities"`
		} `json:"agentCapabilities"`
		Meta api.Meta[api.InitializeMeta] `json:"_meta"`
	}
	c.mustCall(api.MethodInitialize, map[string]any{"protocolVersion": 1}, &init)
	pc, mc := init.AgentCapabilities.PromptCapabilities, init.AgentCapabilities.McpCapabilities
	if !pc.Image || pc.Audio || !pc.EmbeddedContext || !mc.HTTP || mc.SSE {
		t.Errorf("initialize declares prompt %+v, mcp %+v", pc, mc)
	}
	if a := init.Meta.Agenthost.Agents["surface"]; !a.PromptCapabilities.ResourceLink || !a.MCPCapabilities.Stdio || len(a.Options) != 4 {
		t.Errorf("_meta.agenthost.agents.surface: %+v", a)
	}
	var created sessionResult
	c.mustCall(api.MethodSessionNew, newParams(ws, nil), &created)
	id := created.SessionID
	blocks := []any{
		map[string]any{"type": "text", "text": "look"},
		map[string]any{"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo="},
		map[string]any{"type": "resource", "resource": map[string]any{"uri": "file:///w/a.go", "mimeType": "text/x-go", "text": "package a"}},
		map[string]any{"type": "resource_link", "uri": "file:///w/b.go", "name": "b.go"},
	}
	c.mustCall(api.MethodSessionPrompt, map[string]any{"sessionId": id, "prompt": blocks}, nil)
	if texts := agentTexts(c); len(texts) == 0 || texts[len(texts)-1] != "text image resource resource_link" {
		t.Errorf("the agent saw blocks %q", texts)
	}
	prompts := sh.events("prompt")
	if len(prompts) != 1 || !strings.Contains(string(prompts[0]), `iVBORw0KGgo=`) || !strings.Contains(string(prompts[0]), `file:///w/b.go`) {
		t.Errorf("the plugin got prompts %s", prompts)
	}
	m := c.call(api.MethodSessionPrompt, map[string]any{"sessionId": id, "prompt": []any{
		map[string]any{"type": "text", "text": "listen"}, map[string]any{"type": "audio", "mimeType": "audio/wav", "data": "UklGRg=="}}})
	if m.Error == nil || m.Error.Code != api.CodeInvalidParams || !strings.Contains(m.Error.Message, `"audio"`) {
		t.Errorf("an audio block: %+v", m.Error)
	}
	d := dial(t, sh.sock)
	d.mustCall(api.MethodSessionLoad, map[string]any{"sessionId": id, "cwd": ws, "mcpServers": []any{}}, nil)
	var users []string
	for _, u := range updatesOf(d, "user_message_chunk") {
		var x struct {
			Content struct {
				Type string `json:"type"`
			} `json:"content"`
		}
		_ = json.Unmarshal(u, &x)
		users = append(users, x.Content.Type)
		if strings.Contains(string(u), "listen") {
			t.Errorf("the refused prompt was journaled: %s", u)
		}
	}
	if !slices.Equal(users, []string{"text", "image", "resource", "resource_link"}) {
		t.Errorf("load replays user blocks %q", users)
	}
}

// session/request_permission carries the whole tool call and every
// option; an allow_always answer for the request's scope is stored, and a
// later request of the scope, after a restart too, is answered by the
// host without asking.
func TestPermissionAllowAlways(t *testing.T) {
	sh := newSurface(t, nil, nil)
	ws := t.TempDir()
	var asked atomic.Int32
	var lastReq atomic.Value
	answer := func(method string, params json.RawMessage) any {
		if method != api.MethodRequestPermission {
			return map[string]any{}
		}
		asked.Add(1)
		lastReq.Store(string(params))
		return map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": "always"}}
	}
	c := dial(t, sh.sock)
	c.answer = answer
	var created sessionResult
	c.mustCall(api.MethodSessionNew, newParams(ws, nil), &created)
	id := created.SessionID
	c.mustCall(api.MethodSessionPrompt, textPrompt(id, "ask edit"), nil)
	var req struct {
		ToolCall struct {
			Kind      string          `json:"kind"`
			Title     string          `json:"title"`
			RawInput  json.RawMessage `json:"rawInput"`
			Content   []struct{ Type, Path, OldText, NewText string }
			Locations []struct {
				Path string
				Line int
			}
		} `json:"toolCall"`
		Options []struct{ OptionID, Kind string }
	}
	if s, _ := lastReq.Load().(string); json.Unmarshal([]byte(s), &req) != nil {
		t.Fatalf("request %s", s)
	}
	tc := req.ToolCall
	if tc.Kind != "edit" || tc.Title != "Edit /w/f.txt" || !strings.Contains(string(tc.RawInput), "file_path") ||
		len(tc.Content) != 1 || tc.Content[0].Type != "diff" || tc.Content[0].OldText != "old\n" || tc.Content[0].NewText != "new\n" ||
		len(tc.Locations) != 1 || tc.Locations[0].Line != 3 || len(req.Options) != 4 || req.Options[1].Kind != "allow_always" {
		t.Errorf("request_permission %+v", req)
	}
	c.mustCall(api.MethodSessionPrompt, textPrompt(id, "ask edit"), nil)
	c.mustCall(api.MethodSessionPrompt, textPrompt(id, "ask Bash(rm)"), nil)
	if n := asked.Load(); n != 2 {
		t.Errorf("the client was asked %d times, want 2 (the second edit answered by the host)", n)
	}
	if got := storedSession(t, c, id).AllowedScopes; !slices.Equal(got, []string{"edit", "Bash(rm)"}) {
		t.Errorf("stored scopes %q", got)
	}

	sh.restart(true)
	c = dial(t, sh.sock)
	c.answer = answer
	c.mustCall(api.MethodSessionResume, map[string]any{"sessionId": id, "cwd": ws}, nil)
	c.mustCall(api.MethodSessionPrompt, textPrompt(id, "ask edit"), nil)
	if n := asked.Load(); n != 2 {
		t.Errorf("after a restart the client was asked again (%d)", n)
	}
	if texts := agentTexts(c); len(texts) == 0 || texts[len(texts)-1] != "answered always" {
		t.Errorf("the agent's answers %q", texts)
	}
}

// A permission asked while no client follows the session waits and is
// asked of the next client that follows; once answered, a later load does
// not ask it again; one nobody answers is cancelled after the timeout.
func TestPermissionWaitsForTheNextClient(t *testing.T) {
	sh := newSurface(t, nil, nil)
	ws := t.TempDir()
	a := dial(t, sh.sock)
	leave := make(chan struct{})
	a.answer = func(method string, _ json.RawMessage) any {
		// The user closes the app while it asks.
		close(leave)
		a.conn.Close()
		return nil
	}
	var created sessionResult
	a.mustCall(api.MethodSessionNew, newParams(ws, nil), &created)
	id := created.SessionID
	a.send(map[string]any{"jsonrpc": "2.0", "id": 99, "method": api.MethodSessionPrompt, "params": textPrompt(id, "ask edit")})
	<-leave
	time.Sleep(100 * time.Millisecond) // nobody follows now

	var askedB atomic.Int32
	b := dial(t, sh.sock)
	b.answer = func(method string, _ json.RawMessage) any {
		askedB.Add(1)
		return map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": "once"}}
	}
	b.mustCall(api.MethodSessionResume, map[string]any{"sessionId": id, "cwd": ws}, nil)
	waitUntil(t, "the turn answered once", func() bool { return slices.Contains(agentTexts(b), "answered once") })
	if n := askedB.Load(); n != 1 {
		t.Errorf("the next client was asked %d times", n)
	}
	var askedC atomic.Int32
	cc := dial(t, sh.sock)
	cc.answer = func(string, json.RawMessage) any { askedC.Add(1); return map[string]any{} }
	cc.mustCall(api.MethodSessionLoad, map[string]any{"sessionId": id, "cwd": ws, "mcpServers": []any{}}, nil)
	time.Sleep(200 * time.Millisecond)
	if n := askedC.Load(); n != 0 {
		t.Errorf("a load after the answer asked the resolved request again (%d)", n)
	}
}

// A permission request asked before the host went away (its plugin lives
// on) is asked of the first client that follows the readopted session.
func TestPermissionSurvivesReadoption(t *testing.T) {
	sh := newSurface(t, nil, nil)
	ws := t.TempDir()
	a := dial(t, sh.sock)
	leave := make(chan struct{})
	a.answer = func(string, json.RawMessage) any { close(leave); a.conn.Close(); return nil }
	var created sessionResult
	a.mustCall(api.MethodSessionNew, newParams(ws, nil), &created)
	id := created.SessionID
	a.send(map[string]any{"jsonrpc": "2.0", "id": 99, "method": api.MethodSessionPrompt, "params": textPrompt(id, "ask edit")})
	<-leave
	sh.restart(false)
	if d := sh.h.Decisions()[id]; d.Action != host.ActionReadopted {
		t.Fatalf("decision %+v, want readopted", d)
	}
	b := dial(t, sh.sock)
	b.answer = func(string, json.RawMessage) any {
		return map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": "no"}}
	}
	b.mustCall(api.MethodSessionResume, map[string]any{"sessionId": id, "cwd": ws}, nil)
	waitUntil(t, "the turn answered", func() bool { return slices.Contains(agentTexts(b), "answered no") })
}

// Two clients follow a session: both are asked; the first answer counts,
// and the other client's question is withdrawn ($/cancel_request).
func TestPermissionAnsweredElsewhereIsWithdrawn(t *testing.T) {
	sh := newSurface(t, nil, nil)
	ws := t.TempDir()
	askedA, answeredB := make(chan struct{}), make(chan struct{})
	var sessionID atomic.Value // written before the prompt, read by A's answer
	a := dial(t, sh.sock)
	a.answer = func(string, json.RawMessage) any {
		close(askedA)
		<-answeredB
		// The user of A was slower: A answers once the host has taken
		// B's answer (the request is no longer pending), however long B's
		// answer took to arrive on a busy machine.
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if s, ok := sh.h.Session(sessionID.Load().(string)); !ok || len(s.PendingPermissions()) == 0 {
				break
			}
		}
		return map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": "never"}}
	}
	var created sessionResult
	a.mustCall(api.MethodSessionNew, newParams(ws, nil), &created)
	id := created.SessionID
	sessionID.Store(id)
	b := dial(t, sh.sock)
	b.answer = func(string, json.RawMessage) any {
		defer close(answeredB)
		<-askedA // both were asked
		return map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": "once"}}
	}
	b.mustCall(api.MethodSessionResume, map[string]any{"sessionId": id, "cwd": ws}, nil)
	b.mustCall(api.MethodSessionPrompt, textPrompt(id, "ask edit"), nil)
	if texts := agentTexts(b); len(texts) == 0 || texts[len(texts)-1] != "answered once" {
		t.Errorf("the agent's answer %q", texts)
	}
	a.waitNotes("$/cancel_request", 1)
}

func TestPermissionTimesOut(t *testing.T) {
	sh := newSurface(t, func(c *host.Config) { c.PermissionTimeout = 300 * time.Millisecond }, nil)
	ws := t.TempDir()
	a := dial(t, sh.sock)
	a.answer = func(string, json.RawMessage) any { a.conn.Close(); return nil }
	var created sessionResult
	a.mustCall(api.MethodSessionNew, newParams(ws, nil), &created)
	id := created.SessionID
	a.send(map[string]any{"jsonrpc": "2.0", "id": 99, "method": api.MethodSessionPrompt, "params": textPrompt(id, "ask edit")})
	waitUntil(t, "the turn's end", func() bool {
		stopped := false
		_ = sh.h.Store().Replay(context.Background(), id, 0, func(e leasestore.Entry) error {
			stopped = stopped || e.Kind == leasestore.KindStop
			return nil
		})
		return stopped
	})
	var askedB atomic.Int32
	b := dial(t, sh.sock)
	b.answer = func(string, json.RawMessage) any { askedB.Add(1); return map[string]any{} }
	b.mustCall(api.MethodSessionLoad, map[string]any{"sessionId": id, "cwd": ws, "mcpServers": []any{}}, nil)
	waitUntil(t, "the turn's end", func() bool { return slices.Contains(agentTexts(b), "cancelled") })
	if n := askedB.Load(); n != 0 {
		t.Errorf("a request the host cancelled was asked (%d)", n)
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// Session-level updates: a title derived from the first prompt, then the
// agent's own; both sent, stored and listed; a handle change reported at
// the session level recorded in the handle chain; slash commands sent;
// session/list pages with a cursor.
func TestTitlesHandlesAndListPaging(t *testing.T) {
	sh := newSurface(t, nil, func(s *localapi.Server) { s.ListPageSize = 2 })
	c := dial(t, sh.sock)
	var created sessionResult
	c.mustCall(api.MethodSessionNew, newParams(t.TempDir(), nil), &created)
	id := created.SessionID
	c.mustCall(api.MethodSessionPrompt, textPrompt(id, "  \n"+strings.Repeat("long ", 30)+"\nsecond line"), nil)
	title := storedSession(t, c, id).Title
	if !strings.HasPrefix(title, "long long") || len([]rune(title)) != host.TitleLength || !strings.HasSuffix(title, "…") {
		t.Errorf("derived title %q", title)
	}
	c.mustCall(api.MethodSessionPrompt, textPrompt(id, "title Fix the tests"), nil)
	c.mustCall(api.MethodSessionPrompt, textPrompt(id, "handle rotated-1"), nil)
	c.mustCall(api.MethodSessionPrompt, textPrompt(id, "commands"), nil)
	if cmds := updatesOf(c, "available_commands_update"); len(cmds) != 1 || !strings.Contains(string(cmds[0]), `"name":"review"`) ||
		!strings.Contains(string(cmds[0]), `"hint":"a directory"`) {
		t.Errorf("available_commands_update %s", cmds)
	}
	rec := storedSession(t, c, id)
	if rec.Title != "Fix the tests" || rec.Handle() != "rotated-1" {
		t.Errorf("after the agent's title and handle change: title %q, handle %q", rec.Title, rec.Handle())
	}
	var titles []string
	for _, u := range updatesOf(c, "session_info_update") {
		var x struct{ Title string }
		_ = json.Unmarshal(u, &x)
		titles = append(titles, x.Title)
	}
	if len(titles) != 2 || titles[1] != "Fix the tests" {
		t.Errorf("session_info_update titles %q", titles)
	}
	for i := range 3 {
		time.Sleep(2 * time.Millisecond) // distinct creation times: the list's order
		if _, err := sh.h.Store().Create(context.Background(), leasestore.SessionSpec{ID: fmt.Sprintf("listed-%d", i), Agent: "surface"}); err != nil {
			t.Fatal(err)
		}
	}
	var ids []string
	var cursor *string
	for pages := 0; ; pages++ {
		params := map[string]any{}
		if cursor != nil {
			params["cursor"] = *cursor
		}
		var page api.ListSessionsResult
		c.mustCall(api.MethodSessionList, params, &page)
		if len(page.Sessions) > 2 {
			t.Fatalf("a page of %d sessions", len(page.Sessions))
		}
		for _, s := range page.Sessions {
			ids = append(ids, s.SessionID)
			if s.SessionID == id && (s.Title == nil || *s.Title != "Fix the tests") {
				t.Errorf("listed title %v", s.Title)
			}
		}
		if cursor = page.NextCursor; cursor == nil {
			if pages != 1 {
				t.Errorf("%d pages of 4 sessions, 2 a page", pages+1)
			}
			break
		}
	}
	if !slices.Equal(ids, []string{"listed-2", "listed-1", "listed-0", id}) {
		t.Errorf("listed %q", ids)
	}
	if m := c.call(api.MethodSessionList, map[string]any{"cursor": "nonsense"}); m.Error == nil || m.Error.Code != api.CodeInvalidParams {
		t.Errorf("a bad cursor: %+v", m.Error)
	}
}

// Auth: initialize lists the agent's methods; authenticate takes those and
// refuses others; auth required at start and at a turn's end is -32000,
// and every other failure its own code.
func TestAuthAndErrorCodes(t *testing.T) {
	sh := newSurface(t, func(c *host.Config) {
		c.Agents["pinned"] = host.AgentPlugin{Path: surface, SHA256: strings.Repeat("0", 64)}
	}, nil)
	c := dial(t, sh.sock)
	var init struct {
		AuthMethods []struct {
			ID   string `json:"id"`
			Type string `json:"type"`
			Vars []struct {
				Name string `json:"name"`
			} `json:"vars"`
			Meta api.Meta[api.AuthMethodMeta] `json:"_meta"`
		} `json:"authMethods"`
	}
	c.mustCall(api.MethodInitialize, map[string]any{"protocolVersion": 1}, &init)
	if len(init.AuthMethods) != 2 || init.AuthMethods[0].ID != "login" || init.AuthMethods[0].Meta.Agenthost.TerminalCommand[0] != "surface" ||
		init.AuthMethods[1].ID != "key" || init.AuthMethods[1].Type != "env_var" || init.AuthMethods[1].Vars[0].Name != "SURFACE_API_KEY" {
		t.Errorf("authMethods %+v", init.AuthMethods)
	}
	c.mustCall("authenticate", map[string]any{"methodId": "login"}, nil)
	if m := c.call("authenticate", map[string]any{"methodId": "nope"}); m.Error == nil || m.Error.Code != api.CodeInvalidParams {
		t.Errorf("an unknown auth method: %+v", m.Error)
	}
	if m := c.call(api.MethodSessionNew, newParams(t.TempDir(), map[string]string{"fail": "auth"})); m.Error == nil || m.Error.Code != api.CodeAuthRequired {
		t.Errorf("auth required at start: %+v", m.Error)
	}
	var created sessionResult
	c.mustCall(api.MethodSessionNew, newParams(t.TempDir(), nil), &created)
	if m := c.call(api.MethodSessionPrompt, textPrompt(created.SessionID, "auth")); m.Error == nil || m.Error.Code != api.CodeAuthRequired {
		t.Errorf("auth required at a turn's end: %+v", m.Error)
	}
	if m := c.call(api.MethodSessionPrompt, textPrompt(created.SessionID, "sleep forever")); m.Error == nil || m.Error.Code != api.CodeTurnFailed {
		t.Errorf("a failed turn: %+v", m.Error)
	}
	bad := newParams(t.TempDir(), nil)
	bad["_meta"] = map[string]any{"agenthost": map[string]any{"agent": "pinned"}}
	if m := c.call(api.MethodSessionNew, bad); m.Error == nil || m.Error.Code != api.CodeAgentFailed || !strings.Contains(m.Error.Message, "sha256") {
		t.Errorf("a plugin that does not match its pin: %+v", m.Error)
	}

	// A socket serving several agents prefixes each method with its agent.
	srv := &localapi.Server{Host: sh.h, Version: "test", Logger: logtest.New(t)}
	sock := filepath.Join(sh.dir, "several.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	defer func() { cancel(); <-done }()
	d := dial(t, sock)
	var several struct {
		AuthMethods []struct {
			ID string `json:"id"`
		} `json:"authMethods"`
		Meta api.Meta[api.InitializeMeta] `json:"_meta"`
	}
	d.mustCall(api.MethodInitialize, map[string]any{"protocolVersion": 1}, &several)
	var mids []string
	for _, m := range several.AuthMethods {
		mids = append(mids, m.ID)
	}
	if !slices.Equal(mids, []string{"surface:login", "surface:key"}) {
		t.Errorf("auth methods of a socket with several agents: %q", mids)
	}
	if _, ok := several.Meta.Agenthost.Agents["surface"]; !ok {
		t.Errorf("_meta.agenthost.agents %+v", several.Meta.Agenthost.Agents)
	}
	d.mustCall("authenticate", map[string]any{"methodId": "surface:key"}, nil)
}
