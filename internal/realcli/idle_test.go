package realcli_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/plugin/sdk/modelserver"
)

// idleArgs start agenthost serve with a short idle timeout: the session
// is followed (never idle) until its client goes, and stopped soon after.
var idleArgs = []string{"--idle-timeout", "500ms"}

// startIdle is a rig of c with agenthost serve started with idleArgs, a
// client connected, and the model server scripted with replies.
func startIdle(t *testing.T, c cli, replies ...modelserver.Reply) (*rig, *server, *client) {
	t.Helper()
	r := newRig(t, c)
	s := r.start(idleArgs...)
	cl := r.dial(s)
	r.script(replies...)
	return r, s, cl
}

// idleStop closes the session's only client and waits until the host has
// stopped the session's plugin and CLI as idle: no process of the rig
// left, and the session idle in _agenthost/session of a new client,
// which it returns.
func idleStop(t *testing.T, r *rig, s *server, cl *client, id string) *client {
	t.Helper()
	if len(r.processes()) < 2 {
		t.Fatalf("the rig's processes: %v; want the plugin and its CLI", r.processes())
	}
	cl.c.Close()
	waitUntil(t, 30*time.Second, "the idle session's plugin and CLI gone", func() bool { return len(r.processes()) == 0 })
	c2 := r.dial(s)
	// The processes end before the host has written the release the idle
	// stop ends with: wait for the session to stop running, then judge it.
	var res api.SessionResult
	waitUntil(t, 30*time.Second, "the idle session no longer running", func() bool {
		if err := c2.c.Call(ctxFor(t, 10*time.Second), api.MethodSession, api.Params{SessionID: id}, &res); err != nil {
			t.Fatal(err)
		}
		return !res.Running && res.Session.Lease.Claim == "released"
	})
	if ev := res.Session.Lease.DeathEvidence; res.Running || ev == nil || ev.Detail != host.IdleStopDetail ||
		res.Session.State != "" && res.Session.State != api.StateIdle {
		t.Fatalf("_agenthost/session after the idle stop: running %v, state %q, evidence %+v; want idle", res.Running, res.Session.State, ev)
	}
	return c2
}

// A claude session nobody follows is stopped after the idle timeout,
// plugin and CLI, and its next prompt, on a connection that never loaded
// it, resumes the same conversation: the CLI is started with --resume of
// the session's handle, and the model sees the first exchange.
func TestClaudeIdleSessionResumesOnItsNextPrompt(t *testing.T) {
	t.Parallel()
	r, s, cl := startIdle(t, claudeCLI, modelserver.Text("The capital of France is Paris."), modelserver.Text("And of Germany, Berlin."))
	id := cl.newSession(r, nil)
	cl.mustPrompt(id, "What is the capital of France?", "end_turn")
	handle := cl.storedSession(id).Handle()

	c2 := idleStop(t, r, s, cl, id)
	c2.mustPrompt(id, "And of Germany?", "end_turn")
	if _, c := r.pluginAndCLI(); !slices.Contains(cmdline(t, c), "--resume="+handle) {
		t.Errorf("the CLI after the idle stop runs %q; want --resume=%s", cmdline(t, c), handle)
	}
	history := requestHistory(r.nextRequest(2))
	for _, want := range []string{"user: What is the capital of France?", "assistant: The capital of France is Paris.", "user: And of Germany?"} {
		if !strings.Contains(history, want) {
			t.Errorf("the request after the idle stop lacks %q; it carries:\n%s", want, history)
		}
	}
}

// The same for codex: its app-server is gone after the idle timeout, and
// the thread the next prompt runs on is the one it had.
func TestCodexIdleSessionResumesOnItsNextPrompt(t *testing.T) {
	t.Parallel()
	r, s, cl := startIdle(t, codexCLI, modelserver.Text("The secret word is marmalade."), modelserver.Text("You asked about marmalade."))
	id := cl.newSession(r, nil)
	cl.mustPrompt(id, "remember the word marmalade", "end_turn")

	c2 := idleStop(t, r, s, cl, id)
	c2.mustPrompt(id, "what was the word?", "end_turn")
	next := r.nextRequest(2)
	if !hasMessage(next, "user", "remember the word marmalade") || !hasMessage(next, "assistant", "The secret word is marmalade.") ||
		!strings.Contains(next.LastUserText(), "what was the word?") {
		t.Errorf("the request after the idle stop carries:\n%s\nwant the thread resumed", requestHistory(next))
	}
}
