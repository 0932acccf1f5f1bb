package modelserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// A Reply is what the server answers to one model request: a streamed
// message made of thinking, text and tool calls, in that order, or a
// failure. The zero Reply is an empty message that ends the turn.
type Reply struct {
	// Thinking is streamed first, as an Anthropic thinking block (with a
	// signature) or an OpenAI reasoning item (as summary text).
	Thinking string
	// Text is streamed as one text block or output message.
	Text string
	// Tools are streamed after the text, one block or item each.
	Tools []ToolCall
	// Usage is reported at the end of the stream. A zero Usage is
	// replaced by a small non-zero estimate (a quarter of the request's
	// and of the reply's bytes), so a client always sees real numbers.
	Usage Usage
	// StopReason overrides the Anthropic stop_reason, which is "tool_use"
	// when Tools is not empty and "end_turn" otherwise.
	StopReason string
	// ChunkSize is how many runes of text, thinking or tool input each
	// delta carries; zero means 3, so even short texts arrive in several
	// deltas.
	ChunkSize int
	// Delay is waited before every delta: a slow stream, for cancel tests.
	Delay time.Duration

	// Status, when not zero, answers the request with this HTTP status
	// and the API's error body instead of a stream: 401, 429, 500, 529…
	Status int
	// Message is the error message of a Status reply; empty means a
	// default naming the status.
	Message string
	// RetryAfter, when not zero, is sent as retry-after (whole seconds,
	// rounded up) and retry-after-ms with a Status reply.
	RetryAfter time.Duration

	// Cut ends the reply early: Drop closes the connection and Stall
	// stops sending (but holds the connection) once CutAfter deltas have
	// been sent; Hang never answers at all, not even the status line.
	Cut Cut
	// CutAfter is how many deltas Drop and Stall let through first.
	CutAfter int
}

// A Cut is how a reply ends early.
type Cut int

const (
	// NoCut sends the whole reply.
	NoCut Cut = iota
	// Drop closes the connection mid-stream, without the stream's end.
	Drop
	// Stall stops sending mid-stream and holds the connection open until
	// the request's context ends or the server is closed.
	Stall
	// Hang never answers: no status line, no headers, until the request's
	// context ends or the server is closed.
	Hang
)

// A ToolCall is one tool call in a reply.
type ToolCall struct {
	// ID is the call's id (Anthropic tool_use id, OpenAI call_id); empty
	// means one is generated ("toolu_0001", "call_0001"…).
	ID string
	// Name is the tool's name as the CLI offered it: claude's "Bash",
	// "Write", "Edit"; codex's "exec_command", or "exec" and
	// "apply_patch" as custom tools.
	Name string
	// Input is the call's input: a JSON object for a function tool, the
	// raw text for a Custom one.
	Input string
	// Custom makes it an OpenAI custom (freeform) tool call, whose input
	// is plain text, as codex's apply_patch and code-mode exec tools are.
	// The Anthropic API has no such calls; it streams Input as JSON.
	Custom bool
}

// Usage is the token accounting a reply reports.
type Usage struct {
	InputTokens      int
	OutputTokens     int
	CacheReadTokens  int
	CacheWriteTokens int
	ReasoningTokens  int
}

// Text is a reply that streams s and ends the turn.
func Text(s string) Reply { return Reply{Text: s} }

// Tool is a reply that calls one function tool with a JSON input.
func Tool(name, input string) Reply {
	return Reply{Tools: []ToolCall{{Name: name, Input: input}}}
}

// Failure is a reply that answers with an HTTP error status.
func Failure(status int, message string) Reply {
	return Reply{Status: status, Message: message}
}

// Repeat returns n copies of r, for a failure the CLI retries several
// times before it gives up.
func Repeat(n int, r Reply) []Reply {
	out := make([]Reply, n)
	for i := range out {
		out[i] = r
	}
	return out
}

// ErrInvalidReply is wrapped by Script's error for a reply it refuses.
var ErrInvalidReply = errors.New("modelserver: invalid reply")

func (r Reply) validate() error {
	switch {
	case r.ChunkSize < 0, r.Delay < 0, r.CutAfter < 0, r.RetryAfter < 0:
		return fmt.Errorf("%w: negative ChunkSize, Delay, CutAfter or RetryAfter", ErrInvalidReply)
	case r.Status != 0 && (r.Status < 400 || r.Status > 599):
		return fmt.Errorf("%w: status %d is not an HTTP error", ErrInvalidReply, r.Status)
	case r.Cut < NoCut || r.Cut > Hang:
		return fmt.Errorf("%w: unknown cut %d", ErrInvalidReply, r.Cut)
	}
	for _, tc := range r.Tools {
		if tc.Name == "" {
			return fmt.Errorf("%w: a tool call has no name", ErrInvalidReply)
		}
		if tc.Custom {
			continue
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal([]byte(tc.inputJSON()), &obj); err != nil {
			return fmt.Errorf("%w: tool %s: input is not a JSON object: %w", ErrInvalidReply, tc.Name, err)
		}
	}
	return nil
}

// inputJSON is the call's input as a JSON object; an empty input is {}.
func (tc ToolCall) inputJSON() string {
	if tc.Input == "" {
		return "{}"
	}
	return tc.Input
}

// chunks splits s into pieces of n runes (the last may be shorter).
func chunks(s string, n int) []string {
	if n <= 0 {
		n = 3
	}
	var out []string
	runes := []rune(s)
	for len(runes) > 0 {
		k := min(n, len(runes))
		out = append(out, string(runes[:k]))
		runes = runes[k:]
	}
	return out
}

// usageFor is the reply's usage, or the estimate for a zero one.
func (r Reply) usageFor(requestBytes int) Usage {
	if r.Usage != (Usage{}) {
		return r.Usage
	}
	out := len(r.Thinking) + len(r.Text)
	for _, tc := range r.Tools {
		out += len(tc.Name) + len(tc.Input)
	}
	return Usage{InputTokens: requestBytes/4 + 1, OutputTokens: out/4 + 1}
}
