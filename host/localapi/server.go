package localapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	acp "github.com/coder/acp-go-sdk"
	"github.com/hashicorp/go-hclog"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/host"
)

// DefaultMaxRequestBytes bounds one request line.
const DefaultMaxRequestBytes = 4 << 20

// The bounds of one connection (see Server).
const (
	// DefaultMaxSubscriptions: an app subscribes once per session it
	// shows; hundreds are plenty, and each costs a goroutine and a chunk
	// of journal entries read ahead of the socket.
	DefaultMaxSubscriptions = 256
	// DefaultMaxQueuedNotifications: the session/cancel notifications one
	// connection may have waiting to be handled. The protocol library
	// closes a connection whose queue of 1024 overflows, so the bound
	// must stay below that; an editor sends one per user action.
	DefaultMaxQueuedNotifications = 256
	// DefaultMaxRequests: the requests of one connection being served at
	// once (the library serves each in a goroutine of its own); a client
	// runs one prompt per session and a few quick calls.
	DefaultMaxRequests = 1024
	// DefaultMaxQueuedBytes: what a connection's writers may hold
	// marshalled while the client does not read, before new subscriptions
	// are refused.
	DefaultMaxQueuedBytes = 16 << 20
)

// Server serves the local API for one host. The zero value is not usable:
// Host is required.
type Server struct {
	Host *host.Host
	// DefaultAgent runs new sessions whose request names no agent (in
	// _meta.agenthost.agent). Empty: such requests are refused.
	DefaultAgent string
	// Version is reported by initialize and _agenthost/status.
	Version string
	// Agents answers _agenthost/agents, for an embedder that knows where
	// the host's agents come from and when it last looked (the agenthost
	// binary's rescans of its plugins directory and agenthost.json).
	// Default: the host's agent names alone.
	Agents func() api.AgentsResult
	// MaxRequestBytes bounds one request line; a longer one is answered
	// with a JSON-RPC error and skipped. Default: DefaultMaxRequestBytes.
	MaxRequestBytes int
	// Logger receives the server's logs. Default: none.
	Logger hclog.Logger
	// ListPageSize is how many sessions one session/list page holds.
	// Default: api.ListPageSize.
	ListPageSize int
	// MaxSubscriptions bounds the _agenthost/subscribe subscriptions one
	// connection holds together with the sessions it follows (session/new,
	// load, resume); the next is refused with api.CodeOverLimit, a
	// session/new before any plugin starts.
	// Default: DefaultMaxSubscriptions.
	MaxSubscriptions int
	// MaxQueuedBytes bounds the bytes waiting to be written to one
	// connection (messages marshalled, blocked on a client that does not
	// read) above which new subscriptions are refused with
	// api.CodeOverLimit. Default: DefaultMaxQueuedBytes.
	MaxQueuedBytes int
	// MaxQueuedNotifications bounds the notifications from one client
	// waiting to be handled; past it they are dropped, logged, and the
	// client is told with an api.MethodOverLimit notification. Default
	// and most: DefaultMaxQueuedNotifications.
	MaxQueuedNotifications int
	// MaxRequests bounds the requests of one connection being served at
	// once; the next is answered api.CodeOverLimit at once. Default:
	// DefaultMaxRequests.
	MaxRequests int
}

func (s *Server) log() hclog.Logger {
	if s.Logger == nil {
		return hclog.NewNullLogger()
	}
	return s.Logger
}

// Serve accepts connections on ln until ctx ends, then closes ln and every
// connection and waits for them. On a unix socket only peers running as
// this process's user are served. ln closed by the caller ends Serve with
// net.ErrClosed once its connections have ended. An accept that fails for want of a
// resource (descriptors, above all) is retried with backoff, 5 ms doubling
// to 1 s, so the API outlives a shortage; any other accept error ends
// Serve.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		<-ctx.Done()
		_ = ln.Close()
	}()
	var conns sync.WaitGroup
	defer conns.Wait()
	var delay time.Duration
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				// The caller closed ln (a socket replaced by a new one):
				// its connections go on until they end.
				return err
			}
			if !retryAccept(err) {
				// The API is over: a host that stopped accepting must not
				// live on for the clients it still has.
				cancel()
				return err
			}
			// Out of descriptors (or another passing shortage): the API
			// must not end over it, and must not spin. Back off as
			// net/http's Server.Serve does; the connection waits in the
			// listen backlog meanwhile.
			delay = min(max(2*delay, minAcceptDelay), maxAcceptDelay)
			s.log().Warn("accepting a connection failed; retrying", "error", err, "retryIn", delay)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(delay):
			}
			continue
		}
		delay = 0
		if uc, ok := conn.(*net.UnixConn); ok {
			if err := checkPeer(uc); err != nil {
				s.log().Warn("refused a connection", "error", err)
				_ = conn.Close()
				continue
			}
		}
		conns.Go(func() {
			if err := s.ServeConn(ctx, conn); err != nil {
				s.log().Debug("connection ended", "error", err)
			}
		})
	}
}

