package realcli_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/internal/agentconfig"
	"github.com/agenthost/agenthost/internal/apiclient"
	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/plugin/sdk/modelserver"
	"github.com/agenthost/agenthost/plugins/claude"
)

// The claude scenarios of the real-CLI suite: each drives the pinned
// claude CLI through agenthost serve's socket API against the scripted
// model server, and asserts what really happened: in the workspace, in
// the journal, and in the requests the CLI sent the model.

// A tool call that needs permission reaches the client with its title,
// kind and input; allowed, the tool runs and the model reads its result;
// rejected, nothing runs and the model is told.
func TestClaudePermission(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, tool string
		allow      bool
	}{
		{"write-allow", "Write", true},
		{"write-reject", "Write", false},
		{"edit-allow", "Edit", true},
		{"edit-reject", "Edit", false},
		{"bash-allow", "Bash", true},
		{"bash-reject", "Bash", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			testClaudePermission(t, tt.tool, tt.allow)
		})
	}
}

func testClaudePermission(t *testing.T, tool string, allow bool) {
	r, s, cl := startClaude(t)
	answer := acp.PermissionOptionKindRejectOnce
	if allow {
		answer = acp.PermissionOptionKindAllowOnce
	}
	cl.answer = func(acp.RequestPermissionRequest) acp.PermissionOptionKind { return answer }

	// The file each tool changes: Write's and Edit's own, or the one Bash's
	// command tees its output into (a command that writes asks for
	// permission in the default mode; a read-only one would not). before
	// is what it holds first ("": it does not exist), after what the tool
	// leaves when allowed.
	target := filepath.Join(r.workspace, "hello.txt")
	const output = "bash-output-4711"
	// wantJournal is what the journal's update shows of the result: the
	// file-editing tools' diff (its new text), a command's output.
	var input, before, after, wantKind, wantTitle, wantInput, wantResult, wantJournal string
	switch tool {
	case "Write":
		after = "hello from the real claude\n"
		input = `{"file_path":` + asJSONString(target) + `,"content":` + asJSONString(after) + `}`
		wantKind, wantTitle, wantInput, wantResult = "edit", "Write "+target, `"file_path":`+asJSONString(target), "File created successfully"
		wantJournal = after
	case "Edit":
		before, after = "hello old world\n", "hello new world\n"
		input = `{"file_path":` + asJSONString(target) + `,"old_string":"old","new_string":"new"}`
		wantKind, wantTitle, wantInput, wantResult = "edit", "Edit "+target, `"old_string":"old"`, "has been updated successfully"
		wantJournal = "hello new world"
	case "Bash":
		after = output + "\n"
		input = `{"command":"echo ` + output + ` | tee hello.txt","description":"Write the marker"}`
		wantKind, wantTitle, wantInput, wantResult = "execute", "Bash echo "+output+" | tee hello.txt", `"command":"echo `+output, output
		wantJournal = output
	}
	if before != "" {
		if err := os.WriteFile(target, []byte(before), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	r.script(modelserver.Tool(tool, input), modelserver.Text("All done."))
	id := cl.newSession(r, nil)
	cl.mustPrompt(id, "use the tool", "end_turn")

	asked := cl.permissionRequests()
	if len(asked) != 1 {
		t.Fatalf("%d permission requests reached the client, want 1", len(asked))
	}
	tc := asked[0].ToolCall
	if tc.Title == nil || *tc.Title != wantTitle || tc.Kind == nil || string(*tc.Kind) != wantKind || !strings.Contains(asJSON(t, tc.RawInput), wantInput) {
		t.Errorf("the permission request's tool call: title %v, kind %v, rawInput %s; want %q, %q, %s",
			deref(tc.Title), deref(tc.Kind), asJSON(t, tc.RawInput), wantTitle, wantKind, wantInput)
	}

	b, err := os.ReadFile(target)
	switch {
	case allow && (err != nil || string(b) != after):
		t.Errorf("allowed %s: the file holds %q (%v), want %q", tool, b, err, after)
	case !allow && before == "" && !os.IsNotExist(err):
		t.Errorf("rejected %s: %s exists (%v): the tool ran", tool, target, err)
	case !allow && before != "" && string(b) != before:
		t.Errorf("rejected %s: the file holds %q (%v), want it untouched", tool, b, err)
	}

	reqs := r.srv.ModelRequests()
	if len(reqs) != 2 {
		t.Fatalf("the model was asked %d times, want 2 (the tool call, then its result)", len(reqs))
	}
	calls, results := reqs[1].ToolCalls(), reqs[1].ToolResults()
	if len(calls) != 1 || len(results) != 1 || results[0].ToolID != calls[0].ToolID || calls[0].ToolName != tool {
		t.Fatalf("the second model request carries tool calls %+v and results %+v; want the %s call and its result", calls, results, tool)
	}
	res := results[0]
	switch {
	case allow && (res.IsError || !strings.Contains(res.Text, wantResult)):
		t.Errorf("allowed: the model read the result %q (error %v), want one with %q", res.Text, res.IsError, wantResult)
	case !allow && (!res.IsError || !strings.Contains(res.Text, "denied")):
		t.Errorf("rejected: the model read the result %q (error %v), want an error saying it was denied", res.Text, res.IsError)
	}

	// The journal holds the tool call's outcome: the command's output, the
	// edit's diff.
	var status, text string
	for _, u := range toolCallUpdates(r.journal(s, id)) {
		if u.ToolCallID == calls[0].ToolID {
			status = u.Status
			for _, c := range u.Content {
				text += c.Text()
			}
			for _, c := range u.ToolContent {
				if c.Diff != nil {
					text += c.Diff.NewText
				}
			}
		}
	}
	switch {
	case allow && (status != "completed" || !strings.Contains(text, wantJournal)):
		t.Errorf("allowed: the journal's tool call update is %q with %q, want completed with %q", status, text, wantJournal)
	case !allow && status != "failed":
		t.Errorf("rejected: the journal's tool call update is %q with %q, want failed", status, text)
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// session/cancel in the middle of a slow stream ends the turn cancelled
// within 2 s, and the next prompt runs on the same conversation.
func TestClaudeCancelMidStream(t *testing.T) {
	t.Parallel()
	r, _, cl := startClaude(t)
	slow := modelserver.Text(strings.Repeat("slowly ", 60))
	slow.Delay = 50 * time.Millisecond // 140 deltas: 7 s unless cancelled
	r.script(slow, modelserver.Text("Second answer."))
	id := cl.newSession(r, nil)

	stop := cl.promptAsync(id, "talk slowly")
	cl.waitChunks(3)
	cl.cancelWithin(t, id, stop, 2*time.Second)

	// What the cancelled turn showed is a beginning of the text, each
	// piece once: the aborted message's last line repeats no delta.
	before := len(cl.received())
	if text, _ := messageText(updatesOf(cl.received())); !strings.HasPrefix(slow.Text, text) || len(text) < 9 {
		t.Errorf("the cancelled turn showed %q, want a beginning of the scripted text", text)
	}
	cl.mustPrompt(id, "now answer", "end_turn")
	if text, _ := messageText(updatesOf(cl.received()[before:])); text != "Second answer." {
		t.Errorf("the turn after the cancel said %q", text)
	}
	reqs := r.srv.ModelRequests()
	if len(reqs) != 2 || !strings.Contains(reqs[1].LastUserText(), "now answer") {
		t.Fatalf("the model was asked %d times; want the second turn's request", len(reqs))
	}
}

// A model server that never answers: session/cancel still ends the turn
// cancelled within 2 s, and the next prompt works.
func TestClaudeCancelHungServer(t *testing.T) {
	t.Parallel()
	r, _, cl := startClaude(t)
	r.script(modelserver.Reply{Cut: modelserver.Hang}, modelserver.Text("Back again."))
	id := cl.newSession(r, nil)

	stop := cl.promptAsync(id, "wait forever")
	if _, err := r.srv.WaitModelRequests(ctxFor(t, 30*time.Second), 1); err != nil {
		t.Fatalf("the CLI never asked the model: %v", err)
	}
	cl.cancelWithin(t, id, stop, 2*time.Second)
	cl.mustPrompt(id, "try again", "end_turn")
}

// The session option model is the model the CLI asks the server for.
func TestClaudeModelOption(t *testing.T) {
	t.Parallel()
	r, _, cl := startClaude(t)
	r.script(modelserver.Text("Hi."))
	id := cl.newSession(r, map[string]string{claude.OptModel: "claude-x-test"})
	cl.mustPrompt(id, "hello", "end_turn")
	reqs := r.srv.ModelRequests()
	if len(reqs) != 1 || reqs[0].Model != "claude-x-test" {
		var models []string
		for _, q := range reqs {
			models = append(models, q.Model)
		}
		t.Errorf("the CLI asked for the models %q, want [claude-x-test]", models)
	}
}

// A model the provider does not serve fails the turn saying which model
// and which option chooses another. The CLI cannot tell before a turn:
// only a model request finds out.
func TestClaudeModelRejected(t *testing.T) {
	t.Parallel()
	r, _, cl := startClaude(t)
	// The streaming request, and the CLI's non-streaming fallback.
	r.script(modelserver.Repeat(2, modelserver.Failure(404, "model: claude-x-bad"))...)
	id := cl.newSession(r, map[string]string{claude.OptModel: "claude-x-bad"})
	_, err := cl.prompt(ctxFor(t, 60*time.Second), id, "hello")
	if err == nil || !strings.Contains(err.Error(), "does not serve the model claude-x-bad") || !strings.Contains(err.Error(), "session option model") {
		t.Errorf("the turn failed with %v, want it to name the model and the option", err)
	}
}

// A failing model server fails the turn with what to do about it: 401 as
// an authentication failure naming what to configure; 529 and 500 after
// the CLI's own retries (bounded to one), with the provider's message.
func TestClaudeModelFailures(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		status  int
		message string
		want    []string
	}{
		{401, "invalid x-api-key", []string{"authentication failed", "ANTHROPIC_API_KEY"}},
		{529, "Overloaded right now", []string{"529", "Overloaded right now"}},
		{500, "Internal boom", []string{"500", "Internal boom"}},
	} {
		t.Run(strconv.Itoa(tt.status), func(t *testing.T) {
			t.Parallel()
			r, _, cl := startClaude(t)
			// Every attempt fails: the first, the retry, and a
			// non-streaming fallback if the CLI makes one.
			r.script(modelserver.Repeat(4, modelserver.Failure(tt.status, tt.message))...)
			id := cl.newSession(r, nil)
			stop, err := cl.prompt(ctxFor(t, 60*time.Second), id, "hello")
			if err == nil {
				t.Fatalf("the turn ended %q, want it failed", stop)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the turn failed with %q, want it to say %q", err, w)
				}
			}
			// Only the provider refusing credentials is ACP's "auth
			// required".
			var aerr *apiclient.Error
			if !errors.As(err, &aerr) || (aerr.Code == api.CodeAuthRequired) != (tt.status == 401) {
				t.Errorf("the turn failed with %v; want code %d only for 401", err, api.CodeAuthRequired)
			}
			if n := len(r.srv.ModelRequests()); n < 2 {
				t.Errorf("the CLI asked the model %d times, want its retry too", n)
			}
		})
	}
}

// The host is SIGKILLed in the middle of a turn and started again on the
// same state directory: the plugin and its CLI lived on, the new host
// readopts the session, the turn completes, and the journal holds every
// update of it exactly once.
func TestClaudeHostKilledMidTurn(t *testing.T) {
	t.Parallel()
	r, s, cl := startClaude(t)
	const answer = "Every word of this answer arrives exactly once, in order, whatever happens to the host."
	slow := modelserver.Text(answer)
	slow.Delay = 40 * time.Millisecond // 30 deltas: 1.2 s
	r.script(slow, modelserver.Text("Still here."))
	id := cl.newSession(r, nil)

	cl.promptAsync(id, "a long answer, please")
	cl.waitChunks(3)
	plugin, cli := r.pluginAndCLI()
	killed := time.Now()
	s.kill()

	s = r.start()
	if !alive(plugin) || !alive(cli) {
		t.Fatalf("after the host was killed: plugin %d alive %v, CLI %d alive %v; want both alive", plugin, alive(plugin), cli, alive(cli))
	}
	if p, c := r.pluginAndCLI(); p != plugin || c != cli {
		t.Errorf("the new host runs plugin %d with CLI %d, want the same %d and %d", p, c, plugin, cli)
	}
	var st api.StatusResult
	cl = r.dial(s)
	if err := cl.c.Call(ctxFor(t, 10*time.Second), api.MethodStatus, nil, &st); err != nil {
		t.Fatal(err)
	}
	if st.Host.Decided["readopted"] != 1 {
		t.Errorf("the new host decided %v, want the session readopted", st.Host.Decided)
	}

	// The turn completes in the readopted plugin; its stop reaches the
	// journal.
	entries := r.waitJournal(s, id, 30*time.Second, "the turn's stop in the journal", func(es []entry) bool { return stopOf(es) != nil })
	if st := stopOf(entries); st.StopReason != "end_turn" {
		t.Errorf("the turn ended %q (%s), want end_turn", st.StopReason, st.Error)
	}
	assertJournaledOnce(t, entries, killed, answer)
	if !hasLifecycle(entries, "readopted") {
		t.Errorf("the journal has no readopted lifecycle entry")
	}

	// The readopted session takes the next prompt.
	cl.mustPrompt(id, "still there?", "end_turn")
}

// The plugin and its CLI are SIGKILLed between turns: the client's next
// prompt, on the connection that has the session open, starts them again
// on the same provider conversation (the host resumes the session), so the
// model's next request carries the earlier turn. With only the CLI killed,
// the plugin itself starts a new CLI on the conversation at the next
// prompt. (codex's test resumes with session/resume instead.)
func TestClaudeKilledResumes(t *testing.T) {
	t.Parallel()
	for _, pluginToo := range []bool{true, false} {
		name := "plugin-and-cli"
		if !pluginToo {
			name = "cli"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testClaudeKilledResumes(t, pluginToo)
		})
	}
}

func testClaudeKilledResumes(t *testing.T, pluginToo bool) {
	r, _, cl := startClaude(t)
	r.script(modelserver.Text("The capital of France is Paris."), modelserver.Text("And of Germany, Berlin."))
	id := cl.newSession(r, nil)
	cl.mustPrompt(id, "What is the capital of France?", "end_turn")

	plugin, cli := r.pluginAndCLI()
	killed := []int{cli}
	if pluginToo {
		killed = append(killed, plugin)
	}
	for _, pid := range killed {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, 10*time.Second, "the killed processes gone", func() bool { return !alive(plugin) || !pluginToo && !alive(cli) })
	if pluginToo {
		cl.waitNotRunning(t, id)
	}
	cl.mustPrompt(id, "And of Germany?", "end_turn")
	switch p, c := r.pluginAndCLI(); {
	case c == cli:
		t.Errorf("the session runs the killed CLI %d", c)
	case pluginToo == (p == plugin):
		t.Errorf("the session runs plugin %d, the first was %d; want a new one only when it was killed", p, plugin)
	}
	reqs := r.srv.ModelRequests()
	if len(reqs) != 2 {
		t.Fatalf("the model was asked %d times, want 2", len(reqs))
	}
	var said []string
	for _, m := range reqs[1].Messages {
		for _, p := range m.Parts {
			if p.Type == modelserver.TextPart {
				said = append(said, m.Role+": "+p.Text)
			}
		}
	}
	history := strings.Join(said, "\n")
	for _, want := range []string{"user: What is the capital of France?", "assistant: The capital of France is Paris.", "user: And of Germany?"} {
		if !strings.Contains(history, want) {
			t.Errorf("the resumed conversation's request lacks %q; it carries:\n%s", want, history)
		}
	}
}

// "Always allow" of a Write covers the "edit" scope, which the host
// remembers and answers itself: the next turn's Write runs without
// asking the client.
func TestClaudeAllowAlways(t *testing.T) {
	t.Parallel()
	r, _, cl := startClaude(t)
	cl.answer = func(acp.RequestPermissionRequest) acp.PermissionOptionKind {
		return acp.PermissionOptionKindAllowAlways
	}
	first, second := filepath.Join(r.workspace, "first.txt"), filepath.Join(r.workspace, "second.txt")
	r.script(
		modelserver.Tool("Write", `{"file_path":`+asJSONString(first)+`,"content":"1"}`), modelserver.Text("One."),
		modelserver.Tool("Write", `{"file_path":`+asJSONString(second)+`,"content":"2"}`), modelserver.Text("Two."),
	)
	id := cl.newSession(r, nil)
	cl.mustPrompt(id, "write the first", "end_turn")
	cl.mustPrompt(id, "write the second", "end_turn")
	if n := len(cl.permissionRequests()); n != 1 {
		t.Errorf("%d permission requests reached the client, want 1: the first answer allowed edits for the session", n)
	}
	for _, f := range []string{first, second} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("the Write of %s did not run: %v", f, err)
		}
	}
}

