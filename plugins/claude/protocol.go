package claude

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/agenthost/agenthost/plugin/sdk"
	"github.com/agenthost/agenthost/plugin/sdk/cliproc"
)

// This file is Claude Code's stream-json protocol (claude 2.1.332): the
// shapes the plugin reads and writes, and cli, the connection to one
// running CLI over its stdio. Decoding is lenient: unknown fields and
// unknown message types are ignored, and a field whose JSON type changed
// in a newer CLI is skipped rather than failing the whole line.

// message is one line of the CLI's stdout. Only the fields the plugin uses
// are declared; which are set depends on Type.
type message struct {
	Type      string `json:"type"`
	Subtype   string `json:"subtype"`
	SessionID string `json:"session_id"`
	UUID      string `json:"uuid"`

	// system/init.
	Model             string `json:"model"`
	ClaudeCodeVersion string `json:"claude_code_version"`
	APIKeySource      string `json:"apiKeySource"`
	// PermissionMode is the session's mode, in system/init and in the
	// system/status line the CLI prints whenever the mode changes (a
	// set_permission_mode, the agent leaving plan mode).
	PermissionMode string `json:"permissionMode"`
	// Title is system/session_title_changed's.
	Title string `json:"title"`
	// NewConversationID and Trigger are a conversation_reset's: /clear
	// starts a new conversation, whose session id the lines after it
	// carry.
	NewConversationID string `json:"new_conversation_id"`
	Trigger           string `json:"trigger"`

	// assistant and user.
	Message         *apiMessage `json:"message"`
	ParentToolUseID string      `json:"parent_tool_use_id"`
	// ToolUseResult is a tool result line's structured result: Edit's
	// structuredPatch and originalFile, Write's type and content, Bash's
	// stdout and stderr, an MCP tool's content blocks.
	ToolUseResult json.RawMessage `json:"tool_use_result"`
	// Error is set on a synthetic assistant message that reports a failed
	// API call, e.g. "authentication_failed".
	Error             string `json:"error"`
	IsAPIErrorMessage bool   `json:"is_api_error_message"`

	// result.
	IsError        bool     `json:"is_error"`
	Result         string   `json:"result"`
	Errors         []string `json:"errors"`
	StopReason     string   `json:"stop_reason"`
	TerminalReason string   `json:"terminal_reason"`
	TotalCostUSD   float64  `json:"total_cost_usd"`
	Usage          *usage   `json:"usage"`
	// ModelUsage is keyed by model name; each names its context window.
	ModelUsage map[string]modelUsage `json:"modelUsage"`
	NumTurns   int                   `json:"num_turns"`

	// stream_event (--include-partial-messages): one event of the
	// Messages API stream, and the id of the message it belongs to.
	Event        *streamEvent `json:"event"`
	APIMessageID string       `json:"api_message_id"`

	// control_request, control_cancel_request (CLI → plugin).
	RequestID string          `json:"request_id"`
	Request   json.RawMessage `json:"request"`
	// control_response (CLI → plugin).
	Response *controlResponse `json:"response"`
}

// apiMessage is the Anthropic Messages API message inside an assistant or
// user line.
type apiMessage struct {
	ID         string `json:"id"`
	Role       string `json:"role"`
	Model      string `json:"model"`
	StopReason string `json:"stop_reason"`
	// Content is a string (user turns) or an array of content blocks.
	Content json.RawMessage `json:"content"`
}

// blocks returns the message's content blocks; string content is one text
// block.
func (m *apiMessage) blocks() []contentBlock {
	if m == nil {
		return nil
	}
	c := bytes.TrimSpace(m.Content)
	if len(c) == 0 {
		return nil
	}
	if c[0] == '"' {
		var s string
		if json.Unmarshal(c, &s) != nil {
			return nil
		}
		return []contentBlock{{Type: "text", Text: s}}
	}
	var out []contentBlock
	if err := json.Unmarshal(c, &out); err != nil && !isTypeError(err) {
		return nil
	}
	return out
}

// streamEvent is one Messages API server-sent event as the CLI relays it
// in a stream_event line. The plugin reads the text and thinking deltas;
// tool calls are reported from the complete assistant message, whose
// input is whole.
type streamEvent struct {
	Type  string `json:"type"` // content_block_delta, message_start, …
	Index int    `json:"index"`
	Delta struct {
		Type     string `json:"type"` // text_delta, thinking_delta, input_json_delta, signature_delta
		Text     string `json:"text"`
		Thinking string `json:"thinking"`
	} `json:"delta"`
	// Message is message_start's message, whose usage counts what the
	// model call read.
	Message *struct {
		Usage *usage `json:"usage"`
	} `json:"message"`
	// Usage is message_delta's: the model call's final output count, and
	// with the direct API its input counts again (see usage.withDelta).
	Usage *usage `json:"usage"`
}