// The backoff between failed accepts: net/http's.
const (
	minAcceptDelay = 5 * time.Millisecond
	maxAcceptDelay = time.Second
)

// retryAccept tells an accept error that passes (out of descriptors,
// buffers or memory, an aborted or interrupted connection) from the end of
// the listener.
func retryAccept(err error) bool {
	if errors.Is(err, net.ErrClosed) {
		return false
	}
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM,
		syscall.ECONNABORTED, syscall.EINTR, syscall.EAGAIN, syscall.EPROTO} {
		if errors.Is(err, e) {
			return true
		}
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// checkPeer admits only peers running as this process's user (the socket
// is 0600 too; this also holds where file modes do not).
func checkPeer(c *net.UnixConn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var cred *syscall.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if credErr != nil {
		return fmt.Errorf("read peer credentials: %w", credErr)
	}
	if int(cred.Uid) != os.Getuid() {
		return fmt.Errorf("peer pid %d runs as uid %d, this host as uid %d", cred.Pid, cred.Uid, os.Getuid())
	}
	return nil
}

// ServeConn serves one client on rw until it disconnects or ctx ends.
func (s *Server) ServeConn(ctx context.Context, rw io.ReadWriteCloser) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	max := s.MaxRequestBytes
	if max <= 0 {
		max = DefaultMaxRequestBytes
	}
	out := &lockedWriter{w: rw}
	// Requests pass through a filter that answers malformed and oversized
	// lines with JSON-RPC errors itself, so the protocol library only ever
	// sees well-formed JSON lines of bounded size.
	pr, pw := io.Pipe()
	notes := newNoteGate(s.MaxQueuedNotifications)
	reqs := &requestGate{max: int64(s.MaxRequests)}
	if reqs.max <= 0 {
		reqs.max = DefaultMaxRequests
	}
	a := &agent{srv: s, ctx: ctx, out: out, notes: notes, followers: map[string]*follower{}, subs: map[uint64]context.CancelFunc{}}
	// The library's answers pass reqs, which counts them off.
	conn := acp.NewAgentSideConnection(a, answerCounter{out, reqs}, pr)
	conn.SetLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	a.conn = conn
	// Requests start flowing only now: the library's reader runs from
	// the constructor on, and a request handled before a.conn was set
	// (a session/load that replays at once) dereferenced nil and took
	// the host down.
	filterDone := make(chan struct{})
	go func() {
		defer close(filterDone)
		err := filterRequests(rw, pw, out, max, filterGates{notes, reqs}, s.log())
		_ = pw.CloseWithError(err)
	}()
	select {
	case <-conn.Done():
	case <-ctx.Done():
	}
	cancel()
	_ = rw.Close()
	_ = pr.Close()
	<-filterDone
	a.stopFollowers()
	return nil
}

