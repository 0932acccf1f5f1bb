// Package apiclient is a small client of agenthost's local API (package
// host/localapi): JSON-RPC 2.0 over newline-delimited JSON on the unix
// socket `agenthost serve` listens on, or any other stream. The agenthost
// CLI, the demo and the tests use it; it is also the shape a desktop app's
// client takes in any language: write one JSON object per line, read one
// per line, match responses to requests by id, handle notifications
// (session/update, _agenthost/journal) as they come, and answer the
// server's own requests (session/request_permission). Package api names
// the methods, their params and results, and the error codes.
package apiclient

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/agenthost/agenthost/api"
)

// Message is one JSON-RPC message: a request, a notification or a
// response. Raw is the line as received.
type Message struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *Error          `json:"error,omitempty"`

	Raw []byte `json:"-"`
}

// IsNotification reports whether m is a notification (a method, no id).
func (m *Message) IsNotification() bool { return m.Method != "" && len(m.ID) == 0 }

// Error is a JSON-RPC error answered by the server; package api names the
// codes the local API answers with.
type Error struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *Error) Error() string {
	msg := e.Message
	var data api.ErrorData
	if len(e.Data) > 0 && json.Unmarshal(e.Data, &data) == nil && data.Error != "" {
		msg += ": " + data.Error
	} else if len(e.Data) > 0 && string(e.Data) != "null" {
		msg += ": " + string(e.Data)
	}
	return msg
}

// ErrorCode returns the JSON-RPC error code err carries, 0 if none.
func ErrorCode(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

// ErrClosed is returned by calls on a client whose connection ended.
var ErrClosed = errors.New("the connection to agenthost closed")

// Options configure a Client. Every field may be nil.
type Options struct {
	// OnNotification receives every notification, in order, on the
	// client's reading goroutine: it must not block on a Call of the same
	// client.
	OnNotification func(*Message)
	// OnRequest answers a request the server sends (for example
	// session/request_permission); it runs on a goroutine of its own. A
	// nil OnRequest answers every request with method not found.
	OnRequest func(method string, params json.RawMessage) (any, error)
	// OnResponse sees every response before it is matched to its call,
	// including error responses with a null id (to a line the server could
	// not parse), which match no call.
	OnResponse func(*Message)
}

// Client is a JSON-RPC client over one connection.
type Client struct {
	conn io.ReadWriteCloser
	opts Options

	wmu    sync.Mutex
	mu     sync.Mutex
	nextID int64
	calls  map[string]chan *Message
	done   chan struct{}
	err    error
}

// New starts a client on conn; it reads until conn ends.
func New(conn io.ReadWriteCloser, opts Options) *Client {
	c := &Client{conn: conn, opts: opts, calls: map[string]chan *Message{}, done: make(chan struct{})}
	go c.read()
	return c
}

// Dial connects to the local API on the unix socket at path.
func Dial(ctx context.Context, path string, opts Options) (*Client, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	return New(conn, opts), nil
}

// Done is closed when the connection has ended.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err says why the connection ended; valid after Done.
func (c *Client) Err() error { return c.err }

// Close closes the connection and waits for the reader.
func (c *Client) Close() error {
	err := c.conn.Close()
	<-c.done
	return err
}

func (c *Client) read() {
	defer close(c.done)
	br := bufio.NewReaderSize(c.conn, 64<<10)
	var err error
	for {
		var line []byte
		line, err = br.ReadBytes('\n')
		if len(line) > 0 {
			c.dispatch(line)
		}
		if err != nil {
			break
		}
	}
	if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
		err = ErrClosed
	} else {
		err = fmt.Errorf("%w: %v", ErrClosed, err)
	}
	c.mu.Lock()
	c.err = err
	calls := c.calls
	c.calls = map[string]chan *Message{}
	c.mu.Unlock()
	for _, ch := range calls {
		close(ch)
	}
}

func (c *Client) dispatch(line []byte) {
	m := &Message{}
	if json.Unmarshal(line, m) != nil {
		return
	}
	m.Raw = append([]byte(nil), bytes.TrimRight(line, "\r\n")...)
	switch {
	case m.Method != "" && len(m.ID) > 0:
		go c.answer(m)
	case m.Method != "":
		if c.opts.OnNotification != nil {
			c.opts.OnNotification(m)
		}
	default:
		if c.opts.OnResponse != nil {
			c.opts.OnResponse(m)
		}
		c.mu.Lock()
		ch, ok := c.calls[string(m.ID)]
		delete(c.calls, string(m.ID))
		c.mu.Unlock()
		if ok {
			ch <- m
		}
	}
}

// answer replies to a request from the server.
func (c *Client) answer(m *Message) {
	reply := map[string]any{"jsonrpc": "2.0", "id": m.ID}
	if c.opts.OnRequest == nil {
		reply["error"] = Error{Code: api.CodeMethodNotFound, Message: "method not found: " + m.Method}
	} else if result, err := c.opts.OnRequest(m.Method, m.Params); err != nil {
		var e *Error
		if !errors.As(err, &e) {
			e = &Error{Code: api.CodeInternalError, Message: err.Error()}
		}
		reply["error"] = e
	} else {
		reply["result"] = result
	}
	_ = c.send(reply)
}

func (c *Client) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return c.WriteLine(b)
}

// WriteLine writes one raw line (a newline is added), as is: for tests
// and tools that send what they like.
func (c *Client) WriteLine(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.conn.Write(append(b, '\n'))
	return err
}

// Notify sends a notification.
func (c *Client) Notify(method string, params any) error {
	return c.send(map[string]any{"jsonrpc": "2.0", "method": method, "params": params})
}

// Call sends a request and waits for its response; a JSON-RPC error comes
// back as an *Error. When out is not nil the result is decoded into it.
func (c *Client) Call(ctx context.Context, method string, params any, out any) error {
	m, err := c.CallRaw(ctx, method, params)
	if err != nil {
		return err
	}
	if out != nil && len(m.Result) > 0 {
		if err := json.Unmarshal(m.Result, out); err != nil {
			return fmt.Errorf("%s: decode the result %s: %w", method, m.Result, err)
		}
	}
	return nil
}

// CallRaw is Call returning the response message itself.
func (c *Client) CallRaw(ctx context.Context, method string, params any) (*Message, error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return nil, c.err
	}
	c.nextID++
	id := strconv.FormatInt(c.nextID, 10)
	ch := make(chan *Message, 1)
	c.calls[id] = ch
	c.mu.Unlock()
	if params == nil {
		params = map[string]any{}
	}
	if err := c.send(map[string]any{"jsonrpc": "2.0", "id": json.RawMessage(id), "method": method, "params": params}); err != nil {
		c.forget(id)
		return nil, fmt.Errorf("send %s: %w", method, err)
	}
	select {
	case m, ok := <-ch:
		if !ok {
			return nil, c.err
		}
		if m.Error != nil {
			return m, m.Error
		}
		return m, nil
	case <-ctx.Done():
		c.forget(id)
		return nil, ctx.Err()
	}
}

func (c *Client) forget(id string) {
	c.mu.Lock()
	delete(c.calls, id)
	c.mu.Unlock()
}

// WaitFor polls cond every few milliseconds until it is true, ctx ends or
// the connection closes; it is a helper for callers that collect
// notifications.
func (c *Client) WaitFor(ctx context.Context, cond func() bool) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.done:
			if cond() {
				return nil
			}
			return c.err
		case <-t.C:
		}
	}
	return nil
}
