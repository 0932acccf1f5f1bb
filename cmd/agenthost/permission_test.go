package main

import (
	"encoding/json"
	"errors"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/internal/apiclient"
)

// asker is a client of the socket API that records the permission
// questions it is asked and answers each with the option the test sends
// on answer, or never (its connection closes first).
type asker struct {
	c      *apiclient.Client
	col    *collector
	asked  chan string // the request's tool call id, one per question
	answer chan string
}

func dialAsker(t *testing.T, sock string) *asker {
	t.Helper()
	a := &asker{col: &collector{}, asked: make(chan string, 16), answer: make(chan string, 1)}
	c, err := apiclient.Dial(ctxFor(t), sock, apiclient.Options{OnNotification: a.col.add,
		OnRequest: func(method string, params json.RawMessage) (any, error) {
			if method != api.MethodRequestPermission {
				return nil, &apiclient.Error{Code: -32601, Message: "method not found"}
			}
			var req struct {
				ToolCall struct {
					ToolCallID string `json:"toolCallId"`
				} `json:"toolCall"`
			}
			_ = json.Unmarshal(params, &req)
			a.asked <- req.ToolCall.ToolCallID
			select {
			case opt := <-a.answer:
				return map[string]any{"outcome": map[string]any{"outcome": "selected", "optionId": opt}}, nil
			case <-a.c.Done():
				return nil, apiclient.ErrClosed
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	a.c = c
	t.Cleanup(func() { c.Close() })
	if err := c.Call(ctxFor(t), "initialize", map[string]any{"protocolVersion": 1}, nil); err != nil {
		t.Fatal(err)
	}
	return a
}

// newSession creates a session of the scripted agent.
func (a *asker) newSession(t *testing.T) string {
	t.Helper()
	var created struct {
		SessionID string `json:"sessionId"`
	}
	if err := a.c.Call(ctxFor(t), "session/new", map[string]any{"cwd": t.TempDir(), "mcpServers": []any{},
		"_meta": map[string]any{"agenthost": map[string]any{"agent": "scripted"}}}, &created); err != nil {
		t.Fatal(err)
	}
	return created.SessionID
}

// load loads session id, which follows it.
func (a *asker) load(t *testing.T, id string) {
	t.Helper()
	if err := a.c.Call(ctxFor(t), "session/load", map[string]any{"sessionId": id, "cwd": "/", "mcpServers": []any{}}, nil); err != nil {
		t.Fatal(err)
	}
}

// promptAsync sends a prompt whose answer nobody waits for.
func (a *asker) promptAsync(t *testing.T, id, text string) {
	go func() {
		_ = a.c.Call(ctxFor(t), "session/prompt", map[string]any{"sessionId": id, "prompt": prompt(text)}, nil)
	}()
}

// waitAsked waits until the client is asked a permission question.
func (a *asker) waitAsked(t *testing.T, who string) {
	t.Helper()
	select {
	case <-a.asked:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s was never asked the pending permission request", who)
	}
}

// allowThenPrompt answers the pending request "allow", checks that the
// agent got it and its turn ended, and that the session then takes a
// prompt.
func (a *asker) allowThenPrompt(t *testing.T, dir, id string) {
	t.Helper()
	a.answer <- "allow"
	chunks, reason := turnOutcome(t, dir, id)
	if chunks != "permission: selected allow" || reason != "end_turn" {
		t.Fatalf("after the client allowed: the agent reported %q, stop %q; want %q, end_turn", chunks, reason, "permission: selected allow")
	}
	var res struct {
		StopReason string `json:"stopReason"`
	}
	if err := a.c.Call(ctxFor(t), "session/prompt", map[string]any{"sessionId": id, "prompt": prompt("echo next")}, &res); err != nil || res.StopReason != "end_turn" {
		t.Fatalf("a prompt after the permission was answered: %v %+v", err, res)
	}
}

// waitFollowers waits until _agenthost/session counts n clients following
// session id.
func (a *asker) waitFollowers(t *testing.T, id string, n int) {
	t.Helper()
	var r api.SessionResult
	deadline := time.Now().Add(20 * time.Second)
	for {
		if err := a.c.Call(ctxFor(t), api.MethodSession, api.Params{SessionID: id}, &r); err != nil {
			t.Fatal(err)
		}
		if r.Followers == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("session %s has %d followers, want %d", id, r.Followers, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// turnOutcome waits for the session's first stop and returns the
// agent's message chunks up to it and the stop reason.
func turnOutcome(t *testing.T, dir, id string) (chunks, reason string) {
	t.Helper()
	stops := waitStops(t, dir, id, 1)
	if len(stops) == 0 {
		t.Fatalf("the turn waiting on the permission never ended; journal:\n%s", mustAH(t, "--state-dir", dir, "journal", id).stdout)
	}
	for _, e := range parseJournal(t, mustAH(t, "--state-dir", dir, "journal", id, "--json").stdout) {
		if e.Kind == "stop" {
			break
		}
		if e.Payload.Update.SessionUpdate == "agent_message_chunk" {
			chunks += e.Payload.Update.Content.Text
		}
	}
	return chunks, stops[0].Payload.StopReason
}

// startDetaching starts serve without --shutdown-sessions: SIGTERM
// detaches from the sessions, as an app update does.
// The caller ends it (kill or SIGTERM); a test that fails first leaves it
// to the cleanup, whose SIGTERM leaves the plugins to noPluginsLeft.
func startDetaching(t *testing.T, dir string) *server {
	t.Helper()
	s := startServeCmd(t, dir, func(c *exec.Cmd) {
		c.Args = slices.DeleteFunc(c.Args, func(a string) bool { return a == "--shutdown-sessions" })
	})
	t.Cleanup(s.stop)
	return s
}

// A permission request the plugin waits on outlives its host, whether
// the host is SIGKILLed or detaches on SIGTERM: the plugin is never told
// "cancelled" on the user's behalf, the next host asks the next client
// that follows the session, that client's answer reaches the agent, the
// turn ends, and the session takes prompts again.
func TestPendingPermissionSurvivesTheHost(t *testing.T) {
	t.Parallel()
	// Each case is the ways the hosts before the one that asks went
	// away, in order; none but the first had a client.
	for _, hows := range [][]string{{"SIGKILL"}, {"SIGTERM"}, {"SIGKILL", "SIGTERM"}} {
		t.Run(strings.Join(hows, ","), func(t *testing.T) {
			t.Parallel()
			dir := stateDir(t)
			t.Cleanup(func() { noPluginsLeft(t, dir) })
			s := startDetaching(t, dir)
			a := dialAsker(t, s.ready.Socket)
			id := a.newSession(t)
			a.promptAsync(t, id, "ask")
			a.waitAsked(t, "the first client")
			pid := showSession(t, dir, id).Session.Lease.Owner.PID
			for i, how := range hows {
				if i > 0 {
					s = startDetaching(t, dir)
				}
				if how == "SIGKILL" {
					s.kill()
				} else {
					s.stopped = true
					_ = s.cmd.Process.Signal(syscall.SIGTERM)
					select {
					case <-s.done:
					case <-time.After(30 * time.Second):
						t.Fatal("serve did not exit on SIGTERM")
					}
				}
				if err := syscall.Kill(pid, 0); err != nil {
					t.Fatalf("the plugin did not outlive its host (%s): %v", how, err)
				}
			}

			s2 := serve(t, dir)
			b := dialAsker(t, s2.ready.Socket)
			b.load(t, id)
			b.waitAsked(t, "the client following the session after the restart")
			if chunks := journalChunks(t, dir, id); chunks != "" {
				t.Fatalf("before anyone answered, the agent reported %q: the request was answered on the user's behalf", chunks)
			}
			b.allowThenPrompt(t, dir, id)
		})
	}
}

// journalChunks is the agent's message chunks in the session's journal
// so far.
func journalChunks(t *testing.T, dir, id string) string {
	t.Helper()
	var out []string
	for _, e := range parseJournal(t, mustAH(t, "--state-dir", dir, "journal", id, "--json").stdout) {
		if e.Payload.Update.SessionUpdate == "agent_message_chunk" {
			out = append(out, e.Payload.Update.Content.Text)
		}
	}
	return strings.Join(out, "")
}

// Clients leaving do not answer a permission request: neither one that
// only observes the session nor the one that asked. The one that stays
// is still asked (again, when the asking one left before answering), and
// its "allow" reaches the agent.
func TestPermissionOutlivesClientsLeaving(t *testing.T) {
	t.Parallel()
	for _, who := range []string{"observer", "asker"} {
		t.Run(who+" leaves", func(t *testing.T) {
			t.Parallel()
			dir := stateDir(t)
			s := serve(t, dir)
			a := dialAsker(t, s.ready.Socket)
			id := a.newSession(t)
			b := dialAsker(t, s.ready.Socket)
			b.load(t, id)
			a.promptAsync(t, id, "ask")
			a.waitAsked(t, "the prompting client")
			b.waitAsked(t, "the observing client")
			stay, leave := a, b
			if who == "asker" {
				stay, leave = b, a
			}
			stay.waitFollowers(t, id, 2)
			leave.c.Close()
			<-leave.c.Done()
			// The host has finished with a client that left once the
			// session no longer counts it: a host that answers for a
			// client leaving has answered by then.
			stay.waitFollowers(t, id, 1)
			if chunks := journalChunks(t, dir, id); chunks != "" {
				t.Fatalf("once the %s left, the agent reported %q: the request was answered for it", who, chunks)
			}
			// Another client comes and goes too, without answering.
			c := dialAsker(t, s.ready.Socket)
			c.load(t, id)
			c.waitAsked(t, "a third client")
			c.c.Close()
			<-c.c.Done()
			stay.waitFollowers(t, id, 1)
			if chunks := journalChunks(t, dir, id); chunks != "" {
				t.Fatalf("before the remaining client answered, the agent reported %q: the request was answered for a client that left", chunks)
			}
			stay.answer <- "allow"
			chunks, reason := turnOutcome(t, dir, id)
			if chunks != "permission: selected allow" || reason != "end_turn" {
				t.Fatalf("after the %s left, the remaining client allowed: the agent reported %q, stop %q; want %q, end_turn", who, chunks, reason, "permission: selected allow")
			}
		})
	}
}

// While a readopted turn waits on a permission request, a new prompt is
// refused with CodeTurnRunning and journaled nowhere, as for any running
// turn; the answer then ends the turn, and the next prompt runs.
func TestPromptWhileAReadoptedTurnWaitsIsRefusedUnjournaled(t *testing.T) {
	t.Parallel()
	dir := stateDir(t)
	t.Cleanup(func() { noPluginsLeft(t, dir) })
	s := startDetaching(t, dir)
	a := dialAsker(t, s.ready.Socket)
	id := a.newSession(t)
	a.promptAsync(t, id, "ask")
	a.waitAsked(t, "the first client")
	s.kill()

	s2 := serve(t, dir)
	b := dialAsker(t, s2.ready.Socket)
	b.load(t, id)
	b.waitAsked(t, "the client following the session after the restart")
	before := parseJournal(t, mustAH(t, "--state-dir", dir, "journal", id, "--json").stdout)
	err := b.c.Call(ctxFor(t), "session/prompt", map[string]any{"sessionId": id, "prompt": prompt("echo too soon")}, nil)
	var rpcErr *apiclient.Error
	if !errors.As(err, &rpcErr) || rpcErr.Code != api.CodeTurnRunning {
		t.Fatalf("a prompt while the readopted turn waits: %v, want code %d", err, api.CodeTurnRunning)
	}
	after := parseJournal(t, mustAH(t, "--state-dir", dir, "journal", id, "--json").stdout)
	if len(after) != len(before) {
		t.Fatalf("the refused prompt was journaled: %d entries before, %d after:\n%s", len(before), len(after), mustAH(t, "--state-dir", dir, "journal", id).stdout)
	}
	b.allowThenPrompt(t, dir, id)
}
