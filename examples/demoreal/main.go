// Command demoreal is what `make demo-real` runs: the real, pinned claude
// CLI (installed by `make clis` into .cache/clis) does one turn with a
// tool call and a permission through `agenthost serve`, against a scripted
// model server on loopback, so the real path can be watched on a machine
// with no network. It builds bin/agenthost, starts the model server
// (plugin/sdk/modelserver) scripted to stream a sentence and call Write on
// a file of the workspace, then to answer the tool's result; writes an
// agenthost.json opting the claude agent into the host's credentials;
// starts agenthost serve with those credentials in its environment;
// connects to its socket as an app would (internal/apiclient), creates a
// claude session, prompts, streams the reply, answers the permission
// request with allow, and checks that the file appeared, that the model's
// next request carried the tool's result and that the journal holds the
// whole turn — saying what happens as it goes. It exits with status 1 if
// any check fails; everything it started is stopped and its temporary
// directory removed.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/examples/internal/narrate"
	"github.com/agenthost/agenthost/internal/apiclient"
	"github.com/agenthost/agenthost/internal/realcli"
	"github.com/agenthost/agenthost/internal/serveproc"
	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/leasestore"
	"github.com/agenthost/agenthost/plugin/sdk/modelserver"
)

const (
	prompt   = "Please create hello.txt in the workspace with a greeting."
	fileName = "hello.txt"
	content  = "Hello from the real claude CLI, through agenthost.\n"
	intro    = "I'll create hello.txt in your workspace with a short greeting."
	outro    = "Done: hello.txt now holds the greeting."
	toolID   = "toolu_demoreal01"
	// delay paces the model server's deltas so the stream can be watched.
	delay = 25 * time.Millisecond
)

func main() {
	// Interrupted, the demo still cleans up: the plugin and the CLI run
	// in sessions of their own, beyond the terminal's signal.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	d := &demo{}
	err := d.run(ctx)
	stop()
	d.cleanup()
	narrate.Exit(err, "All checks passed: the real claude CLI asked for the permission, wrote the file, and the model saw the result.")
}

type demo struct {
	root, bin, dir  string
	home, workspace string
	srv             *modelserver.Server
	serve           *serveproc.Server
	client          *apiclient.Client

	mu      sync.Mutex
	updates []journal.SessionUpdate
	asked   []acp.RequestPermissionRequest
	midLine bool // the streamed text has begun a line not yet ended
}

