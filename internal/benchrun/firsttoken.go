package main

// The first-token figures: how long the first streamed token of a real
// claude or codex turn takes to reach an API client of `agenthost serve`,
// beside the same CLI driven bare. Both sides run the pinned CLI against a
// scripted model server of their own (plugin/sdk/modelserver) that answers
// each turn at once, in 3-character deltas, so what is measured is the
// CLI's own turn overhead and, on agenthost's side, the path through the
// host: API client → host → plugin → CLI, and back through the journal
// (synced before a client sees an update) to the client.
//
// Both sides are warm: the CLI process is already running and has done
// warmupTurns turns on the same conversation before the measured ones, and
// the sides alternate turn by turn, so a change of load on the machine
// falls on both (each goes first every other turn). agenthost's side is timed from the client writing
// session/prompt to its first agent_message_chunk session/update; the bare
// side from writing the user message on the CLI's stdin to the first text
// delta on its stdout (claude: a stream_event text_delta of
// --include-partial-messages; codex app-server: item/agentMessage/delta).

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/coder/acp-go-sdk"
	"github.com/google/uuid"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/internal/apiclient"
	"github.com/agenthost/agenthost/internal/realcli"
	"github.com/agenthost/agenthost/internal/serveproc"
	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/plugin/sdk/modelserver"
)

// warmupTurns are run on each side before the measured turns.
const warmupTurns = 2

// firstTokenReply is the model's answer to every turn.
const firstTokenReply = "The first token, and a few more after it."

// turnTimeout bounds one turn on either side.
const turnTimeout = 2 * time.Minute

// A realCLI is one of the two CLIs the first-token figure measures.
type realCLI struct {
	name string
	find func() (string, error)
	// setup points the CLI at path at srv, its home inside home.
	setup func(path, home string, srv *modelserver.Server) (realcli.Setup, error)
	// bare starts the CLI by itself in workspace, ready for its first
	// turn; bareWhat says what it runs, for the row.
	bare     func(ctx context.Context, path, workspace string, env []string) (turner, error)
	bareWhat string
}

var claudeReal = realCLI{
	name: "claude", find: realcli.Claude,
	setup: func(path, home string, srv *modelserver.Server) (realcli.Setup, error) {
		return realcli.ClaudeSetup(path, home, srv.URL(), 1), nil
	},
	bare:     startBareClaude,
	bareWhat: "the CLI alone, claude -p stream-json --include-partial-messages",
}

var codexReal = realCLI{
	name: "codex", find: realcli.Codex,
	setup: func(path, home string, srv *modelserver.Server) (realcli.Setup, error) {
		return realcli.CodexSetup(path, home, srv.OpenAIBaseURL(), 1)
	},
	bare:     startBareCodex,
	bareWhat: "the CLI alone, codex app-server",
}

// A turner runs turns on a warm conversation: turn sends prompt, returns
// how long its first streamed text took, and returns once the turn ended.
type turner interface {
	turn(ctx context.Context, prompt string) (time.Duration, error)
	close()
}

