package realcli_test

import (
	"encoding/json"
	"errors"
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

// The real codex CLI (codex app-server, driven by the codex plugin) through
// agenthost serve's socket API. The text turn is TestCodexTextTurn in
// turns_test.go.
//
// Codex's default model has one tool, the code-mode "exec": JavaScript
// that calls tools.exec_command and tools.apply_patch. That is the path a
// user's turns take, so the tool scenarios script it (codexExec) rather
// than the exec_command function tool codex offers only to models it has
// no metadata for.

// A command that needs approval asks the API client, with the command as
// the title, kind execute and the command in rawInput. Allowed, it runs:
// its file appears in the workspace, its output is in the journal, and
// the model's next request carries it as the exec call's output.
func TestCodexPermissionAllow(t *testing.T) {
	t.Parallel()
	testCodexPermission(t, true)
}

// Rejected, nothing runs, the tool call fails, and the model's next
// request says the user rejected it.
func TestCodexPermissionReject(t *testing.T) {
	t.Parallel()
	testCodexPermission(t, false)
}

func testCodexPermission(t *testing.T, allow bool) {
	r := newRig(t, codexCLI)
	s := r.start()
	c := r.dial(s)
	answer := acp.PermissionOptionKindRejectOnce
	if allow {
		answer = acp.PermissionOptionKindAllowOnce
	}
	c.answer = func(acp.RequestPermissionRequest) acp.PermissionOptionKind { return answer }
	id := c.newSession(r, askingOptions)
	const cmd = "printf made-by-codex > made.txt && echo wrote-made"
	r.script(codexExec(cmd), modelserver.Text("All done."))
	c.mustPrompt(id, "make the file", "end_turn")

	asked := c.permissionRequests()
	if len(asked) != 1 {
		t.Fatalf("%d permission requests reached the client; want 1", len(asked))
	}
	tc := asked[0].ToolCall
	var input codex.CommandInput
	raw, _ := json.Marshal(tc.RawInput)
	if err := json.Unmarshal(raw, &input); err != nil || !strings.Contains(input.Command, cmd) || input.Cwd != r.workspace {
		t.Errorf("the request's rawInput %s; want the command and the workspace", raw)
	}
	// Codex runs the command as /bin/bash -lc '<cmd>'; the title is cmd.
	if tc.Title == nil || *tc.Title != cmd || tc.Kind == nil || *tc.Kind != acp.ToolKindExecute {
		t.Errorf("the request's title %v, kind %v; want the command, execute", deref(tc.Title), deref(tc.Kind))
	}

	file, ferr := os.ReadFile(filepath.Join(r.workspace, "made.txt"))
	updates := c.toolUpdates()[string(tc.ToolCallId)]
	var final *journal.ToolCallUpdate
	if len(updates) > 0 {
		final = updates[len(updates)-1]
	}
	next := r.nextRequest(2)
	results := next.ToolResults()
	if len(results) != 1 {
		t.Fatalf("the model's next request carries %d tool results; want 1: %+v", len(results), next.Messages)
	}
	if allow {
		if ferr != nil || string(file) != "made-by-codex" {
			t.Errorf("made.txt: %q, %v; want the approved command to have written it", file, ferr)
		}
		if final == nil || final.Status != "completed" || len(final.Content) == 0 || !strings.Contains(final.Content[0].Text(), "wrote-made") {
			t.Errorf("the tool call's last update %+v; want completed with the command's output", final)
		}
		if !strings.Contains(results[0].Text, "wrote-made") {
			t.Errorf("the tool result the model got: %q; want the command's output", results[0].Text)
		}
		r.assertJournalHas(s, id, "wrote-made")
	} else {
		if !errors.Is(ferr, os.ErrNotExist) {
			t.Errorf("made.txt: %q, %v; want no file: the command was rejected", file, ferr)
		}
		if final == nil || final.Status != "failed" {
			t.Errorf("the tool call's last update %+v; want failed", final)
		}
		if !strings.Contains(results[0].Text, "rejected by user") {
			t.Errorf("the tool result the model got: %q; want it told the user rejected the command", results[0].Text)
		}
	}
	if got := c.agentText(); got != "All done." {
		t.Errorf("the turn's message %q", got)
	}
}

// session/cancel in the middle of a slow stream ends the turn cancelled
// within 2 s, and the next prompt runs a turn of its own.
func TestCodexCancel(t *testing.T) {
	t.Parallel()
	r, _, c, id := newCodexSession(t, nil)
	slow := modelserver.Text(strings.Repeat("slowly, ", 200))
	slow.Delay = 20 * time.Millisecond
	r.script(slow, modelserver.Text("Second answer."))
	done := c.promptAsync(id, "talk slowly")
	c.waitChunks(3)
	c.cancelWithin(t, id, done, 2*time.Second)
	before := c.agentText()
	c.mustPrompt(id, "now answer", "end_turn")
	if got := strings.TrimPrefix(c.agentText(), before); got != "Second answer." {
		t.Errorf("the turn after the cancel said %q", got)
	}
	if next := r.nextRequest(2); !strings.Contains(next.LastUserText(), "now answer") {
		t.Errorf("the next request's user text %q", next.LastUserText())
	}
}

// The session option model is the model codex asks the provider for.
func TestCodexModelOption(t *testing.T) {
	t.Parallel()
	r := newRig(t, codexCLI)
	s := r.start()
	c := r.dial(s)
	const model = "gpt-agenthost-test"
	id := c.newSession(r, map[string]string{codex.OptModel: model})
	r.script(modelserver.Text("ok"))
	c.mustPrompt(id, "which model?", "end_turn")
	if got := r.nextRequest(1).Model; got != model {
		t.Errorf("codex asked for model %q; want %q", got, model)
	}
}

// The host is SIGKILLed in the middle of a slow turn and started again on
// the same state directory: the plugin and its app-server lived on (same
// pids), the new host readopts the session, the turn completes (updates
// journaled after the kill), and the journal holds every update once:
// plugin sequence numbers without gaps or repeats, the answer's text
// exactly once. The readopted session takes the next prompt at once, on
// the same codex thread.
func TestCodexHostKilledMidTurn(t *testing.T) {
	t.Parallel()
	r, s, c, id := newCodexSession(t, nil)
	answer := strings.Repeat("survive the host, ", 20)
	slow := modelserver.Text(answer)
	slow.Delay = 15 * time.Millisecond // 120 deltas: 1.8 s
	r.script(slow, modelserver.Text("After the restart."))
	_ = c.promptAsync(id, "talk through a crash")
	c.waitChunks(3)
	plugin, appServer := r.pluginAndCLI()
	killed := time.Now()
	s.kill()

	s = r.start()
	if p, a := r.pluginAndCLI(); p != plugin || a != appServer {
		t.Errorf("the new host runs plugin %d with app-server %d; want the ones that ran the turn, %d and %d", p, a, plugin, appServer)
	}
	c = r.dial(s)
	var st api.StatusResult
	if err := c.c.Call(ctxFor(t, 10*time.Second), api.MethodStatus, nil, &st); err != nil {
		t.Fatal(err)
	}
	if st.Host.Decided[api.ActionReadopted] != 1 {
		t.Errorf("the new host decided %v; want the session readopted", st.Host.Decided)
	}
	es := r.waitJournal(s, id, 30*time.Second, "the readopted turn's end", func(es []entry) bool { return stopOf(es) != nil })
	if st := stopOf(es); st.StopReason != string(acp.StopReasonEndTurn) {
		t.Errorf("the turn stopped %q (%s); want end_turn", st.StopReason, st.Error)
	}
	last := assertJournaledOnce(t, es, killed, answer)
	if !hasLifecycle(es, "readopted") {
		t.Error("the journal has no readopted lifecycle entry")
	}

	// The session runs in this host already: it takes a prompt without a
	// session/resume (this connection then does not follow its updates,
	// so the answer is read from the journal).
	c.mustPrompt(id, "still there?", "end_turn")
	var next []journal.SessionUpdate
	for _, u := range updates(r.journal(s, id)) {
		if u.PluginSeq > last {
			next = append(next, u.Update)
		}
	}
	if text, _ := messageText(next); text != "After the restart." {
		t.Errorf("the readopted session's next turn said %q", text)
	}
	req := r.nextRequest(2)
	if !strings.Contains(req.LastUserText(), "still there?") || !hasMessage(req, "user", "talk through a crash") {
		t.Errorf("the next turn's request (last user text %q) does not continue the thread of the first", req.LastUserText())
	}
}

// The plugin and its app-server are SIGKILLed between turns. session/resume
// starts them again on the session's provider handle, and the next turn
// continues the same codex thread: the model's next request carries the
// first turn's prompt and answer, and the session's options still hold.
func TestCodexResumesAfterPluginKilled(t *testing.T) {
	t.Parallel()
	r, _, c, id := newCodexSession(t, askingOptions)
	r.script(modelserver.Text("The secret word is marmalade."), codexExec("echo marmalade > word.txt"), modelserver.Text("You asked about marmalade."))
	c.mustPrompt(id, "remember the word marmalade", "end_turn")

	r.killSessionProcesses()
	c.waitNotRunning(t, id)
	c.resumeSession(t, r, id)
	c.mustPrompt(id, "what was the word?", "end_turn")
	next := r.nextRequest(2)
	user, assistant := hasMessage(next, "user", "remember the word marmalade"), hasMessage(next, "assistant", "The secret word is marmalade.")
	if !user || !assistant || !strings.Contains(next.LastUserText(), "what was the word?") {
		t.Errorf("the request after the resume carries the first prompt %v, the first answer %v, last user text %q; want the thread resumed",
			user, assistant, next.LastUserText())
	}
	if asked := c.permissionRequests(); len(asked) != 1 {
		t.Errorf("the resumed session asked %d times before running a command; want once: its approval policy holds", len(asked))
	}
}

// A provider that refuses the key (401) fails the turn, after the one
// retry CodexSetup allows, with a message saying authentication failed
// and what to configure, answered as ACP's "auth required".
func TestCodexUnauthorized(t *testing.T) {
	t.Parallel()
	r, _, c, id := newCodexSession(t, nil)
	r.script(modelserver.Repeat(2, modelserver.Failure(401, "Incorrect API key provided: sk-agen***"))...)
	_, err := c.prompt(ctxFor(t, 60*time.Second), id, "hello?")
	if err == nil || !strings.Contains(err.Error(), "authentication failed") || !strings.Contains(err.Error(), "OPENAI_API_KEY") ||
		!strings.Contains(err.Error(), "Incorrect API key provided") {
		t.Errorf("the turn's error: %v; want authentication failed, the provider's message and what to configure", err)
	}
	// Auth required is the one failure answered -32000.
	if code := rpcCode(err); code != api.CodeAuthRequired {
		t.Errorf("the prompt's error code %d; want %d (auth required)", code, api.CodeAuthRequired)
	}
	if n := len(r.srv.ModelRequests()); n != 2 {
		t.Errorf("codex asked the model %d times; want 2 (CodexSetup bounds its retries to 1)", n)
	}
}

// 529 (overloaded) and 500 fail the turn once codex's own retries are
// spent, with the provider's message (codex 0.171.0 replaces a 500's
// body with text of its own, which is then what the turn says).
func TestCodexOverloaded(t *testing.T) {
	t.Parallel()
	testCodexServerError(t, 529, "the provider is overloaded right now", "the provider is overloaded right now")
}

func TestCodexServerError(t *testing.T) {
	t.Parallel()
	testCodexServerError(t, 500, "database on fire", "server error")
}

func testCodexServerError(t *testing.T, status int, message, want string) {
	r, _, c, id := newCodexSession(t, nil)
	// Codex retries the request once and the stream once (CodexSetup):
	// four attempts.
	r.script(modelserver.Repeat(4, modelserver.Failure(status, message))...)
	_, err := c.prompt(ctxFor(t, 60*time.Second), id, "hello?")
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("the turn's error: %v; want one saying %q", err, want)
	}
	if n, p := len(r.srv.ModelRequests()), r.srv.Pending(); n != 4 || p != 0 {
		t.Errorf("codex asked the model %d times, leaving %d replies; want its 4 attempts", n, p)
	}
	r.script(modelserver.Text("Recovered."))
	c.mustPrompt(id, "again", "end_turn")
}

