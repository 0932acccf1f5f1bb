package realcli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/internal/agentconfig"
	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/plugin/sdk/modelserver"
	"github.com/agenthost/agenthost/plugins/codex"
)

// What the codex scenarios share: replies in the shape codex's default
// model calls its tools, and ways to watch a turn through the API.

// codexExec is a reply calling codex's code-mode tool "exec" (the only
// tool its default model gets) with JavaScript that runs cmd through
// tools.exec_command and returns the command's output to the model.
func codexExec(cmd string) modelserver.Reply {
	js := fmt.Sprintf("const r = await tools.exec_command({cmd: %q});\ntext(r.output);\n", cmd)
	return modelserver.Reply{Tools: []modelserver.ToolCall{{Name: "exec", Input: js, Custom: true}}}
}

// askingOptions are session options under which codex asks before it
// runs any command that is not known to be read-only: approval policy
// "untrusted", in a sandbox that lets an approved command write the
// workspace.
var askingOptions = map[string]string{codex.OptApprovalPolicy: "untrusted", codex.OptSandbox: "workspace-write"}

// newCodexSession is a codex rig with agenthost serve started, a client
// dialled and a session of codex opened with options.
func newCodexSession(t *testing.T, options map[string]string) (*rig, *server, *client, string) {
	t.Helper()
	r := newRig(t, codexCLI)
	s := r.start()
	c := r.dial(s)
	return r, s, c, c.newSession(r, options)
}

// script scripts the rig's model server, failing the test on a reply the
// server refuses.
func (r *rig) script(replies ...modelserver.Reply) {
	r.t.Helper()
	if err := r.srv.Script(replies...); err != nil {
		r.t.Fatal(err)
	}
}

// promptInBackground starts a turn and returns the channel its outcome arrives on.
func (c *client) promptInBackground(ctx context.Context, id, text string) <-chan promptOutcome {
	ch := make(chan promptOutcome, 1)
	go func() {
		reason, err := c.prompt(ctx, id, text)
		ch <- promptOutcome{reason, err}
	}()
	return ch
}

type promptOutcome struct {
	reason acp.StopReason
	err    error
}

// messageText is the text of the agent message chunks the client saw.
func (c *client) messageText() string {
	var b strings.Builder
	for _, u := range c.received() {
		if ch, ok := u.Update.(*journal.Chunk); ok && ch.Kind == journal.KindAgentMessageChunk {
			b.WriteString(ch.Content.Text())
		}
	}
	return b.String()
}

// waitChunks waits until the client has seen at least n agent message
// chunks.
func (c *client) waitChunks(n int) {
	c.t.Helper()
	err := c.c.WaitFor(ctxFor(c.t, 30*time.Second), func() bool {
		k := 0
		for _, u := range c.received() {
			if ch, ok := u.Update.(*journal.Chunk); ok && ch.Kind == journal.KindAgentMessageChunk {
				k++
			}
		}
		return k >= n
	})
	if err != nil {
		c.t.Fatalf("waiting for %d message chunks: %v (text so far %q)", n, err, c.messageText())
	}
}

// cancel sends session/cancel.
func (c *client) cancel(id string) {
	c.t.Helper()
	if err := c.c.Notify(api.MethodSessionCancel, acp.CancelNotification{SessionId: acp.SessionId(id)}); err != nil {
		c.t.Fatal(err)
	}
}

// cancelEndsWithin sends session/cancel and fails the test unless the turn
// whose outcome done delivers ends cancelled within d.
func (c *client) cancelEndsWithin(id string, done <-chan promptOutcome, d time.Duration) {
	c.t.Helper()
	c.cancel(id)
	select {
	case o := <-done:
		if o.err != nil || o.reason != acp.StopReasonCancelled {
			c.t.Fatalf("the cancelled turn ended with %q, %v; want cancelled", o.reason, o.err)
		}
	case <-time.After(d):
		c.t.Fatalf("the turn did not end within %v of session/cancel", d)
	}
}