// lockedWriter serialises whole lines from the protocol library and the
// request filter, and counts the bytes waiting to be written.
type lockedWriter struct {
	mu     sync.Mutex
	w      io.Writer
	queued atomic.Int64
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.queued.Add(int64(len(p)))
	defer l.queued.Add(-int64(len(p)))
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// maxSubscriptions and maxQueuedBytes are the connection bounds in force.
func (s *Server) maxSubscriptions() int {
	if s.MaxSubscriptions > 0 {
		return s.MaxSubscriptions
	}
	return DefaultMaxSubscriptions
}

func (s *Server) maxQueuedBytes() int64 {
	if s.MaxQueuedBytes > 0 {
		return int64(s.MaxQueuedBytes)
	}
	return DefaultMaxQueuedBytes
}

// overLimit is the error of a request refused because the connection is
// over one of its bounds.
func overLimit(format string, args ...any) error {
	return &acp.RequestError{Code: api.CodeOverLimit, Message: fmt.Sprintf(format, args...)}
}

type rpcError struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Error   struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func writeError(w io.Writer, id json.RawMessage, code int, msg string) {
	e := rpcError{JSONRPC: "2.0", ID: id}
	if len(e.ID) == 0 {
		e.ID = json.RawMessage("null")
	}
	e.Error.Code, e.Error.Message = code, msg
	b, _ := json.Marshal(e)
	_, _ = w.Write(append(b, '\n'))
}

// filterRequests copies well-formed request lines from r to dst and
// answers the others on out: a line that is not JSON gets a parse error
// (-32700), one that is not a JSON-RPC object an invalid-request error
// (-32600), one without a method that is no response (no result, no
// error) or with an empty method an invalid-request error too, one longer
// than max an invalid-request error naming the limit.
//
// Notifications are bounded too, as the protocol library would close the
// connection without a word when its queue overflows: only session/cancel
// (with params it decodes) and $/cancel_request are forwarded, others are
// dropped here as the library would drop them (ACP ignores unknown
// notifications), and a session/cancel that finds notes full is dropped,
// logged, and told to the client (api.MethodOverLimit).
//
// A request that finds reqs full is answered api.CodeOverLimit here.
func filterRequests(r io.Reader, dst io.Writer, out io.Writer, max int, gates filterGates, log hclog.Logger) error {
	notes, reqs := gates.notes, gates.reqs
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, tooLong, err := readLine(br, max)
		if tooLong {
			writeError(out, nil, api.CodeInvalidRequest, fmt.Sprintf("request too large: the limit is %d bytes", max))
		} else if len(bytes.TrimSpace(line)) > 0 {
			// The probe decodes every member the SDK's envelope types:
			// a line the SDK cannot decode (an "error" of the wrong shape,
			// say) it drops unanswered, so it must be refused here.
			var probe struct {
				JSONRPC string            `json:"jsonrpc"`
				ID      json.RawMessage   `json:"id"`
				Method  *string           `json:"method"`
				Params  json.RawMessage   `json:"params"`
				Result  json.RawMessage   `json:"result"`
				Error   *acp.RequestError `json:"error"`
			}
			switch {
			case !json.Valid(line):
				writeError(out, nil, api.CodeParseError, "parse error: the request is not valid JSON")
			case json.Unmarshal(line, &probe) != nil || probe.JSONRPC != "2.0":
				writeError(out, probe.ID, api.CodeInvalidRequest, `invalid request: expected a JSON-RPC 2.0 object with "jsonrpc":"2.0"`)
			case probe.Method != nil && *probe.Method == "":
				// The SDK takes an id with an empty method for a response
				// and drops it: the client would wait forever.
				writeError(out, probe.ID, api.CodeInvalidRequest, `invalid request: "method" is empty; name the method`)
			case probe.Method == nil && len(probe.Result) == 0 && probe.Error == nil:
				// Neither a request (no method) nor a response (no result,
				// no error): the SDK drops it unanswered.
				writeError(out, probe.ID, api.CodeInvalidRequest, `invalid request: no "method" (a request names one; a response carries "result" or "error")`)
			case probe.Method != nil && (len(probe.ID) == 0 || string(probe.ID) == "null"):
				if notes.admit(*probe.Method, probe.Params, out, log) {
					if _, werr := dst.Write(append(bytes.TrimRight(line, "\r\n"), '\n')); werr != nil {
						return werr
					}
				}
			case probe.Method != nil && !reqs.admit():
				writeError(out, probe.ID, api.CodeOverLimit, fmt.Sprintf("%d requests of this connection are being served, its limit: wait for their answers, then retry", reqs.max))
			default:
				if _, werr := dst.Write(append(bytes.TrimRight(line, "\r\n"), '\n')); werr != nil {
					return werr
				}
			}
		}
		if err != nil {
			return err
		}
	}
}

