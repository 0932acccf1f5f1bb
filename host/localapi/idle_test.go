package localapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	acp "github.com/coder/acp-go-sdk"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/leasestore"
)

// serveIdle serves a host whose sessions are idle after timeout.
func serveIdle(t *testing.T, timeout time.Duration) (string, *host.Host) {
	t.Helper()
	return serveHost(t, func(c *host.Config) { c.IdleTimeout = timeout }, nil)
}

// connected is a new initialized connection.
func connected(t *testing.T, sock string) *rpcClient {
	t.Helper()
	c := dial(t, sock)
	c.mustCall(api.MethodInitialize, acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber}, nil)
	return c
}

// newSessionOn starts a session of the default agent on c, which follows it.
func newSessionOn(t *testing.T, c *rpcClient) string {
	t.Helper()
	var created acp.NewSessionResponse
	c.mustCall(api.MethodSessionNew, acp.NewSessionRequest{Cwd: t.TempDir(), McpServers: []acp.McpServer{}}, &created)
	return string(created.SessionId)
}

func promptText(c *rpcClient, id, text string) message {
	return c.call(api.MethodSessionPrompt, acp.PromptRequest{SessionId: acp.SessionId(id), Prompt: []acp.ContentBlock{acp.TextBlock(text)}})
}

func mustPromptText(t *testing.T, c *rpcClient, id, text string) {
	t.Helper()
	m := promptText(c, id, text)
	var res acp.PromptResponse
	if m.Error != nil {
		t.Fatalf("prompt %q: %d %s", text, m.Error.Code, m.Error.Message)
	}
	if err := json.Unmarshal(m.Result, &res); err != nil || res.StopReason != acp.StopReasonEndTurn {
		t.Fatalf("prompt %q answered %s", text, m.Result)
	}
}

// processGone reports whether pid no longer exists (a reaped process).
func processGone(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return os.IsNotExist(err) && syscall.Kill(pid, 0) == syscall.ESRCH
}

// waitEnded waits for the session's end: here only the idle stop ends it.
func waitEnded(t *testing.T, s *host.Session) {
	t.Helper()
	select {
	case <-s.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("session %q was not stopped after the idle timeout", s.ID())
	}
}