func (d *demo) run(ctx context.Context) error {
	fmt.Println("agenthost demo-real: the real claude CLI runs a turn with a tool call and a permission, through agenthost, offline.")

	narrate.Step("1. Finding the pinned claude CLI that `make clis` installed.")
	cli, err := realcli.Claude()
	if err != nil {
		return fmt.Errorf("%w (make demo-real installs it: it needs Node.js and npm)", err)
	}
	version, err := exec.CommandContext(ctx, cli, "--version").Output()
	if err != nil {
		return fmt.Errorf("%s --version: %w", cli, err)
	}
	narrate.Detail("%s: %s", cli, strings.TrimSpace(string(version)))

	if d.root, err = serveproc.ModuleRoot(ctx); err != nil {
		return err
	}
	d.bin = filepath.Join(d.root, "bin", "agenthost")
	narrate.Step("2. Building bin/agenthost: one binary holding the host, its command line and the built-in plugins.")
	if err := serveproc.Build(ctx, d.root, d.bin); err != nil {
		return err
	}
	narrate.Detail("built %s", d.bin)

	// A short path: the host's unix socket lives in the state directory.
	if d.dir, err = os.MkdirTemp("/tmp", "ahreal-"); err != nil {
		return err
	}
	d.home, d.workspace = filepath.Join(d.dir, "home"), filepath.Join(d.dir, "work")
	for _, dir := range []string{d.home, d.workspace} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
	}
	target := filepath.Join(d.workspace, fileName)

	narrate.Step("3. Starting a scripted model server on loopback, speaking the Anthropic Messages API.")
	if d.srv, err = modelserver.Start(modelserver.Config{}); err != nil {
		return err
	}
	input, _ := json.Marshal(map[string]string{"file_path": target, "content": content})
	if err := d.srv.Script(
		modelserver.Reply{Text: intro, Tools: []modelserver.ToolCall{{ID: toolID, Name: "Write", Input: string(input)}}, Delay: delay},
		modelserver.Reply{Text: outro, Delay: delay},
	); err != nil {
		return err
	}
	narrate.Detail("%s, scripted with two replies:", d.srv.URL())
	narrate.Detail("  1. stream %q, then call the Write tool on %s", intro, target)
	narrate.Detail("  2. once the tool's result is back, stream %q", outro)

	narrate.Step("4. Writing %s: the claude agent pointed at the model server, with the host's credentials.", filepath.Join(d.dir, "agenthost.json"))
	setup := realcli.ClaudeSetup(cli, d.home, d.srv.URL(), 1)
	config, err := realcli.Config(setup)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(d.dir, "agenthost.json"), config, 0o600); err != nil {
		return err
	}
	narrate.Block(string(config))
	narrate.Detail(`"credentials": "inherit" lets the CLI see the provider variables of agenthost's own environment,`)
	narrate.Detail("which are stripped by default; the entry's env points the CLI at its own config directory.")
	narrate.Detail("%s", narrate.Command("agents"))
	agents, err := d.ah(ctx, "agents")
	if err != nil {
		return fmt.Errorf("agenthost agents: %w", err)
	}
	narrate.Block(agents)

	narrate.Step("5. Starting the host with those credentials in its environment.")
	for _, kv := range setup.Credentials {
		narrate.Detail("%s", kv)
	}
	narrate.Detail("%s", narrate.Command("serve"))
	env := append(realcli.IsolatedEnv(os.Environ(), d.home), "AGENTHOST_LOG_LEVEL=warn")
	if d.serve, err = serveproc.Start(serveproc.Config{Bin: d.bin, StateDir: d.dir, Env: append(env, setup.Credentials...)}); err != nil {
		return err
	}
	narrate.Detail("%s", d.serve.Ready)

	narrate.Step("6. Connecting to %s as an app would, and creating a claude session in %s.", d.serve.Socket, d.workspace)
	if d.client, err = apiclient.Dial(ctx, d.serve.Socket, apiclient.Options{OnNotification: d.note, OnRequest: d.answer}); err != nil {
		return err
	}
	callCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := d.client.Call(callCtx, api.MethodInitialize, acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber}, nil); err != nil {
		return fmt.Errorf("initialize: %w", err)
	}
	var created acp.NewSessionResponse
	meta := map[string]any{api.MetaKey: api.NewSessionMeta{Agent: "claude"}}
	start := time.Now()
	if err := d.client.Call(callCtx, api.MethodSessionNew, acp.NewSessionRequest{Cwd: d.workspace, McpServers: []acp.McpServer{}, Meta: meta}, &created); err != nil {
		return fmt.Errorf("session/new: %w", err)
	}
	id := string(created.SessionId)
	narrate.OK("session %s is ready after %s: the plugin checked the CLI and started it.", id, time.Since(start).Round(time.Millisecond))

	narrate.Step("7. Prompting: %q", prompt)
	narrate.Detail("streaming:")
	var res acp.PromptResponse
	turnCtx, cancelTurn := context.WithTimeout(ctx, 2*time.Minute)
	defer cancelTurn()
	err = d.client.Call(turnCtx, api.MethodSessionPrompt, acp.PromptRequest{SessionId: created.SessionId, Prompt: []acp.ContentBlock{acp.TextBlock(prompt)}}, &res)
	d.line()
	if err != nil {
		return fmt.Errorf("session/prompt: %w", err)
	}
	narrate.OK("the turn ended: %s.", res.StopReason)

	narrate.Step("8. Checking what really happened.")
	if err := d.check(res.StopReason, target); err != nil {
		return err
	}

	narrate.Step("9. The session's journal, as the host made it durable (runs of message chunks shortened):")
	narrate.Detail("%s", narrate.Command("journal", id))
	out, err := d.ah(ctx, "journal", id)
	if err != nil {
		return fmt.Errorf("agenthost journal: %w", err)
	}
	narrate.Block(shortenChunks(out))
	if err := d.checkJournal(ctx, id); err != nil {
		return err
	}

	narrate.Step("10. Shutting down: stopping the session, then the host and the model server.")
	narrate.Detail("%s", narrate.Command("sessions", "stop", id))
	if out, err := d.ah(ctx, "sessions", "stop", id); err != nil {
		return fmt.Errorf("sessions stop: %w", err)
	} else {
		narrate.Block(out)
	}
	_ = d.client.Close()
	if err := d.serve.Stop(30 * time.Second); err != nil {
		return err
	}
	if left := waitNoneLeft(d.dir, 10*time.Second); len(left) > 0 {
		return fmt.Errorf("processes %v of the session outlived it", left)
	}
	narrate.OK("the host exited on SIGTERM, and neither the plugin nor the claude CLI is left.")
	return nil
}

