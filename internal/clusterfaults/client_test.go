package clusterfaults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	acp "github.com/coder/acp-go-sdk"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/internal/apiclient"
)

// worker is one session's client: it prompts the session again and again
// through whichever host runs it, following CodeSessionElsewhere to the
// owner and resuming the session where it is not running (a session taken
// over from a lost host is released, resumable by any host). Every prompt
// has a text of its own ("jepsen s<session> n<attempt>"), which the
// scripted plugin echoes as one message chunk: an echo the client receives
// is an acknowledged update (the host sends an update only once it is
// journaled), and no echo may be journaled twice.
type worker struct {
	idx       int
	id        string
	workspace string
	hosts     []*hostProc
	callTO    time.Duration

	mu      sync.Mutex
	acked   map[string]bool // echoes received
	acks    int             // prompts answered end_turn
	lastAck time.Time
	lastErr error
	n       int

	// ranOn is the host that last acknowledged a prompt, for the fault
	// schedule to aim at (owner is the worker goroutine's own).
	ranOn atomic.Int32

	owner int // believed owner host index, -1 when unknown
	next  int // the host tried next when the owner is unknown
	conns map[int]*wconn
}

// wconn is one connection of a worker to a host, and whether it has the
// session open (resumed or created on it).
type wconn struct {
	c    *apiclient.Client
	open bool
}

func newWorker(idx int, hosts []*hostProc, workspace string, callTO time.Duration) *worker {
	return &worker{idx: idx, hosts: hosts, workspace: workspace, callTO: callTO, acked: map[string]bool{}, owner: -1, conns: map[int]*wconn{}}
}

func (w *worker) note(m *apiclient.Message) {
	if m.Method != api.MethodSessionUpdate {
		return
	}
	var n struct {
		SessionID string `json:"sessionId"`
		Update    struct {
			SessionUpdate string `json:"sessionUpdate"`
			Content       struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"content"`
		} `json:"update"`
	}
	if json.Unmarshal(m.Params, &n) != nil || n.Update.SessionUpdate != "agent_message_chunk" || n.Update.Content.Type != "text" {
		return
	}
	w.mu.Lock()
	if n.SessionID == w.id {
		w.acked[n.Update.Content.Text] = true
	}
	w.mu.Unlock()
}

// conn returns the worker's connection to host i, dialing it if needed.
func (w *worker) conn(ctx context.Context, i int) (*wconn, error) {
	if c, ok := w.conns[i]; ok {
		select {
		case <-c.c.Done():
			delete(w.conns, i)
		default:
			return c, nil
		}
	}
	dctx, cancel := context.WithTimeout(ctx, w.callTO)
	defer cancel()
	c, err := apiclient.Dial(dctx, w.hosts[i].socket(), apiclient.Options{OnNotification: w.note})
	if err != nil {
		return nil, err
	}
	if err := c.Call(dctx, api.MethodInitialize, acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber}, nil); err != nil {
		c.Close()
		return nil, fmt.Errorf("initialize: %w", err)
	}
	wc := &wconn{c: c}
	w.conns[i] = wc
	return wc, nil
}

func (w *worker) drop(i int) {
	if c, ok := w.conns[i]; ok {
		c.c.Close()
		delete(w.conns, i)
	}
	if w.owner == i {
		w.owner = -1
	}
}

func (w *worker) close() {
	for i := range w.conns {
		w.drop(i)
	}
}

// create makes the session on host i.
func (w *worker) create(ctx context.Context, i int) error {
	c, err := w.conn(ctx, i)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, 3*w.callTO)
	defer cancel()
	var res acp.NewSessionResponse
	meta := map[string]any{api.MetaKey: api.NewSessionMeta{Agent: "scripted", SessionID: w.id}}
	if err := c.c.Call(cctx, api.MethodSessionNew, acp.NewSessionRequest{Cwd: w.workspace, McpServers: []acp.McpServer{}, Meta: meta}, &res); err != nil {
		return fmt.Errorf("session/new on host %s: %w", w.hosts[i].id, err)
	}
	c.open, w.owner = true, i
	w.ranOn.Store(int32(i))
	return nil
}

// step makes one attempt to have a prompt acknowledged; it returns
// whether it was.
func (w *worker) step(ctx context.Context, live func(int) bool) bool {
	i := w.owner
	if i < 0 {
		for range len(w.hosts) {
			i = w.next % len(w.hosts)
			w.next++
			if live(i) {
				break
			}
		}
	}
	err := w.attempt(ctx, i)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err == nil {
		w.acks++
		w.lastAck = time.Now()
		w.owner = i
		w.ranOn.Store(int32(i))
		return true
	}
	w.lastErr = fmt.Errorf("host %s: %w", w.hosts[i].id, err)
	return false
}

func (w *worker) attempt(ctx context.Context, i int) error {
	c, err := w.conn(ctx, i)
	if err != nil {
		w.drop(i)
		return err
	}
	if !c.open {
		cctx, cancel := context.WithTimeout(ctx, 3*w.callTO)
		err := c.c.Call(cctx, api.MethodSessionResume, acp.ResumeSessionRequest{SessionId: acp.SessionId(w.id), Cwd: w.workspace, McpServers: []acp.McpServer{}}, nil)
		cancel()
		if err != nil {
			return w.failed(i, "session/resume", err)
		}
		c.open = true
	}
	w.mu.Lock()
	w.n++
	text := fmt.Sprintf("jepsen s%d n%d", w.idx, w.n)
	w.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, w.callTO)
	defer cancel()
	var res acp.PromptResponse
	if err := c.c.Call(cctx, api.MethodSessionPrompt, acp.PromptRequest{SessionId: acp.SessionId(w.id), Prompt: []acp.ContentBlock{acp.TextBlock(text)}}, &res); err != nil {
		return w.failed(i, "session/prompt", err)
	}
	if res.StopReason != acp.StopReasonEndTurn {
		return fmt.Errorf("prompt %q ended %s", text, res.StopReason)
	}
	return nil
}

// failed decides where the next attempt goes after method failed on host
// i, and returns the error as it was.
func (w *worker) failed(i int, method string, err error) error {
	var e *apiclient.Error
	switch {
	case errors.As(err, &e) && e.Code == api.CodeSessionElsewhere:
		var d api.ElsewhereData
		_ = json.Unmarshal(e.Data, &d)
		w.owner = -1
		for j, h := range w.hosts {
			if h.id == d.HostID || (d.Address != "" && h.socket() == d.Address) {
				w.owner = j
			}
		}
		if c, ok := w.conns[i]; ok {
			c.open = false
		}
	case errors.As(err, &e) && e.Code == api.CodeNotFound:
		if c, ok := w.conns[i]; ok {
			c.open = false
		}
	case errors.As(err, &e):
		// Held, undecided, a turn still running, the store unreachable:
		// the next attempt tries again, elsewhere if the owner is unknown.
		if c, ok := w.conns[i]; ok && e.Code != api.CodeTurnRunning {
			c.open = false
		}
		if e.Code != api.CodeTurnRunning {
			w.owner = -1
		}
	default:
		// The connection ended (the host was killed) or the call timed
		// out (the host is stopped): start over on a new connection.
		w.drop(i)
	}
	return fmt.Errorf("%s: %w", method, err)
}

// snapshot returns the echoes received so far and the acknowledgement
// count.
func (w *worker) snapshot() (acked map[string]bool, acks int, last time.Time, lastErr error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	acked = make(map[string]bool, len(w.acked))
	for k := range w.acked {
		acked[k] = true
	}
	return acked, w.acks, w.lastAck, w.lastErr
}