// A model server that never answers does not hold the turn: session/cancel
// still ends it cancelled, within 2 s, and the next prompt works.
func TestCodexCancelWhileTheServerHangs(t *testing.T) {
	t.Parallel()
	r, _, c, id := newCodexSession(t, nil)
	r.script(modelserver.Reply{Cut: modelserver.Hang}, modelserver.Text("Back again."))
	done := c.promptAsync(id, "hello?")
	r.nextRequest(1)
	c.cancelWithin(t, id, done, 2*time.Second)
	c.mustPrompt(id, "try again", "end_turn")
	if got := c.agentText(); got != "Back again." {
		t.Errorf("the turn after the cancel said %q", got)
	}
	if next := r.nextRequest(2); !strings.Contains(next.LastUserText(), "try again") {
		t.Errorf("the next request's user text %q", next.LastUserText())
	}
}

// A codex session with no credentials of any kind (no auth.json in its
// CODEX_HOME, and agenthost.json does not let agenthost's key through)
// fails session/new within seconds, before any prompt, saying what to do,
// as ACP's "auth required".
func TestCodexNoCredentialsFailsAtStart(t *testing.T) {
	t.Parallel()
	r := newRig(t, codexCLI)
	r.writeConfig(func(a *agentconfig.Agent) { a.Credentials = agentconfig.CredentialsStrip })
	s := r.start()
	c := r.dial(s)
	start := time.Now()
	err := c.tryNewSession(r, nil)
	t.Logf("session/new: %v", err)
	if err == nil {
		t.Fatal("session/new succeeded without credentials")
	}
	for _, want := range []string{"no credentials", "codex login", "OPENAI_API_KEY", `"credentials": "inherit"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("session/new's error lacks %q", want)
		}
	}
	if code := rpcCode(err); code != api.CodeAuthRequired {
		t.Errorf("session/new's error code %d; want %d (auth required)", code, api.CodeAuthRequired)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("session/new failed after %v; want within seconds", d)
	}
	if n := len(r.srv.Requests()); n != 0 {
		t.Errorf("the model server got %d requests; want none", n)
	}
}

// A model the provider rejects cannot fail the session's start: codex
// 0.171.0 sends the provider nothing before the first turn (thread/start
// only warns that it has no metadata for the model). The first turn fails
// at once (codex does not retry a 400) with the provider's message, not
// its JSON body.
func TestCodexRejectedModelFailsTheFirstTurn(t *testing.T) {
	t.Parallel()
	r, _, c, id := newCodexSession(t, map[string]string{codex.OptModel: "no-such-model"})
	if n := len(r.srv.Requests()); n != 0 {
		t.Errorf("codex sent the provider %d requests at start; this test expects none (then the plugin could check the model there)", n)
	}
	const msg = "The model `no-such-model` does not exist or you do not have access to it."
	r.script(modelserver.Failure(400, msg))
	_, err := c.prompt(ctxFor(t, 60*time.Second), id, "hello?")
	if err == nil || !strings.Contains(err.Error(), "the model provider refused the request: "+msg) {
		t.Errorf("the turn's error: %v; want the provider's message", err)
	}
	if n := len(r.srv.ModelRequests()); n != 1 {
		t.Errorf("codex asked the model %d times; want once", n)
	}
}

// A patch (tools.apply_patch from the exec tool) that needs approval asks
// with the file it edits as the title, kind edit and the change in
// rawInput; allowed, codex writes the file.
func TestCodexPatchPermissionAllow(t *testing.T) {
	t.Parallel()
	testCodexPatchPermission(t, true)
}

// Rejected, the file is not written and the model's next request says
// the patch was rejected.
func TestCodexPatchPermissionReject(t *testing.T) {
	t.Parallel()
	testCodexPatchPermission(t, false)
}

func testCodexPatchPermission(t *testing.T, allow bool) {
	// In a read-only sandbox every patch needs approval.
	r, _, c, id := newCodexSession(t, map[string]string{codex.OptApprovalPolicy: "untrusted", codex.OptSandbox: "read-only"})
	answer := acp.PermissionOptionKindRejectOnce
	if allow {
		answer = acp.PermissionOptionKindAllowOnce
	}
	c.answer = func(acp.RequestPermissionRequest) acp.PermissionOptionKind { return answer }
	const patch = "*** Begin Patch\n*** Add File: notes.txt\n+patched by codex\n*** End Patch\n"
	js := fmt.Sprintf("const r = await tools.apply_patch(%q);\ntext(JSON.stringify(r));\n", patch)
	r.script(modelserver.Reply{Tools: []modelserver.ToolCall{{Name: "exec", Input: js, Custom: true}}}, modelserver.Text("Patched."))
	c.mustPrompt(id, "write the notes", "end_turn")

	path := filepath.Join(r.workspace, "notes.txt")
	asked := c.permissionRequests()
	if len(asked) != 1 {
		t.Fatalf("%d permission requests reached the client; want 1", len(asked))
	}
	tc := asked[0].ToolCall
	var input codex.PatchInput
	raw, _ := json.Marshal(tc.RawInput)
	if err := json.Unmarshal(raw, &input); err != nil || len(input.Changes) != 1 || input.Changes[0].Path != path || !strings.Contains(input.Changes[0].Diff, "patched by codex") {
		t.Errorf("the request's rawInput %s; want the file and the change", raw)
	}
	if tc.Title == nil || *tc.Title != "edit "+path || tc.Kind == nil || *tc.Kind != acp.ToolKindEdit {
		t.Errorf("the request's title %v, kind %v; want the file, edit", deref(tc.Title), deref(tc.Kind))
	}
	b, err := os.ReadFile(path)
	results := r.nextRequest(2).ToolResults()
	if len(results) != 1 {
		t.Fatalf("the model's next request carries %d tool results; want 1", len(results))
	}
	if allow {
		if err != nil || string(b) != "patched by codex\n" {
			t.Errorf("notes.txt: %q, %v; want the approved patch applied", b, err)
		}
		if !strings.Contains(results[0].Text, "Script completed") {
			t.Errorf("the tool result the model got: %q", results[0].Text)
		}
	} else {
		if !errors.Is(err, os.ErrNotExist) {
			t.Errorf("notes.txt: %q, %v; want no file: the patch was rejected", b, err)
		}
		if !strings.Contains(results[0].Text, "patch rejected by user") {
			t.Errorf("the tool result the model got: %q; want it told the patch was rejected", results[0].Text)
		}
	}
}

// session/cancel while the client is being asked ends the turn cancelled
// within 2 s; the command never runs, and the next turn works.
func TestCodexCancelDuringPermission(t *testing.T) {
	t.Parallel()
	r, _, c, id := newCodexSession(t, askingOptions)
	asked, release := make(chan struct{}, 1), make(chan struct{})
	t.Cleanup(func() { close(release) })
	c.answer = func(acp.RequestPermissionRequest) acp.PermissionOptionKind {
		// Only the first request is waited for: a later one must not
		// block here, where the cleanup's close(release) cannot free it.
		select {
		case asked <- struct{}{}:
		default:
		}
		<-release // the user never answers
		return acp.PermissionOptionKindAllowOnce
	}
	r.script(codexExec("printf never > never.txt"), modelserver.Text("Next turn."))
	done := c.promptAsync(id, "make the file")
	select {
	case <-asked:
	case <-time.After(30 * time.Second):
		t.Fatal("no permission request reached the client")
	}
	c.cancelWithin(t, id, done, 2*time.Second)
	if _, err := os.Stat(filepath.Join(r.workspace, "never.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("never.txt: %v; want no file: the turn was cancelled while asking", err)
	}
	if n := len(r.srv.ModelRequests()); n != 1 {
		t.Errorf("codex asked the model %d times; want once: a cancelled turn goes no further", n)
	}
	c.mustPrompt(id, "again", "end_turn")
	if got := c.agentText(); got != "Next turn." {
		t.Errorf("the turn after the cancel said %q", got)
	}
}

// The model's reasoning reaches the client as thought chunks, streamed,
// before the answer.
func TestCodexThinking(t *testing.T) {
	t.Parallel()
	r, _, c, id := newCodexSession(t, nil)
	const thought = "First consider the question, then answer briefly."
	r.script(modelserver.Reply{Thinking: thought, Text: "Answered."})
	c.mustPrompt(id, "think first", "end_turn")
	var got strings.Builder
	chunks, answered, late := 0, false, false
	for _, u := range c.received() {
		ch, ok := u.Update.(*journal.Chunk)
		switch {
		case !ok:
		case ch.Kind == journal.KindAgentMessageChunk:
			answered = true
		case ch.Kind == journal.KindAgentThoughtChunk:
			chunks++
			late = late || answered
			got.WriteString(ch.Content.Text())
		}
	}
	if late {
		t.Error("a thought chunk came after the answer had begun")
	}
	if got.String() != thought || chunks < 5 {
		t.Errorf("the client saw %d thought chunks of %q; want the reasoning in many chunks", chunks, got.String())
	}
	if c.agentText() != "Answered." {
		t.Errorf("the answer %q", c.agentText())
	}
}

// A stream dropped mid-answer is retried by codex (once, CodexSetup), and
// the turn ends with the retried answer. The deltas of the dropped
// attempt have reached the client by then: codex abandons that message
// item (never completes it) and streams the retry as a new one, and ACP
// has no way to take a chunk back, so the client's text starts with the
// cut-off attempt.
func TestCodexDroppedStream(t *testing.T) {
	t.Parallel()
	r, _, c, id := newCodexSession(t, nil)
	r.script(modelserver.Reply{Text: "This answer is cut short", Cut: modelserver.Drop, CutAfter: 3}, modelserver.Text("The whole answer."))
	c.mustPrompt(id, "answer", "end_turn")
	if got := c.agentText(); got != "This answThe whole answer." {
		t.Errorf("the client saw %q; want the dropped attempt's deltas, then the retried answer", got)
	}
	reqs := r.srv.ModelRequests()
	if len(reqs) != 2 || !strings.Contains(reqs[1].LastUserText(), "answer") {
		t.Errorf("codex asked the model %d times; want the dropped request and its retry", len(reqs))
	}
}
