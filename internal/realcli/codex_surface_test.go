package realcli_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/plugin/sdk/modelserver"
	"github.com/agenthost/agenthost/plugins/codex"
)

// The ACP session surface with the real codex 0.171.0 app-server: what a
// desktop app sets and sees, checked where it lands, in the requests
// codex sends the model server.

// A session created with a model, a mode, an effort, developer
// instructions and an MCP server runs codex with all of them; its modes
// and config options come from codex (the models from model/list); the
// slash commands arrive; set_config_option model and set_mode apply from
// the next turn.
func TestCodexSettingsAndModes(t *testing.T) {
	t.Parallel()
	r := newRig(t, codexCLI)
	s := r.start()
	c := r.dial(s)
	res := c.newSessionWith(r, map[string]string{"model": "gpt-6.2-astra", "mode": "full-access", "effort": "high",
		"append_system_prompt": "DEVELOPER-NOTE-7"}, []acp.McpServer{stdioMCP("echo", mcpEcho(t))})
	id := string(res.SessionId)
	if res.Modes == nil || res.Modes.CurrentModeId != "full-access" || len(res.Modes.AvailableModes) != 3 {
		t.Errorf("modes %+v", res.Modes)
	}
	models := configValues(res.ConfigOptions, "model")
	if !slices.Contains(models, "gpt-6.2-sol") || !slices.Contains(models, "gpt-6.2-astra") {
		t.Errorf("the model config option offers %v; want codex's model/list", models)
	}
	if e := configValues(res.ConfigOptions, "effort"); !slices.Contains(e, "high") {
		t.Errorf("the effort config option offers %v", e)
	}
	r.script(modelserver.Text("first"), modelserver.Text("second"))
	c.mustPrompt(id, "hello", "end_turn")
	req := r.nextRequest(1)
	body := string(req.Body)
	if req.Model != "gpt-6.2-astra" || !strings.Contains(body, `"effort":"high"`) || !strings.Contains(body, "DEVELOPER-NOTE-7") ||
		!strings.Contains(body, "mcp__echo") || sandboxMode(req) != "danger-full-access" {
		t.Errorf("the first request: model %q, effort high %v, developer note %v, MCP server %v, sandbox %q",
			req.Model, strings.Contains(body, `"effort":"high"`), strings.Contains(body, "DEVELOPER-NOTE-7"), strings.Contains(body, "mcp__echo"), sandboxMode(req))
	}
	if !c.sawCommands("new", "compact") {
		t.Errorf("no available_commands_update with /new and /compact reached the client")
	}

	opts := c.setConfig(id, "model", "gpt-6.2-sol")
	if v := configCurrent(opts, "model"); v != "gpt-6.2-sol" {
		t.Errorf("set_config_option answered model %q", v)
	}
	c.setMode(id, "read-only")
	c.mustPrompt(id, "again", "end_turn")
	req = r.nextRequest(2)
	if req.Model != "gpt-6.2-sol" || sandboxMode(req) != "read-only" {
		t.Errorf("after set_config_option and set_mode: model %q, sandbox %q; want gpt-6.2-sol, read-only", req.Model, sandboxMode(req))
	}
	st := c.storedSession(id)
	if st.Options["model"] != "gpt-6.2-sol" || st.Options["mode"] != "read-only" || st.Options["effort"] != "high" {
		t.Errorf("the stored options %v", st.Options)
	}
}

// An image, an embedded resource and a resource link reach the model:
// the image as an input_image with its data URL, the resource's text with
// its URI.
func TestCodexRichPrompt(t *testing.T) {
	t.Parallel()
	r, _, c, id := newCodexSession(t, nil)
	r.script(modelserver.Text("I see it."))
	const png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
	c.promptBlocks(id, "end_turn",
		map[string]any{"type": "text", "text": "what is this?"},
		map[string]any{"type": "image", "mimeType": "image/png", "data": png},
		map[string]any{"type": "resource", "resource": map[string]any{"uri": "file:///w/notes.md", "mimeType": "text/markdown", "text": "NOTES-ABOUT-IT"}},
		map[string]any{"type": "resource_link", "uri": "file:///w/main.go", "name": "main.go"})
	body := string(r.nextRequest(1).Body)
	for _, want := range []string{`"type":"input_image"`, "data:image/png;base64," + png, "NOTES-ABOUT-IT", "file:///w/notes.md", "[@main.go](file:///w/main.go)"} {
		if !strings.Contains(body, want) {
			t.Errorf("the model request lacks %q", want)
		}
	}
}

