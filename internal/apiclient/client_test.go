package apiclient

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agenthost/agenthost/api"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeServer answers one connection with handle, which gets each request
// line and writes what it likes.
func fakeServer(t *testing.T, handle func(m Message, w func(any))) (*Client, *collected) {
	t.Helper()
	clientEnd, serverEnd := net.Pipe()
	var wmu sync.Mutex
	write := func(v any) {
		b, _ := json.Marshal(v)
		wmu.Lock()
		defer wmu.Unlock()
		_, _ = serverEnd.Write(append(b, '\n'))
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(serverEnd)
		for sc.Scan() {
			var m Message
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				handle(m, write)
			}
		}
	}()
	col := &collected{}
	c := New(clientEnd, Options{
		OnNotification: col.add,
		OnRequest: func(method string, params json.RawMessage) (any, error) {
			if method == "fail" {
				return nil, errors.New("no")
			}
			return map[string]any{"echo": json.RawMessage(params)}, nil
		},
	})
	t.Cleanup(func() {
		c.Close()
		serverEnd.Close()
		<-done
	})
	return c, col
}

type collected struct {
	mu    sync.Mutex
	notes []*Message
}

func (c *collected) add(m *Message) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.notes = append(c.notes, m)
}

func (c *collected) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.notes)
}

func TestCallsNotificationsAndRequests(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	answers := make(chan Message, 4)
	c, col := fakeServer(t, func(m Message, w func(any)) {
		switch {
		case m.Method == "" && len(m.ID) > 0:
			answers <- m // the client's answer to our request
		case m.Method == "ping":
			// A notification and a request of the server's own before the
			// answer: the notification must arrive first.
			w(map[string]any{"jsonrpc": "2.0", "method": "note", "params": map[string]any{"n": 1}})
			w(map[string]any{"jsonrpc": "2.0", "id": "s1", "method": "echo", "params": map[string]any{"x": 1}})
			w(map[string]any{"jsonrpc": "2.0", "id": "s2", "method": "fail", "params": map[string]any{}})
			w(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": map[string]any{"pong": true}})
		case m.Method == "bad":
			w(map[string]any{"jsonrpc": "2.0", "id": m.ID, "error": map[string]any{"code": -32602, "message": "Invalid params", "data": map[string]any{"error": "cwd is required"}}})
		case m.Method == "hang":
		}
	})
	var res struct {
		Pong bool `json:"pong"`
	}
	if err := c.Call(ctx, "ping", nil, &res); err != nil || !res.Pong {
		t.Fatalf("ping: %v %+v", err, res)
	}
	if col.len() != 1 {
		t.Errorf("%d notifications before the answer, want 1", col.len())
	}
	for range 2 {
		select {
		case a := <-answers:
			switch string(a.ID) {
			case `"s1"`:
				if string(a.Result) != `{"echo":{"x":1}}` {
					t.Errorf("answer to echo: %s", a.Result)
				}
			case `"s2"`:
				if a.Error == nil || a.Error.Message != "no" {
					t.Errorf("answer to fail: %+v", a)
				}
			}
		case <-ctx.Done():
			t.Fatal("no answer to the server's requests")
		}
	}
	err := c.Call(ctx, "bad", map[string]any{}, nil)
	if ErrorCode(err) != api.CodeInvalidParams || err.Error() != "Invalid params: cwd is required" {
		t.Errorf("bad: %v (code %d)", err, ErrorCode(err))
	}
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancelShort()
	if err := c.Call(short, "hang", nil, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("hang: %v", err)
	}
	if err := c.Notify("n", nil); err != nil {
		t.Error(err)
	}
}

func TestClosedConnectionFailsPendingCalls(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var once sync.Once
	closeIt := make(chan struct{})
	c, _ := fakeServer(t, func(m Message, w func(any)) { once.Do(func() { close(closeIt) }) })
	errc := make(chan error, 1)
	go func() { errc <- c.Call(ctx, "hang", nil, nil) }()
	<-closeIt
	c.conn.Close()
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Errorf("a call pending when the connection closed: %v", err)
	}
	<-c.Done()
	if err := c.Call(ctx, "after", nil, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("a call after close: %v", err)
	}
	if err := c.WaitFor(ctx, func() bool { return false }); !errors.Is(err, ErrClosed) {
		t.Errorf("WaitFor on a closed client: %v", err)
	}
}