// contentBlock is an Anthropic content block: text, thinking, tool_use,
// tool_result, or one the plugin does not know.
type contentBlock struct {
	Type string `json:"type"`
	// text.
	Text string `json:"text"`
	// thinking.
	Thinking string `json:"thinking"`
	// tool_use (and server_tool_use).
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
	// tool_result.
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

// resultText returns the text of a tool_result's content, which is a string
// or an array of content blocks.
func (b contentBlock) resultText() string {
	c := bytes.TrimSpace(b.Content)
	if len(c) == 0 {
		return ""
	}
	if c[0] == '"' {
		var s string
		_ = json.Unmarshal(c, &s)
		return s
	}
	var parts []contentBlock
	if err := json.Unmarshal(c, &parts); err != nil && !isTypeError(err) {
		return ""
	}
	var texts []string
	for _, p := range parts {
		if p.Type == "text" {
			texts = append(texts, p.Text)
		}
	}
	return strings.Join(texts, "\n")
}

// usage is the token usage of a result (the turn's model calls summed)
// or of one model call (a stream event's).
type usage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	OutputTokensDetails      *struct {
		ThinkingTokens int64 `json:"thinking_tokens"`
	} `json:"output_tokens_details"`
}

// context is what a model call's context held: everything it read (fresh,
// cache writes and cache reads) and what it wrote.
func (u *usage) context() int64 {
	return u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens + u.OutputTokens
}

// withDelta returns the usage of a model call whose message_start said u
// (nil when there was none) once its message_delta says d. Anthropic's API
// sent only output_tokens in message_delta, and gateways, Bedrock and
// Vertex still do, while the direct API now repeats the input counts: a
// count the delta carries (non-zero) is the call's final one, and the
// others stay as message_start said them.
func (u *usage) withDelta(d *usage) *usage {
	var out usage
	if u != nil {
		out = *u
	}
	for _, f := range []struct{ to, from *int64 }{
		{&out.InputTokens, &d.InputTokens},
		{&out.OutputTokens, &d.OutputTokens},
		{&out.CacheCreationInputTokens, &d.CacheCreationInputTokens},
		{&out.CacheReadInputTokens, &d.CacheReadInputTokens},
	} {
		if *f.from != 0 {
			*f.to = *f.from
		}
	}
	if d.OutputTokensDetails != nil {
		out.OutputTokensDetails = d.OutputTokensDetails
	}
	return &out
}

// modelUsage is one model's entry in a result's modelUsage.
type modelUsage struct {
	ContextWindow int64 `json:"contextWindow"`
}

// controlResponse is the body of a control_response line.
type controlResponse struct {
	Subtype   string          `json:"subtype"` // success or error
	RequestID string          `json:"request_id"`
	Response  json.RawMessage `json:"response"`
	Error     string          `json:"error"`
}

// controlRequest is the body of a control_request from the CLI. Only
// can_use_tool is answered with substance; the plugin registers no hooks and
// no SDK MCP servers, so hook_callback and mcp_message never come.
type controlRequest struct {
	Subtype               string          `json:"subtype"`
	ToolName              string          `json:"tool_name"`
	Input                 json.RawMessage `json:"input"`
	PermissionSuggestions json.RawMessage `json:"permission_suggestions"`
	ToolUseID             string          `json:"tool_use_id"`
	Title                 string          `json:"title"`
	DisplayName           string          `json:"display_name"`
	Description           string          `json:"description"`
	BlockedPath           string          `json:"blocked_path"`
	DecisionReason        string          `json:"decision_reason"`
}

// decodeLine decodes one stdout line. It returns cliproc.ErrNotJSONObject
// for a line that does not start with '{' (blank lines and "[SandboxDebug]
// …" included), which the reader skips, and a syntax error for a line that
// starts like an object but is not valid JSON. A field whose JSON type
// does not match what the plugin expects is left empty: newer CLIs may
// change shapes the plugin does not depend on.
func decodeLine(line []byte) (*message, error) {
	line, err := cliproc.JSONObject(line)
	if err != nil {
		return nil, err
	}
	var m message
	if err := json.Unmarshal(line, &m); err != nil && !isTypeError(err) {
		return nil, err
	}
	return &m, nil
}