// note keeps every session/update and prints the streamed text.
func (d *demo) note(m *apiclient.Message) {
	_, u, ok := m.SessionUpdate()
	if !ok {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.updates = append(d.updates, u)
	switch u := u.(type) {
	case *journal.Chunk:
		if u.Kind == journal.KindAgentMessageChunk {
			if !d.midLine {
				fmt.Print("     ")
			}
			fmt.Print(u.Content.Text())
			d.midLine = true
		}
	case *journal.ToolCall:
		d.lineLocked()
		narrate.Detail("tool call %s: %s (%s, %s)", u.ToolCallID, u.Title, u.Kind, u.Status)
	case *journal.ToolCallUpdate:
		d.lineLocked()
		narrate.Detail("tool call %s: %s", u.ToolCallID, u.Status)
	}
}

// line ends the streamed text's line, if one was begun.
func (d *demo) line() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lineLocked()
}

func (d *demo) lineLocked() {
	if d.midLine {
		fmt.Println()
		d.midLine = false
	}
}

// answer is the app's side of a permission request: it shows what the
// agent asks to do and allows it once.
func (d *demo) answer(method string, params json.RawMessage) (any, error) {
	if method != api.MethodRequestPermission {
		return nil, &apiclient.Error{Code: api.CodeMethodNotFound, Message: "not served: " + method}
	}
	var req acp.RequestPermissionRequest
	if err := json.Unmarshal(params, &req); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.asked = append(d.asked, req)
	d.lineLocked()
	tc := req.ToolCall
	input, _ := json.Marshal(tc.RawInput)
	narrate.Detail("permission requested: %q (kind %s)", deref(tc.Title), deref(tc.Kind))
	narrate.Detail("  input: %s", input)
	var names []string
	for _, o := range req.Options {
		names = append(names, fmt.Sprintf("%s (%s)", o.Name, o.Kind))
	}
	narrate.Detail("  options: %s", strings.Join(names, ", "))
	for _, o := range req.Options {
		if o.Kind == acp.PermissionOptionKindAllowOnce {
			narrate.Detail("  the app answers: %s", o.Name)
			return acp.RequestPermissionResponse{Outcome: acp.RequestPermissionOutcome{Selected: &acp.RequestPermissionOutcomeSelected{OptionId: o.OptionId}}}, nil
		}
	}
	narrate.Detail("  no allow-once option: the app cancels the request")
	return acp.RequestPermissionResponse{Outcome: acp.RequestPermissionOutcome{Cancelled: &acp.RequestPermissionOutcomeCancelled{}}}, nil
}

func deref[T ~string](p *T) string {
	if p == nil {
		return ""
	}
	return string(*p)
}