// benchFirstToken measures c's first token through agenthost and bare,
// or reports the rows skipped when the CLI is not installed.
func benchFirstToken(work string, c realCLI, rounds int) ([]row, error) {
	name := fmt.Sprintf("first token of a real %s turn, warm: API client session/prompt → first agent_message_chunk, median of %d", c.name, rounds)
	target := "≤ 1.05× + 5 ms"
	path, err := c.find()
	if err != nil {
		return []row{{Name: name, Value: "skipped", Baseline: err.Error(), Ratio: "–", Target: target, Verdict: "skipped"}}, nil
	}
	ctx := context.Background()
	dir, err := os.MkdirTemp(work, c.name+"-")
	if err != nil {
		return nil, err
	}

	ours, err := startHostSide(ctx, c, path, filepath.Join(dir, "host"), filepath.Join(work, "agenthost"), warmupTurns+rounds)
	if ours != nil {
		defer ours.close()
	}
	if err != nil {
		return nil, fmt.Errorf("%s through agenthost: %w", c.name, err)
	}
	bareSrv, err := modelserver.Start(modelserver.Config{})
	if err != nil {
		return nil, err
	}
	defer bareSrv.Close()
	bareHome, bareWork := filepath.Join(dir, "bare", "home"), filepath.Join(dir, "bare", "work")
	if err := mkdirs(bareHome, bareWork); err != nil {
		return nil, err
	}
	setup, err := c.setup(path, bareHome, bareSrv)
	if err != nil {
		return nil, err
	}
	bare, err := c.bare(ctx, path, bareWork, setup.Bare(realcli.IsolatedEnv(os.Environ(), bareHome)))
	if err != nil {
		return nil, fmt.Errorf("%s bare: %w", c.name, err)
	}
	defer bare.close()
	if err := bareSrv.Script(modelserver.Repeat(warmupTurns+rounds, modelserver.Text(firstTokenReply))...); err != nil {
		return nil, err
	}

	// The sides take turns going first, so neither always follows the
	// other's leftovers (a CLI writing its transcript after a turn).
	var withHost, alone []time.Duration
	for i := range warmupTurns + rounds {
		prompt := fmt.Sprintf("Say something, round %d.", i+1)
		var d, b time.Duration
		host := func() (err error) {
			if d, err = ours.turn(ctx, prompt); err != nil {
				err = fmt.Errorf("%s through agenthost, turn %d: %w", c.name, i+1, err)
			}
			return err
		}
		bareTurn := func() (err error) {
			if b, err = bare.turn(ctx, prompt); err != nil {
				err = fmt.Errorf("%s bare, turn %d: %w", c.name, i+1, err)
			}
			return err
		}
		first, second := host, bareTurn
		if i%2 == 1 {
			first, second = bareTurn, host
		}
		if err := first(); err != nil {
			return nil, err
		}
		if err := second(); err != nil {
			return nil, err
		}
		if i >= warmupTurns {
			withHost, alone = append(withHost, d), append(alone, b)
		}
	}
	m, mb := median(withHost), median(alone)
	return []row{{
		Name:     name,
		Value:    ms(m),
		Baseline: ms(mb) + " " + c.bareWhat + ": user message on stdin → first text delta on stdout",
		Ratio:    fmt.Sprintf("%.2f×", float64(m)/float64(mb)),
		Target:   target,
		Verdict:  verdict(float64(m) <= 1.05*float64(mb)+float64(5*time.Millisecond)),
	}}, nil
}

func mkdirs(dirs ...string) error {
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	return nil
}

// hostSide is agenthost serve with one session of the CLI, and an API
// client that notes when each turn's first message chunk arrives.
type hostSide struct {
	srv    *modelserver.Server
	serve  *serveproc.Server
	client *apiclient.Client
	dir    string
	id     acp.SessionId

	mu    sync.Mutex
	first chan time.Time // set for a turn; the first chunk's arrival is sent on it
}

// startHostSide starts a model server scripted for turns turns, agenthost
// serve on a state directory in dir configured for c, and a session of c.
// The caller closes what it returns, even with an error.
func startHostSide(ctx context.Context, c realCLI, path, dir, bin string, turns int) (*hostSide, error) {
	h := &hostSide{dir: dir}
	home, workspace := filepath.Join(dir, "home"), filepath.Join(dir, "work")
	if err := mkdirs(home, workspace); err != nil {
		return nil, err
	}
	var err error
	if h.srv, err = modelserver.Start(modelserver.Config{}); err != nil {
		return nil, err
	}
	if err := h.srv.Script(modelserver.Repeat(turns, modelserver.Text(firstTokenReply))...); err != nil {
		return h, err
	}
	setup, err := c.setup(path, home, h.srv)
	if err != nil {
		return h, err
	}
	config, err := realcli.Config(setup)
	if err != nil {
		return h, err
	}
	if err := os.WriteFile(filepath.Join(dir, "agenthost.json"), config, 0o600); err != nil {
		return h, err
	}
	env := append(realcli.IsolatedEnv(os.Environ(), home), "AGENTHOST_LOG_LEVEL=warn")
	h.serve, err = serveproc.Start(serveproc.Config{Bin: bin, StateDir: dir, Env: append(env, setup.Credentials...), Args: []string{"--shutdown-sessions"}})
	if err != nil {
		return h, err
	}
	if h.client, err = apiclient.Dial(ctx, h.serve.Socket, apiclient.Options{OnNotification: h.note}); err != nil {
		return h, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := h.client.Call(ctx, api.MethodInitialize, acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber}, nil); err != nil {
		return h, fmt.Errorf("initialize: %w", err)
	}
	var res acp.NewSessionResponse
	meta := map[string]any{api.MetaKey: api.NewSessionMeta{Agent: c.name}}
	if err := h.client.Call(ctx, api.MethodSessionNew, acp.NewSessionRequest{Cwd: workspace, McpServers: []acp.McpServer{}, Meta: meta}, &res); err != nil {
		return h, fmt.Errorf("session/new: %w", err)
	}
	h.id = res.SessionId
	return h, nil
}

