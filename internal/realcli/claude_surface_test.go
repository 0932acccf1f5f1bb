package realcli_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/internal/apiclient"
	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/plugin/sdk/modelserver"
	"github.com/agenthost/agenthost/plugins/claude"
)

// The ACP session surface with the real claude: settings that survive a
// host SIGKILL and a plugin death, modes and config options mid-session,
// rich prompts, diffs, "allow always", slash commands, /clear across a
// restart, leaving plan mode. Each asserts what the CLI really did: its
// argv, the model server's requests, the workspace, the stored session.

// A session created with a model, a mode and a stdio MCP server keeps all
// three across a SIGKILL of the host (the plugin and CLI live on and are
// readopted) and across a plugin death (the host resumes the session): the
// CLI's argv carries them, the model is asked for that model with the MCP
// tool offered, the MCP tool runs, and _agenthost/session stores them.
func TestClaudeSettingsSurviveHostKillAndPluginDeath(t *testing.T) {
	t.Parallel()
	r, s, cl := startClaude(t)
	echo := `{"text":"kept"}`
	r.script(modelserver.Text("One."), modelserver.Text("Two."),
		modelserver.Tool("mcp__echosrv__echo", echo), modelserver.Text("Three."))
	opts := map[string]string{claude.OptModel: "sonnet", claude.OptMode: "acceptEdits"}
	res := cl.newSessionWith(r, opts, []acp.McpServer{stdioMCP("echosrv", mcpEchoBin)})
	id := string(res.SessionId)
	if res.Modes == nil || res.Modes.CurrentModeId != "acceptEdits" {
		t.Errorf("session/new's modes %+v, want acceptEdits current", res.Modes)
	}

	// check asserts the settings where they show: the running CLI's argv,
	// the n-th model request, the stored session.
	check := func(when string, n int) {
		t.Helper()
		_, pid := r.pluginAndCLI()
		argv := cmdline(t, pid)
		if !slices.Contains(argv, "--model=sonnet") || !slices.Contains(argv, "--permission-mode=acceptEdits") ||
			!hasArgPrefix(argv, `--mcp-config={"mcpServers":{"echosrv":{`) {
			t.Errorf("%s: the CLI's argv %q lacks the model, the mode or the MCP server", when, argv)
		}
		req := r.nextRequest(n)
		// 2.1.332 defers MCP tools behind ToolSearch: the request names
		// the tool in its deferred list rather than its tools.
		if req.Model != "claude-sonnet-5-5" || !strings.Contains(string(req.Body), "mcp__echosrv__echo") {
			t.Errorf("%s: model request %d asks for %q, names the MCP tool %v; want claude-sonnet-5-5 with mcp__echosrv__echo",
				when, n, req.Model, strings.Contains(string(req.Body), "mcp__echosrv__echo"))
		}
		st := cl.storedSession(id)
		if st.Options[claude.OptModel] != "sonnet" || st.Options[claude.OptMode] != "acceptEdits" {
			t.Errorf("%s: the stored options %v, want model sonnet and mode acceptEdits", when, st.Options)
		}
	}
	cl.mustPrompt(id, "first", "end_turn")
	check("at first", 1)

	// The host dies; the new one readopts the same plugin and CLI.
	plugin, cliPID := r.pluginAndCLI()
	s.kill()
	s = r.start()
	cl = r.dial(s)
	if p, c := r.pluginAndCLI(); p != plugin || c != cliPID {
		t.Errorf("after the host's SIGKILL: plugin %d CLI %d, want the readopted %d and %d", p, c, plugin, cliPID)
	}
	cl.resumeSession(t, r, id)
	cl.mustPrompt(id, "second", "end_turn")
	check("readopted", 2)

	// The plugin dies with its CLI; the host resumes the session.
	for _, pid := range []int{cliPID, plugin} {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	cl.waitNotRunning(t, id)
	cl.resumeSession(t, r, id)
	cl.answer = func(acp.RequestPermissionRequest) acp.PermissionOptionKind { return acp.PermissionOptionKindAllowOnce }
	cl.mustPrompt(id, "third", "end_turn")
	if p, _ := r.pluginAndCLI(); p == plugin {
		t.Fatalf("the killed plugin %d still runs the session", plugin)
	}
	check("resumed", 3)
	// The MCP server of the resumed CLI answers: its result reaches the
	// model.
	results := r.nextRequest(4).ToolResults()
	if len(results) != 1 || results[0].Text != "echo: kept" {
		t.Errorf("the model read the MCP tool's results %+v, want echo: kept", results)
	}
}

// session/set_mode between turns switches the CLI's permission mode: in
// acceptEdits the next Write runs without asking; the client hears
// current_mode_update and the stored session keeps the mode.
func TestClaudeSetMode(t *testing.T) {
	t.Parallel()
	r, _, cl := startClaude(t)
	first, second := filepath.Join(r.workspace, "first.txt"), filepath.Join(r.workspace, "second.txt")
	r.script(
		modelserver.Tool("Write", `{"file_path":`+asJSONString(first)+`,"content":"1"}`), modelserver.Text("One."),
		modelserver.Tool("Write", `{"file_path":`+asJSONString(second)+`,"content":"2"}`), modelserver.Text("Two."),
	)
	id := cl.newSession(r, nil)
	cl.mustPrompt(id, "write the first", "end_turn") // rejected: the default mode asks
	if n := len(cl.permissionRequests()); n != 1 {
		t.Fatalf("%d permission requests in the default mode, want 1", n)
	}
	cl.setMode(id, "acceptEdits")
	waitUntil(t, 10*time.Second, "current_mode_update acceptEdits", func() bool {
		m := kindOf[*journal.CurrentMode](cl)
		return len(m) > 0 && m[len(m)-1].ModeID == "acceptEdits"
	})
	cl.mustPrompt(id, "write the second", "end_turn")
	if n := len(cl.permissionRequests()); n != 1 {
		t.Errorf("%d permission requests, want still 1: acceptEdits writes without asking", n)
	}
	if b, err := os.ReadFile(second); err != nil || string(b) != "2" {
		t.Errorf("the Write in acceptEdits: %q %v", b, err)
	}
	if st := cl.storedSession(id); st.Options[claude.OptMode] != "acceptEdits" {
		t.Errorf("stored options %v, want mode acceptEdits", st.Options)
	}
	var aerr *apiclient.Error
	err := cl.c.Call(ctxFor(t, 30*time.Second), acp.AgentMethodSessionSetMode, map[string]any{"sessionId": id, "modeId": "yolo"}, nil)
	if !errors.As(err, &aerr) || aerr.Code != api.CodeInvalidParams {
		t.Errorf("set_mode yolo: %v, want invalid params", err)
	}
}

// session/set_config_option model and effort between turns: the next
// model request asks for the new model with the new effort.
func TestClaudeSetConfigOption(t *testing.T) {
	t.Parallel()
	r, _, cl := startClaude(t)
	r.script(modelserver.Text("One."), modelserver.Text("Two."))
	res := cl.newSessionWith(r, nil, nil)
	id := string(res.SessionId)
	var ids []string
	for _, o := range res.ConfigOptions {
		if o.Select != nil {
			ids = append(ids, string(o.Select.Id))
		}
	}
	if !slices.Equal(ids, []string{"mode", "model", "effort"}) {
		t.Errorf("session/new's config options %v, want mode, model, effort", ids)
	}
	cl.mustPrompt(id, "first", "end_turn")
	cl.setConfig(id, "model", "sonnet")
	cl.setConfig(id, "effort", "high")
	cl.mustPrompt(id, "second", "end_turn")
	effort := func(req modelserver.Request) string {
		var b struct {
			OutputConfig struct {
				Effort string `json:"effort"`
			} `json:"output_config"`
		}
		_ = json.Unmarshal(req.Body, &b)
		return b.OutputConfig.Effort
	}
	if first, second := r.nextRequest(1), r.nextRequest(2); first.Model == second.Model || second.Model != "claude-sonnet-5-5" || effort(second) != "high" {
		t.Errorf("requests asked for %s (effort %s) then %s (effort %s); want the second claude-sonnet-5-5 at high",
			first.Model, effort(first), second.Model, effort(second))
	}
	if st := cl.storedSession(id); st.Options[claude.OptModel] != "sonnet" || st.Options[claude.OptEffort] != "high" {
		t.Errorf("stored options %v", st.Options)
	}
	if n := len(kindOf[*journal.ConfigOptions](cl)); n < 2 {
		t.Errorf("%d config_option_update notifications, want one per change", n)
	}
}

// An image and an embedded text resource reach the model as the
// Messages API's image block and as text that names the resource.
func TestClaudeImagePrompt(t *testing.T) {
	t.Parallel()
	r, _, cl := startClaude(t)
	r.script(modelserver.Text("A red pixel."))
	id := cl.newSession(r, nil)
	const png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"
	cl.promptBlocks(id, "end_turn", map[string]any{"type": "text", "text": "what is this?"},
		map[string]any{"type": "image", "mimeType": "image/png", "data": png},
		map[string]any{"type": "resource", "resource": map[string]any{"uri": "file:///notes.txt", "text": "the pixel is red"}})
	body := string(r.nextRequest(1).Body)
	if !strings.Contains(body, `"type":"image"`) || !strings.Contains(body, png) {
		t.Errorf("the model request carries no image block with the data")
	}
	if !strings.Contains(body, `the pixel is red`) || !strings.Contains(body, `file:///notes.txt`) {
		t.Errorf("the model request lacks the resource's text or uri")
	}
}

// An Edit's permission request carries the diff and the file; allowed
// always, a second edit runs without asking (the host answers the "edit"
// scope); the tool call update carries the diff of the result.
func TestClaudeEditDiffAllowAlways(t *testing.T) {
	t.Parallel()
	r, _, cl := startClaude(t)
	cl.answer = func(acp.RequestPermissionRequest) acp.PermissionOptionKind {
		return acp.PermissionOptionKindAllowAlways
	}
	target := filepath.Join(r.workspace, "hello.txt")
	if err := os.WriteFile(target, []byte("line one\nhello old world\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	edit := func(from, to string) string {
		return `{"file_path":` + asJSONString(target) + `,"old_string":"` + from + `","new_string":"` + to + `"}`
	}
	r.script(modelserver.Tool("Edit", edit("old", "new")), modelserver.Text("One."),
		modelserver.Tool("Edit", edit("new", "newer")), modelserver.Text("Two."))
	id := cl.newSession(r, nil)
	cl.mustPrompt(id, "edit it", "end_turn")
	cl.mustPrompt(id, "edit it again", "end_turn")

	asked := cl.permissionRequests()
	if len(asked) != 1 {
		t.Fatalf("%d permission requests reached the client, want 1: allow always covers the second edit", len(asked))
	}
	diffs := func(cs []acp.ToolCallContent) []*acp.ToolCallContentDiff {
		var out []*acp.ToolCallContentDiff
		for _, c := range cs {
			if c.Diff != nil {
				out = append(out, c.Diff)
			}
		}
		return out
	}
	tc := asked[0].ToolCall
	if d := diffs(tc.Content); len(d) != 1 || d[0].Path != target || d[0].OldText == nil || *d[0].OldText != "old" || d[0].NewText != "new" ||
		len(tc.Locations) != 1 || tc.Locations[0].Path != target {
		t.Errorf("the permission request's tool call: content %s locations %s; want the diff old -> new of %s", asJSON(t, tc.Content), asJSON(t, tc.Locations), target)
	}
	if b, _ := os.ReadFile(target); string(b) != "line one\nhello newer world\n" {
		t.Errorf("the file holds %q after both edits", b)
	}
	// The tool call itself shows the diff of its input.
	var calls []string
	for _, x := range kindOf[*journal.ToolCall](cl) {
		for _, c := range x.Content {
			if c.Diff != nil && c.Diff.OldText != nil {
				calls = append(calls, *c.Diff.OldText+" -> "+c.Diff.NewText)
			}
		}
	}
	if !slices.Equal(calls, []string{"old -> new", "new -> newer"}) {
		t.Errorf("the tool calls' diffs %q, want old -> new and new -> newer", calls)
	}
	// The results' diffs: the structured patch's hunk, with its context.
	var got []string
	for _, x := range kindOf[*journal.ToolCallUpdate](cl) {
		for _, c := range x.ToolContent {
			if c.Diff != nil && c.Diff.OldText != nil {
				got = append(got, *c.Diff.OldText+" -> "+c.Diff.NewText)
			}
		}
	}
	want := []string{"line one\nhello old world -> line one\nhello new world", "line one\nhello new world -> line one\nhello newer world"}
	if !slices.Equal(got, want) {
		t.Errorf("the tool call updates' diffs %q, want %q", got, want)
	}
}

// The CLI's slash commands reach the client as available_commands_update
// when the session opens, before any prompt.
func TestClaudeAvailableCommands(t *testing.T) {
	t.Parallel()
	r, _, cl := startClaude(t)
	cl.newSession(r, nil)
	waitUntil(t, 10*time.Second, "available_commands_update", func() bool { return len(kindOf[*journal.AvailableCommands](cl)) > 0 })
	var names []string
	for _, c := range kindOf[*journal.AvailableCommands](cl)[0].Commands {
		names = append(names, c.Name)
	}
	for _, want := range []string{"clear", "compact", "model"} {
		if !slices.Contains(names, want) {
			t.Errorf("available commands %v lack %s", names, want)
		}
	}
	if slices.Contains(names, "login") {
		t.Errorf("available commands offer login, which needs the CLI's terminal")
	}
}

// claude-agent-acp #906: /clear, then the plugin and CLI die, then the
// session resumes: the next model request carries nothing of the
// conversation before /clear, because the host recorded /clear's new
// conversation as a link of the handle chain.
func TestClaudeClearSurvivesRestart(t *testing.T) {
	t.Parallel()
	r, _, cl := startClaude(t)
	r.script(modelserver.Text("Noted: zebra."), modelserver.Text("Fresh start."))
	id := cl.newSession(r, nil)
	cl.mustPrompt(id, "remember the word zebra", "end_turn")
	cl.mustPrompt(id, "/clear", "end_turn")
	handles := cl.storedSession(id).Handles
	if len(handles) < 2 || handles[len(handles)-1].Origin != "created" || handles[len(handles)-1].Handle == handles[0].Handle {
		t.Errorf("after /clear the handle chain is %+v, want a new created link", handles)
	}
	plugin, cliPID := r.pluginAndCLI()
	for _, pid := range []int{cliPID, plugin} {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	cl.waitNotRunning(t, id)
	cl.resumeSession(t, r, id)
	cl.mustPrompt(id, "what word did I say?", "end_turn")
	if _, c := r.pluginAndCLI(); !slices.Contains(cmdline(t, c), "--resume="+handles[len(handles)-1].Handle) {
		t.Errorf("the resumed CLI's argv %q, want --resume of the post-clear handle", cmdline(t, c))
	}
	history := requestHistory(r.nextRequest(2))
	if strings.Contains(history, "zebra") {
		t.Errorf("the model request after /clear and a restart carries the pre-clear conversation:\n%s", history)
	}
	if !strings.Contains(history, "what word did I say?") {
		t.Errorf("the request lacks the prompt:\n%s", history)
	}
}

// In plan mode the agent's ExitPlanMode asks with the plan and the modes
// to go on in; "Yes, and auto-accept edits" switches the CLI to
// acceptEdits, which the client hears and the host stores.
func TestClaudePlanExit(t *testing.T) {
	t.Parallel()
	r, _, cl := startClaude(t)
	cl.answer = func(acp.RequestPermissionRequest) acp.PermissionOptionKind {
		return acp.PermissionOptionKindAllowAlways
	}
	r.script(modelserver.Tool("ExitPlanMode", `{"plan":"1. write hello.txt"}`), modelserver.Text("Coding now."))
	id := cl.newSession(r, map[string]string{claude.OptMode: "plan"})
	cl.mustPrompt(id, "plan it", "end_turn")
	asked := cl.permissionRequests()
	if len(asked) != 1 {
		t.Fatalf("%d permission requests, want the plan exit's", len(asked))
	}
	var opts []string
	for _, o := range asked[0].Options {
		opts = append(opts, string(o.OptionId))
	}
	if !slices.Contains(opts, "acceptEdits") || !slices.Contains(opts, "default") || !slices.Contains(opts, "plan") ||
		!strings.Contains(asJSON(t, asked[0].ToolCall.Content), "1. write hello.txt") {
		t.Errorf("the plan exit offers %v with content %s; want the modes and the plan", opts, asJSON(t, asked[0].ToolCall.Content))
	}
	modes := kindOf[*journal.CurrentMode](cl)
	if len(modes) == 0 || modes[len(modes)-1].ModeID != "acceptEdits" {
		t.Errorf("current_mode_update after leaving plan mode: %+v, want acceptEdits", modes)
	}
	if st := cl.storedSession(id); st.Options[claude.OptMode] != "acceptEdits" {
		t.Errorf("stored options %v, want mode acceptEdits", st.Options)
	}
}

// session/set_mode while a turn runs: the mode reaches the CLI at once, so
// a Write the model asks for later in the same turn runs without asking.
func TestClaudeSetModeMidTurn(t *testing.T) {
	t.Parallel()
	r, _, cl := startClaude(t)
	target := filepath.Join(r.workspace, "later.txt")
	slow := modelserver.Reply{Text: strings.Repeat("planning ", 20), Delay: 40 * time.Millisecond, // 60 deltas: 2.4 s
		Tools: []modelserver.ToolCall{{Name: "Write", Input: `{"file_path":` + asJSONString(target) + `,"content":"later"}`}}}
	r.script(slow, modelserver.Text("Written."))
	id := cl.newSession(r, nil)
	turn := cl.promptAsync(id, "write it after a while")
	cl.waitChunks(3)
	cl.setMode(id, "acceptEdits")
	end := <-turn
	if end.err != nil || end.stop != acp.StopReasonEndTurn {
		t.Fatalf("the turn ended %q, %v", end.stop, end.err)
	}
	if n := len(cl.permissionRequests()); n != 0 {
		t.Errorf("%d permission requests: the mode set mid-turn did not reach the CLI", n)
	}
	if b, err := os.ReadFile(target); err != nil || string(b) != "later" {
		t.Errorf("the Write after the mode change: %q %v", b, err)
	}
}

// Settings the claude agent does not take are refused with invalid params
// naming them: an unknown option (by the host, from the declared list), a
// bad value (by the plugin), the old name of a renamed option.
func TestClaudeRefusedSettings(t *testing.T) {
	t.Parallel()
	r, _, cl := startClaude(t)
	for _, tt := range []struct {
		opts map[string]string
		name string
	}{
		{map[string]string{"temperature": "2"}, "temperature"},
		{map[string]string{claude.OptMode: "yolo"}, claude.OptMode},
		{map[string]string{claude.OptEffort: "extreme"}, claude.OptEffort},
		{map[string]string{"permission_mode": "plan"}, "permission_mode"},
	} {
		err := cl.tryNewSession(r, tt.opts)
		var aerr *apiclient.Error
		if !errors.As(err, &aerr) || aerr.Code != api.CodeInvalidParams || !strings.Contains(aerr.Message, tt.name) {
			t.Errorf("session/new with %v: %v, want invalid params naming %s", tt.opts, err, tt.name)
		}
	}
	if n := len(r.srv.Requests()); n != 0 {
		t.Errorf("the model server saw %d requests", n)
	}
}
