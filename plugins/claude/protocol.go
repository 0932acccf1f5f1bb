package claude

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
)

// This file holds the shapes of Claude Code's stream-json protocol (claude
// 2.1.332) that the plugin reads and writes. Decoding is lenient: unknown
// fields and unknown message types are ignored, and a field whose JSON type
// changed in a newer CLI is skipped rather than failing the whole line.

// message is one line of the CLI's stdout. Only the fields the plugin uses
// are declared; which are set depends on Type.
type message struct {
	Type      string `json:"type"`
	Subtype   string `json:"subtype"`
	SessionID string `json:"session_id"`
	UUID      string `json:"uuid"`

	// system/init.
	Model             string `json:"model"`
	ClaudeCodeVersion string `json:"claude_code_version"`
	APIKeySource      string `json:"apiKeySource"`
	PermissionMode    string `json:"permissionMode"`

	// assistant and user.
	Message         *apiMessage `json:"message"`
	ParentToolUseID string      `json:"parent_tool_use_id"`
	// Error is set on a synthetic assistant message that reports a failed
	// API call, e.g. "authentication_failed".
	Error             string `json:"error"`
	IsAPIErrorMessage bool   `json:"is_api_error_message"`

	// result.
	IsError        bool     `json:"is_error"`
	Result         string   `json:"result"`
	Errors         []string `json:"errors"`
	StopReason     string   `json:"stop_reason"`
	TerminalReason string   `json:"terminal_reason"`
	TotalCostUSD   float64  `json:"total_cost_usd"`
	Usage          *usage   `json:"usage"`
	// ModelUsage is keyed by model name; each names its context window.
	ModelUsage map[string]modelUsage `json:"modelUsage"`
	NumTurns   int                   `json:"num_turns"`

	// control_request, control_cancel_request (CLI → plugin).
	RequestID string          `json:"request_id"`
	Request   json.RawMessage `json:"request"`
	// control_response (CLI → plugin).
	Response *controlResponse `json:"response"`
}

// apiMessage is the Anthropic Messages API message inside an assistant or
// user line.
type apiMessage struct {
	ID         string `json:"id"`
	Role       string `json:"role"`
	Model      string `json:"model"`
	StopReason string `json:"stop_reason"`
	// Content is a string (user turns) or an array of content blocks.
	Content json.RawMessage `json:"content"`
}

// blocks returns the message's content blocks; string content is one text
// block.
func (m *apiMessage) blocks() []contentBlock {
	if m == nil {
		return nil
	}
	c := bytes.TrimSpace(m.Content)
	if len(c) == 0 {
		return nil
	}
	if c[0] == '"' {
		var s string
		if json.Unmarshal(c, &s) != nil {
			return nil
		}
		return []contentBlock{{Type: "text", Text: s}}
	}
	var out []contentBlock
	if err := json.Unmarshal(c, &out); err != nil && !isTypeError(err) {
		return nil
	}
	return out
}

// contentBlock is an Anthropic content block: text, thinking, tool_use,
// tool_result, or one the plugin does not know.
type contentBlock struct {
	Type string `json:"type"`
	// text.
	Text string `json:"text"`
	// thinking.
	Thinking string `json:"thinking"`
	// tool_use (and server_tool_use).
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
	// tool_result.
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

// resultText returns the text of a tool_result's content, which is a string
// or an array of content blocks.
func (b contentBlock) resultText() string {
	c := bytes.TrimSpace(b.Content)
	if len(c) == 0 {
		return ""
	}
	if c[0] == '"' {
		var s string
		_ = json.Unmarshal(c, &s)
		return s
	}
	var parts []contentBlock
	if err := json.Unmarshal(c, &parts); err != nil && !isTypeError(err) {
		return ""
	}
	var texts []string
	for _, p := range parts {
		if p.Type == "text" {
			texts = append(texts, p.Text)
		}
	}
	return strings.Join(texts, "\n")
}

// usage is the token usage of a result.
type usage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	OutputTokensDetails      *struct {
		ThinkingTokens int64 `json:"thinking_tokens"`
	} `json:"output_tokens_details"`
}

