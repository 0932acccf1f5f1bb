package localapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	acp "github.com/coder/acp-go-sdk"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/localapi"
	"github.com/agenthost/agenthost/internal/buildtest"
	"github.com/agenthost/agenthost/internal/logtest"
	"github.com/agenthost/agenthost/leasestore/badgerstore"
)

var scripted, surface string

func TestMain(m *testing.M) {
	os.Exit(buildtest.Main(m, map[*string]string{&scripted: "../../examples/scripted/cmd/agenthost-plugin-scripted",
		&surface: "../internal/surfaceagent/cmd/agenthost-plugin-surface"}))
}

// rpcClient is a minimal newline-delimited JSON-RPC client, as a desktop
// app would write one: it sends requests, collects notifications, and
// answers the server's requests with answer.
type rpcClient struct {
	t      *testing.T
	conn   net.Conn
	enc    sync.Mutex
	nextID int
	answer func(method string, params json.RawMessage) any

	mu       sync.Mutex
	pending  map[int]chan message
	notes    []message
	noteCond chan struct{}
	done     chan struct{}
}

type message struct {
	ID     *json.RawMessage `json:"id,omitempty"`
	Method string           `json:"method,omitempty"`
	Params json.RawMessage  `json:"params,omitempty"`
	Result json.RawMessage  `json:"result,omitempty"`
	Error  *struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error,omitempty"`
}

func dial(t *testing.T, path string) *rpcClient {
	t.Helper()
	conn, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	c := &rpcClient{t: t, conn: conn, pending: map[int]chan message{}, noteCond: make(chan struct{}), done: make(chan struct{})}
	go c.read()
	t.Cleanup(func() { conn.Close(); <-c.done })
	return c
}

func (c *rpcClient) read() {
	defer close(c.done)
	sc := bufio.NewScanner(c.conn)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var m message
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			continue
		}
		switch {
		case m.Method != "" && m.ID != nil:
			var result any = map[string]any{}
			if c.answer != nil {
				result = c.answer(m.Method, m.Params)
			}
			c.send(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": result})
		case m.Method != "":
			c.mu.Lock()
			c.notes = append(c.notes, m)
			close(c.noteCond)
			c.noteCond = make(chan struct{})
			c.mu.Unlock()
		default:
			var id int
			if m.ID != nil {
				_ = json.Unmarshal(*m.ID, &id)
			}
			c.mu.Lock()
			ch := c.pending[id]
			delete(c.pending, id)
			c.mu.Unlock()
			if ch != nil {
				ch <- m
			}
		}
	}
}

func (c *rpcClient) send(v any) {
	b, _ := json.Marshal(v)
	c.enc.Lock()
	defer c.enc.Unlock()
	_, _ = c.conn.Write(append(b, '\n'))
}

func (c *rpcClient) raw(line string) {
	c.enc.Lock()
	defer c.enc.Unlock()
	_, _ = c.conn.Write([]byte(line + "\n"))
}

func (c *rpcClient) call(method string, params any) message {
	c.t.Helper()
	c.mu.Lock()
	c.nextID++
	id := c.nextID
	ch := make(chan message, 1)
	c.pending[id] = ch
	c.mu.Unlock()
	c.send(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	select {
	case m := <-ch:
		return m
	case <-time.After(60 * time.Second):
		c.t.Fatalf("%s: no answer", method)
		return message{}
	}
}

func (c *rpcClient) mustCall(method string, params any, out any) {
	c.t.Helper()
	m := c.call(method, params)
	if m.Error != nil {
		c.t.Fatalf("%s: error %d %s %s", method, m.Error.Code, m.Error.Message, m.Error.Data)
	}
	if out != nil {
		if err := json.Unmarshal(m.Result, out); err != nil {
			c.t.Fatalf("%s: result %s: %v", method, m.Result, err)
		}
	}
}

// notesOf returns the notifications of a method received so far.
func (c *rpcClient) notesOf(method string) []message {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []message
	for _, n := range c.notes {
		if n.Method == method {
			out = append(out, n)
		}
	}
	return out
}

func (c *rpcClient) waitNotes(method string, n int) []message {
	c.t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		c.mu.Lock()
		cond := c.noteCond
		c.mu.Unlock()
		if got := c.notesOf(method); len(got) >= n {
			return got
		}
		select {
		case <-cond:
		case <-deadline:
			c.t.Fatalf("waited for %d %s notifications, got %d", n, method, len(c.notesOf(method)))
		}
	}
}

