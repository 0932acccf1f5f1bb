package codex

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/plugin/sdk/cliproc"
	"github.com/agenthost/agenthost/plugins/internal/plugintest"
)

// sampleLines are the lines codex wrote in the stored transcripts: real
// app-server output of 0.171.0 (some cut mid-line by the reference's
// recorder), and `codex exec --json` lines, which are not app-server
// messages at all.
func sampleLines(tb testing.TB) [][]byte {
	tb.Helper()
	return plugintest.SampleLines(tb, func(_ string, line []byte) ([]byte, bool) {
		line = bytes.TrimPrefix(line, []byte("<< "))
		line = bytes.TrimPrefix(line, []byte(">> "))
		return line, len(line) > 0
	}, "appserver_0.171.0.jsonl", "reference_ephemeral_interrupt.txt", "reference_exec_json_offline.jsonl")
}

func TestDecodeSamples(t *testing.T) {
	var requests, notifications, responses, errs int
	for _, l := range sampleLines(t) {
		m, err := decodeMessage(l)
		if err != nil {
			continue
		}
		switch {
		case m.isNotification():
			notifications++
		case m.isResponse() && m.Error != nil:
			errs++
		case m.isResponse():
			responses++
		case m.isRequest():
			requests++
		}
	}
	// The transcripts hold the client's requests (>>), the server's
	// results, errors and notifications.
	if requests == 0 || notifications < 10 || responses < 5 || errs < 5 {
		t.Errorf("decoded %d requests, %d notifications, %d results, %d errors", requests, notifications, responses, errs)
	}
	m, err := decodeMessage([]byte(`{"error":{"code":-32600,"message":"no rollout found for thread id 00000000-0000-0000-0000-000000000000"},"id":5}`))
	if err != nil || string(m.ID) != "5" || m.Error.Code != codeInvalidRequest || !strings.Contains(m.Error.Message, "no rollout found") {
		t.Errorf("error response: %+v, %v", m, err)
	}
	for _, bad := range []string{"", "not json", `["a"]`, `{"method": broken`, `{"foo":1}`, `{"id":{"x":1},"result":{}}`, `{"id":true,"result":{}}`} {
		if m, err := decodeMessage([]byte(bad)); err == nil {
			t.Errorf("decodeMessage(%q) = %+v, want an error", bad, m)
		}
	}
	if _, err := decodeMessage([]byte("hello")); !errors.Is(err, cliproc.ErrNotJSONObject) {
		t.Errorf("a non-JSON line: %v", err)
	}
}

