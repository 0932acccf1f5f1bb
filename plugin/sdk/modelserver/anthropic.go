package modelserver

import (
	"encoding/json"
	"net/http"
	"strings"
)

// anthropicBody is what the server reads of a Messages API request.
type anthropicBody struct {
	Model    string          `json:"model"`
	Stream   bool            `json:"stream"`
	System   json.RawMessage `json:"system"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Tools []struct {
		Name string `json:"name"`
	} `json:"tools"`
}

type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	Thinking  string          `json:"thinking"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

// decodeAnthropic fills req's model fields from a Messages API body.
func decodeAnthropic(req *Request) error {
	var b anthropicBody
	if err := json.Unmarshal(req.Body, &b); err != nil {
		return err
	}
	req.API, req.Model, req.Stream = Anthropic, b.Model, b.Stream
	if len(b.System) > 0 {
		req.System = textOf(b.System)
	}
	for _, t := range b.Tools {
		req.Tools = append(req.Tools, t.Name)
	}
	for _, m := range b.Messages {
		msg := Message{Role: m.Role}
		var s string
		if json.Unmarshal(m.Content, &s) == nil {
			msg.Parts = []Part{{Type: TextPart, Text: s, Raw: m.Content}}
			req.Messages = append(req.Messages, msg)
			continue
		}
		var raws []json.RawMessage
		_ = json.Unmarshal(m.Content, &raws)
		for _, raw := range raws {
			var blk anthropicBlock
			_ = json.Unmarshal(raw, &blk)
			p := Part{Raw: raw}
			switch blk.Type {
			case "text":
				p.Type, p.Text = TextPart, blk.Text
			case "thinking":
				p.Type, p.Text = ThinkingPart, blk.Thinking
			case "tool_use":
				p.Type, p.ToolID, p.ToolName, p.Input = ToolCallPart, blk.ID, blk.Name, string(blk.Input)
			case "tool_result":
				p.Type, p.ToolID, p.Text, p.IsError = ToolResultPart, blk.ToolUseID, textOf(blk.Content), blk.IsError
			default:
				p.Type = OtherPart
			}
			msg.Parts = append(msg.Parts, p)
		}
		req.Messages = append(req.Messages, msg)
	}
	return nil
}

// anthropicError answers with the Messages API's error body.
func anthropicError(w http.ResponseWriter, status int, message string) {
	typ := map[int]string{
		400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
		404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
		500: "api_error", 529: "overloaded_error",
	}[status]
	if typ == "" {
		typ = "api_error"
	}
	if message == "" {
		message = defaultMessage(status)
	}
	writeJSON(w, status, map[string]any{
		"type":  "error",
		"error": map[string]any{"type": typ, "message": message},
	})
}

// defaultMessage is an error message naming the status.
func defaultMessage(status int) string {
	switch status {
	case 529:
		return "Overloaded"
	case 401:
		return "invalid x-api-key"
	}
	if t := http.StatusText(status); t != "" {
		return t
	}
	return "error"
}

// anthropicAPI is the Messages API for serveModel.
func (s *Server) anthropicAPI() wireAPI {
	return wireAPI{
		decode:   decodeAnthropic,
		fail:     anthropicError,
		idHeader: "Request-Id",
		answer: func(req *Request, reply Reply) answer {
			return s.anthropicMessage(req, reply)
		},
	}
}

// anthropicMessage is one reply as a Messages API message.
type anthropicMessage struct {
	id, model, stopReason string
	reply                 Reply
	usage                 Usage
	toolIDs               []string
	signature             string
}

func (s *Server) anthropicMessage(req *Request, reply Reply) *anthropicMessage {
	m := &anthropicMessage{
		id:         s.newID("msg_"),
		model:      req.Model,
		reply:      reply,
		usage:      reply.usageFor(len(req.Body)),
		stopReason: reply.StopReason,
		signature:  "modelserver-signature-" + s.newID("sig_"),
	}
	for _, tc := range reply.Tools {
		id := tc.ID
		if id == "" {
			id = s.newID("toolu_")
		}
		m.toolIDs = append(m.toolIDs, id)
	}
	if m.stopReason == "" {
		m.stopReason = "end_turn"
		if len(reply.Tools) > 0 {
			m.stopReason = "tool_use"
		}
	}
	return m
}

func (m *anthropicMessage) usageJSON() map[string]any {
	return map[string]any{
		"input_tokens":                m.usage.InputTokens,
		"output_tokens":               m.usage.OutputTokens,
		"cache_read_input_tokens":     m.usage.CacheReadTokens,
		"cache_creation_input_tokens": m.usage.CacheWriteTokens,
	}
}

// blocks are the message's content blocks, complete.
func (m *anthropicMessage) blocks() []map[string]any {
	var out []map[string]any
	if m.reply.Thinking != "" {
		out = append(out, map[string]any{"type": "thinking", "thinking": m.reply.Thinking, "signature": m.signature})
	}
	if m.reply.Text != "" {
		out = append(out, map[string]any{"type": "text", "text": m.reply.Text})
	}
	for i, tc := range m.reply.Tools {
		out = append(out, map[string]any{"type": "tool_use", "id": m.toolIDs[i], "name": tc.Name, "input": json.RawMessage(tc.inputJSON())})
	}
	return out
}

// full is the non-streaming response.
func (m *anthropicMessage) full() any {
	return map[string]any{
		"id": m.id, "type": "message", "role": "assistant", "model": m.model,
		"content": m.blocks(), "stop_reason": m.stopReason, "stop_sequence": nil,
		"usage": m.usageJSON(),
	}
}

// stream writes the message as Messages API events.
func (m *anthropicMessage) stream(s *sse) error {
	start := m.usageJSON()
	start["output_tokens"] = 1 // as the API does: the rest comes with message_delta
	if err := s.event("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": m.id, "type": "message", "role": "assistant", "model": m.model,
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil, "usage": start,
	}}); err != nil {
		return err
	}
	if err := s.event("ping", map[string]any{"type": "ping"}); err != nil {
		return err
	}
	chunk := m.reply.ChunkSize
	index := 0
	block := func(start map[string]any, deltaType, field, text string, extra ...map[string]any) error {
		if err := s.event("content_block_start", map[string]any{"type": "content_block_start", "index": index, "content_block": start}); err != nil {
			return err
		}
		for _, c := range chunks(text, chunk) {
			if err := s.delta("content_block_delta", map[string]any{"type": "content_block_delta", "index": index,
				"delta": map[string]any{"type": deltaType, field: c}}); err != nil {
				return err
			}
		}
		for _, d := range extra {
			if err := s.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": index, "delta": d}); err != nil {
				return err
			}
		}
		err := s.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": index})
		index++
		return err
	}
	if m.reply.Thinking != "" {
		if err := block(map[string]any{"type": "thinking", "thinking": "", "signature": ""}, "thinking_delta", "thinking", m.reply.Thinking,
			map[string]any{"type": "signature_delta", "signature": m.signature}); err != nil {
			return err
		}
	}
	if m.reply.Text != "" {
		if err := block(map[string]any{"type": "text", "text": ""}, "text_delta", "text", m.reply.Text); err != nil {
			return err
		}
	}
	for i, tc := range m.reply.Tools {
		start := map[string]any{"type": "tool_use", "id": m.toolIDs[i], "name": tc.Name, "input": map[string]any{}}
		if err := block(start, "input_json_delta", "partial_json", strings.TrimSpace(tc.inputJSON())); err != nil {
			return err
		}
	}
	if err := s.finish(); err != nil {
		return err
	}
	if err := s.event("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": m.stopReason, "stop_sequence": nil},
		"usage": m.usageJSON()}); err != nil {
		return err
	}
	return s.event("message_stop", map[string]any{"type": "message_stop"})
}

func (s *Server) serveCountTokens(w http.ResponseWriter, req *Request) {
	_ = decodeAnthropic(req)
	req.Kind = Aux
	s.record(req, false)
	writeJSON(w, http.StatusOK, map[string]any{"input_tokens": len(req.Body)/4 + 1})
}