// serve opens a host with the scripted agent and serves its API on a unix
// socket; it returns the socket path.
func serve(t *testing.T) (string, *host.Host) {
	t.Helper()
	return serveWith(t, nil)
}

// serveWith is serve with the server's settings changed by set.
func serveWith(t *testing.T, set func(*localapi.Server)) (string, *host.Host) {
	t.Helper()
	return serveHost(t, nil, set)
}

// serveHost is serveWith with the host's configuration changed by setHost.
func serveHost(t *testing.T, setHost func(*host.Config), set func(*localapi.Server)) (string, *host.Host) {
	t.Helper()
	dir, err := os.MkdirTemp("", "ah-api-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	store, err := badgerstore.Open(context.Background(), dir, badgerstore.Options{Logger: logtest.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	cfg := host.Config{
		StateDir: dir, Store: store, Agents: map[string]host.AgentPlugin{"scripted": {Path: scripted}}, Logger: logtest.New(t),
	}
	if setHost != nil {
		setHost(&cfg)
	}
	h, err := host.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "api.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv := &localapi.Server{Host: h, DefaultAgent: "scripted", Version: "test", MaxRequestBytes: 64 << 10, Logger: logtest.New(t)}
	if set != nil {
		set(srv)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		<-done
		_ = h.Shutdown(context.Background())
	})
	return sock, h
}

