package modelserver_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/plugin/sdk/modelserver"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// start starts a server with replies scripted; it is closed at cleanup.
func start(t *testing.T, replies ...modelserver.Reply) *modelserver.Server {
	t.Helper()
	srv, err := modelserver.Start(modelserver.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	if err := srv.Script(replies...); err != nil {
		t.Fatal(err)
	}
	return srv
}

// client is an HTTP client whose idle connections close at cleanup, so
// goleak sees no transport goroutine.
func client(t *testing.T) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// post sends body as JSON to url and returns the response; the caller
// closes its body.
func post(t *testing.T, ctx context.Context, c *http.Client, url string, body any) *http.Response {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Api-Key", "test-key")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

// event is one server-sent event, its data decoded.
type event struct {
	name string
	data map[string]any
	at   time.Time
}

// readEvents reads server-sent events until the body ends; err is the
// read error that ended it (nil at a clean end).
func readEvents(t *testing.T, body io.Reader) (events []event, err error) {
	t.Helper()
	return readEventsUntil(t, body, -1, nil)
}

// readEventsUntil is readEvents that calls then (if not nil) once it has
// read n deltas.
func readEventsUntil(t *testing.T, body io.Reader, n int, then func()) (events []event, err error) {
	t.Helper()
	deltas := 0
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	var name string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var data map[string]any
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &data); err != nil {
				t.Fatalf("event %s: bad data %q: %v", name, line, err)
			}
			if data["type"] != name {
				t.Errorf("event %q carries type %v", name, data["type"])
			}
			events = append(events, event{name: name, data: data, at: time.Now()})
			if strings.HasSuffix(name, "delta") && name != "message_delta" {
				if deltas++; deltas == n && then != nil {
					then()
				}
			}
		case line == "":
		default:
			t.Fatalf("unexpected SSE line %q", line)
		}
	}
	return events, sc.Err()
}

func names(evs []event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.name)
	}
	return out
}

// field walks data along keys (map keys).
func field(data map[string]any, keys ...string) any {
	var cur any = data
	for _, k := range keys {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[k]
	}
	return cur
}

func anthropicBody(stream bool, prompt string) map[string]any {
	return map[string]any{
		"model": "claude-test", "stream": stream, "max_tokens": 100,
		"system":   []any{map[string]any{"type": "text", "text": "be brief"}},
		"messages": []any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": prompt}}}},
		"tools":    []any{map[string]any{"name": "Bash", "input_schema": map[string]any{"type": "object"}}},
	}
}

func openaiBody(prompt string) map[string]any {
	return map[string]any{
		"model": "gpt-test", "stream": true, "instructions": "be brief",
		"input": []any{map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": prompt}}}},
		"tools": []any{
			map[string]any{"type": "function", "name": "exec_command"},
			map[string]any{"type": "namespace", "name": "ns", "tools": []any{map[string]any{"type": "custom", "name": "apply_patch"}}},
			map[string]any{"type": "web_search"},
		},
	}
}
