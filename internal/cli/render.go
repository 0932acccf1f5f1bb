package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	acp "github.com/coder/acp-go-sdk"

	"github.com/agenthost/agenthost/journal"
)

// style colours terminal output; the zero value prints plain text.
type style struct{ on bool }

func styleFor(w io.Writer) style {
	return style{on: isTerminal(w) && os.Getenv("NO_COLOR") == "" && os.Getenv("TERM") != "dumb"}
}

func (s style) wrap(code, text string) string {
	if !s.on || text == "" {
		return text
	}
	return "\x1b[" + code + "m" + text + "\x1b[0m"
}

func (s style) dim(t string) string    { return s.wrap("2", t) }
func (s style) bold(t string) string   { return s.wrap("1", t) }
func (s style) red(t string) string    { return s.wrap("31", t) }
func (s style) green(t string) string  { return s.wrap("32", t) }
func (s style) yellow(t string) string { return s.wrap("33", t) }
func (s style) cyan(t string) string   { return s.wrap("36", t) }

// contentText returns the text of an ACP content block, or "[type]" for a
// block of another type without text.
func contentText(c journal.Content) string {
	if t := c.Text(); t != "" {
		return t
	}
	if typ := c.Type(); typ != "" && typ != "text" {
		return "[" + typ + "]"
	}
	return ""
}

// contentsText joins the texts of a tool call's content blocks.
func contentsText(cs []journal.Content) string {
	var parts []string
	for _, c := range cs {
		if t := contentText(c); t != "" {
			parts = append(parts, t)
		}
	}
	return strings.Join(parts, " ")
}

// firstLine shortens s to its first line, at most n runes.
func firstLine(s string, n int) string {
	s = strings.TrimSpace(s)
	more := false
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s, more = s[:i], true
	}
	if r := []rune(s); len(r) > n {
		s, more = string(r[:n]), true
	}
	if more {
		s += "…"
	}
	return s
}

// renderer prints a turn's updates readably: agent text inline on out,
// tool calls and plans as one-liners, thoughts dimmed (only on a
// terminal). It is safe for concurrent use.
type renderer struct {
	mu      sync.Mutex
	out     io.Writer
	st      style
	midLine bool
	titles  map[string]string // tool call id → title
	spin    *spinner
	// thoughts are shown only when out is a terminal.
	thoughts bool
}

func newRenderer(out io.Writer, spin *spinner) *renderer {
	return &renderer{out: out, st: styleFor(out), titles: map[string]string{}, spin: spin, thoughts: isTerminal(out)}
}

// write prints text, keeping track of whether a line is open.
func (r *renderer) write(text string) {
	if text == "" {
		return
	}
	r.spin.clear()
	io.WriteString(r.out, text)
	r.midLine = !strings.HasSuffix(text, "\n")
}

// line prints a line of its own, ending an open line first.
func (r *renderer) line(text string) {
	if r.midLine {
		r.write("\n")
	}
	r.write(text + "\n")
}

// finish ends an open line.
func (r *renderer) finish() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.midLine {
		r.write("\n")
	}
}

// update renders one ACP update object.
func (r *renderer) update(raw json.RawMessage) {
	up, err := journal.DecodeUpdate(raw)
	if err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.st
	switch u := up.(type) {
	case *journal.Chunk:
		switch u.Kind {
		case journal.KindAgentMessageChunk:
			r.write(contentText(u.Content))
		case journal.KindAgentThoughtChunk:
			if r.thoughts {
				r.write(st.dim(contentText(u.Content)))
			}
		case journal.KindUserMessageChunk:
			// The prompt, echoed from the journal: the user just typed it.
		}
	case *journal.ToolCall:
		r.titles[u.ToolCallID] = u.Title
		kind := ""
		if u.Kind != "" {
			kind = " " + st.dim("["+u.Kind+"]")
		}
		r.line(st.cyan("⚙ "+u.Title) + kind + " " + st.dim(statusWord(u.Status)))
	case *journal.ToolCallUpdate:
		title := r.titles[u.ToolCallID]
		if title == "" {
			title = u.ToolCallID
		}
		text := firstLine(contentsText(u.Content), 80)
		if text != "" {
			text = ": " + text
		}
		r.line(st.dim("  ↳ "+title+" "+statusWord(u.Status)) + text)
	case *journal.Plan:
		r.line(st.bold("Plan:"))
		for _, e := range u.Entries {
			mark := "○"
			switch e.Status {
			case acp.PlanEntryStatusCompleted:
				mark = "●"
			case acp.PlanEntryStatusInProgress:
				mark = "◐"
			}
			r.line("  " + mark + " " + e.Content)
		}
	}
}

func statusWord(s string) string {
	if s == "" {
		return ""
	}
	return strings.ReplaceAll(s, "_", " ")
}

// spinner shows a turning character at the cursor while the agent is
// quiet, on a terminal only. Its frame is followed by a backspace, so the
// next output overwrites it wherever the cursor is; clear erases it.
type spinner struct {
	w    io.Writer
	mu   sync.Mutex
	on   bool // drawn now
	last time.Time
	stop chan struct{}
	done chan struct{}
}

// startSpinner starts a spinner on w if w is a terminal; otherwise it
// returns a spinner that does nothing.
func startSpinner(w io.Writer) *spinner {
	s := &spinner{w: w}
	if !isTerminal(w) {
		return s
	}
	s.stop, s.done, s.last = make(chan struct{}), make(chan struct{}), time.Now()
	go s.run()
	return s
}

var spinnerFrames = []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}

func (s *spinner) run() {
	defer close(s.done)
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-s.stop:
			s.clear()
			return
		case <-t.C:
		}
		s.mu.Lock()
		if time.Since(s.last) > 300*time.Millisecond {
			fmt.Fprint(s.w, spinnerFrames[i%len(spinnerFrames)]+"\b")
			s.on = true
		}
		s.mu.Unlock()
	}
}

// clear erases the frame and restarts the quiet period.
func (s *spinner) clear() {
	if s == nil || s.stop == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.on {
		fmt.Fprint(s.w, " \b")
		s.on = false
	}
	s.last = time.Now()
}

// close stops the spinner and erases it.
func (s *spinner) close() {
	if s == nil || s.stop == nil {
		return
	}
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
}
