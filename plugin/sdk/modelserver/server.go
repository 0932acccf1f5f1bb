package modelserver

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"
)

// Config configures a Server. The zero value works.
type Config struct {
	// Logger gets every request at debug level and every request the
	// server does not know at warn level. Nil means no logging.
	Logger hclog.Logger
	// MaxBodyBytes caps a recorded request body; zero means 16 MiB. A
	// larger body is answered 413.
	MaxBodyBytes int64
}

// A Server is a scripted model server on a loopback port of its own. It
// is safe for concurrent use.
type Server struct {
	log     hclog.Logger
	maxBody int64
	ln      net.Listener
	http    *http.Server
	done    chan struct{} // closed by Close: every wait ends
	wg      sync.WaitGroup
	once    sync.Once

	mu       sync.Mutex
	closed   bool // set by Close before it waits for the handlers
	script   []Reply
	next     int // index in script of the next reply to hand out
	requests []Request
	changed  chan struct{} // closed and replaced when requests grows
	ids      int
}

// Start opens a listener on 127.0.0.1 (a port of its own) and serves
// until Close.
func Start(cfg Config) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("modelserver: listen on loopback: %w", err)
	}
	s := &Server{
		log:     cfg.Logger,
		maxBody: cfg.MaxBodyBytes,
		ln:      ln,
		done:    make(chan struct{}),
		changed: make(chan struct{}),
	}
	if s.log == nil {
		s.log = hclog.NewNullLogger()
	}
	if s.maxBody <= 0 {
		s.maxBody = 16 << 20
	}
	s.http = &http.Server{
		Handler:  http.HandlerFunc(s.serveHTTP),
		ErrorLog: s.log.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_ = s.http.Serve(ln) // returns ErrServerClosed after Close
	}()
	return s, nil
}

// URL is the server's base URL, http://127.0.0.1:PORT: claude's
// ANTHROPIC_BASE_URL.
func (s *Server) URL() string { return "http://" + s.ln.Addr().String() }

// OpenAIBaseURL is URL + "/v1": the base_url of a codex model provider.
func (s *Server) OpenAIBaseURL() string { return s.URL() + "/v1" }

// Close stops the server: open streams end (stalled and hanging replies
// included), connections close, and Close returns once every handler has
// returned. It is idempotent.
func (s *Server) Close() error {
	var err error
	s.once.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		close(s.done)
		err = s.http.Close()
		s.wg.Wait()
	})
	return err
}

// Script appends replies to the script. Each model request (a streaming
// or non-streaming POST to /v1/messages or /v1/responses) takes the next
// one, whichever API it uses. It refuses the whole call, wrapping
// ErrInvalidReply, if one reply is invalid.
func (s *Server) Script(replies ...Reply) error {
	for i, r := range replies {
		if err := r.validate(); err != nil {
			return fmt.Errorf("reply %d: %w", i, err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script = append(s.script, replies...)
	return nil
}

// Pending is how many scripted replies no request has taken yet.
func (s *Server) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.script) - s.next
}

// Requests returns a copy of every request recorded so far, in arrival
// order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return cloneRequests(s.requests)
}

// ModelRequests returns the recorded requests that asked for a reply
// (Kind Turn or Exhausted), in arrival order.
func (s *Server) ModelRequests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return cloneRequests(modelRequests(s.requests))
}

// WaitModelRequests waits until at least n model requests have been
// recorded and returns them all; it returns early with ctx's error or
// ErrClosed.
func (s *Server) WaitModelRequests(ctx context.Context, n int) ([]Request, error) {
	for {
		s.mu.Lock()
		got := modelRequests(s.requests)
		changed := s.changed
		s.mu.Unlock()
		if len(got) >= n {
			return cloneRequests(got), nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, fmt.Errorf("modelserver: waiting for %d model requests, have %d: %w", n, len(got), ctx.Err())
		case <-s.done:
			return nil, fmt.Errorf("modelserver: waiting for %d model requests, have %d: %w", n, len(got), ErrClosed)
		}
	}
}

// ErrClosed is returned by waits that the server's Close ended.
var ErrClosed = errors.New("modelserver: server closed")

func modelRequests(all []Request) []Request {
	var out []Request
	for _, r := range all {
		if r.Kind == Turn || r.Kind == Exhausted {
			out = append(out, r)
		}
	}
	return out
}

func cloneRequests(rs []Request) []Request {
	out := make([]Request, len(rs))
	copy(out, rs)
	return out
}