// note runs on the client's reading goroutine for every notification.
func (h *hostSide) note(m *apiclient.Message) {
	now := time.Now()
	_, u, ok := m.SessionUpdate()
	if c, isChunk := u.(*journal.Chunk); !ok || !isChunk || c.Kind != journal.KindAgentMessageChunk {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.first != nil {
		h.first <- now
		h.first = nil
	}
}

func (h *hostSide) turn(ctx context.Context, prompt string) (time.Duration, error) {
	first := make(chan time.Time, 1)
	h.mu.Lock()
	h.first = first
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, turnTimeout)
	defer cancel()
	start := time.Now()
	var res acp.PromptResponse
	err := h.client.Call(ctx, api.MethodSessionPrompt, acp.PromptRequest{SessionId: h.id, Prompt: []acp.ContentBlock{acp.TextBlock(prompt)}}, &res)
	if err != nil {
		return 0, fmt.Errorf("session/prompt: %w", err)
	}
	if res.StopReason != acp.StopReasonEndTurn {
		return 0, fmt.Errorf("the turn ended %q", res.StopReason)
	}
	select {
	case t := <-first:
		return t.Sub(start), nil
	default:
		return 0, errors.New("the turn ended without a message chunk")
	}
}

func (h *hostSide) close() {
	if h.client != nil {
		_ = h.client.Close()
	}
	if h.serve != nil {
		_ = h.serve.Stop(30 * time.Second)
		serveproc.KillSessionProcesses(h.dir)
	}
	if h.srv != nil {
		_ = h.srv.Close()
	}
}

// bareProc is a CLI run by itself, speaking JSON lines on its stdio; a
// goroutine reads its stdout into lines until it exits.
type bareProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan line
	done  chan struct{} // closed when the process has been waited for
}

// line is one stdout line and when it was read.
type line struct {
	at   time.Time
	text []byte
}

// startBare starts path with args in workspace, in a process group of its
// own (codex's npm launcher spawns the native binary: close kills both).
// PWD is set to the workspace, as the plugins' CLIs have it: with an
// explicit environment os/exec leaves the caller's PWD in place.
func startBare(path string, args []string, workspace string, env []string) (*bareProc, error) {
	p := &bareProc{lines: make(chan line, 1024), done: make(chan struct{})}
	p.cmd = exec.Command(path, args...)
	p.cmd.Dir, p.cmd.Env = workspace, append(slices.Clone(env), "PWD="+workspace)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		defer close(p.done)
		defer close(p.lines)
		br := bufio.NewReaderSize(out, 1<<20)
		for {
			b, err := br.ReadBytes('\n')
			if len(b) > 0 {
				p.lines <- line{at: time.Now(), text: b}
			}
			if err != nil {
				_ = p.cmd.Wait()
				return
			}
		}
	}()
	return p, nil
}

func (p *bareProc) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = p.stdin.Write(append(b, '\n'))
	return err
}

