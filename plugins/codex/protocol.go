package codex

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"

	"github.com/agenthost/agenthost/plugin/sdk/cliproc"
)

// This file is codex's app-server protocol: the v2 shapes this plugin
// reads and writes, after the schema `codex app-server
// generate-json-schema` prints for 0.171.0 (only the fields used are
// declared; unknown fields are ignored when decoding), and conn, the
// JSON-RPC connection to one app-server over its stdio.

type clientInfo struct {
	Name    string  `json:"name"`
	Title   *string `json:"title"`
	Version string  `json:"version"`
}

type initializeCapabilities struct {
	ExperimentalAPI           bool     `json:"experimentalApi"`
	RequestAttestation        bool     `json:"requestAttestation"`
	OptOutNotificationMethods []string `json:"optOutNotificationMethods,omitempty"`
}

type initializeParams struct {
	ClientInfo   clientInfo             `json:"clientInfo"`
	Capabilities initializeCapabilities `json:"capabilities"`
}

type initializeResult struct {
	UserAgent string `json:"userAgent"`
	CodexHome string `json:"codexHome"`
}

// threadParams are the fields thread/start and thread/resume share.
type threadStartParams struct {
	Model          string         `json:"model,omitempty"`
	Cwd            string         `json:"cwd,omitempty"`
	ApprovalPolicy string         `json:"approvalPolicy,omitempty"`
	Sandbox        string         `json:"sandbox,omitempty"`
	Config         map[string]any `json:"config,omitempty"`
	Ephemeral      bool           `json:"ephemeral,omitempty"`
	// BaseInstructions replace codex's; DeveloperInstructions are a
	// developer message at the head of the conversation.
	BaseInstructions      string `json:"baseInstructions,omitempty"`
	DeveloperInstructions string `json:"developerInstructions,omitempty"`
}

type threadResumeParams struct {
	ThreadID       string         `json:"threadId"`
	Model          string         `json:"model,omitempty"`
	Cwd            string         `json:"cwd,omitempty"`
	ApprovalPolicy string         `json:"approvalPolicy,omitempty"`
	Sandbox        string         `json:"sandbox,omitempty"`
	Config         map[string]any `json:"config,omitempty"`
	ExcludeTurns   bool           `json:"excludeTurns"`

	BaseInstructions      string `json:"baseInstructions,omitempty"`
	DeveloperInstructions string `json:"developerInstructions,omitempty"`
}

type thread struct {
	ID        string  `json:"id"`
	Ephemeral bool    `json:"ephemeral"`
	Path      *string `json:"path"`
}

// threadResult is the result of thread/start and thread/resume.
type threadResult struct {
	Thread         thread          `json:"thread"`
	Model          string          `json:"model"`
	ModelProvider  string          `json:"modelProvider"`
	ApprovalPolicy json.RawMessage `json:"approvalPolicy"`
	// Sandbox is a SandboxPolicy: {"type":"readOnly",…}.
	Sandbox         json.RawMessage `json:"sandbox"`
	ReasoningEffort *string         `json:"reasoningEffort"`
}

// userInput is one UserInput: {type:"text",text,text_elements:[]},
// {type:"image",url} or {type:"localImage",path}.
type userInput map[string]any

// turnStartParams is turn/start's; its model, effort, approval policy
// and sandbox policy become the thread's defaults from this turn on.
type turnStartParams struct {
	ThreadID       string      `json:"threadId"`
	Input          []userInput `json:"input"`
	Model          string      `json:"model,omitempty"`
	Effort         string      `json:"effort,omitempty"`
	ApprovalPolicy string      `json:"approvalPolicy,omitempty"`
	// SandboxPolicy is tagged: {"type":"readOnly"},
	// {"type":"workspaceWrite","writableRoots":[…]},
	// {"type":"dangerFullAccess"}.
	SandboxPolicy any `json:"sandboxPolicy,omitempty"`
}

type turnInterruptParams struct {
	ThreadID string `json:"threadId"`
	TurnID   string `json:"turnId"`
}

type turnError struct {
	Message           string          `json:"message"`
	AdditionalDetails *string         `json:"additionalDetails"`
	CodexErrorInfo    json.RawMessage `json:"codexErrorInfo"`
}

type turnInfo struct {
	ID string `json:"id"`
	// RootTurnID is the turn a review's inner turn belongs to (its items
	// and turn/completed name the root).
	RootTurnID string     `json:"rootTurnId"`
	Status     string     `json:"status"`
	Error      *turnError `json:"error"`
}

// turnResult is the result of turn/start.
type turnResult struct {
	Turn turnInfo `json:"turn"`
}

