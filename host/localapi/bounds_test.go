package localapi

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	acp "github.com/coder/acp-go-sdk"

	"github.com/agenthost/agenthost/api"
)

// While more than MaxQueuedBytes wait to be written to a client that does
// not read, a new subscription is refused with CodeOverLimit naming the
// bound; once the bytes are gone, nothing is counted against the
// connection any more.
func TestSubscribeRefusedWhileBytesWait(t *testing.T) {
	pr, pw := io.Pipe() // never read: a write blocks as on a full socket
	out := &lockedWriter{w: pw}
	a := &agent{srv: &Server{MaxQueuedBytes: 100}, ctx: t.Context(), out: out, subs: map[uint64]context.CancelFunc{}}
	written := make(chan struct{})
	go func() {
		defer close(written)
		_, _ = out.Write(make([]byte, 150))
	}()
	deadline := time.Now().Add(10 * time.Second)
	for out.queued.Load() != 150 {
		if time.Now().After(deadline) {
			t.Fatalf("queued %d bytes, want the 150 blocked", out.queued.Load())
		}
		time.Sleep(time.Millisecond)
	}
	err := a.subscribe("s", 1)
	var re *acp.RequestError
	if !errors.As(err, &re) || re.Code != api.CodeOverLimit || !strings.Contains(re.Message, "100") {
		t.Fatalf("subscribe with 150 bytes waiting: %v; want %d naming the limit 100", err, api.CodeOverLimit)
	}
	_ = pr.Close()
	<-written
	if q := out.queued.Load(); q != 0 {
		t.Errorf("%d bytes still counted after the write ended", q)
	}
}

// isAnswer tells the library's answers from its requests and
// notifications, as it marshals them.
func TestIsAnswer(t *testing.T) {
	for line, want := range map[string]bool{
		`{"jsonrpc":"2.0","id":3,"result":{"stopReason":"end_turn"}}` + "\n":         true,
		`{"jsonrpc":"2.0","id":"x","error":{"code":-32601,"message":"no"}}` + "\n":   true,
		`{"jsonrpc":"2.0","id":{"odd":[1,2]},"result":null}`:                         true,
		`{"jsonrpc":"2.0","id":7}`:                                                   true,
		`{"jsonrpc":"2.0","id":1,"method":"session/request_permission","params":{}}`: false,
		`{"jsonrpc":"2.0","method":"session/update","params":{"id":1}}`:              false,
		`not json`: false,
		``:         false,
	} {
		if got := isAnswer([]byte(line)); got != want {
			t.Errorf("isAnswer(%q) = %v, want %v", line, got, want)
		}
	}
}