// record stores a request and wakes the waiters. For a model request
// (takeReply) it also hands out the next scripted reply; ok is false when
// the script has run out, and the request is then recorded as Exhausted.
func (s *Server) record(req *Request, takeReply bool) (r Reply, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	req.Seq = len(s.requests) + 1
	req.Reply = -1
	if takeReply {
		if s.next < len(s.script) {
			r, ok = s.script[s.next], true
			req.Reply = s.next
			s.next++
		} else {
			req.Kind = Exhausted
		}
	}
	s.requests = append(s.requests, *req)
	close(s.changed)
	s.changed = make(chan struct{})
	return r, ok
}

// newID returns prefix followed by a number unique in this server.
func (s *Server) newID(prefix string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids++
	return fmt.Sprintf("%s%04d", prefix, s.ids)
}

// exhaustedMessage says that the script ran out, for the CLI's error.
func (s *Server) exhaustedMessage(req *Request) string {
	s.mu.Lock()
	n := len(s.script)
	s.mu.Unlock()
	return fmt.Sprintf("modelserver: script exhausted: model request %d (%s %s) has no scripted reply; %d replies were scripted",
		req.Seq, req.Method, req.Path, n)
}

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	// A handler counts itself under mu, so none is added once Close has
	// begun to wait.
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		http.Error(w, "modelserver: closed", http.StatusServiceUnavailable)
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	body, err := readBody(r, s.maxBody)
	req := newRequest(r, body)
	s.log.Debug("request", "method", r.Method, "path", r.URL.Path, "bytes", len(body))
	if err != nil {
		req.Kind = Unmatched
		s.record(&req, false)
		http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
		return
	}
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/messages":
		s.serveModel(w, r, &req, s.anthropicAPI())
	case r.Method == http.MethodPost && r.URL.Path == "/v1/messages/count_tokens":
		s.serveCountTokens(w, &req)
	case r.Method == http.MethodPost && r.URL.Path == "/v1/responses":
		s.serveModel(w, r, &req, s.openaiAPI())
	case r.Method == http.MethodGet && r.URL.Path == "/v1/models":
		s.serveModels(w, &req)
	default:
		req.Kind = Unmatched
		s.record(&req, false)
		s.log.Warn("unmatched request", "method", r.Method, "path", r.URL.Path, "query", r.URL.RawQuery)
		writeJSON(w, http.StatusNotFound, map[string]any{
			"type":  "error",
			"error": map[string]any{"type": "not_found_error", "message": "modelserver: no route for " + r.Method + " " + r.URL.Path},
		})
	}
}

// readBody reads the whole body (gzip-decoded when so encoded), at most
// limit bytes.
func readBody(r *http.Request, limit int64) ([]byte, error) {
	var src io.Reader = r.Body
	if strings.EqualFold(r.Header.Get("Content-Encoding"), "gzip") {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			return nil, fmt.Errorf("modelserver: gzip body: %w", err)
		}
		defer func() { _ = zr.Close() }()
		src = zr
	}
	var buf bytes.Buffer
	n, err := io.Copy(&buf, io.LimitReader(src, limit+1))
	if err != nil {
		return nil, fmt.Errorf("modelserver: read body: %w", err)
	}
	if n > limit {
		return nil, fmt.Errorf("modelserver: body larger than %d bytes", limit)
	}
	return buf.Bytes(), nil
}

// wireAPI is what differs between the two APIs for a model request.
type wireAPI struct {
	decode   func(*Request) error
	fail     func(w http.ResponseWriter, status int, message string)
	idHeader string // the response header carrying a request id
	answer   func(*Request, Reply) answer
}

// answer is one reply in an API's shape.
type answer interface {
	full() any           // the non-streaming response body
	stream(s *sse) error // the streaming response's events
}

// serveModel answers a model request with the next scripted reply.
func (s *Server) serveModel(w http.ResponseWriter, r *http.Request, req *Request, api wireAPI) {
	if err := api.decode(req); err != nil {
		req.Kind = Unmatched
		s.record(req, false)
		api.fail(w, http.StatusBadRequest, "modelserver: cannot decode the request: "+err.Error())
		return
	}
	req.Kind = Turn
	reply, ok := s.record(req, true)
	if !ok {
		api.fail(w, http.StatusBadRequest, s.exhaustedMessage(req))
		return
	}
	w.Header().Set(api.idHeader, s.newID("req_"))
	switch {
	case reply.Cut == Hang:
		waitEnd(r.Context(), s.done)
		return
	case reply.Status != 0:
		setRetryAfter(w.Header(), reply.RetryAfter)
		api.fail(w, reply.Status, reply.Message)
		return
	}
	a := api.answer(req, reply)
	if req.Stream {
		_ = a.stream(newSSE(w, r.Context(), s.done, reply))
		return
	}
	switch reply.Cut {
	case Drop:
		drop()
	case Stall:
		waitEnd(r.Context(), s.done)
		return
	}
	writeJSON(w, http.StatusOK, a.full())
}