// turnNotification is turn/started and turn/completed.
type turnNotification struct {
	ThreadID string   `json:"threadId"`
	Turn     turnInfo `json:"turn"`
}

// threadItem is a ThreadItem: its type tag and the fields of the variants
// the plugin maps.
type threadItem struct {
	Type string `json:"type"`
	ID   string `json:"id"`
	// agentMessage, plan
	Text string `json:"text"`
	// reasoning
	Summary []string        `json:"summary"`
	Content json.RawMessage `json:"content"` // strings for reasoning, blocks for userMessage
	// commandExecution
	Command          string  `json:"command"`
	Cwd              string  `json:"cwd"`
	Status           string  `json:"status"`
	AggregatedOutput *string `json:"aggregatedOutput"`
	ExitCode         *int    `json:"exitCode"`
	DurationMs       *int64  `json:"durationMs"`
	// fileChange
	Changes []fileChange `json:"changes"`
	// mcpToolCall, dynamicToolCall
	Server    string          `json:"server"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
	Result    json.RawMessage `json:"result"`
	Error     json.RawMessage `json:"error"`
	// webSearch
	Query string `json:"query"`
}

type fileChange struct {
	Path string          `json:"path"`
	Kind json.RawMessage `json:"kind"`
	Diff string          `json:"diff"`
}

// itemNotification is item/started and item/completed.
type itemNotification struct {
	ThreadID string     `json:"threadId"`
	TurnID   string     `json:"turnId"`
	Item     threadItem `json:"item"`
}

// deltaNotification is item/agentMessage/delta, item/reasoning/*Delta and
// item/commandExecution/outputDelta.
type deltaNotification struct {
	ThreadID string `json:"threadId"`
	TurnID   string `json:"turnId"`
	ItemID   string `json:"itemId"`
	Delta    string `json:"delta"`
}

type tokenUsageBreakdown struct {
	TotalTokens           int64 `json:"totalTokens"`
	InputTokens           int64 `json:"inputTokens"`
	CachedInputTokens     int64 `json:"cachedInputTokens"`
	OutputTokens          int64 `json:"outputTokens"`
	ReasoningOutputTokens int64 `json:"reasoningOutputTokens"`
}

type tokenUsageNotification struct {
	ThreadID   string `json:"threadId"`
	TurnID     string `json:"turnId"`
	TokenUsage struct {
		Total tokenUsageBreakdown `json:"total"`
		Last  tokenUsageBreakdown `json:"last"`
		// ModelContextWindow is null when the model's window is unknown.
		ModelContextWindow int64 `json:"modelContextWindow"`
	} `json:"tokenUsage"`
}

type errorNotification struct {
	ThreadID  string    `json:"threadId"`
	TurnID    string    `json:"turnId"`
	Error     turnError `json:"error"`
	WillRetry bool      `json:"willRetry"`
}

type planNotification struct {
	ThreadID string `json:"threadId"`
	TurnID   string `json:"turnId"`
	Plan     []struct {
		Step   string `json:"step"`
		Status string `json:"status"`
	} `json:"plan"`
}

type serverRequestResolved struct {
	ThreadID  string          `json:"threadId"`
	RequestID json.RawMessage `json:"requestId"`
}

// approvalParams covers item/commandExecution/requestApproval,
// item/fileChange/requestApproval and item/permissions/requestApproval.
type approvalParams struct {
	ThreadID    string          `json:"threadId"`
	TurnID      string          `json:"turnId"`
	ItemID      string          `json:"itemId"`
	Permissions json.RawMessage `json:"permissions"`
	Reason      *string         `json:"reason"`
	Command     *string         `json:"command"`
	Cwd         *string         `json:"cwd"`
	GrantRoot   *string         `json:"grantRoot"`
}

// legacyApprovalParams covers execCommandApproval and applyPatchApproval,
// which 0.171.0 still lists among its server requests.
type legacyApprovalParams struct {
	ConversationID string          `json:"conversationId"`
	CallID         string          `json:"callId"`
	Command        []string        `json:"command"`
	Cwd            string          `json:"cwd"`
	Reason         *string         `json:"reason"`
	FileChanges    json.RawMessage `json:"fileChanges"`
	GrantRoot      *string         `json:"grantRoot"`
}

// The JSON-RPC client of the app-server's stdio transport: one JSON object
// per line, JSON-RPC 2.0 semantics without the "jsonrpc" member. It is
// hand-written because no maintained Go JSON-RPC library
// writes messages without that member, caps a message's size with a clear
// error, skips the non-JSON lines a CLI may print, and answers requests
// the server sends, all in a few hundred lines.

// DefaultMaxMessageBytes caps one line the app-server writes; a longer one
// ends the connection with an error saying so. Tool outputs make lines of
// several MB; the session option max_message_bytes changes the cap.
const DefaultMaxMessageBytes = 64 << 20

// JSON-RPC error codes the app-server and this client use.
const (
	codeInvalidRequest = -32600
	codeMethodNotFound = -32601
)

// message is any line of the protocol: a request (Method and ID), a
// notification (Method, no ID) or a response (ID and Result or Error).
// Unknown fields are ignored.
type message struct {
	Method string          `json:"method,omitempty"`
	ID     json.RawMessage `json:"id,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *rpcError       `json:"error,omitempty"`
}