// A claude session that cannot authenticate fails at session/new, in
// seconds, saying what to do: the host holds an API key, but the agent's
// agenthost.json entry does not inherit it, and there is no login in the
// CLI's config directory.
func TestClaudeNoCredentialsFailsAtStart(t *testing.T) {
	t.Parallel()
	r := newRig(t, claudeCLI)
	r.writeConfig(func(a *agentconfig.Agent) { a.Credentials = "" })
	s := r.start()
	cl := r.dial(s)
	start := time.Now()
	err := cl.tryNewSession(r, nil)
	took := time.Since(start)
	if err == nil {
		t.Fatal("session/new succeeded without credentials")
	}
	for _, want := range []string{"no credentials", "claude auth login", "ANTHROPIC_API_KEY", `"credentials": "inherit"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("session/new failed with %q, want it to say %q", err, want)
		}
	}
	t.Logf("session/new failed in %s: %v", took, err)
	if aerr := (*apiclient.Error)(nil); !errors.As(err, &aerr) || aerr.Code != api.CodeAuthRequired {
		t.Errorf("session/new failed with %v, want ACP's auth required (%d)", err, api.CodeAuthRequired)
	}
	if took > 10*time.Second {
		t.Errorf("session/new took %s to fail", took)
	}
	if n := len(r.srv.Requests()); n != 0 {
		t.Errorf("the model server saw %d requests; nothing should have reached it", n)
	}
}

// session/cancel while a permission request waits at the client ends the
// turn cancelled within 2 s; the tool does not run, and the next prompt
// works.
func TestClaudeCancelDuringPermission(t *testing.T) {
	t.Parallel()
	r, _, cl := startClaude(t)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	// The user never decides: the answer comes only when the test ends.
	cl.answer = func(acp.RequestPermissionRequest) acp.PermissionOptionKind {
		<-release
		return acp.PermissionOptionKindAllowOnce
	}
	target := filepath.Join(r.workspace, "never.txt")
	r.script(modelserver.Tool("Write", `{"file_path":`+asJSONString(target)+`,"content":"no"}`), modelserver.Text("Stopped."))
	id := cl.newSession(r, nil)

	stop := cl.promptAsync(id, "write it")
	waitUntil(t, 30*time.Second, "the permission request", func() bool { return len(cl.permissionRequests()) > 0 })
	cl.cancelWithin(t, id, stop, 2*time.Second)
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Errorf("%s exists (%v): the tool ran after the cancel", target, err)
	}
	cl.mustPrompt(id, "never mind", "end_turn")
	reqs := r.srv.ModelRequests()
	if len(reqs) != 2 {
		t.Fatalf("the model was asked %d times, want 2", len(reqs))
	}
	if res := reqs[1].ToolResults(); len(res) != 1 || !res[0].IsError {
		t.Errorf("the next request carries the tool results %+v, want the cancelled call rejected", res)
	}
}

// A turn of two model calls (thinking and a tool call, then the answer):
// the thinking streams as many thought chunks, each text exactly once, and
// the usage reaching the client counts both calls' tokens but only the
// last call's as the context.
func TestClaudeThinkingAndUsage(t *testing.T) {
	t.Parallel()
	r, _, cl := startClaude(t)
	cl.answer = func(acp.RequestPermissionRequest) acp.PermissionOptionKind { return acp.PermissionOptionKindAllowOnce }
	const thinking = "Let me look at the workspace before I answer."
	first := modelserver.Tool("Bash", `{"command":"ls","description":"List the workspace"}`)
	first.Thinking = thinking
	first.Usage = modelserver.Usage{InputTokens: 1000, OutputTokens: 10}
	second := modelserver.Text("The workspace is empty.")
	second.Usage = modelserver.Usage{InputTokens: 1100, OutputTokens: 20}
	r.script(first, second)
	id := cl.newSession(r, nil)
	cl.mustPrompt(id, "what is in the workspace?", "end_turn")

	var thought strings.Builder
	thoughts := 0
	var usage *journal.Usage
	ups := cl.sessionUpdates()
	for _, u := range ups {
		switch u := u.(type) {
		case *journal.Chunk:
			if u.Kind == journal.KindAgentThoughtChunk {
				thought.WriteString(u.Content.Text())
				thoughts++
			}
		case *journal.Usage:
			usage = u
		}
	}
	if thought.String() != thinking || thoughts < 5 {
		t.Errorf("the client saw %d thought chunks of %q, want %q in many", thoughts, thought.String(), thinking)
	}
	if text, _ := messageText(ups); text != "The workspace is empty." {
		t.Errorf("the client saw the message %q", text)
	}
	switch {
	case usage == nil:
		t.Fatal("no usage reached the client")
	case usage.Tokens.InputTokens != 2100 || usage.Tokens.OutputTokens != 30:
		t.Errorf("usage counts %d in, %d out; want both calls': 2100 and 30", usage.Tokens.InputTokens, usage.Tokens.OutputTokens)
	case usage.Used != 1120:
		t.Errorf("usage says the context holds %d tokens, want the last call's 1100 + 20", usage.Used)
	}
}