// check verifies the turn from the outside: the client's updates and
// permission requests, the workspace, and the model server's record.
func (d *demo) check(stop acp.StopReason, target string) error {
	d.mu.Lock()
	updates, asked := d.updates, d.asked
	d.mu.Unlock()
	if stop != acp.StopReasonEndTurn {
		return fmt.Errorf("the turn ended %q, not end_turn", stop)
	}

	var text strings.Builder
	chunks := 0
	var call *journal.ToolCall
	completed := false
	for _, u := range updates {
		switch u := u.(type) {
		case *journal.Chunk:
			if u.Kind == journal.KindAgentMessageChunk {
				chunks++
				text.WriteString(u.Content.Text())
			}
		case *journal.ToolCall:
			if call == nil {
				call = u
			}
		case *journal.ToolCallUpdate:
			completed = completed || (call != nil && u.ToolCallID == call.ToolCallID && u.Status == "completed")
		}
	}
	if want := intro + outro; strings.ReplaceAll(text.String(), "\n", "") != want {
		return fmt.Errorf("the client was streamed %q, not the model's %q", text.String(), want)
	}
	// The model server sent each reply in deltas of 3 characters: a
	// client that saw each reply as one chunk was not streamed to.
	if chunks < 10 {
		return fmt.Errorf("the reply reached the client in %d chunks: the model streamed it in %d deltas, and the plugin should pass them on as they come",
			chunks, (len(intro)+len(outro))/3)
	}
	narrate.OK("the client was streamed the model's text as it came, in %d chunks.", chunks)

	if len(asked) != 1 {
		return fmt.Errorf("the client was asked for %d permissions, want 1", len(asked))
	}
	tc := asked[0].ToolCall
	var in struct {
		FilePath string `json:"file_path"`
		Content  string `json:"content"`
	}
	raw, _ := json.Marshal(tc.RawInput)
	if err := json.Unmarshal(raw, &in); err != nil || in.FilePath != target || in.Content != content {
		return fmt.Errorf("the permission request carried the input %s, not the Write of %s", raw, target)
	}
	if deref(tc.Title) == "" || deref(tc.Kind) != string(acp.ToolKindEdit) {
		return fmt.Errorf("the permission request's tool call has title %q and kind %q; want a title and kind edit", deref(tc.Title), deref(tc.Kind))
	}
	narrate.OK("the permission request reached the client with its title %q, kind %s and the tool's input.", deref(tc.Title), deref(tc.Kind))

	if call == nil || !completed {
		return fmt.Errorf("the client saw tool call %+v, completed %v", call, completed)
	}
	narrate.OK("the client saw the tool call %s run and complete.", call.ToolCallID)

	got, err := os.ReadFile(target)
	if err != nil {
		return fmt.Errorf("the file the model asked for is not in the workspace: %w", err)
	}
	if string(got) != content {
		return fmt.Errorf("%s holds %q, not %q", target, got, content)
	}
	narrate.OK("%s is in the workspace, holding %q: the CLI really ran the tool.", target, strings.TrimSpace(string(got)))

	reqs := d.srv.ModelRequests()
	if len(reqs) != 2 {
		return fmt.Errorf("the model server had %d model requests, want 2 (the prompt, then the tool's result)", len(reqs))
	}
	if !strings.Contains(reqs[0].LastUserText(), prompt) {
		return fmt.Errorf("the model's first request did not carry the prompt: %q", reqs[0].LastUserText())
	}
	var result *modelserver.Part
	for _, p := range reqs[1].ToolResults() {
		if p.ToolID == toolID {
			result = &p
		}
	}
	if result == nil || result.IsError {
		return fmt.Errorf("the model's second request carried the tool results %+v, not a successful result of %s", reqs[1].ToolResults(), toolID)
	}
	narrate.OK("the model's second request carried the tool's result for %s:", toolID)
	narrate.Detail("  %q", result.Text)
	return nil
}

// shortenChunks shortens each run of agent_message_chunk lines of
// `agenthost journal` to its first and last line and a count between.
func shortenChunks(out string) string {
	var b strings.Builder
	var run []string
	flush := func() {
		if len(run) > 3 {
			run = []string{run[0], fmt.Sprintf("%6s  … %d more chunks …", "", len(run)-2), run[len(run)-1]}
		}
		for _, l := range run {
			b.WriteString(l + "\n")
		}
		run = run[:0]
	}
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		if strings.Contains(l, " agent_message_chunk ") {
			run = append(run, l)
			continue
		}
		flush()
		b.WriteString(l + "\n")
	}
	flush()
	return b.String()
}