func (m *message) isRequest() bool      { return m.Method != "" && len(m.ID) > 0 }
func (m *message) isNotification() bool { return m.Method != "" && len(m.ID) == 0 }
func (m *message) isResponse() bool     { return m.Method == "" && len(m.ID) > 0 }

// rpcError is a JSON-RPC error object.
type rpcError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *rpcError) Error() string { return fmt.Sprintf("%s (code %d)", e.Message, e.Code) }

// decodeMessage parses one line. Lines that do not start with '{' (after
// blanks) are cliproc.ErrNotJSONObject, which the reader skips; a line that
// is a JSON object but none of the three message kinds is an error too.
func decodeMessage(line []byte) (*message, error) {
	line, err := cliproc.JSONObject(line)
	if err != nil {
		return nil, err
	}
	var m message
	if err := json.Unmarshal(line, &m); err != nil {
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	if len(m.ID) > 0 {
		if bytes.Equal(m.ID, []byte("null")) {
			m.ID = nil
		} else if c := m.ID[0]; c != '"' && c != '-' && (c < '0' || c > '9') {
			return nil, fmt.Errorf("invalid id %s: expected a number or a string", m.ID)
		}
	}
	if !m.isRequest() && !m.isNotification() && !m.isResponse() {
		if m.Error != nil {
			// An error with a null id: the server could not read a request.
			return &m, nil
		}
		return nil, errors.New("neither a request, a notification nor a response")
	}
	return &m, nil
}

// errProcessGone is wrapped by errors about an app-server that has exited.
var errProcessGone = errors.New("the codex app-server is not running")

// methodUndecodable names, for onIdle, a line that looked like JSON but
// was not a message.
const methodUndecodable = "agenthost/undecodable"

// event is a notification or a request from the server, in arrival order.
type event struct {
	msg *message
}

// conn is a JSON-RPC connection to one app-server process.
type conn struct {
	w   io.Writer
	wmu sync.Mutex

	mu      sync.Mutex
	nextID  int64
	pending map[string]chan *message
	err     error         // why the connection ended; set once
	done    chan struct{} // closed when the connection has ended
	// events queues notifications and server requests for the running
	// turn; sink says whether one is running (otherwise requests are
	// refused at once and notifications dropped).
	events []event
	wake   chan struct{} // signalled (buffered 1) when events grows
	sink   bool
	// onIdle handles what arrives while no turn runs (logging).
	onIdle func(*message)
}

func newConn(w io.Writer, onIdle func(*message)) *conn {
	return &conn{
		w: w, pending: map[string]chan *message{}, done: make(chan struct{}),
		wake: make(chan struct{}, 1), onIdle: onIdle,
	}
}

// readLoop reads r until it ends, routing responses to their callers and
// everything else to the turn. It ends the connection with the error
// returned by describeEnd (given why reading stopped) and returns.
func (c *conn) readLoop(r io.Reader, max int, describeEnd func(error) error) {
	lr := cliproc.NewLineReader(r, max)
	for {
		line, err := lr.ReadLine()
		if err != nil {
			c.fail(describeEnd(err))
			return
		}
		m, err := decodeMessage(line)
		if err != nil {
			if !errors.Is(err, cliproc.ErrNotJSONObject) && c.onIdle != nil {
				c.onIdle(&message{Method: methodUndecodable, Error: &rpcError{Message: err.Error()}})
			}
			continue
		}
		c.route(m)
	}
}

func (c *conn) route(m *message) {
	switch {
	case m.isResponse():
		c.mu.Lock()
		ch, ok := c.pending[string(m.ID)]
		delete(c.pending, string(m.ID))
		c.mu.Unlock()
		if ok {
			ch <- m // buffered
		}
	case m.isRequest() || m.isNotification():
		c.mu.Lock()
		if c.sink {
			c.events = append(c.events, event{m})
			c.mu.Unlock()
			select {
			case c.wake <- struct{}{}:
			default:
			}
			return
		}
		c.mu.Unlock()
		if m.isRequest() {
			_ = c.respondError(m.ID, codeMethodNotFound, "agenthost: no turn is running to answer "+m.Method)
		}
		if c.onIdle != nil {
			c.onIdle(m)
		}
	default:
		if c.onIdle != nil {
			c.onIdle(m)
		}
	}
}

// fail ends the connection with err (once) and fails every pending call.
func (c *conn) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	c.err = err
	close(c.done)
	for id, ch := range c.pending {
		delete(c.pending, id)
		close(ch)
	}
}

