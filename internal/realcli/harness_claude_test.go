package realcli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/internal/agentconfig"
	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/plugin/sdk/modelserver"
)

// Helpers of the claude scenarios (claude_test.go).

// updates returns the agent updates a journal holds, in order.
func updates(entries []entry) []*journal.Update {
	var out []*journal.Update
	for _, e := range entries {
		if u, ok := e.Record.(*journal.Update); ok {
			out = append(out, u)
		}
	}
	return out
}

// toolCallUpdates returns the journal's tool call updates.
func toolCallUpdates(entries []entry) []*journal.ToolCallUpdate {
	var out []*journal.ToolCallUpdate
	for _, u := range updates(entries) {
		if x, ok := u.Update.(*journal.ToolCallUpdate); ok {
			out = append(out, x)
		}
	}
	return out
}

// messageText joins the agent message chunks of updates.
func messageText(ups []journal.SessionUpdate) (text string, chunks int) {
	var b strings.Builder
	for _, u := range ups {
		if c, ok := u.(*journal.Chunk); ok && c.Kind == journal.KindAgentMessageChunk {
			b.WriteString(c.Content.Text())
			chunks++
		}
	}
	return b.String(), chunks
}

// sessionUpdates returns what the client received, without the numbering.
func (c *client) sessionUpdates() []journal.SessionUpdate { return updatesOf(c.received()) }

// asJSON marshals v (a permission request's rawInput) for a substring
// check.
func asJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// stat returns a live process's state and parent; ok is false for one
// that is gone or a zombie.
func stat(pid int) (ppid int, ok bool) {
	st, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, false
	}
	// pid (comm) state ppid …: comm may hold spaces, so read after ')'.
	i := strings.LastIndexByte(string(st), ')')
	f := strings.Fields(string(st[i+1:]))
	if len(f) < 2 || f[0] == "Z" || f[0] == "X" {
		return 0, false
	}
	ppid, err = strconv.Atoi(f[1])
	return ppid, err == nil
}

// alive reports whether pid runs (and is not a zombie).
func alive(pid int) bool {
	_, ok := stat(pid)
	return ok
}

// childrenOf returns the live processes whose parent is pid.
func childrenOf(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, ok := stat(child); ok && ppid == pid {
			out = append(out, child)
		}
	}
	return out
}

// pluginAndCLI returns the rig's one plugin process and the claude CLI it
// runs (its child), waiting a little for both. The plugin is the rig's
// process whose parent is not one of the rig's (agenthost serve, or after
// the host died whoever adopted it).
func (r *rig) pluginAndCLI() (plugin, cli int) {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ps := r.processes()
		var roots []int
		for _, p := range ps {
			if ppid, ok := stat(p); ok && !slices.Contains(ps, ppid) {
				roots = append(roots, p)
			}
		}
		if len(roots) == 1 {
			if kids := childrenOf(roots[0]); len(kids) == 1 {
				return roots[0], kids[0]
			}
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("want one plugin running one CLI; the rig's processes are %v", ps)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitUntil polls cond every 20 ms for up to d: for a cheap cond.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	pollUntil(t, d, 20*time.Millisecond, what, cond)
}

// pollUntil polls cond every interval for up to d.
func pollUntil(t *testing.T, d, interval time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(interval)
	}
}

// waitJournal reads the session's journal every 200 ms, for up to d,
// until done holds for what it read, and returns that. Each read dials the
// host and replays the whole journal, so it is not polled fast.
func (r *rig) waitJournal(s *server, id string, d time.Duration, what string, done func([]entry) bool) []entry {
	r.t.Helper()
	var es []entry
	pollUntil(r.t, d, 200*time.Millisecond, what, func() bool {
		es = r.journal(s, id)
		return done(es)
	})
	return es
}

// asJSONString is s as a JSON string literal.
func asJSONString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// turnEnd is how a prompt ended.
type turnEnd struct {
	stop acp.StopReason
	err  error
	at   time.Time
}

// promptAsync runs a turn in the background; its end arrives on the
// channel. The goroutine ends with the prompt, which the test's context
// bounds.
func (c *client) promptAsync(id, text string) <-chan turnEnd {
	ctx := ctxFor(c.t, 90*time.Second)
	ch := make(chan turnEnd, 1)
	go func() {
		stop, err := c.prompt(ctx, id, text)
		ch <- turnEnd{stop: stop, err: err, at: time.Now()}
	}()
	return ch
}