// checkJournal reads the session's journal through the API and checks it
// holds the turn: the prompt, the permission asked and answered, the tool
// call, and the turn's end.
func (d *demo) checkJournal(ctx context.Context, id string) error {
	entries, err := readJournal(ctx, d.serve.Socket, id)
	if err != nil {
		return err
	}
	var prompted, asked, allowed, tool bool
	stop := ""
	for i, e := range entries {
		if e.Seq != uint64(i+1) {
			return fmt.Errorf("journal entry %d has seq %d: a gap", i+1, e.Seq)
		}
		switch r := e.rec.(type) {
		case *journal.Prompt:
			prompted = true
		case *journal.Update:
			switch u := r.Update.(type) {
			case *journal.PermissionRequest:
				asked = true
			case *journal.PermissionResolved:
				allowed = u.Outcome.Outcome == "selected"
			case *journal.ToolCall:
				tool = true
			}
		case *journal.Stop:
			stop = r.StopReason
		}
	}
	switch {
	case !prompted || !tool:
		return fmt.Errorf("the journal lacks the prompt (%v) or the tool call (%v)", prompted, tool)
	case !asked || !allowed:
		return fmt.Errorf("the journal lacks the permission request (%v) or its answer (%v)", asked, allowed)
	case stop != string(acp.StopReasonEndTurn):
		return fmt.Errorf("the journal's turn ended %q, not end_turn", stop)
	}
	narrate.OK("entries 1 to %d without a gap: the prompt, the permission asked and allowed, the tool call, the end (end_turn).", len(entries))
	return nil
}

// entry is a journal entry, its payload decoded.
type entry struct {
	api.JournalEntry
	rec journal.Record
}

// readJournal reads the whole journal of a session through
// _agenthost/subscribe, on a connection of its own.
func readJournal(ctx context.Context, socket, id string) ([]entry, error) {
	var mu sync.Mutex
	var got []entry
	var bad error
	note := func(m *apiclient.Message) {
		if m.Method != api.MethodJournal {
			return
		}
		var e entry
		err := json.Unmarshal(m.Params, &e.JournalEntry)
		if err == nil {
			e.rec, err = journal.DecodePayload(leasestore.EntryKind(e.Kind), e.Payload)
		}
		mu.Lock()
		defer mu.Unlock()
		if err != nil && bad == nil {
			bad = fmt.Errorf("journal entry %s: %w", m.Params, err)
		}
		got = append(got, e)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := apiclient.Dial(ctx, socket, apiclient.Options{OnNotification: note})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var sub api.SubscribeResult
	if err := c.Call(ctx, api.MethodSubscribe, api.Params{SessionID: id, FromSeq: 1}, &sub); err != nil {
		return nil, fmt.Errorf("subscribe: %w", err)
	}
	if err := c.WaitFor(ctx, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return bad != nil || (len(got) > 0 && got[len(got)-1].Seq >= sub.LastSeq)
	}); err != nil {
		return nil, fmt.Errorf("reading the journal up to entry %d: %w", sub.LastSeq, err)
	}
	mu.Lock()
	defer mu.Unlock()
	return got, bad
}

// ah runs an agenthost command on the demo's state directory.
func (d *demo) ah(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, d.bin, append([]string{"--state-dir", d.dir}, args...)...)
	cmd.Env = append(realcli.IsolatedEnv(os.Environ(), d.home), "AGENTHOST_LOG_LEVEL=warn")
	out, err := cmd.Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		err = fmt.Errorf("%w: %s", err, exit.Stderr)
	}
	return string(out), err
}

// waitNoneLeft waits up to d for the session processes of stateDir to
// exit and returns those left.
func waitNoneLeft(stateDir string, d time.Duration) []int {
	deadline := time.Now().Add(d)
	for {
		left := serveproc.SessionProcesses(stateDir)
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cleanup stops whatever the demo started, whatever happened, and removes
// its directory.
func (d *demo) cleanup() {
	if d.client != nil {
		_ = d.client.Close()
	}
	if d.serve != nil {
		_ = d.serve.Stop(30 * time.Second)
	}
	if d.srv != nil {
		_ = d.srv.Close()
	}
	if d.dir != "" {
		serveproc.KillSessionProcesses(d.dir)
		os.RemoveAll(d.dir)
	}
}