// modelUsage is one model's entry in a result's modelUsage.
type modelUsage struct {
	ContextWindow int64 `json:"contextWindow"`
}

// controlResponse is the body of a control_response line.
type controlResponse struct {
	Subtype   string          `json:"subtype"` // success or error
	RequestID string          `json:"request_id"`
	Response  json.RawMessage `json:"response"`
	Error     string          `json:"error"`
}

// controlRequest is the body of a control_request from the CLI. Only
// can_use_tool is answered with substance; the plugin registers no hooks and
// no SDK MCP servers, so hook_callback and mcp_message never come.
type controlRequest struct {
	Subtype               string          `json:"subtype"`
	ToolName              string          `json:"tool_name"`
	Input                 json.RawMessage `json:"input"`
	PermissionSuggestions json.RawMessage `json:"permission_suggestions"`
	ToolUseID             string          `json:"tool_use_id"`
	Title                 string          `json:"title"`
	DisplayName           string          `json:"display_name"`
	Description           string          `json:"description"`
	BlockedPath           string          `json:"blocked_path"`
	DecisionReason        string          `json:"decision_reason"`
}

// errNotJSON reports a stdout line that is not a JSON object; such lines
// (e.g. "[SandboxDebug] …") are skipped.
var errNotJSON = errors.New("not a JSON object")

// decodeLine decodes one stdout line. It returns errNotJSON for a line that
// does not start with '{' (blank lines included), and a syntax error for a
// line that starts like an object but is not valid JSON. A field whose JSON
// type does not match what the plugin expects is left empty: newer CLIs may
// change shapes the plugin does not depend on.
func decodeLine(line []byte) (*message, error) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' {
		return nil, errNotJSON
	}
	var m message
	if err := json.Unmarshal(line, &m); err != nil && !isTypeError(err) {
		return nil, err
	}
	return &m, nil
}

// isTypeError reports whether err only says a value had an unexpected JSON
// type, in which case encoding/json has decoded everything else.
func isTypeError(err error) bool {
	var te *json.UnmarshalTypeError
	return errors.As(err, &te)
}

// Lines the plugin writes to the CLI's stdin.

// userLine is a user turn, exactly as the official SDKs send it.
type userLine struct {
	Type            string      `json:"type"` // "user"
	Message         userMessage `json:"message"`
	ParentToolUseID *string     `json:"parent_tool_use_id"` // always null
	SessionID       string      `json:"session_id"`         // "default"; ignored by the CLI
}

type userMessage struct {
	Role string `json:"role"` // "user"
	// Content is a string, or an array of Anthropic content blocks when the
	// prompt holds more than text.
	Content any `json:"content"`
}

// controlRequestLine is a control request from the plugin (initialize,
// interrupt).
type controlRequestLine struct {
	Type      string         `json:"type"` // "control_request"
	RequestID string         `json:"request_id"`
	Request   map[string]any `json:"request"`
}

// controlResponseLine answers a control request from the CLI.
type controlResponseLine struct {
	Type     string              `json:"type"` // "control_response"
	Response controlResponseBody `json:"response"`
}

type controlResponseBody struct {
	Subtype   string `json:"subtype"` // success or error
	RequestID string `json:"request_id"`
	Response  any    `json:"response,omitempty"`
	Error     string `json:"error,omitempty"`
}

func successResponse(requestID string, response any) controlResponseLine {
	return controlResponseLine{Type: "control_response", Response: controlResponseBody{Subtype: "success", RequestID: requestID, Response: response}}
}

func errorResponse(requestID, msg string) controlResponseLine {
	return controlResponseLine{Type: "control_response", Response: controlResponseBody{Subtype: "error", RequestID: requestID, Error: msg}}
}

// permissionAllow and permissionDeny are the answers to can_use_tool.
type permissionAllow struct {
	Behavior           string          `json:"behavior"` // "allow"
	UpdatedInput       json.RawMessage `json:"updatedInput"`
	UpdatedPermissions json.RawMessage `json:"updatedPermissions,omitempty"`
}

type permissionDeny struct {
	Behavior  string `json:"behavior"` // "deny"
	Message   string `json:"message"`
	Interrupt bool   `json:"interrupt,omitempty"`
}