// isTypeError reports whether err only says a value had an unexpected JSON
// type, in which case encoding/json has decoded everything else.
func isTypeError(err error) bool {
	var te *json.UnmarshalTypeError
	return errors.As(err, &te)
}

// Bounds of the connection.
const (
	// writeTimeout bounds one write to the CLI's stdin. A CLI that stops
	// reading its stdin for this long is stuck.
	writeTimeout = 30 * time.Second
	// eventBuffer is how many stdout messages wait for the turn loop.
	eventBuffer = 256
	// initTimeout bounds the initialize handshake.
	initTimeout = 60 * time.Second
)

// event is what the reader hands the session: a stdout message, or err
// when the stream broke (a line over the cap). After an err event the
// reader discards the rest of the stream.
type event struct {
	msg *message
	err error
}

// cli is one running claude process and its stream-json plumbing. Its
// stdout is read by one goroutine that routes control responses to the
// requests waiting for them, answers control requests the plugin does not
// support, and hands everything else to events, in order.
type cli struct {
	log   hclog.Logger
	proc  *cliproc.Process
	start start

	events   chan event    // closed when stdout ends
	quit     chan struct{} // closed by stop: stop delivering, drain
	quitOnce sync.Once

	mu      sync.Mutex
	pending map[string]chan controlResponse
	seq     int
	// source is where the CLI found its API key (system/init's
	// apiKeySource), for an authentication failure's advice.
	source string
	// commands are the slash commands the CLI reported at initialize.
	commands []sdk.Command
}

// startCLI starts path with args in dir as a cliproc child: pipes of its
// own, the plugin's process group, dead with the plugin. Stop gives it
// grace after stdin EOF and after SIGTERM.
func startCLI(ctx context.Context, log hclog.Logger, path string, args, env []string, dir string, st start, maxLine int, grace time.Duration) (*cli, error) {
	p, err := cliproc.Start(ctx, cliproc.Config{
		Path: path, Args: args, Env: env, Dir: dir, Logger: log,
		Grace: grace, WriteTimeout: writeTimeout,
	})
	if err != nil {
		return nil, err
	}
	c := &cli{
		log: log, proc: p, start: st,
		events: make(chan event, eventBuffer), quit: make(chan struct{}),
		pending: map[string]chan controlResponse{},
	}
	go c.readStdout(maxLine)
	return c, nil
}

// keySource is where the CLI said it found its API key; "" before its
// system/init.
func (c *cli) keySource() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.source
}

func (c *cli) setKeySource(s string) {
	c.mu.Lock()
	c.source = s
	c.mu.Unlock()
}

// pid is the CLI's process id.
func (c *cli) pid() int { return c.proc.Pid() }

// hasExited reports whether the process has been reaped.
func (c *cli) hasExited() bool { return !c.proc.Running() }

// isStopped reports whether the process has been reaped and its output
// drained.
func (c *cli) isStopped() bool {
	select {
	case <-c.proc.Done():
		return true
	default:
		return false
	}
}

// exitNote describes how the CLI ended, with the end of its stderr, for an
// error message. It waits a little longer than the drain for the process to
// be reaped and its output drained.
func (c *cli) exitNote() string {
	select {
	case <-c.proc.Done():
	case <-time.After(cliproc.DrainWait + time.Second):
		return "it closed its stdout but is still running"
	}
	note := c.proc.Status()
	if t := c.proc.Stderr().Last(5); len(t) > 0 {
		note += "; its stderr ended with: " + strings.Join(t, " | ")
	}
	return note
}

// readStdout reads the CLI's stdout line by line until it ends.
func (c *cli) readStdout(maxLine int) {
	defer close(c.events)
	r := cliproc.NewLineReader(c.proc.Stdout(), maxLine)
	broken := false
	for {
		line, err := r.ReadLine()
		var long *cliproc.LineTooLongError
		switch {
		case errors.As(err, &long):
			if !broken {
				c.log.Error("claude printed a line over the cap", "bytes", long.Len, "max", long.Max)
				c.deliver(event{err: fmt.Errorf("claude printed a stream-json line of %d bytes, over the plugin's cap of %d bytes (session option %s); the turn was stopped",
					long.Len, long.Max, OptMaxLineBytes)})
				broken = true
			}
		case err != nil:
			if !errors.Is(err, io.EOF) {
				c.log.Debug("stopped reading claude's stdout", "error", err)
			}
			return
		case !broken:
			c.handleLine(line)
		}
	}
}