// FuzzDecodeMessage: the decoder never panics, classifies every message as
// exactly one kind, and what it accepts survives a round trip through the
// encoder's shapes.
func FuzzDecodeMessage(f *testing.F) {
	for _, l := range sampleLines(f) {
		f.Add(l)
	}
	f.Add([]byte(`{"method":"initialized"}`))
	f.Add([]byte(`{"method":"item/commandExecution/requestApproval","id":"srv-1","params":{"itemId":"x"}}`))
	f.Add([]byte(`{"id":null,"error":{"code":-32700,"message":"Parse error"}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		m, err := decodeMessage(line)
		if err != nil {
			return
		}
		kinds := 0
		for _, k := range []bool{m.isRequest(), m.isNotification(), m.isResponse()} {
			if k {
				kinds++
			}
		}
		if kinds > 1 || kinds == 0 && m.Error == nil {
			t.Fatalf("%q decoded as %d kinds: %+v", line, kinds, m)
		}
		b, err := encodeLine(m)
		if err != nil {
			t.Fatalf("re-encode %+v: %v", m, err)
		}
		m2, err := decodeMessage(b)
		if err != nil {
			t.Fatalf("%q re-encoded as %s, which does not decode: %v", line, b, err)
		}
		if m2.Method != m.Method || string(m2.ID) != string(m.ID) || (m2.Error == nil) != (m.Error == nil) {
			t.Fatalf("round trip changed %+v into %+v", m, m2)
		}
		// The line reader returns the same line.
		if !bytes.ContainsAny(line, "\n") {
			got, err := cliproc.NewLineReader(bytes.NewReader(append(line, '\n')), len(line)).ReadLine()
			if err != nil || !bytes.Equal(got, line) {
				t.Fatalf("readLine: %q, %v", got, err)
			}
		}
	})
}

// fakeServer is the other end of a conn, in the test, over OS pipes (which
// buffer, as the app-server's do).
type fakeServer struct {
	t   *testing.T
	in  *bufio.Reader // what the client wrote
	out *os.File      // what the client reads
}

func newTestConn(t *testing.T, sink bool) (*conn, *fakeServer, chan error) {
	cr, sw, err := os.Pipe() // server → client
	if err != nil {
		t.Fatal(err)
	}
	sr, cw, err := os.Pipe() // client → server
	if err != nil {
		t.Fatal(err)
	}
	idle := make(chan error, 16)
	c := newConn(cw, func(m *message) {
		if m.Error != nil {
			idle <- errors.New(m.Error.Message)
		}
	})
	if sink {
		c.openSink()
	}
	go c.readLoop(cr, 1<<20, func(err error) error { return errors.Join(errProcessGone, err) })
	t.Cleanup(func() { sw.Close(); cw.Close(); sr.Close(); cr.Close() })
	return c, &fakeServer{t: t, in: bufio.NewReader(sr), out: sw}, idle
}

func (s *fakeServer) read() map[string]any {
	s.t.Helper()
	l, err := s.in.ReadBytes('\n')
	if err != nil {
		s.t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(l, &m); err != nil {
		s.t.Fatalf("client wrote %q: %v", l, err)
	}
	if _, ok := m["jsonrpc"]; ok {
		s.t.Errorf("client wrote the jsonrpc member: %s", l)
	}
	return m
}

func (s *fakeServer) write(line string) {
	s.t.Helper()
	if _, err := io.WriteString(s.out, line+"\n"); err != nil {
		s.t.Fatal(err)
	}
}

func TestConnCallsAndRequests(t *testing.T) {
	c, s, _ := newTestConn(t, true)
	type res struct {
		A int `json:"a"`
	}
	results := make(chan string, 2)
	for range 2 {
		go func() {
			var r res
			err := c.call(context.Background(), "x/y", map[string]int{"n": 1}, &r)
			if err != nil {
				results <- err.Error()
				return
			}
			results <- string(rune('0' + r.A))
		}()
	}
	a, b := s.read(), s.read()
	if a["method"] != "x/y" || b["method"] != "x/y" {
		t.Fatalf("requests %v %v", a, b)
	}
	// Answer out of order, around noise and a server request.
	s.write("not json at all")
	s.write(`{"id":` + jsonNum(b["id"]) + `,"result":{"a":2,"extra":[1]}}`)
	s.write(`{"method":"item/commandExecution/requestApproval","id":7,"params":{"itemId":"i"},"emittedAtMs":1}`)
	s.write(`{"error":{"code":-32600,"message":"nope"},"id":` + jsonNum(a["id"]) + `}`)
	got := []string{<-results, <-results}
	slices.Sort(got)
	if !(got[0] == "2" && strings.Contains(got[1], "nope (code -32600)")) {
		t.Errorf("results %q", got)
	}
	// The server request waits in the turn's queue.
	var e event
	for deadline := time.Now().Add(2 * time.Second); ; {
		var ok bool
		if e, ok = c.next(); ok || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if e.msg == nil || !e.msg.isRequest() || string(e.msg.ID) != "7" {
		t.Fatalf("queued event %+v", e.msg)
	}
	if err := c.respond(e.msg.ID, map[string]string{"decision": "accept"}); err != nil {
		t.Fatal(err)
	}
	if m := s.read(); m["id"] != float64(7) || m["result"].(map[string]any)["decision"] != "accept" {
		t.Errorf("answer %v", m)
	}
}

func jsonNum(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestConnRefusesRequestsOutsideATurn(t *testing.T) {
	_, s, _ := newTestConn(t, false)
	s.write(`{"method":"item/fileChange/requestApproval","id":"r1","params":{}}`)
	m := s.read()
	if m["id"] != "r1" || m["error"].(map[string]any)["code"] != float64(codeMethodNotFound) {
		t.Errorf("answer %v", m)
	}
}

func TestConnEndFailsPendingCalls(t *testing.T) {
	c, s, _ := newTestConn(t, true)
	errc := make(chan error, 1)
	go func() { errc <- c.call(context.Background(), "slow", nil, nil) }()
	s.read()
	s.out.Close()
	if err := <-errc; !errors.Is(err, errProcessGone) {
		t.Errorf("pending call: %v", err)
	}
	if _, err := c.start("later", nil); !errors.Is(err, errProcessGone) {
		t.Errorf("call after the end: %v", err)
	}
}

func TestConnLineTooLong(t *testing.T) {
	cr, sw := io.Pipe()
	c := newConn(io.Discard, nil)
	done := make(chan struct{})
	go func() {
		c.readLoop(cr, 1024, func(err error) error { return err })
		close(done)
	}()
	go func() {
		io.WriteString(sw, `{"method":"x","params":"`+strings.Repeat("a", 2000)+`"}`+"\n")
		sw.Close()
	}()
	<-done
	if !errors.Is(c.Err(), cliproc.ErrLineTooLong) {
		t.Errorf("connection error %v", c.Err())
	}
}