// next returns the next stdout line, or an error when the process ended
// or ctx did.
func (p *bareProc) next(ctx context.Context) (line, error) {
	select {
	case l, ok := <-p.lines:
		if !ok {
			return line{}, errors.New("the CLI exited")
		}
		return l, nil
	case <-ctx.Done():
		return line{}, ctx.Err()
	}
}

// timeTurn runs one turn: it calls send, then reads stdout lines, each
// classified by read (a text delta, the turn's end, or an error ending
// it), and returns how long after send the first text delta was read.
func (p *bareProc) timeTurn(ctx context.Context, send func() error, read func([]byte) (text, end bool, err error)) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, turnTimeout)
	defer cancel()
	start := time.Now()
	if err := send(); err != nil {
		return 0, err
	}
	var first time.Duration
	for {
		l, err := p.next(ctx)
		if err != nil {
			return 0, err
		}
		text, end, err := read(l.text)
		switch {
		case err != nil:
			return 0, err
		case text && first == 0:
			first = l.at.Sub(start)
		case end && first == 0:
			return 0, errors.New("the turn ended without a text delta")
		case end:
			return first, nil
		}
	}
}

// close closes the CLI's stdin, on which both CLIs exit, and kills its
// process group if it has not within 5 s.
func (p *bareProc) close() {
	_ = p.stdin.Close()
	go func() {
		for range p.lines {
		}
	}()
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
}

// bareClaude is claude in print mode with the flags the plugin passes:
// stream-json on both sides, partial messages (so text deltas stream),
// permission prompts on stdio and a session id of its own.
type bareClaude struct{ *bareProc }

func startBareClaude(ctx context.Context, path, workspace string, env []string) (turner, error) {
	p, err := startBare(path, []string{"-p", "--output-format", "stream-json", "--input-format", "stream-json", "--verbose",
		"--include-partial-messages", "--permission-prompt-tool", "stdio", "--session-id=" + uuid.NewString()}, workspace, env)
	if err != nil {
		return nil, err
	}
	c := &bareClaude{p}
	// The SDKs' initialize handshake, as the plugin does it.
	if err := p.send(map[string]any{"type": "control_request", "request_id": "init", "request": map[string]any{"subtype": "initialize", "hooks": nil}}); err != nil {
		c.close()
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		l, err := p.next(ctx)
		if err != nil {
			c.close()
			return nil, fmt.Errorf("waiting for the initialize response: %w", err)
		}
		var m struct {
			Type     string `json:"type"`
			Response struct {
				RequestID string `json:"request_id"`
			} `json:"response"`
		}
		if json.Unmarshal(l.text, &m) == nil && m.Type == "control_response" && m.Response.RequestID == "init" {
			return c, nil
		}
	}
}

func (c *bareClaude) turn(ctx context.Context, prompt string) (time.Duration, error) {
	send := func() error {
		// The user line as the plugin writes a text prompt.
		return c.send(map[string]any{"type": "user", "session_id": "default", "parent_tool_use_id": nil,
			"message": map[string]any{"role": "user", "content": prompt}})
	}
	return c.timeTurn(ctx, send, func(b []byte) (text, end bool, err error) {
		var m struct {
			Type    string `json:"type"`
			IsError bool   `json:"is_error"`
			Result  string `json:"result"`
			Event   struct {
				Type  string `json:"type"`
				Delta struct {
					Type string `json:"type"`
				} `json:"delta"`
			} `json:"event"`
		}
		switch {
		case json.Unmarshal(b, &m) != nil:
		case m.Type == "stream_event" && m.Event.Type == "content_block_delta" && m.Event.Delta.Type == "text_delta":
			return true, false, nil
		case m.Type == "result" && m.IsError:
			return false, true, fmt.Errorf("the turn failed: %s", m.Result)
		case m.Type == "result":
			return false, true, nil
		}
		return false, false, nil
	})
}

// bareCodex is codex app-server, the interface the plugin drives, with
// one thread.
type bareCodex struct {
	*bareProc
	thread string
	nextID int
}