// handleLine routes one stdout line.
func (c *cli) handleLine(line []byte) {
	m, err := decodeLine(line)
	if err != nil {
		if !errors.Is(err, cliproc.ErrNotJSONObject) || len(bytes.TrimSpace(line)) > 0 {
			c.log.Debug("skipping a stdout line that is not a JSON object", "line", cliproc.Clip(string(line), 200), "error", err)
		}
		return
	}
	switch m.Type {
	case "control_response":
		if m.Response == nil {
			return
		}
		c.mu.Lock()
		ch := c.pending[m.Response.RequestID]
		delete(c.pending, m.Response.RequestID)
		c.mu.Unlock()
		if ch != nil {
			ch <- *m.Response
		}
		return
	case "control_request":
		var req controlRequest
		if err := json.Unmarshal(m.Request, &req); err != nil && !isTypeError(err) {
			c.log.Warn("malformed control request from claude", "error", err)
		}
		if req.Subtype != "can_use_tool" {
			// No hooks or SDK MCP servers are registered, so nothing else
			// is expected; answer so the CLI does not wait forever.
			c.log.Warn("claude sent a control request the plugin does not handle", "subtype", req.Subtype)
			_ = c.write(errorResponse(m.RequestID, fmt.Sprintf("agenthost's claude plugin does not handle control requests of subtype %q", req.Subtype)))
			return
		}
	}
	c.deliver(event{msg: m})
}

// deliver hands ev to the session unless the process is being stopped.
func (c *cli) deliver(ev event) {
	select {
	case c.events <- ev:
	case <-c.quit:
	}
}

// write sends one JSON line to the CLI's stdin.
func (c *cli) write(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = c.proc.Write(append(b, '\n'))
	switch {
	case err == nil:
		return nil
	case errors.Is(err, cliproc.ErrStdinClosed):
		return errors.New("claude's stdin is closed")
	case errors.Is(err, cliproc.ErrWriteTimeout):
		return fmt.Errorf("claude has not read its stdin for %s", writeTimeout)
	}
	return fmt.Errorf("write to claude's stdin: %w", err)
}

// request sends a control request and returns its id and the channel its
// response arrives on. Call forget when no longer waiting.
func (c *cli) request(subtype string, fields map[string]any) (string, chan controlResponse, error) {
	var b [4]byte
	_, _ = rand.Read(b[:])
	c.mu.Lock()
	c.seq++
	id := fmt.Sprintf("req_%d_%s", c.seq, hex.EncodeToString(b[:]))
	ch := make(chan controlResponse, 1)
	c.pending[id] = ch
	c.mu.Unlock()
	req := map[string]any{"subtype": subtype}
	for k, v := range fields {
		req[k] = v
	}
	if err := c.write(controlRequestLine{Type: "control_request", RequestID: id, Request: req}); err != nil {
		c.forget(id)
		return "", nil, err
	}
	return id, ch, nil
}

func (c *cli) forget(id string) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}

// initialize sends the control protocol's initialize request and waits for
// its answer. A CLI that cannot open the conversation (an unknown --resume
// id, a --session-id already in use) answers with an error result or exits
// instead; the error then carries the CLI's own message.
func (c *cli) initialize(ctx context.Context) (initInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, initTimeout)
	defer cancel()
	id, ch, err := c.request("initialize", map[string]any{"hooks": nil})
	if err != nil {
		// A CLI that refuses its arguments exits at once, and the write
		// can lose that race (broken pipe): say what the user can act on,
		// the exit and its stderr, whichever happened first.
		note := c.exitNote()
		if c.hasExited() {
			return initInfo{}, fmt.Errorf("claude exited at startup (%s)", note)
		}
		return initInfo{}, fmt.Errorf("claude did not take the initialize request: %v (%s)", err, note)
	}
	defer c.forget(id)
	for {
		select {
		case resp := <-ch:
			if resp.Subtype == "error" {
				return initInfo{}, fmt.Errorf("claude refused the initialize request: %s", resp.Error)
			}
			var info initInfo
			if err := json.Unmarshal(resp.Response, &info); err != nil && !isTypeError(err) {
				c.log.Warn("could not read claude's initialize response", "error", err)
			}
			return info, nil
		case ev, ok := <-c.events:
			switch {
			case !ok:
				return initInfo{}, fmt.Errorf("claude exited at startup (%s)", c.exitNote())
			case ev.err != nil:
				return initInfo{}, ev.err
			case ev.msg.Type == "result" && ev.msg.IsError:
				return initInfo{}, c.startError(ev.msg)
			case ev.msg.Type == "control_request":
				_ = c.write(successResponse(ev.msg.RequestID, permissionDeny{Behavior: "deny", Message: "no turn is running"}))
			}
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return initInfo{}, fmt.Errorf("claude did not answer the initialize request within %s", initTimeout)
			}
			return initInfo{}, ctx.Err()
		}
	}
}

