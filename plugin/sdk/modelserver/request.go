package modelserver

import (
	"encoding/json"
	"net/http"
	"strings"
)

// A Request is one HTTP request the server received, recorded before it
// was answered.
type Request struct {
	// Seq is the request's place in arrival order, from 1.
	Seq int
	// API is which wire format the request used; "" for one the server
	// does not know.
	API API
	// Kind says how the server answered it.
	Kind Kind
	// Reply is the index in the script of the reply it got, or -1.
	Reply int

	Method string
	Path   string // without the query
	Query  string // the raw query: claude sends "beta=true"
	Header http.Header
	Body   []byte // as received (gzip decoded)

	// Model and Stream are the body's model and stream fields.
	Model  string
	Stream bool
	// System is the system prompt: Anthropic's system text blocks, or the
	// Responses API's instructions, joined by newlines.
	System string
	// Messages is the conversation the request carries, decoded from
	// Anthropic's messages or the Responses API's input items.
	Messages []Message
	// Tools are the names of the tools the request offers, those inside
	// OpenAI namespaces and codex's additional_tools items included.
	Tools []string
}

// API is a wire format.
type API string

const (
	// Anthropic is the Messages API, as claude speaks it.
	Anthropic API = "anthropic"
	// OpenAI is the Responses API, as codex speaks it.
	OpenAI API = "openai"
)

// Kind is how the server answered a request.
type Kind int

const (
	// Turn is a model request answered with a scripted reply.
	Turn Kind = iota + 1
	// Exhausted is a model request that found the script empty; it was
	// answered 400 with a message saying so.
	Exhausted
	// Aux is a request answered without the script: count_tokens, the
	// models list.
	Aux
	// Unmatched is a request the server does not know, answered 404.
	Unmatched
)

func (k Kind) String() string {
	switch k {
	case Turn:
		return "turn"
	case Exhausted:
		return "exhausted"
	case Aux:
		return "aux"
	case Unmatched:
		return "unmatched"
	}
	return "unknown"
}

// A Message is one entry of a request's conversation. For the Responses
// API, each input item is one Message: a function call is an "assistant"
// message with one ToolCall part, a function call output a "tool"
// message with one ToolResult part.
type Message struct {
	Role  string
	Parts []Part
}

// A Part is one piece of a Message.
type Part struct {
	Type PartType
	// Text is the text of a TextPart, ThinkingPart or ToolResultPart
	// (the result's text blocks joined by newlines).
	Text string
	// ToolID and ToolName identify a tool call; a result has ToolID only.
	ToolID   string
	ToolName string
	// Input is a tool call's input: JSON, or plain text for a custom call.
	Input string
	// IsError marks a tool result the CLI reported as an error.
	IsError bool
	// Raw is the part as it was sent.
	Raw json.RawMessage
}

// PartType is the kind of a Part.
type PartType string

const (
	TextPart       PartType = "text"
	ThinkingPart   PartType = "thinking"
	ToolCallPart   PartType = "tool_call"
	ToolResultPart PartType = "tool_result"
	// OtherPart is anything else (images, codex's additional_tools…);
	// read its Raw.
	OtherPart PartType = "other"
)

// ToolResults returns every tool result part of the request, in order.
func (r Request) ToolResults() []Part { return r.PartsOf(ToolResultPart) }

// ToolCalls returns every tool call part of the request's history.
func (r Request) ToolCalls() []Part { return r.PartsOf(ToolCallPart) }

// PartsOf returns every part of type t in the request's messages, in order.
func (r Request) PartsOf(t PartType) []Part {
	var out []Part
	for _, m := range r.Messages {
		for _, p := range m.Parts {
			if p.Type == t {
				out = append(out, p)
			}
		}
	}
	return out
}

// LastUserText is the text of the last user message, its text parts
// joined by newlines; claude puts system reminders in the same message,
// so a test usually checks that it contains the prompt.
func (r Request) LastUserText() string {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		m := r.Messages[i]
		if m.Role != "user" {
			continue
		}
		var texts []string
		for _, p := range m.Parts {
			if p.Type == TextPart {
				texts = append(texts, p.Text)
			}
		}
		if len(texts) > 0 {
			return strings.Join(texts, "\n")
		}
	}
	return ""
}

func newRequest(r *http.Request, body []byte) Request {
	return Request{
		Method: r.Method,
		Path:   r.URL.Path,
		Query:  r.URL.RawQuery,
		Header: r.Header.Clone(),
		Body:   body,
	}
}

// textOf decodes content that is a string or an array of blocks with a
// "text" field, joining the texts by newlines.
func textOf(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var blocks []struct {
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &blocks) != nil {
		return ""
	}
	var texts []string
	for _, b := range blocks {
		if b.Text != "" {
			texts = append(texts, b.Text)
		}
	}
	return strings.Join(texts, "\n")
}
