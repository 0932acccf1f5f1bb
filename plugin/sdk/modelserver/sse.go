package modelserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// errStreamEnded ends a stream whose client went away, whose reply was
// stalled until the end, or whose server closed; the handler just returns.
var errStreamEnded = errors.New("modelserver: stream ended")

// sse writes one reply's server-sent events. Deltas are where a reply is
// paced (Delay) and cut (CutAfter).
type sse struct {
	w      http.ResponseWriter
	rc     *http.ResponseController
	ctx    context.Context
	done   <-chan struct{}
	reply  Reply
	deltas int
	seq    int // OpenAI sequence_number
}

func newSSE(w http.ResponseWriter, ctx context.Context, done <-chan struct{}, reply Reply) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return &sse{w: w, rc: http.NewResponseController(w), ctx: ctx, done: done, reply: reply}
}

// event writes one event and flushes it.
func (s *sse) event(name string, data any) error {
	b, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("modelserver: encode %s: %w", name, err)
	}
	if _, err := fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", name, b); err != nil {
		return errStreamEnded
	}
	if err := s.rc.Flush(); err != nil {
		return errStreamEnded
	}
	return nil
}

// delta writes a delta event, after the reply's Delay and unless the
// reply is cut before it.
func (s *sse) delta(name string, data any) error {
	if err := s.cutPoint(); err != nil {
		return err
	}
	if s.reply.Delay > 0 {
		t := time.NewTimer(s.reply.Delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-s.ctx.Done():
			return errStreamEnded
		case <-s.done:
			drop()
		}
	}
	s.deltas++
	return s.event(name, data)
}

// cutPoint applies the reply's Drop or Stall once CutAfter deltas went out.
func (s *sse) cutPoint() error {
	if s.deltas < s.reply.CutAfter {
		return nil
	}
	return s.cut()
}

func (s *sse) cut() error {
	switch s.reply.Cut {
	case Drop:
		drop()
	case Stall:
		waitEnd(s.ctx, s.done)
		return errStreamEnded
	}
	return nil
}

// finish applies a cut that no delta reached (CutAfter at or beyond the
// reply's delta count) before the stream's last events.
func (s *sse) finish() error { return s.cut() }

// drop aborts the response: the server closes the connection without
// ending the chunked body, so the client sees the stream cut.
func drop() { panic(http.ErrAbortHandler) }

// waitEnd waits until the request's context ends or the server closes;
// a close drops the connection, so the client sees the answer cut rather
// than a clean end.
func waitEnd(ctx context.Context, done <-chan struct{}) {
	select {
	case <-ctx.Done():
	case <-done:
		drop()
	}
}

// writeJSON answers with status and v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// setRetryAfter sets the retry headers of a failure reply.
func setRetryAfter(h http.Header, d time.Duration) {
	if d <= 0 {
		return
	}
	secs := int64((d + time.Second - 1) / time.Second)
	h.Set("Retry-After", strconv.FormatInt(secs, 10))
	h.Set("Retry-After-Ms", strconv.FormatInt(d.Milliseconds(), 10))
}