// controlTimeout bounds a control request the plugin waits for
// (set_permission_mode, set_model, apply_flag_settings).
const controlTimeout = 30 * time.Second

// call sends a control request and waits for its answer; an error
// answer is a *controlError with the CLI's words. The reader routes the
// answer, so call works whether or not a turn is reading events.
func (c *cli) call(ctx context.Context, subtype string, fields map[string]any) (json.RawMessage, error) {
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	id, ch, err := c.request(subtype, fields)
	if err != nil {
		return nil, err
	}
	defer c.forget(id)
	select {
	case resp := <-ch:
		if resp.Subtype == "error" {
			return nil, &controlError{subtype: subtype, msg: resp.Error}
		}
		return resp.Response, nil
	case <-c.proc.Done():
		return nil, fmt.Errorf("claude exited before it answered %s", subtype)
	case <-ctx.Done():
		return nil, fmt.Errorf("claude did not answer %s: %w", subtype, ctx.Err())
	}
}

// controlError is the CLI's error answer to a control request.
type controlError struct{ subtype, msg string }

func (e *controlError) Error() string { return fmt.Sprintf("claude refused %s: %s", e.subtype, e.msg) }

// startError turns the error result a CLI prints instead of starting into
// an error with the CLI's own words.
func (c *cli) startError(m *message) error {
	text := resultText(m)
	if c.start.resume {
		return fmt.Errorf("claude could not resume session %s: %s", c.start.id, text)
	}
	return fmt.Errorf("claude could not start session %s: %s", c.start.id, text)
}

// resultText is the CLI's own explanation of an error result.
func resultText(m *message) string {
	switch {
	case len(m.Errors) > 0:
		return strings.Join(m.Errors, "; ")
	case m.Result != "":
		return m.Result
	case m.TerminalReason != "":
		return fmt.Sprintf("%s (%s)", m.Subtype, m.TerminalReason)
	}
	return m.Subtype
}

// stop ends the CLI under the cliproc rule (stdin EOF, which makes it
// flush its transcript and exit; SIGTERM; SIGKILL; the waits sharing
// ctx's deadline) and reaps it. Concurrent calls wait for the first, or
// kill when their ctx ends first.
func (c *cli) stop(ctx context.Context) {
	c.quitOnce.Do(func() { close(c.quit) })
	_ = c.proc.Stop(ctx)
}

// Lines the plugin writes to the CLI's stdin.

// userLine is a user turn, exactly as the official SDKs send it.
type userLine struct {
	Type            string      `json:"type"` // "user"
	Message         userMessage `json:"message"`
	ParentToolUseID *string     `json:"parent_tool_use_id"` // always null
	SessionID       string      `json:"session_id"`         // "default"; ignored by the CLI
}

type userMessage struct {
	Role string `json:"role"` // "user"
	// Content is a string, or an array of Anthropic content blocks when the
	// prompt holds more than text.
	Content any `json:"content"`
}

// controlRequestLine is a control request from the plugin (initialize,
// interrupt).
type controlRequestLine struct {
	Type      string         `json:"type"` // "control_request"
	RequestID string         `json:"request_id"`
	Request   map[string]any `json:"request"`
}

// controlResponseLine answers a control request from the CLI.
type controlResponseLine struct {
	Type     string              `json:"type"` // "control_response"
	Response controlResponseBody `json:"response"`
}

type controlResponseBody struct {
	Subtype   string `json:"subtype"` // success or error
	RequestID string `json:"request_id"`
	Response  any    `json:"response,omitempty"`
	Error     string `json:"error,omitempty"`
}

func successResponse(requestID string, response any) controlResponseLine {
	return controlResponseLine{Type: "control_response", Response: controlResponseBody{Subtype: "success", RequestID: requestID, Response: response}}
}

func errorResponse(requestID, msg string) controlResponseLine {
	return controlResponseLine{Type: "control_response", Response: controlResponseBody{Subtype: "error", RequestID: requestID, Error: msg}}
}

// permissionAllow and permissionDeny are the answers to can_use_tool.
type permissionAllow struct {
	Behavior           string          `json:"behavior"` // "allow"
	UpdatedInput       json.RawMessage `json:"updatedInput"`
	UpdatedPermissions json.RawMessage `json:"updatedPermissions,omitempty"`
}

type permissionDeny struct {
	Behavior  string `json:"behavior"` // "deny"
	Message   string `json:"message"`
	Interrupt bool   `json:"interrupt,omitempty"`
}
