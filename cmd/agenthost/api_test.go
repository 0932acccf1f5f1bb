package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/internal/apiclient"
	"github.com/agenthost/agenthost/internal/logtest"
)

// collector keeps a client's notifications.
type collector struct {
	mu    sync.Mutex
	notes []*apiclient.Message
}

func (c *collector) add(m *apiclient.Message) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.notes = append(c.notes, m)
}

func (c *collector) of(method string) []*apiclient.Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*apiclient.Message
	for _, m := range c.notes {
		if m.Method == method {
			out = append(out, m)
		}
	}
	return out
}

type update struct {
	SessionID string `json:"sessionId"`
	Update    struct {
		SessionUpdate string `json:"sessionUpdate"`
		Content       struct {
			Text string `json:"text"`
		} `json:"content"`
	} `json:"update"`
	Meta struct {
		Agenthost struct {
			Seq    uint64 `json:"seq"`
			TurnID string `json:"turnId"`
		} `json:"agenthost"`
	} `json:"_meta"`
}

func decodeUpdates(t *testing.T, ms []*apiclient.Message) []update {
	t.Helper()
	out := make([]update, len(ms))
	for i, m := range ms {
		if err := json.Unmarshal(m.Params, &out[i]); err != nil {
			t.Fatalf("session/update %s: %v", m.Params, err)
		}
	}
	return out
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func dialAPI(t *testing.T, sock string, col *collector) *apiclient.Client {
	t.Helper()
	c, err := apiclient.Dial(ctxFor(t), sock, apiclient.Options{OnNotification: col.add})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.Call(ctxFor(t), "initialize", map[string]any{"protocolVersion": 1}, nil); err != nil {
		t.Fatal(err)
	}
	return c
}

func prompt(text string) []any { return []any{map[string]any{"type": "text", "text": text}} }

// waitStop waits until the session's journal holds n stop entries.
func waitStops(t *testing.T, dir, id string, n int) []journalLine {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var stops []journalLine
		for _, e := range parseJournal(t, mustAH(t, "--state-dir", dir, "journal", id, "--json").stdout) {
			if e.Kind == "stop" {
				stops = append(stops, e)
			}
		}
		if len(stops) >= n || time.Now().After(deadline) {
			return stops
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A Go client of the socket API, as a desktop app writes one: it creates a
// session, prompts, cancels a turn, reconnects and catches up from the last
// seq it saw, resumes the session and prompts again.
func TestACPClientOverTheSocket(t *testing.T) {
	t.Parallel()
	dir := stateDir(t)
	s := serve(t, dir)
	ctx := ctxFor(t)
	col := &collector{}
	c := dialAPI(t, s.ready.Socket, col)

	var created struct {
		SessionID string `json:"sessionId"`
	}
	if err := c.Call(ctx, "session/new", map[string]any{"cwd": t.TempDir(), "mcpServers": []any{},
		"_meta": map[string]any{"agenthost": map[string]any{"agent": "scripted"}}}, &created); err != nil {
		t.Fatal(err)
	}
	id := created.SessionID
	var res struct {
		StopReason string `json:"stopReason"`
	}
	if err := c.Call(ctx, "session/prompt", map[string]any{"sessionId": id, "prompt": prompt("count 3")}, &res); err != nil || res.StopReason != "end_turn" {
		t.Fatalf("prompt: %v %+v", err, res)
	}
	ups := decodeUpdates(t, col.of("session/update"))
	var text string
	var lastSeen uint64
	for _, u := range ups {
		if u.Update.SessionUpdate == "agent_message_chunk" {
			text += u.Update.Content.Text
		}
		lastSeen = max(lastSeen, u.Meta.Agenthost.Seq)
	}
	if text != "123" || lastSeen == 0 {
		t.Fatalf("updates before the answer: %q, last seq %d", text, lastSeen)
	}

	// Cancel a turn that would run for 30 s.
	answered := make(chan error, 1)
	go func() {
		answered <- c.Call(ctx, "session/prompt", map[string]any{"sessionId": id, "prompt": prompt("sleep 30s")}, nil)
	}()
	for len(col.of("session/update")) < len(ups)+1 { // the prompt's echo
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	cancelUntilAnswered(t, c, id, answered)
	if stops := waitStops(t, dir, id, 2); len(stops) != 2 || stops[1].Payload.StopReason != "cancelled" || time.Since(start) > 5*time.Second {
		t.Fatalf("after session/cancel the journal's stops are %+v", stops)
	}
	for _, u := range decodeUpdates(t, col.of("session/update")) {
		lastSeen = max(lastSeen, u.Meta.Agenthost.Seq)
	}
	c.Close()

	// Meanwhile another client runs a turn: the first one will catch up.
	mustAH(t, "--state-dir", dir, "run", "--session", id, "count 2")

	// Reconnect and subscribe from the entry after the last one seen:
	// every entry since, none twice, no gap.
	col2 := &collector{}
	c2 := dialAPI(t, s.ready.Socket, col2)
	var sub struct {
		LastSeq uint64 `json:"lastSeq"`
	}
	if err := c2.Call(ctx, "_agenthost/subscribe", map[string]any{"sessionId": id, "fromSeq": lastSeen + 1}, &sub); err != nil {
		t.Fatal(err)
	}
	if err := c2.WaitFor(ctx, func() bool { return len(col2.of("_agenthost/journal")) >= int(sub.LastSeq-lastSeen) }); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for i, m := range col2.of("_agenthost/journal") {
		var e journalLine
		_ = json.Unmarshal(m.Params, &e)
		if e.Seq != lastSeen+1+uint64(i) {
			t.Fatalf("after reconnecting, entry %d has seq %d, want %d", i, e.Seq, lastSeen+1+uint64(i))
		}
		kinds = append(kinds, e.Kind)
	}
	if got := strings.Join(kinds, ","); !strings.Contains(got, "stop,prompt,update,update,stop") {
		t.Errorf("caught up with %s; want the cancelled turn's stop and the other client's turn", got)
	}

	// Resume and prompt again on the new connection.
	if err := c2.Call(ctx, "session/resume", map[string]any{"sessionId": id, "cwd": "/"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c2.Call(ctx, "session/prompt", map[string]any{"sessionId": id, "prompt": prompt("echo resumed")}, &res); err != nil || res.StopReason != "end_turn" {
		t.Fatalf("prompt after resume: %v %+v", err, res)
	}
	got := decodeUpdates(t, col2.of("session/update"))
	if len(got) != 2 || got[1].Update.Content.Text != "echo resumed" || got[0].Update.SessionUpdate != "user_message_chunk" {
		t.Errorf("updates after resume: %+v", got)
	}
}

// Bad API input is answered with JSON-RPC errors; the connection and the
// host carry on.
func TestBadAPIInputKeepsTheHostUp(t *testing.T) {
	t.Parallel()
	dir := stateDir(t)
	s := serve(t, dir)
	ctx := ctxFor(t)
	var mu sync.Mutex
	var nullIDErrors []int
	c, err := apiclient.Dial(ctx, s.ready.Socket, apiclient.Options{OnResponse: func(m *apiclient.Message) {
		if m.Error != nil && (len(m.ID) == 0 || string(m.ID) == "null") {
			mu.Lock()
			nullIDErrors = append(nullIDErrors, m.Error.Code)
			mu.Unlock()
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, line := range []string{
		`{"this is": not json`,
		`[1, 2, 3]`,
		`{"method":"initialize"}`,
		`{"jsonrpc":"2.0","id":null,"method":"session/prompt","params":` + strings.Repeat(" ", 5<<20) + `{}}`,
		"\x00\x01\x02 binary garbage \xff\xfe",
	} {
		if err := c.WriteLine([]byte(line)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.WaitFor(ctx, func() bool { mu.Lock(); defer mu.Unlock(); return len(nullIDErrors) >= 5 }); err != nil {
		t.Fatalf("answers to bad lines: %v (got %v)", err, nullIDErrors)
	}
	mu.Lock()
	if codes := nullIDErrors; codes[0] != api.CodeParseError || codes[2] != api.CodeInvalidRequest || codes[3] != api.CodeInvalidRequest {
		t.Errorf("error codes %v: want parse error, …, invalid request for a non-JSON-RPC object and for an oversized line", codes)
	}
	mu.Unlock()
	for _, tc := range []struct {
		method string
		params any
		code   int
	}{
		{"no/such/method", map[string]any{}, api.CodeMethodNotFound},
		{"session/prompt", map[string]any{"sessionId": 42}, api.CodeInvalidParams},
		{"session/prompt", map[string]any{"sessionId": "nope", "prompt": prompt("hi")}, api.CodeNotFound},
		{"session/new", map[string]any{"cwd": "/", "mcpServers": []any{}}, api.CodeInvalidParams},
		{"session/new", map[string]any{"cwd": "relative", "mcpServers": []any{}, "_meta": map[string]any{"agenthost": map[string]any{"agent": "scripted"}}}, api.CodeInvalidParams},
		{"_agenthost/subscribe", map[string]any{"sessionId": []int{1}}, api.CodeInvalidParams},
		{"_agenthost/stop", map[string]any{"sessionId": "nope"}, api.CodeNotFound},
	} {
		err := c.Call(ctx, tc.method, tc.params, nil)
		if apiclient.ErrorCode(err) != tc.code {
			t.Errorf("%s %v: got %v (code %d), want code %d", tc.method, tc.params, err, apiclient.ErrorCode(err), tc.code)
		}
	}
	// A client that vanishes mid-request does no harm either.
	conn, err := net.Dial("unix", s.ready.Socket)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(conn, `{"jsonrpc":"2.0","id":1,"method":"initial`)
	conn.Close()

	// Still serving, on this connection and on new ones.
	if err := c.Call(ctx, "initialize", map[string]any{"protocolVersion": 1}, nil); err != nil {
		t.Fatal(err)
	}
	mustAH(t, "--state-dir", dir, "run", "--agent", "scripted", "count 1")
	if r := mustAH(t, "--state-dir", dir, "status"); !strings.Contains(r.stdout, "pid "+itoa(s.ready.PID)) {
		t.Errorf("status after bad input: %s", r)
	}
	select {
	case <-s.done:
		t.Fatalf("the host exited: %v\n%s", s.err, s.stderrText())
	default:
	}
}

// agenthost acp serves one client on stdin/stdout: an editor's view.
func TestACPOnStdio(t *testing.T) {
	t.Parallel()
	dir := stateDir(t)
	cmd := exec.Command(bins.agenthost, "--state-dir", dir, "acp", "--agent", "scripted", "--shutdown-sessions")
	cmd.Env = testEnv()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr logtest.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var raw []string
	var rawMu sync.Mutex
	col := &collector{}
	c := apiclient.New(stdioConn{stdout, stdin}, apiclient.Options{OnNotification: col.add, OnResponse: func(m *apiclient.Message) {
		rawMu.Lock()
		raw = append(raw, string(m.Raw))
		rawMu.Unlock()
	}})
	ctx := ctxFor(t)
	var init struct {
		ProtocolVersion int `json:"protocolVersion"`
		AgentInfo       struct {
			Name string `json:"name"`
		} `json:"agentInfo"`
	}
	if err := c.Call(ctx, "initialize", map[string]any{"protocolVersion": 1}, &init); err != nil || init.AgentInfo.Name != "agenthost" {
		t.Fatalf("initialize: %v %+v\nstderr:\n%s", err, init, stderr.String())
	}
	// No agent named: the default one runs.
	var created struct {
		SessionID string `json:"sessionId"`
	}
	if err := c.Call(ctx, "session/new", map[string]any{"cwd": t.TempDir(), "mcpServers": []any{}}, &created); err != nil {
		t.Fatal(err)
	}
	var res struct {
		StopReason string `json:"stopReason"`
	}
	if err := c.Call(ctx, "session/prompt", map[string]any{"sessionId": created.SessionID, "prompt": prompt("count 3")}, &res); err != nil || res.StopReason != "end_turn" {
		t.Fatalf("prompt: %v %+v", err, res)
	}
	var text string
	for _, u := range decodeUpdates(t, col.of("session/update")) {
		text += u.Update.Content.Text
	}
	if text != "count 3123" {
		t.Errorf("updates on stdout: %q", text)
	}
	// The socket is served alongside.
	if r := mustAH(t, "--state-dir", dir, "sessions", "list"); !strings.Contains(r.stdout, created.SessionID) {
		t.Errorf("sessions list beside acp: %s", r)
	}
	// Cancel.
	answered := make(chan error, 1)
	go func() {
		answered <- c.Call(ctx, "session/prompt", map[string]any{"sessionId": created.SessionID, "prompt": prompt("sleep 30s")}, nil)
	}()
	for len(col.of("session/update")) < 5 {
		time.Sleep(10 * time.Millisecond)
	}
	cancelUntilAnswered(t, c, created.SessionID, answered)
	if stops := waitStops(t, dir, created.SessionID, 2); len(stops) != 2 || stops[1].Payload.StopReason != "cancelled" {
		t.Errorf("stops after cancel: %+v", stops)
	}
	// stdin ends: acp exits 0, its sessions stopped, stdout held only
	// protocol.
	stdin.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("acp exited with %v; stderr:\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("acp did not exit when stdin ended")
	}
	<-c.Done()
	rawMu.Lock()
	for _, l := range raw {
		if !json.Valid([]byte(l)) {
			t.Errorf("acp wrote a non-JSON line on stdout: %q", l)
		}
	}
	rawMu.Unlock()
	noPluginsLeft(t, dir)
	if r := ah(t, "--state-dir", dir, "acp"); r.code != 2 || !strings.Contains(r.stderr, `"agent" not set`) {
		t.Errorf("acp without --agent: %s", r)
	}
	if r := ahInput(t, "", "--state-dir", dir, "acp", "--agent", "nobody"); r.code != 1 || !strings.Contains(r.stderr, `unknown agent "nobody"`) {
		t.Errorf("acp --agent nobody: %s", r)
	}
}

// cancelUntilAnswered sends session/cancel until the prompt is answered,
// as a client should: a cancel that reaches the host while the prompt is
// still on its way to the agent can be lost.
func cancelUntilAnswered(t *testing.T, c *apiclient.Client, id string, answered <-chan error) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		if err := c.Notify("session/cancel", map[string]any{"sessionId": id}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-answered:
			return
		case <-time.After(500 * time.Millisecond):
		case <-deadline:
			t.Fatal("the cancelled prompt was not answered")
		}
	}
}

// stdioConn joins a process's stdout and stdin into one connection.
type stdioConn struct {
	r io.ReadCloser
	w io.WriteCloser
}

func (s stdioConn) Read(p []byte) (int, error)  { return s.r.Read(p) }
func (s stdioConn) Write(p []byte) (int, error) { return s.w.Write(p) }
func (s stdioConn) Close() error {
	s.w.Close()
	return s.r.Close()
}