// A patch that updates a file: its tool call and the permission request
// carry the diff (the whole old and new text) and the file's location.
func TestCodexPatchDiff(t *testing.T) {
	t.Parallel()
	r := newRig(t, codexCLI)
	path := filepath.Join(r.workspace, "a.txt")
	if err := os.WriteFile(path, []byte("line1\nline2\nline3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := r.start()
	c := r.dial(s)
	c.answer = func(acp.RequestPermissionRequest) acp.PermissionOptionKind { return acp.PermissionOptionKindAllowOnce }
	id := c.newSession(r, map[string]string{codex.OptApprovalPolicy: "untrusted", codex.OptSandbox: "read-only"})
	const patch = "*** Begin Patch\n*** Update File: a.txt\n@@\n line1\n-line2\n+LINE2\n*** End Patch\n"
	js := "const r = await tools.apply_patch(" + jsString(patch) + ");\ntext(JSON.stringify(r));\n"
	r.script(modelserver.Reply{Tools: []modelserver.ToolCall{{Name: "exec", Input: js, Custom: true}}}, modelserver.Text("Patched."))
	c.mustPrompt(id, "patch it", "end_turn")

	if b, _ := os.ReadFile(path); string(b) != "line1\nLINE2\nline3\n" {
		t.Errorf("a.txt %q; want the patch applied", b)
	}
	asked := c.permissionRequests()
	if len(asked) != 1 {
		t.Fatalf("%d permission requests; want 1", len(asked))
	}
	checkDiff := func(who string, content []journal.ToolCallContent, locs []journal.Location) {
		t.Helper()
		if len(content) != 1 || content[0].Diff == nil {
			t.Errorf("%s content %+v; want one diff", who, content)
			return
		}
		d := content[0].Diff
		if d.Path != path || d.OldText == nil || *d.OldText != "line1\nline2\nline3\n" || d.NewText != "line1\nLINE2\nline3\n" {
			t.Errorf("%s diff %+v", who, d)
		}
		if len(locs) != 1 || locs[0].Path != path {
			t.Errorf("%s locations %+v", who, locs)
		}
	}
	var reqContent []journal.ToolCallContent
	var reqLocs []journal.Location
	raw, _ := json.Marshal(asked[0].ToolCall)
	var tc struct {
		Content   json.RawMessage `json:"content"`
		Locations json.RawMessage `json:"locations"`
	}
	_ = json.Unmarshal(raw, &tc)
	reqContent, reqLocs = decodeToolContent(t, tc.Content, tc.Locations)
	checkDiff("the permission request's tool call", reqContent, reqLocs)
	var found bool
	for _, call := range kindOf[*journal.ToolCall](c) {
		if call.Kind == "edit" {
			found = true
			checkDiff("the tool call", call.Content, call.Locations)
		}
	}
	if !found {
		t.Error("no edit tool call reached the client")
	}
}

// "Allow always" on a command: the host remembers its exact command as
// the scope ("exec:touch one.txt"), durably with the session; a compound
// command with a redirection has no scope, so answering it "allow
// always" grants nothing and codex asks again for it.
func TestCodexAllowAlways(t *testing.T) {
	t.Parallel()
	r := newRig(t, codexCLI)
	s := r.start()
	c := r.dial(s)
	c.answer = func(acp.RequestPermissionRequest) acp.PermissionOptionKind {
		return acp.PermissionOptionKindAllowAlways
	}
	id := c.newSession(r, askingOptions)
	r.script(codexExec("touch one.txt"), codexExec("printf two > two.txt"), modelserver.Text("Both done."))
	c.mustPrompt(id, "write two files", "end_turn")
	for _, f := range []string{"one.txt", "two.txt"} {
		if _, err := os.Stat(filepath.Join(r.workspace, f)); err != nil {
			t.Errorf("%s: %v; want both commands run", f, err)
		}
	}
	if asked := c.permissionRequests(); len(asked) != 2 {
		t.Errorf("the client was asked %d times; want twice, no scope covering the redirection", len(asked))
	}
	if got := c.storedSession(id).AllowedScopes; !slices.Equal(got, []string{"exec:touch one.txt"}) {
		t.Errorf("the session's allowed scopes %q; want only the exact command exec:touch one.txt", got)
	}
}

// A command's output reaches the client as it runs: an output delta
// arrives before the command's final update.
func TestCodexLiveCommandOutput(t *testing.T) {
	t.Parallel()
	r, _, c, id := newCodexSession(t, map[string]string{"mode": "full-access"})
	r.script(codexExec("for i in 1 2 3 4; do echo out$i; sleep 0.4; done"), modelserver.Text("Counted."))
	c.mustPrompt(id, "count slowly", "end_turn")
	delta, final := uint64(0), uint64(0)
	var out strings.Builder
	for _, u := range c.received() {
		if tu, ok := u.Update.(*journal.ToolCallUpdate); ok {
			if tu.OutputDelta != "" {
				out.WriteString(tu.OutputDelta)
				if delta == 0 {
					delta = u.Seq
				}
			}
			if tu.Status == "completed" {
				final = u.Seq
			}
		}
	}
	if delta == 0 || final == 0 || delta > final || !strings.Contains(out.String(), "out3") {
		t.Errorf("first output delta at seq %d, final update at %d, output %q; want output before the end", delta, final, out.String())
	}
}

// /new starts a fresh codex thread and records it as the session's new
// handle: after the plugin and the CLI are killed, the resumed session
// continues the new conversation, and the model never sees the old one.
func TestCodexNewThreadAfterRestart(t *testing.T) {
	t.Parallel()
	r, _, c, id := newCodexSession(t, nil)
	r.script(modelserver.Text("Noted: the word is PAPAYA."), modelserver.Text("A fresh start."))
	c.mustPrompt(id, "remember the word PAPAYA", "end_turn")
	before := c.storedSession(id).Handle()
	c.mustPrompt(id, "/new", "end_turn")
	after := c.storedSession(id)
	if after.Handle() == before || len(after.Handles) < 2 {
		t.Fatalf("after /new the handle chain is %+v; want a new link", after.Handles)
	}
	r.killSessionProcesses()
	c.waitNotRunning(t, id)
	c.resumeSession(t, r, id)
	c.mustPrompt(id, "what was the word?", "end_turn")
	next := r.nextRequest(2)
	if strings.Contains(string(next.Body), "PAPAYA") || !strings.Contains(next.LastUserText(), "what was the word?") {
		t.Errorf("the request after /new and the restart carries the old conversation (PAPAYA %v) or lacks the prompt (%q)",
			strings.Contains(string(next.Body), "PAPAYA"), next.LastUserText())
	}
}

// /compact runs codex's compaction: the model is asked for a summary, and
// the next turn's request carries it in place of the conversation.
func TestCodexCompactCommand(t *testing.T) {
	t.Parallel()
	r, _, c, id := newCodexSession(t, nil)
	r.script(modelserver.Text("The word is QUINCE."), modelserver.Text("SUMMARY-OF-IT-ALL"), modelserver.Text("Still here."))
	c.mustPrompt(id, "remember QUINCE", "end_turn")
	c.mustPrompt(id, "/compact", "end_turn")
	if !strings.Contains(c.agentText(), "Conversation compacted.") {
		t.Errorf("the client saw %q; want the compaction reported", c.agentText())
	}
	c.mustPrompt(id, "and now?", "end_turn")
	if next := r.nextRequest(3); !strings.Contains(string(next.Body), "SUMMARY-OF-IT-ALL") || !strings.Contains(next.LastUserText(), "and now?") {
		t.Errorf("the request after /compact (last user text %q) lacks the summary", next.LastUserText())
	}
}

// /review with instructions runs codex's review: the model is asked with
// them, and its findings come back as the turn's message.
func TestCodexReviewCommand(t *testing.T) {
	t.Parallel()
	r, _, c, id := newCodexSession(t, nil)
	const verdict = `{"findings":[{"title":"Off by one","body":"the loop skips the last item","confidence_score":0.8,"priority":1,` +
		`"code_location":{"absolute_file_path":"/w/main.go","line_range":{"start":3,"end":3}}}],` +
		`"overall_correctness":"patch is incorrect","overall_explanation":"REVIEW-VERDICT","overall_confidence_score":0.9}`
	r.script(modelserver.Text(verdict))
	c.mustPrompt(id, "/review look for off-by-one errors", "end_turn")
	if req := r.nextRequest(1); !strings.Contains(string(req.Body), "look for off-by-one errors") {
		t.Errorf("the review request lacks the instructions")
	}
	if got := c.agentText(); !strings.Contains(got, "REVIEW-VERDICT") || !strings.Contains(got, "Off by one") {
		t.Errorf("the review said %q; want the verdict and the finding", got)
	}
}

// The done-when scenario: a session created with a model, a mode and an
// MCP server keeps all three across a SIGKILL of the host (readopted)
// and a plugin death (resumed), in the model requests and in the
// options the host stores.
func TestCodexSettingsSurviveHostAndPluginDeath(t *testing.T) {
	t.Parallel()
	r := newRig(t, codexCLI)
	s := r.start()
	c := r.dial(s)
	opts := map[string]string{"model": "gpt-6.2-astra", "mode": "full-access"}
	id := string(c.newSessionWith(r, opts, []acp.McpServer{stdioMCP("echo", mcpEcho(t))}).SessionId)
	r.script(modelserver.Text("one"), modelserver.Text("two"), modelserver.Text("three"))
	check := func(n int, when string) {
		t.Helper()
		req := r.nextRequest(n)
		if req.Model != "gpt-6.2-astra" || sandboxMode(req) != "danger-full-access" || !strings.Contains(string(req.Body), "mcp__echo") {
			t.Errorf("%s: the request has model %q, sandbox %q, MCP server %v; want gpt-6.2-astra, full access, mcp__echo",
				when, req.Model, sandboxMode(req), strings.Contains(string(req.Body), "mcp__echo"))
		}
		st := c.storedSession(id)
		if st.Options["model"] != "gpt-6.2-astra" || st.Options["mode"] != "full-access" {
			t.Errorf("%s: stored options %v", when, st.Options)
		}
	}
	c.mustPrompt(id, "first", "end_turn")
	check(1, "at first")

	s.kill()
	s = r.start()
	c = r.dial(s)
	c.mustPrompt(id, "second", "end_turn")
	check(2, "after the host's SIGKILL")

	r.killSessionProcesses()
	c.waitNotRunning(t, id)
	c.resumeSession(t, r, id)
	c.mustPrompt(id, "third", "end_turn")
	check(3, "after the plugin's death")
}

// An http MCP server (streamable HTTP, on loopback) reaches codex with
// its headers: codex lists its tools, and the model is offered them.
func TestCodexHTTPMCPServer(t *testing.T) {
	t.Parallel()
	mcp := newHTTPMCP(t)
	r := newRig(t, codexCLI)
	s := r.start()
	c := r.dial(s)
	server := acp.McpServer{Http: &acp.McpServerHttpInline{Type: "http", Name: "web", Url: mcp.URL + "/mcp",
		Headers: []acp.HttpHeader{{Name: "X-Agenthost-Test", Value: "secret-7"}}}}
	id := string(c.newSessionWith(r, nil, []acp.McpServer{server}).SessionId)
	r.script(modelserver.Text("ok"))
	c.mustPrompt(id, "hello", "end_turn")
	if body := string(r.nextRequest(1).Body); !strings.Contains(body, "mcp__web") {
		t.Error("the model request does not offer the http MCP server's tools (mcp__web)")
	}
	if got := mcp.seen(); !slices.Contains(got, "tools/list secret-7") {
		t.Errorf("the http MCP server saw %v; want tools/list with the session's header", got)
	}
}

// httpMCP is the smallest streamable-HTTP MCP server: JSON answers to
// initialize and tools/list (one tool), 202 to notifications. It records
// each method with the test header it came with.
type httpMCP struct {
	*httptest.Server
	mu     sync.Mutex
	method []string
}

func newHTTPMCP(t *testing.T) *httpMCP {
	m := &httpMCP{}
	m.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				ProtocolVersion string `json:"protocolVersion"`
			} `json:"params"`
		}
		if err := json.NewDecoder(req.Body).Decode(&msg); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		m.mu.Lock()
		m.method = append(m.method, msg.Method+" "+req.Header.Get("X-Agenthost-Test"))
		m.mu.Unlock()
		if len(msg.ID) == 0 {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		var result any = map[string]any{}
		switch msg.Method {
		case "initialize":
			result = map[string]any{"protocolVersion": msg.Params.ProtocolVersion, "capabilities": map[string]any{"tools": map[string]any{}},
				"serverInfo": map[string]any{"name": "httpmcp", "version": "1.0.0"}}
		case "tools/list":
			result = map[string]any{"tools": []any{map[string]any{"name": "lookup", "description": "looks things up",
				"inputSchema": map[string]any{"type": "object", "properties": map[string]any{}}}}}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": msg.ID, "result": result})
	}))
	t.Cleanup(m.Close)
	return m
}