func TestACPSessionPromptAndLoad(t *testing.T) {
	sock, _ := serve(t)
	c := dial(t, sock)
	var init struct {
		ProtocolVersion   int `json:"protocolVersion"`
		AgentCapabilities struct {
			LoadSession bool `json:"loadSession"`
		} `json:"agentCapabilities"`
	}
	c.mustCall("initialize", map[string]any{"protocolVersion": 1}, &init)
	if init.ProtocolVersion != 1 || !init.AgentCapabilities.LoadSession {
		t.Fatalf("initialize: %+v", init)
	}
	var created struct {
		SessionID string `json:"sessionId"`
	}
	c.mustCall("session/new", map[string]any{"cwd": t.TempDir(), "mcpServers": []any{}}, &created)
	var res struct {
		StopReason string `json:"stopReason"`
	}
	c.mustCall("session/prompt", map[string]any{"sessionId": created.SessionID, "prompt": []any{map[string]any{"type": "text", "text": "count 3"}}}, &res)
	if res.StopReason != "end_turn" {
		t.Fatalf("stop reason %q", res.StopReason)
	}
	// Every update of the turn arrived before the answer.
	notes := c.notesOf("session/update")
	var texts []string
	for _, n := range notes {
		var p struct {
			Update struct {
				SessionUpdate string `json:"sessionUpdate"`
				Content       struct{ Text string }
			} `json:"update"`
		}
		_ = json.Unmarshal(n.Params, &p)
		if p.Update.SessionUpdate == "agent_message_chunk" {
			texts = append(texts, p.Update.Content.Text)
		}
	}
	if strings.Join(texts, ",") != "1,2,3" {
		t.Fatalf("streamed chunks %q before the answer", texts)
	}
	// A failing turn is a JSON-RPC error carrying the agent's message.
	m := c.call("session/prompt", map[string]any{"sessionId": created.SessionID, "prompt": []any{map[string]any{"type": "text", "text": "fail out of tokens"}}})
	if m.Error == nil || !strings.Contains(m.Error.Message, "out of tokens") {
		t.Fatalf("failed turn answered %+v", m)
	}

	// session/cancel ends a running turn; the prompt is answered with the
	// stop reason "cancelled", not an error.
	answered := make(chan message, 1)
	seen := len(c.notesOf("session/update")) // the earlier turns' updates all came before their answers
	go func() {
		answered <- c.call("session/prompt", map[string]any{"sessionId": created.SessionID, "prompt": []any{map[string]any{"type": "text", "text": "sleep 30s"}}})
	}()
	c.waitNotes("session/update", seen+1) // the prompt's echo: it is journaled, the turn is the session's
	c.send(map[string]any{"jsonrpc": "2.0", "method": "session/cancel", "params": map[string]any{"sessionId": created.SessionID}})
	select {
	case m := <-answered:
		var r struct {
			StopReason string `json:"stopReason"`
		}
		_ = json.Unmarshal(m.Result, &r)
		if m.Error != nil || r.StopReason != "cancelled" {
			t.Fatalf("cancelled prompt answered %+v (%s)", m.Error, m.Result)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("session/cancel did not end the turn")
	}

	// A second client loads the session: the journal replays as updates.
	c2 := dial(t, sock)
	c2.mustCall("initialize", map[string]any{"protocolVersion": 1}, nil)
	c2.mustCall("session/load", map[string]any{"sessionId": created.SessionID, "cwd": "/", "mcpServers": []any{}}, nil)
	replayed := c2.notesOf("session/update")
	if len(replayed) < 5 { // the prompt, three chunks, the second prompt
		t.Fatalf("session/load replayed %d updates", len(replayed))
	}
	var list struct {
		Sessions []struct {
			SessionID string `json:"sessionId"`
		} `json:"sessions"`
	}
	c2.mustCall("session/list", map[string]any{}, &list)
	if len(list.Sessions) != 1 || list.Sessions[0].SessionID != created.SessionID {
		t.Fatalf("session/list: %+v", list)
	}

	// Clients that load right after connecting: the server once handled
	// such a request before it had finished setting the connection up, and
	// the replay dereferenced nil (the race detector saw it in CI).
	for range 20 {
		c3 := dial(t, sock)
		c3.mustCall("initialize", map[string]any{"protocolVersion": 1}, nil)
		c3.mustCall("session/load", map[string]any{"sessionId": created.SessionID, "cwd": "/", "mcpServers": []any{}}, nil)
		if got := len(c3.notesOf("session/update")); got != len(replayed) {
			t.Fatalf("a load right after connecting replayed %d updates, the first %d", got, len(replayed))
		}
	}
}

// The usage an agent reports reaches an ACP client as ACP's usage_update,
// with real numbers: the scripted plugin process reports it, the host
// journals it, the follower sends it over the socket.
func TestUsageReachesTheClient(t *testing.T) {
	sock, _ := serve(t)
	c := dial(t, sock)
	c.mustCall("initialize", map[string]any{"protocolVersion": 1}, nil)
	var created struct {
		SessionID string `json:"sessionId"`
	}
	c.mustCall("session/new", map[string]any{"cwd": t.TempDir(), "mcpServers": []any{}}, &created)
	c.mustCall("session/prompt", map[string]any{"sessionId": created.SessionID, "prompt": []any{map[string]any{"type": "text", "text": "usage 53000 200000"}}}, nil)
	var got []acp.SessionUsageUpdate
	for _, n := range c.notesOf("session/update") {
		var p acp.SessionNotification
		if err := json.Unmarshal(n.Params, &p); err != nil {
			t.Fatalf("session/update %s: %v", n.Params, err)
		}
		if u := p.Update.UsageUpdate; u != nil {
			got = append(got, *u)
		}
	}
	if len(got) != 1 {
		t.Fatalf("%d usage_update notifications, want 1", len(got))
	}
	u := got[0]
	if u.Used != 53000 || u.Size != 200000 || u.Cost != nil {
		t.Errorf("usage_update used %d of %d, cost %v; want 53000 of 200000, no cost", u.Used, u.Size, u.Cost)
	}
	if tokens, _ := u.Meta["agenthost"].(map[string]any); tokens["inputTokens"] != float64(53000) || tokens["outputTokens"] != float64(0) {
		t.Errorf("usage_update _meta %v, want the provider's counts under agenthost", u.Meta)
	}
}

// A client that subscribes from the last seq it saw misses nothing and sees
// nothing twice, across a reconnect.
func TestSubscribeResumesFromAnySeq(t *testing.T) {
	sock, h := serve(t)
	s, err := h.StartSession(context.Background(), host.SessionRequest{ID: "sub", Agent: "scripted", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, sock)
	c.mustCall(api.MethodSubscribe, map[string]any{"sessionId": "sub", "fromSeq": 1}, nil)
	if _, err := s.Prompt(context.Background(), "count 10"); err != nil {
		t.Fatal(err)
	}
	last, _ := h.Store().LastSeq(context.Background(), "sub")
	got := c.waitNotes(api.MethodJournal, int(last))
	var seen uint64
	for _, n := range got[:5] {
		var e api.JournalEntry
		_ = json.Unmarshal(n.Params, &e)
		seen = e.Seq
	}
	// Reconnect and ask from the entry after the fifth.
	c2 := dial(t, sock)
	c2.mustCall(api.MethodSubscribe, map[string]any{"sessionId": "sub", "fromSeq": seen + 1}, nil)
	rest := c2.waitNotes(api.MethodJournal, int(last-seen))
	for i, n := range rest {
		var e api.JournalEntry
		_ = json.Unmarshal(n.Params, &e)
		if e.Seq != seen+1+uint64(i) {
			t.Fatalf("after reconnecting, entry %d has seq %d, want %d", i, e.Seq, seen+1+uint64(i))
		}
	}
}

func TestPermissionRequestsReachTheClient(t *testing.T) {
	sock, _ := serve(t)
	c := dial(t, sock)
	asked := make(chan string, 1)
	c.answer = func(method string, params json.RawMessage) any {
		asked <- method
		return map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": "allow"}}
	}
	c.mustCall("initialize", map[string]any{"protocolVersion": 1}, nil)
	var created struct {
		SessionID string `json:"sessionId"`
	}
	c.mustCall("session/new", map[string]any{"cwd": t.TempDir(), "mcpServers": []any{}}, &created)
	c.mustCall("session/prompt", map[string]any{"sessionId": created.SessionID, "prompt": []any{map[string]any{"type": "text", "text": "ask"}}}, nil)
	if m := <-asked; m != "session/request_permission" {
		t.Fatalf("the client was asked %q", m)
	}
	found := false
	for _, n := range c.notesOf("session/update") {
		if strings.Contains(string(n.Params), "permission: selected allow") {
			found = true
		}
	}
	if !found {
		t.Error("the agent never reported the client's answer")
	}
}

// Bad and oversized requests get JSON-RPC errors; the connection and the
// host carry on.
func TestBadRequestsGetErrors(t *testing.T) {
	sock, _ := serve(t)
	c := dial(t, sock)
	errorsSeen := make(chan int, 8)
	c.mu.Lock()
	c.pending[0] = make(chan message, 8)
	ch := c.pending[0]
	c.mu.Unlock()
	go func() {
		for m := range ch {
			if m.Error != nil {
				errorsSeen <- m.Error.Code
			}
		}
	}()
	c.raw(`{"this is": not json`)
	if code := <-errorsSeen; code != -32700 {
		t.Errorf("malformed JSON: code %d", code)
	}
	c.mu.Lock()
	c.pending[0] = ch
	c.mu.Unlock()
	c.raw(`{"method":"initialize"}`)
	if code := <-errorsSeen; code != -32600 {
		t.Errorf("not JSON-RPC 2.0: code %d", code)
	}
	c.mu.Lock()
	c.pending[0] = ch
	c.mu.Unlock()
	c.raw(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"pad":"` + strings.Repeat("x", 100<<10) + `"}}`)
	if code := <-errorsSeen; code != -32600 {
		t.Errorf("oversized request: code %d", code)
	}
	close(ch) // the reader hands errors to pending[0] only while it is set
	if m := c.call("no/such/method", map[string]any{}); m.Error == nil || m.Error.Code != -32601 {
		t.Errorf("unknown method answered %+v", m)
	}
	// Still serving.
	c.mustCall("initialize", map[string]any{"protocolVersion": 1}, nil)
	var st struct {
		Host host.Status `json:"host"`
	}
	c.mustCall(api.MethodStatus, map[string]any{}, &st)
	if st.Host.PID != os.Getpid() || len(st.Host.Agents) != 1 {
		t.Errorf("status %+v", st)
	}
}

// A connection that has a session open goes on with it when the session's
// plugin dies: its next prompt resumes the session (a new plugin, the same
// session) instead of being refused. Once the client closed the session, a
// prompt is refused until it loads or resumes the session again.
func TestPromptResumesASessionWhosePluginDied(t *testing.T) {
	sock, h := serve(t)
	c := dial(t, sock)
	c.mustCall(api.MethodInitialize, acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber}, nil)
	var created acp.NewSessionResponse
	c.mustCall(api.MethodSessionNew, acp.NewSessionRequest{Cwd: t.TempDir(), McpServers: []acp.McpServer{}}, &created)
	id := string(created.SessionId)
	prompt := func(text string) message {
		return c.call(api.MethodSessionPrompt, acp.PromptRequest{SessionId: created.SessionId, Prompt: []acp.ContentBlock{acp.TextBlock(text)}})
	}
	if m := prompt("count 2"); m.Error != nil {
		t.Fatalf("first prompt: %+v", m.Error)
	}
	s, ok := h.Session(id)
	if !ok {
		t.Fatal("the new session is not running")
	}
	pid := s.PID()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-s.Done()
	var res acp.PromptResponse
	m := prompt("count 3")
	if m.Error != nil {
		t.Fatalf("a prompt after the plugin died: %d %s", m.Error.Code, m.Error.Message)
	}
	if err := json.Unmarshal(m.Result, &res); err != nil || res.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("a prompt after the plugin died: %s", m.Result)
	}
	s2, ok := h.Session(id)
	if !ok || s2.PID() == pid {
		t.Fatalf("after the prompt the session runs %v (pid %d; the dead plugin was %d)", ok, s2.PID(), pid)
	}

	c.mustCall(api.MethodSessionClose, acp.CloseSessionRequest{SessionId: created.SessionId}, nil)
	if m := prompt("count 1"); m.Error == nil || m.Error.Code != api.CodeNotFound || !strings.Contains(m.Error.Message, "load or resume it first") {
		t.Errorf("a prompt after session/close: %+v", m.Error)
	}
}

// A prompt while a turn runs is refused with CodeTurnRunning, and no
// user_message_chunk of it reaches the client: it was never journaled.
func TestPromptDuringATurnIsRefused(t *testing.T) {
	sock, _ := serve(t)
	c := dial(t, sock)
	c.mustCall(api.MethodInitialize, acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber}, nil)
	var created acp.NewSessionResponse
	c.mustCall(api.MethodSessionNew, acp.NewSessionRequest{Cwd: t.TempDir(), McpServers: []acp.McpServer{}}, &created)
	prompt := func(text string) acp.PromptRequest {
		return acp.PromptRequest{SessionId: created.SessionId, Prompt: []acp.ContentBlock{acp.TextBlock(text)}}
	}
	first := make(chan message, 1)
	go func() { first <- c.call(api.MethodSessionPrompt, prompt("sleep 30s")) }()
	c.waitNotes(api.MethodSessionUpdate, 1) // the first prompt's echo
	m := c.call(api.MethodSessionPrompt, prompt("the refused one"))
	if m.Error == nil || m.Error.Code != api.CodeTurnRunning || !strings.Contains(m.Error.Message, "cancel it") {
		t.Fatalf("a prompt during a turn: %+v", m.Error)
	}
	c.send(map[string]any{"jsonrpc": "2.0", "method": api.MethodSessionCancel, "params": acp.CancelNotification{SessionId: created.SessionId}})
	if r := <-first; r.Error != nil || !strings.Contains(string(r.Result), "cancelled") {
		t.Fatalf("the first turn: %s %+v", r.Result, r.Error)
	}
	for _, n := range c.notesOf(api.MethodSessionUpdate) {
		if strings.Contains(string(n.Params), "the refused one") {
			t.Errorf("the refused prompt reached the client as an update: %s", n.Params)
		}
	}
}

// A line with an id but no method, or an empty method, is neither a
// request nor a response: it is answered -32600 with its id (the SDK used
// to drop it, and the client waited forever).
func TestRequestWithoutMethodIsInvalid(t *testing.T) {
	sock, _ := serve(t)
	c := dial(t, sock)
	for id, line := range map[int]string{
		7: `{"jsonrpc":"2.0","id":7}`,
		8: `{"jsonrpc":"2.0","id":8,"method":""}`,
		9: `{"jsonrpc":"2.0","id":9,"method":"","params":{}}`,
	} {
		ch := make(chan message, 1)
		c.mu.Lock()
		c.pending[id] = ch
		c.mu.Unlock()
		c.raw(line)
		select {
		case m := <-ch:
			if m.Error == nil || m.Error.Code != api.CodeInvalidRequest || !strings.Contains(m.Error.Message, "method") {
				t.Errorf("%s answered %+v, want -32600 naming the method", line, m.Error)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%s: no answer", line)
		}
	}
	// Still serving.
	c.mustCall("initialize", map[string]any{"protocolVersion": 1}, nil)
}

// A connection holds at most MaxSubscriptions subscriptions: the next is
// refused with CodeOverLimit naming the bound, the ones it holds go on,
// and everything is freed when the connection closes (one client that
// subscribed thousands of times pinned hundreds of MiB).
func TestSubscriptionsPerConnectionAreBounded(t *testing.T) {
	const bound = 8
	sock, h := serveWith(t, func(s *localapi.Server) { s.MaxSubscriptions = bound })
	s, err := h.StartSession(context.Background(), host.SessionRequest{ID: "subs", Agent: "scripted", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Prompt(context.Background(), "count 3"); err != nil {
		t.Fatal(err)
	}
	last, _ := h.Store().LastSeq(context.Background(), "subs")
	baseline := runtime.NumGoroutine()
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	c := &rpcClient{t: t, conn: conn, pending: map[int]chan message{}, noteCond: make(chan struct{}), done: make(chan struct{})}
	go c.read()
	for i := range bound {
		if m := c.call(api.MethodSubscribe, map[string]any{"sessionId": "subs", "fromSeq": 1}); m.Error != nil {
			t.Fatalf("subscription %d of %d: %+v", i+1, bound, m.Error)
		}
	}
	m := c.call(api.MethodSubscribe, map[string]any{"sessionId": "subs", "fromSeq": 1})
	if m.Error == nil || m.Error.Code != api.CodeOverLimit || !strings.Contains(m.Error.Message, strconv.Itoa(bound)) {
		t.Fatalf("subscription %d: %+v; want %d naming the bound %d", bound+1, m.Error, api.CodeOverLimit, bound)
	}
	// The ones it holds go on: every entry, once each.
	c.waitNotes(api.MethodJournal, bound*int(last))
	if m := c.call(api.MethodStatus, nil); m.Error != nil {
		t.Fatalf("status after the refusal: %+v", m.Error)
	}
	conn.Close()
	<-c.done
	deadline := time.Now().Add(20 * time.Second)
	for runtime.NumGoroutine() > baseline {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after the client left, %d before it came", runtime.NumGoroutine(), baseline)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A burst of session/cancel notifications larger than the protocol
// library's queue (1024) does not end the connection: the server sheds
// the excess, logs it and tells the client with an _agenthost/overLimit
// notification, and goes on serving (it used to drop the connection
// without a word).
func TestCancelBurstDoesNotDropTheConnection(t *testing.T) {
	sock, _ := serve(t)
	c := dial(t, sock)
	c.mustCall(api.MethodInitialize, acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber}, nil)
	var created acp.NewSessionResponse
	c.mustCall(api.MethodSessionNew, acp.NewSessionRequest{Cwd: t.TempDir(), McpServers: []acp.McpServer{}}, &created)
	line, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": api.MethodSessionCancel, "params": acp.CancelNotification{SessionId: created.SessionId}})
	burst := strings.Repeat(string(line)+"\n", 5000)
	c.enc.Lock()
	_, err := c.conn.Write([]byte(burst))
	c.enc.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if m := c.call(api.MethodStatus, nil); m.Error != nil {
		t.Fatalf("status after the burst: %+v", m.Error)
	}
	// A prompt is served too (cancels of the burst still queued may end
	// its turn: they were sent before it).
	var res acp.PromptResponse
	c.mustCall(api.MethodSessionPrompt, acp.PromptRequest{SessionId: created.SessionId, Prompt: []acp.ContentBlock{acp.TextBlock("count 2")}}, &res)
	if res.StopReason != acp.StopReasonEndTurn && res.StopReason != acp.StopReasonCancelled {
		t.Errorf("a prompt after the burst: %+v", res)
	}
	if shed := c.notesOf(api.MethodOverLimit); len(shed) > 0 {
		var n api.OverLimitParams
		if err := json.Unmarshal(shed[0].Params, &n); err != nil || n.Code != api.CodeOverLimit || n.Method != api.MethodSessionCancel || n.Message == "" {
			t.Errorf("_agenthost/overLimit %s: %v", shed[0].Params, err)
		}
		t.Logf("%d runs of dropped cancels, each told once", len(shed))
	}
}

// A connection has at most MaxRequests requests being served: the next is
// answered CodeOverLimit naming the bound at once, and once answers went
// out the connection is served again.
func TestRequestsInFlightAreBounded(t *testing.T) {
	const bound = 2
	sock, _ := serveWith(t, func(s *localapi.Server) { s.MaxRequests = bound })
	c := dial(t, sock)
	c.mustCall(api.MethodInitialize, acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber}, nil)
	var sessions []acp.SessionId
	for range bound {
		var created acp.NewSessionResponse
		c.mustCall(api.MethodSessionNew, acp.NewSessionRequest{Cwd: t.TempDir(), McpServers: []acp.McpServer{}}, &created)
		sessions = append(sessions, created.SessionId)
	}
	answered := make(chan message, bound)
	for _, id := range sessions {
		go func() {
			answered <- c.call(api.MethodSessionPrompt, acp.PromptRequest{SessionId: id, Prompt: []acp.ContentBlock{acp.TextBlock("sleep 30s")}})
		}()
	}
	// Both prompts' echoes: both turns run. (Each session's derived title
	// is an update naming the prompt too, in either order, so only the
	// user_message_chunk of each session counts.)
	for n := 1; ; n++ {
		echoed := map[acp.SessionId]bool{}
		for _, u := range c.waitNotes(api.MethodSessionUpdate, n) {
			var p acp.SessionNotification
			if err := json.Unmarshal(u.Params, &p); err != nil {
				t.Fatalf("session/update %s: %v", u.Params, err)
			}
			if p.Update.UserMessageChunk != nil {
				echoed[p.SessionId] = true
			}
		}
		if len(echoed) == bound {
			break
		}
	}
	m := c.call(api.MethodStatus, nil)
	if m.Error == nil || m.Error.Code != api.CodeOverLimit || !strings.Contains(m.Error.Message, strconv.Itoa(bound)) {
		t.Fatalf("a request past %d in flight: %+v; want %d naming the bound", bound, m.Error, api.CodeOverLimit)
	}
	for _, id := range sessions {
		c.send(map[string]any{"jsonrpc": "2.0", "method": api.MethodSessionCancel, "params": acp.CancelNotification{SessionId: id}})
	}
	for range bound {
		if r := <-answered; r.Error != nil {
			t.Fatalf("a cancelled prompt: %+v", r.Error)
		}
	}
	if m := c.call(api.MethodStatus, nil); m.Error != nil {
		t.Fatalf("status once the prompts were answered: %+v", m.Error)
	}
}

// Sessions a connection follows (session/new, load, resume) count toward
// the same bound as its subscriptions: each is a goroutine and a
// read-ahead. Past it, session/new is refused before a plugin starts.
func TestFollowedSessionsCountTowardTheBound(t *testing.T) {
	const bound = 2
	sock, h := serveWith(t, func(s *localapi.Server) { s.MaxSubscriptions = bound })
	c := dial(t, sock)
	c.mustCall(api.MethodInitialize, acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber}, nil)
	var created acp.NewSessionResponse
	for range bound {
		c.mustCall(api.MethodSessionNew, acp.NewSessionRequest{Cwd: t.TempDir(), McpServers: []acp.McpServer{}}, &created)
	}
	sessions := func() int {
		st, err := h.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return st.Sessions
	}
	before := sessions()
	m := c.call(api.MethodSessionNew, acp.NewSessionRequest{Cwd: t.TempDir(), McpServers: []acp.McpServer{}})
	if m.Error == nil || m.Error.Code != api.CodeOverLimit || !strings.Contains(m.Error.Message, strconv.Itoa(bound)) {
		t.Fatalf("session/new past %d followed: %+v; want %d naming the bound", bound, m.Error, api.CodeOverLimit)
	}
	if n := sessions(); n != before {
		t.Fatalf("%d sessions after the refused session/new, %d before: it started one", n, before)
	}
	if m := c.call(api.MethodSubscribe, map[string]any{"sessionId": created.SessionId, "fromSeq": 1}); m.Error == nil || m.Error.Code != api.CodeOverLimit {
		t.Fatalf("a subscription past %d followed sessions: %+v; want %d", bound, m.Error, api.CodeOverLimit)
	}
}