// sessionPrompts are the texts of the session's journaled prompts.
func sessionPrompts(t *testing.T, h *host.Host, id string) []string {
	t.Helper()
	var out []string
	err := h.Store().Replay(context.Background(), id, 0, func(e leasestore.Entry) error {
		if e.Kind != leasestore.KindPrompt {
			return nil
		}
		r, err := journal.Decode(e)
		if err != nil {
			return err
		}
		out = append(out, r.(*journal.Prompt).Prompt[0].Text())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A session nobody follows is stopped after the idle timeout, plugin
// process and all, shows as idle in _agenthost/session, and a prompt on
// another connection, which never loaded it, resumes it transparently:
// the same provider conversation, every prompt in its journal. A
// session/resume resumes it too.
func TestPromptResumesAnIdleSessionOnAnyConnection(t *testing.T) {
	t.Parallel()
	sock, h := serveIdle(t, 300*time.Millisecond)
	c1 := connected(t, sock)
	id := newSessionOn(t, c1)
	mustPromptText(t, c1, id, "count 2")
	s, ok := h.Session(id)
	if !ok {
		t.Fatal("the new session is not running")
	}
	pid, handle := s.PID(), s.Handle()
	c1.conn.Close() // its follower goes, and the session is idle

	waitEnded(t, s)
	if !processGone(pid) {
		t.Errorf("plugin %d still exists after the idle stop", pid)
	}
	c2 := connected(t, sock)
	var st api.StatusResult
	c2.mustCall(api.MethodStatus, nil, &st)
	if st.Host.IdleTimeout != "300ms" {
		t.Errorf("status reports idle timeout %q; want 300ms", st.Host.IdleTimeout)
	}
	var res api.SessionResult
	c2.mustCall(api.MethodSession, api.Params{SessionID: id}, &res)
	ev := res.Session.Lease.DeathEvidence
	if res.Running || ev == nil || ev.Detail != host.IdleStopDetail || res.Session.State != "" && res.Session.State != api.StateIdle {
		t.Errorf("_agenthost/session after the idle stop: running %v, state %q, evidence %+v; want idle", res.Running, res.Session.State, ev)
	}
	rec, err := h.Store().Get(context.Background(), id)
	if err != nil || host.StateOf(rec, false) != api.StateIdle {
		t.Errorf("the session's state is %q (%v); want idle", host.StateOf(rec, false), err)
	}

	mustPromptText(t, c2, id, "count 3")
	s2, ok := h.Session(id)
	if !ok || s2.PID() == pid || s2.Handle() != handle {
		t.Fatalf("after the prompt: running %v; want a new plugin on the same conversation %q", ok, handle)
	}
	if got := fmt.Sprint(sessionPrompts(t, h, id)); got != "[count 2 count 3]" {
		t.Errorf("journaled prompts %s", got)
	}

	// c2 follows nothing: the session goes idle again, and session/resume
	// starts it, as it starts any stopped session.
	waitEnded(t, s2)
	var resumed acp.ResumeSessionResponse
	c2.mustCall(api.MethodSessionResume, acp.ResumeSessionRequest{SessionId: acp.SessionId(id), Cwd: "/"}, &resumed)
	s3, ok := h.Session(id)
	if !ok || s3.Handle() != handle {
		t.Fatalf("session/resume of the idle session: running %v", ok)
	}
	mustPromptText(t, c2, id, "count 1")
}

// Prompts sent around the moment the idle stop is decided are each
// answered, and journaled once: one that meets the stop waits for it and
// goes to the resumed session. The gaps between them straddle the idle
// timeout so that some land just before the stop, some during it, some
// after; what is asserted is only what must hold for every one.
func TestPromptsRacingTheIdleStopAreNeverLost(t *testing.T) {
	t.Parallel()
	const idle = 100 * time.Millisecond
	sock, h := serveIdle(t, idle)
	c1 := connected(t, sock)
	id := newSessionOn(t, c1)
	c1.conn.Close() // nobody follows the session: it idles
	c := connected(t, sock)
	var want []string
	for i := range 8 {
		time.Sleep(idle * time.Duration(7+i%4*2) / 10) // 0.7, 0.9, 1.1, 1.3 timeouts
		text := fmt.Sprintf("hello %d", i)
		mustPromptText(t, c, id, text)
		want = append(want, text)
	}
	if got, w := fmt.Sprint(sessionPrompts(t, h, id)), fmt.Sprint(want); got != w {
		t.Errorf("journaled prompts %s; want %s", got, w)
	}
}

// A connection following a session whose plugin died and was resumed for
// its prompt follows the resumed session too: it keeps it from idling.
func TestFollowingConnectionKeepsTheResumedSessionAwake(t *testing.T) {
	t.Parallel()
	const idle = 300 * time.Millisecond
	sock, h := serveIdle(t, idle)
	c := connected(t, sock)
	id := newSessionOn(t, c)
	s, _ := h.Session(id)
	if err := syscall.Kill(s.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-s.Done()
	mustPromptText(t, c, id, "count 1")
	s2, ok := h.Session(id)
	if !ok {
		t.Fatal("the prompt did not resume the session")
	}
	var res api.SessionResult
	c.mustCall(api.MethodSession, api.Params{SessionID: id}, &res)
	if res.Followers != 1 {
		t.Errorf("the resumed session counts %d followers; want the connection that follows it", res.Followers)
	}
	// Nothing happens while it is followed: five idle timeouts (four
	// stops over, had it been idle) before the test looks.
	time.Sleep(5 * idle)
	select {
	case <-s2.Done():
		t.Fatal("the followed session was stopped as idle")
	default:
	}
}

// A session/load of a running session is activity: the session is not
// idle while the load replays its journal, however slow the client is to
// read it. The client here reads nothing until the test has seen the
// replay under way and then held it for five idle timeouts.
func TestALoadKeepsTheSessionAwakeDuringItsReplay(t *testing.T) {
	t.Parallel()
	const idle = 300 * time.Millisecond
	sock, h := serveIdle(t, idle)
	c1 := connected(t, sock)
	id := newSessionOn(t, c1)
	// A journal far larger than a socket's buffers.
	mustPromptText(t, c1, id, "count 5000")
	s, _ := h.Session(id)
	hold := s.Followed() // the session stays awake until the load is under way
	c1.conn.Close()

	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	enc := json.NewEncoder(conn)
	_ = enc.Encode(map[string]any{"jsonrpc": "2.0", "id": 1, "method": api.MethodInitialize, "params": acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber}})
	_ = enc.Encode(map[string]any{"jsonrpc": "2.0", "id": 2, "method": api.MethodSessionLoad, "params": acp.LoadSessionRequest{SessionId: acp.SessionId(id), Cwd: "/", McpServers: []acp.McpServer{}}})
	sc := bufio.NewScanner(conn)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for !strings.Contains(sc.Text(), `"session/update"`) {
		if !sc.Scan() {
			t.Fatalf("the connection ended before the load's replay began: %v", sc.Err())
		}
	}
	// The replay is under way, and blocked on the client.
	hold()
	time.Sleep(5 * idle)
	if s.IdleStopping() {
		t.Error("the session was stopped as idle while a load replayed its journal")
	}
	for sc.Scan() {
		var m message
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		if m.ID != nil && string(*m.ID) == "2" {
			if m.Error != nil {
				t.Fatalf("session/load: %d %s", m.Error.Code, m.Error.Message)
			}
			break
		}
	}
	if s2, ok := h.Session(id); !ok || s2 != s {
		t.Errorf("after the load: running %v; want the session the load found, never stopped", ok)
	}
}