func (m *httpMCP) seen() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.method)
}

// configValues and configCurrent read a config option of a result.
func configValues(opts []acp.SessionConfigOption, id string) []string {
	var out []string
	raw, _ := json.Marshal(opts)
	var decoded []struct {
		ID      string `json:"id"`
		Options []struct {
			Value string `json:"value"`
		} `json:"options"`
	}
	_ = json.Unmarshal(raw, &decoded)
	for _, o := range decoded {
		if o.ID == id {
			for _, v := range o.Options {
				out = append(out, v.Value)
			}
		}
	}
	return out
}

func configCurrent(opts []acp.SessionConfigOption, id string) string {
	raw, _ := json.Marshal(opts)
	var decoded []struct {
		ID           string `json:"id"`
		CurrentValue string `json:"currentValue"`
	}
	_ = json.Unmarshal(raw, &decoded)
	for _, o := range decoded {
		if o.ID == id {
			return o.CurrentValue
		}
	}
	return ""
}

// sawCommands reports whether an available_commands_update naming every
// one of names reached the client.
func (c *client) sawCommands(names ...string) bool {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, u := range c.received() {
			ac, ok := u.Update.(*journal.AvailableCommands)
			if !ok {
				continue
			}
			var got []string
			for _, cmd := range ac.Commands {
				got = append(got, cmd.Name)
			}
			if !slices.ContainsFunc(names, func(n string) bool { return !slices.Contains(got, n) }) {
				return true
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// decodeToolContent decodes an ACP tool call's content and locations as
// the journal does.
func decodeToolContent(t *testing.T, content, locations json.RawMessage) ([]journal.ToolCallContent, []journal.Location) {
	t.Helper()
	w, _ := json.Marshal(map[string]any{"sessionUpdate": "tool_call", "toolCallId": "x", "title": "x", "content": content, "locations": locations})
	u, err := journal.DecodeUpdate(w)
	if err != nil {
		t.Fatalf("decoding the permission's tool call: %v", err)
	}
	tc, _ := u.(*journal.ToolCall)
	if tc == nil {
		t.Fatalf("decoded %T", u)
	}
	return tc.Content, tc.Locations
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