// cancelWithin sends session/cancel and fails the test unless the turn
// ends cancelled within d.
func (c *client) cancelWithin(t *testing.T, id string, turn <-chan turnEnd, d time.Duration) {
	t.Helper()
	sent := time.Now()
	if err := c.c.Notify(api.MethodSessionCancel, acp.CancelNotification{SessionId: acp.SessionId(id)}); err != nil {
		t.Fatal(err)
	}
	select {
	case end := <-turn:
		if end.err != nil || end.stop != acp.StopReasonCancelled {
			t.Fatalf("the cancelled turn ended with %q, error %v; want cancelled", end.stop, end.err)
		}
		if took := end.at.Sub(sent); took > d {
			t.Errorf("the turn ended %s after session/cancel, want within %s", took, d)
		}
	case <-time.After(d + 10*time.Second):
		t.Fatalf("the turn had not ended %s after session/cancel", d+10*time.Second)
	}
}

// updatesOf strips the numbering of received updates.
func updatesOf(rs []received) []journal.SessionUpdate {
	var out []journal.SessionUpdate
	for _, r := range rs {
		out = append(out, r.Update)
	}
	return out
}

// stopOf returns the journal's last turn stop, or nil.
func stopOf(entries []entry) *journal.Stop {
	var out *journal.Stop
	for _, e := range entries {
		if s, ok := e.Record.(*journal.Stop); ok {
			out = s
		}
	}
	return out
}

// resumeSession resumes a session through session/resume, as a client
// does after its plugin died.
func (c *client) resumeSession(t *testing.T, r *rig, id string) {
	t.Helper()
	if err := c.c.Call(ctxFor(t, 60*time.Second), api.MethodSessionResume, acp.ResumeSessionRequest{SessionId: acp.SessionId(id), Cwd: r.workspace}, nil); err != nil {
		t.Fatalf("session/resume %s: %v", id, err)
	}
}

// writeConfig rewrites the rig's agenthost.json, its agent's entry changed
// by edit. Call it before start.
func (r *rig) writeConfig(edit func(*agentconfig.Agent)) {
	r.t.Helper()
	path := filepath.Join(r.dir, agentconfig.Name)
	b, err := os.ReadFile(path)
	if err != nil {
		r.t.Fatal(err)
	}
	var f agentconfig.File
	if err := json.Unmarshal(b, &f); err != nil {
		r.t.Fatal(err)
	}
	a := f.Agents[r.cli.name]
	edit(&a)
	f.Agents[r.cli.name] = a
	if b, err = json.MarshalIndent(f, "", "  "); err != nil {
		r.t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		r.t.Fatal(err)
	}
}

// tryNewSession starts a session of the rig's agent and returns the
// error session/new answered with.
func (c *client) tryNewSession(r *rig, options map[string]string) error {
	meta := map[string]any{api.MetaKey: api.NewSessionMeta{Agent: r.cli.name, Options: options}}
	var res acp.NewSessionResponse
	return c.c.Call(ctxFor(c.t, 60*time.Second), api.MethodSessionNew, acp.NewSessionRequest{Cwd: r.workspace, McpServers: []acp.McpServer{}, Meta: meta}, &res)
}

// waitNotRunning waits until the host has seen the session's plugin die
// (_agenthost/session no longer reports it running). A session/resume
// sent before that, while the host has not yet reaped the dead process,
// still finds the session running and returns it, and the next prompt
// fails on the plugin's closed connection.
func (c *client) waitNotRunning(t *testing.T, id string) {
	t.Helper()
	waitUntil(t, 10*time.Second, "the host noticing the plugin's death", func() bool {
		var res api.SessionResult
		if err := c.c.Call(ctxFor(t, 5*time.Second), api.MethodSession, api.Params{SessionID: id}, &res); err != nil {
			t.Fatalf("%s %s: %v", api.MethodSession, id, err)
		}
		return !res.Running
	})
}

// startClaude is a claude rig with agenthost serve started and a client
// connected.
func startClaude(t *testing.T) (*rig, *server, *client) {
	r := newRig(t, claudeCLI)
	s := r.start()
	return r, s, r.dial(s)
}

// mcpEchoBin is the built MCP server of the tests (testdata/mcpecho).
var mcpEchoBin string

// cmdline is a live process's argv.
func cmdline(t *testing.T, pid int) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

// hasArgPrefix reports whether argv holds an argument starting with p.
func hasArgPrefix(argv []string, p string) bool {
	return slices.ContainsFunc(argv, func(a string) bool { return strings.HasPrefix(a, p) })
}

// kindOf finds the session updates of type T the client received.
func kindOf[T journal.SessionUpdate](c *client) []T {
	var out []T
	for _, u := range c.sessionUpdates() {
		if x, ok := u.(T); ok {
			out = append(out, x)
		}
	}
	return out
}

// requestHistory is the text of a model request's conversation, one
// "role: text" line per text part.
func requestHistory(req modelserver.Request) string {
	var said []string
	for _, m := range req.Messages {
		for _, p := range m.Parts {
			if p.Type == modelserver.TextPart {
				said = append(said, m.Role+": "+p.Text)
			}
		}
	}
	return strings.Join(said, "\n")
}