// toolUpdates returns the tool call updates the client saw, by tool call id.
func (c *client) toolUpdates() map[string][]*journal.ToolCallUpdate {
	out := map[string][]*journal.ToolCallUpdate{}
	for _, u := range c.received() {
		if tu, ok := u.Update.(*journal.ToolCallUpdate); ok {
			out[tu.ToolCallID] = append(out[tu.ToolCallID], tu)
		}
	}
	return out
}

// nextRequest waits for the model server's n-th model request (from 1).
func (r *rig) nextRequest(n int) modelserver.Request {
	r.t.Helper()
	reqs, err := r.srv.WaitModelRequests(ctxFor(r.t, 30*time.Second), n)
	if err != nil {
		r.t.Fatal(err)
	}
	return reqs[n-1]
}

// assertJournalHas fails the test unless a tool call update in the
// session's journal carries text.
func (r *rig) assertJournalHas(s *server, id, text string) {
	r.t.Helper()
	for _, e := range r.journal(s, id) {
		u, ok := e.Record.(*journal.Update)
		if !ok {
			continue
		}
		if tu, ok := u.Update.(*journal.ToolCallUpdate); ok {
			for _, c := range tu.Content {
				if strings.Contains(c.Text(), text) {
					return
				}
			}
		}
	}
	r.t.Errorf("no tool call update in the journal of %s carries %q", id, text)
}

// waitStop reads the session's journal until it holds n turn stops, and
// returns it.
func (r *rig) waitStop(s *server, id string, n int) []entry {
	r.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		es := r.journal(s, id)
		stops := 0
		for _, e := range es {
			if _, ok := e.Record.(*journal.Stop); ok {
				stops++
			}
		}
		if stops >= n {
			return es
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("the journal of %s holds %d turn stops after 30 s; want %d", id, stops, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// cliPids are the rig's live processes whose command is name.
func (r *rig) cliPids(name string) []int {
	var out []int
	for _, pid := range r.processes() {
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err == nil && strings.TrimSpace(string(comm)) == name {
			out = append(out, pid)
		}
	}
	return out
}

// resume sends session/resume, which starts the session in this host if
// it does not run (resuming its provider conversation) and makes the
// connection follow its updates.
func (c *client) resume(r *rig, id string) {
	c.t.Helper()
	if err := c.c.Call(ctxFor(c.t, 60*time.Second), api.MethodSessionResume, acp.ResumeSessionRequest{SessionId: acp.SessionId(id), Cwd: r.workspace, McpServers: []acp.McpServer{}}, nil); err != nil {
		c.t.Fatalf("session/resume: %v", err)
	}
}

// waitSessionStopped waits until the host reports that the session no longer
// runs (_agenthost/session), as a client checks before resuming it.
func (c *client) waitSessionStopped(id string) {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var res api.SessionResult
		if err := c.c.Call(ctxFor(c.t, 10*time.Second), api.MethodSession, api.Params{SessionID: id}, &res); err != nil {
			c.t.Fatalf("%s: %v", api.MethodSession, err)
		}
		if !res.Running {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("the host still runs session %s 10 s after its plugin was killed", id)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// withholdCredentials rewrites the rig's agenthost.json so that its agent
// no longer inherits agenthost's credentials: the default policy, which
// strips them.
func (r *rig) withholdCredentials() {
	r.t.Helper()
	path := filepath.Join(r.dir, "agenthost.json")
	b, err := os.ReadFile(path)
	if err != nil {
		r.t.Fatal(err)
	}
	var f agentconfig.File
	if err := json.Unmarshal(b, &f); err != nil {
		r.t.Fatal(err)
	}
	e := f.Agents[r.cli.name]
	e.Credentials = ""
	f.Agents[r.cli.name] = e
	if b, err = json.MarshalIndent(f, "", "  "); err != nil {
		r.t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		r.t.Fatal(err)
	}
}

// newSessionErr is session/new that may fail.
func (c *client) newSessionErr(r *rig, options map[string]string) error {
	meta := map[string]any{api.MetaKey: api.NewSessionMeta{Agent: r.cli.name, Options: options}}
	return c.c.Call(ctxFor(c.t, 60*time.Second), api.MethodSessionNew, acp.NewSessionRequest{Cwd: r.workspace, McpServers: []acp.McpServer{}, Meta: meta}, nil)
}