// codexMessage is a JSON-RPC message of the app-server (which leaves the
// "jsonrpc" member out).
type codexMessage struct {
	ID     *int            `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Message string `json:"message"`
	} `json:"error"`
}

func startBareCodex(ctx context.Context, path, workspace string, env []string) (turner, error) {
	p, err := startBare(path, []string{"app-server"}, workspace, env)
	if err != nil {
		return nil, err
	}
	c := &bareCodex{bareProc: p}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	fail := func(err error) (turner, error) { c.close(); return nil, err }
	if _, err := c.call(ctx, "initialize", map[string]any{
		"clientInfo":   map[string]any{"name": "agenthost-benchrun", "title": "agenthost benchrun", "version": "0"},
		"capabilities": map[string]any{"experimentalApi": false, "requestAttestation": false},
	}); err != nil {
		return fail(err)
	}
	if err := c.send(map[string]any{"method": "initialized"}); err != nil {
		return fail(err)
	}
	res, err := c.call(ctx, "thread/start", map[string]any{"cwd": workspace})
	if err != nil {
		return fail(err)
	}
	var started struct {
		Thread struct {
			ID string `json:"id"`
		} `json:"thread"`
	}
	if err := json.Unmarshal(res, &started); err != nil || started.Thread.ID == "" {
		return fail(fmt.Errorf("thread/start answered %s", res))
	}
	c.thread = started.Thread.ID
	return c, nil
}

// request sends a request and returns its id.
func (c *bareCodex) request(method string, params any) (int, error) {
	c.nextID++
	return c.nextID, c.send(map[string]any{"id": c.nextID, "method": method, "params": params})
}

// call sends a request and waits for its response, skipping what comes
// before it.
func (c *bareCodex) call(ctx context.Context, method string, params any) (json.RawMessage, error) {
	id, err := c.request(method, params)
	if err != nil {
		return nil, err
	}
	for {
		l, err := c.next(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", method, err)
		}
		var m codexMessage
		if json.Unmarshal(l.text, &m) != nil {
			continue
		}
		if err := c.refuse(m); err != nil {
			return nil, err
		}
		if m.Method == "" && m.ID != nil && *m.ID == id {
			if m.Error != nil {
				return nil, fmt.Errorf("%s: %s", method, m.Error.Message)
			}
			return m.Result, nil
		}
	}
}

// refuse answers a request of the server (an approval, say; a text turn
// asks none), which codex would otherwise wait on forever.
func (c *bareCodex) refuse(m codexMessage) error {
	if m.Method == "" || m.ID == nil {
		return nil
	}
	return c.send(map[string]any{"id": *m.ID, "error": map[string]any{"code": -32601, "message": "not served: " + m.Method}})
}

func (c *bareCodex) turn(ctx context.Context, prompt string) (time.Duration, error) {
	var id int
	send := func() (err error) {
		id, err = c.request("turn/start", map[string]any{"threadId": c.thread,
			"input": []any{map[string]any{"type": "text", "text": prompt, "text_elements": []any{}}}})
		return err
	}
	return c.timeTurn(ctx, send, func(b []byte) (text, end bool, err error) {
		var m codexMessage
		if json.Unmarshal(b, &m) != nil {
			return false, false, nil
		}
		if err := c.refuse(m); err != nil {
			return false, true, err
		}
		switch {
		case m.Method == "" && m.ID != nil && *m.ID == id && m.Error != nil:
			return false, true, fmt.Errorf("turn/start: %s", m.Error.Message)
		case m.Method == "item/agentMessage/delta":
			return true, false, nil
		case m.Method == "turn/completed":
			var n struct {
				Turn struct {
					Status string `json:"status"`
					Error  *struct {
						Message string `json:"message"`
					} `json:"error"`
				} `json:"turn"`
			}
			_ = json.Unmarshal(m.Params, &n)
			if n.Turn.Status != "completed" {
				msg := ""
				if n.Turn.Error != nil {
					msg = n.Turn.Error.Message
				}
				return false, true, fmt.Errorf("the turn ended %q: %s", n.Turn.Status, strings.TrimSpace(msg))
			}
			return false, true, nil
		}
		return false, false, nil
	})
}
