package realcli_test

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/internal/apiclient"
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

// agentText is the text of the agent message chunks the client saw.
func (c *client) agentText() string {
	text, _ := messageText(c.sessionUpdates())
	return text
}

// waitChunks waits until the client has seen at least n agent message
// chunks.
func (c *client) waitChunks(n int) {
	c.t.Helper()
	err := c.c.WaitFor(ctxFor(c.t, 30*time.Second), func() bool {
		_, k := messageText(c.sessionUpdates())
		return k >= n
	})
	if err != nil {
		c.t.Fatalf("waiting for %d message chunks: %v (text so far %q)", n, err, c.agentText())
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

// assertJournaledOnce checks the journal of a turn whose host was killed
// at killed and which a new host readopted: the plugin's updates'
// sequence numbers (the session-level ones included) run 1..n without
// gaps or repeats, some were produced after the kill, and their message
// text is answer, each piece once. It returns n.
func assertJournaledOnce(t *testing.T, es []entry, killed time.Time, answer string) uint64 {
	t.Helper()
	var seqs []uint64
	var ups []journal.SessionUpdate
	afterKill := 0
	for _, u := range updates(es) {
		if u.PluginSeq == 0 {
			// The host's own (the title it takes from the first prompt).
			continue
		}
		seqs = append(seqs, u.PluginSeq)
		ups = append(ups, u.Update)
		if time.Unix(0, u.PluginTime).After(killed) {
			afterKill++
		}
	}
	if afterKill == 0 {
		t.Error("no update was produced after the host was killed: the turn was not interrupted by the kill")
	}
	for i, seq := range seqs {
		if seq != uint64(i+1) {
			t.Errorf("the journal's plugin seqs are %v; want 1..%d without gaps or repeats", seqs, len(seqs))
			break
		}
	}
	if text, _ := messageText(ups); text != answer {
		t.Errorf("the journal's message text %q; want the answer exactly once", text)
	}
	return uint64(len(seqs))
}

// hasLifecycle reports whether the journal holds a lifecycle entry of
// event.
func hasLifecycle(es []entry, event string) bool {
	for _, e := range es {
		if l, ok := e.Record.(*journal.Lifecycle); ok && l.Event == event {
			return true
		}
	}
	return false
}

// hasMessage reports whether a model request carries a message of role
// whose text holds text.
func hasMessage(req modelserver.Request, role, text string) bool {
	for _, m := range req.Messages {
		for _, p := range m.Parts {
			if m.Role == role && strings.Contains(p.Text, text) {
				return true
			}
		}
	}
	return false
}

// mcpEcho returns the real-CLI tests' MCP server (testdata/mcpecho),
// which TestMain builds once.
func mcpEcho(t *testing.T) string {
	t.Helper()
	return mcpEchoBin
}

// newSessionWith opens a codex session with options and MCP servers
// and returns the session/new result.
func (c *client) newSessionWith(r *rig, options map[string]string, mcp []acp.McpServer) acp.NewSessionResponse {
	c.t.Helper()
	if mcp == nil {
		mcp = []acp.McpServer{}
	}
	var res acp.NewSessionResponse
	meta := map[string]any{api.MetaKey: api.NewSessionMeta{Agent: r.cli.name, Options: options}}
	if err := c.c.Call(ctxFor(c.t, 60*time.Second), api.MethodSessionNew, acp.NewSessionRequest{Cwd: r.workspace, McpServers: mcp, Meta: meta}, &res); err != nil {
		c.t.Fatalf("session/new: %v", err)
	}
	return res
}

// stdioMCP is an ACP stdio MCP server entry.
func stdioMCP(name, command string) acp.McpServer {
	return acp.McpServer{Stdio: &acp.McpServerStdio{Name: name, Command: command, Args: []string{}, Env: []acp.EnvVariable{}}}
}

// promptBlocks runs a turn of raw ACP content blocks, which must end with
// want.
func (c *client) promptBlocks(id string, want acp.StopReason, blocks ...map[string]any) {
	c.t.Helper()
	var res acp.PromptResponse
	err := c.c.Call(ctxFor(c.t, 90*time.Second), api.MethodSessionPrompt, map[string]any{"sessionId": id, "prompt": blocks}, &res)
	if err != nil || res.StopReason != want {
		c.t.Fatalf("prompt: stop reason %q, error %v; want %q", res.StopReason, err, want)
	}
}

// setMode and setConfig call session/set_mode and
// session/set_config_option.
func (c *client) setMode(id, mode string) {
	c.t.Helper()
	if err := c.c.Call(ctxFor(c.t, 30*time.Second), acp.AgentMethodSessionSetMode, map[string]any{"sessionId": id, "modeId": mode}, nil); err != nil {
		c.t.Fatalf("session/set_mode %s: %v", mode, err)
	}
}

func (c *client) setConfig(id, option, value string) []acp.SessionConfigOption {
	c.t.Helper()
	var res acp.SetSessionConfigOptionResponse
	err := c.c.Call(ctxFor(c.t, 30*time.Second), acp.AgentMethodSessionSetConfigOption, map[string]any{"sessionId": id, "configId": option, "value": value}, &res)
	if err != nil {
		c.t.Fatalf("session/set_config_option %s=%s: %v", option, value, err)
	}
	return res.ConfigOptions
}

// storedSession is the session as the host stores it.
func (c *client) storedSession(id string) api.Session {
	c.t.Helper()
	var res api.SessionResult
	if err := c.c.Call(ctxFor(c.t, 10*time.Second), api.MethodSession, api.Params{SessionID: id}, &res); err != nil {
		c.t.Fatalf("%s %s: %v", api.MethodSession, id, err)
	}
	return res.Session
}

// killSessionProcesses SIGKILLs the rig's plugin and CLI and waits until
// they are gone.
func (r *rig) killSessionProcesses() {
	r.t.Helper()
	pids := r.processes()
	if len(pids) < 2 {
		r.t.Fatalf("the rig's processes: %v; want the plugin and its app-server", pids)
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	waitUntil(r.t, 10*time.Second, "the plugin and its CLI gone after SIGKILL", func() bool { return len(r.processes()) == 0 })
}

// sandboxMode is the sandbox codex reports to the model provider in a
// request's turn metadata ("read-only", "workspace-write",
// "danger-full-access"), which shows the approval preset the turn ran in.
func sandboxMode(req modelserver.Request) string {
	_, rest, ok := strings.Cut(string(req.Body), `\"sandbox_mode\":\"`)
	if !ok {
		return ""
	}
	mode, _, _ := strings.Cut(rest, `\"`)
	return mode
}

// rpcCode is the JSON-RPC error code of an API call's error, 0 for none.
func rpcCode(err error) int {
	var e *apiclient.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}