// Err returns why the connection ended, nil while it is open.
func (c *conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// encodeLine encodes one message as one line. HTML escaping is off so that
// an id the server sent (kept as raw JSON) goes back byte for byte:
// json.Marshal would respell "<" in a string id as "\u003c", an equal JSON
// string but not the bytes a server that keys its requests by them sent.
func encodeLine(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil // Encode ended it with a newline
}

// write sends one message as one line.
func (c *conn) write(v any) error {
	b, err := encodeLine(v)
	if err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.Err(); err != nil {
		return err
	}
	if _, err := c.w.Write(b); err != nil {
		return fmt.Errorf("write to the codex app-server: %w", err)
	}
	return nil
}

// The shapes written on the wire: the app-server omits "jsonrpc", and so
// does this client.
type (
	outRequest struct {
		Method string `json:"method"`
		ID     int64  `json:"id"`
		Params any    `json:"params,omitempty"`
	}
	outNotification struct {
		Method string `json:"method"`
		Params any    `json:"params,omitempty"`
	}
	outResult struct {
		ID     json.RawMessage `json:"id"`
		Result any             `json:"result"`
	}
	outError struct {
		Error rpcError        `json:"error"`
		ID    json.RawMessage `json:"id"`
	}
)

// start sends a request and returns the channel its response arrives on;
// the channel is closed without a value if the connection ends first.
func (c *conn) start(method string, params any) (<-chan *message, error) {
	ch := make(chan *message, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, err
	}
	id := c.nextID
	c.nextID++
	key := strconv.FormatInt(id, 10)
	c.pending[key] = ch
	c.mu.Unlock()
	if err := c.write(outRequest{Method: method, ID: id, Params: params}); err != nil {
		c.mu.Lock()
		delete(c.pending, key)
		c.mu.Unlock()
		return nil, err
	}
	return ch, nil
}

// call sends a request and waits for its response, decoding the result
// into result (if not nil). A JSON-RPC error is returned as *rpcError.
func (c *conn) call(ctx context.Context, method string, params, result any) error {
	ch, err := c.start(method, params)
	if err != nil {
		return err
	}
	select {
	case m, ok := <-ch:
		return decodeResponse(m, ok, c, result)
	case <-ctx.Done():
		c.abandon(ch)
		return fmt.Errorf("%s: no answer from the codex app-server: %w", method, ctx.Err())
	}
}

// abandon forgets the pending call whose response channel is ch.
func (c *conn) abandon(ch <-chan *message) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, p := range c.pending {
		if p == ch {
			delete(c.pending, id)
		}
	}
}

// decodeResponse turns a response (or a closed channel) into an error or
// a decoded result.
func decodeResponse(m *message, ok bool, c *conn, result any) error {
	if !ok {
		return c.Err()
	}
	if m.Error != nil {
		return m.Error
	}
	if result == nil {
		return nil
	}
	if err := json.Unmarshal(m.Result, result); err != nil {
		return fmt.Errorf("unexpected result from the codex app-server: %w", err)
	}
	return nil
}

func (c *conn) notify(method string, params any) error {
	return c.write(outNotification{Method: method, Params: params})
}

func (c *conn) respond(id json.RawMessage, result any) error {
	return c.write(outResult{ID: id, Result: result})
}

func (c *conn) respondError(id json.RawMessage, code int, msg string) error {
	return c.write(outError{ID: id, Error: rpcError{Code: code, Message: msg}})
}

// openSink starts queueing events for a turn, dropping anything left from
// before (refusing stale requests).
func (c *conn) openSink() {
	c.mu.Lock()
	stale := c.events
	c.events, c.sink = nil, true
	c.mu.Unlock()
	for _, e := range stale {
		if e.msg.isRequest() {
			_ = c.respondError(e.msg.ID, codeMethodNotFound, "agenthost: no turn is running to answer "+e.msg.Method)
		}
	}
}

// closeSink stops queueing events.
func (c *conn) closeSink() {
	c.mu.Lock()
	c.events, c.sink = nil, false
	c.mu.Unlock()
}

// next pops the oldest queued event, if any.
func (c *conn) next() (event, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.events) == 0 {
		return event{}, false
	}
	e := c.events[0]
	c.events[0] = event{}
	c.events = c.events[1:]
	return e, true
}