// readLine reads one line of at most max bytes; a longer line is consumed
// to its end and reported as tooLong.
func readLine(br *bufio.Reader, max int) (line []byte, tooLong bool, err error) {
	var buf []byte
	for {
		chunk, isPrefix, err := br.ReadLine()
		if len(buf)+len(chunk) > max {
			tooLong = true
		}
		if !tooLong {
			buf = append(buf, chunk...)
		}
		if err != nil {
			return buf, tooLong, err
		}
		if !isPrefix {
			return buf, tooLong, nil
		}
	}
}

// errf makes an error whose message reaches the client.
func errf(format string, args ...any) error {
	return acp.NewInvalidParams(api.ErrorData{Error: fmt.Sprintf(format, args...)})
}

// noteGate bounds the notifications of one connection that wait to be
// handled: filterRequests admits them, agent.Cancel releases each once
// handled. Only notifications the agent handles are admitted, so each
// admitted one is released.
type noteGate struct {
	max      int64
	queued   atomic.Int64
	shedding atomic.Bool // the client was told; told again only after room came back
}

func newNoteGate(max int) *noteGate {
	if max <= 0 || max > DefaultMaxQueuedNotifications {
		max = DefaultMaxQueuedNotifications
	}
	return &noteGate{max: int64(max)}
}

// admit says whether the notification is to be handed on to the protocol
// library. A nil gate admits everything (the fuzz tests' filter).
func (g *noteGate) admit(method string, params json.RawMessage, out io.Writer, log hclog.Logger) bool {
	if g == nil {
		return true
	}
	switch method {
	case "$/cancel_request":
		return true // handled as it is read, never queued
	case api.MethodSessionCancel:
	default:
		log.Debug("ignored a notification the host does not take", "method", method)
		return false
	}
	// A cancel the library cannot decode it drops before reaching the
	// agent, which would never release it: dropped here instead.
	var p acp.CancelNotification
	if json.Unmarshal(params, &p) != nil || p.Validate() != nil {
		log.Debug("ignored a session/cancel with bad params", "params", string(params))
		return false
	}
	if g.queued.Add(1) <= g.max {
		g.shedding.Store(false)
		return true
	}
	g.queued.Add(-1)
	log.Warn("dropped a notification: too many wait to be handled", "method", method, "limit", g.max)
	if !g.shedding.Swap(true) {
		msg := fmt.Sprintf("%d notifications of this connection wait to be handled, its limit: %s and the ones after it are dropped until they are; send fewer (one session/cancel per turn is enough)", g.max, method)
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": api.MethodOverLimit,
			"params": api.OverLimitParams{Method: method, Code: api.CodeOverLimit, Message: msg}})
		_, _ = out.Write(append(b, '\n'))
	}
	return false
}

// release ends the wait of one admitted notification.
func (g *noteGate) release() {
	if g != nil {
		g.queued.Add(-1)
	}
}

// filterGates are the bounds filterRequests admits lines through; nil ones
// admit everything.
type filterGates struct {
	notes *noteGate
	reqs  *requestGate
}

// requestGate bounds the requests of one connection being served:
// filterRequests admits each, and answerCounter releases it when the
// library writes its answer (it answers every request it was handed).
type requestGate struct {
	max int64
	n   atomic.Int64
}

func (g *requestGate) admit() bool {
	if g == nil {
		return true
	}
	if g.n.Add(1) <= g.max {
		return true
	}
	g.n.Add(-1)
	return false
}

// answerCounter is the library's writer: each answer it writes releases
// one request of reqs. The filter's own answers bypass it: their requests
// were never admitted.
type answerCounter struct {
	w    io.Writer
	reqs *requestGate
}

func (c answerCounter) Write(p []byte) (int, error) {
	// Released before the write: a client that reads the answer and at
	// once sends its next request must find room for it.
	if isAnswer(p) {
		c.reqs.n.Add(-1)
	}
	return c.w.Write(p)
}

// isAnswer reports whether line, one message as the library marshals it
// (members jsonrpc, id, method, params, result, error in that order,
// empty ones left out), is an answer: an id followed by no method. Only
// the first members are read.
func isAnswer(line []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(line))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return false
	}
	sawID := false
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return false
		}
		switch key {
		case "jsonrpc":
		case "id":
			sawID = true
		default:
			return sawID && key != "method"
		}
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return false
		}
	}
	return sawID
}
