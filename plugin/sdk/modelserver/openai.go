package modelserver

import (
	"encoding/json"
	"maps"
	"net/http"
	"strings"
	"time"
)

// openaiBody is what the server reads of a Responses API request.
type openaiBody struct {
	Model        string          `json:"model"`
	Stream       bool            `json:"stream"`
	Instructions string          `json:"instructions"`
	Input        json.RawMessage `json:"input"`
	Tools        json.RawMessage `json:"tools"`
}

type openaiItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Input     string          `json:"input"`
	Output    json.RawMessage `json:"output"`
	Summary   json.RawMessage `json:"summary"`
	Tools     json.RawMessage `json:"tools"`
}

// toolNames lists the names of a tools array, descending into namespaces.
func toolNames(raw json.RawMessage) []string {
	var tools []struct {
		Type  string          `json:"type"`
		Name  string          `json:"name"`
		Tools json.RawMessage `json:"tools"`
	}
	if json.Unmarshal(raw, &tools) != nil {
		return nil
	}
	var out []string
	for _, t := range tools {
		switch {
		case t.Type == "namespace":
			out = append(out, toolNames(t.Tools)...)
		case t.Name != "":
			out = append(out, t.Name)
		case t.Type != "":
			out = append(out, t.Type) // web_search and other hosted tools
		}
	}
	return out
}

// decodeOpenAI fills req's model fields from a Responses API body.
func decodeOpenAI(req *Request) error {
	var b openaiBody
	if err := json.Unmarshal(req.Body, &b); err != nil {
		return err
	}
	req.API, req.Model, req.Stream, req.System = OpenAI, b.Model, b.Stream, b.Instructions
	req.Tools = toolNames(b.Tools)
	var s string
	if json.Unmarshal(b.Input, &s) == nil {
		req.Messages = []Message{{Role: "user", Parts: []Part{{Type: TextPart, Text: s, Raw: b.Input}}}}
		return nil
	}
	var raws []json.RawMessage
	_ = json.Unmarshal(b.Input, &raws)
	for _, raw := range raws {
		var it openaiItem
		_ = json.Unmarshal(raw, &it)
		p := Part{Raw: raw}
		role := it.Role
		switch it.Type {
		case "message", "":
			p.Type, p.Text = TextPart, textOf(it.Content)
		case "reasoning":
			p.Type, p.Text, role = ThinkingPart, textOf(it.Summary), "assistant"
		case "function_call":
			p.Type, p.ToolID, p.ToolName, p.Input, role = ToolCallPart, it.CallID, it.Name, it.Arguments, "assistant"
		case "custom_tool_call":
			p.Type, p.ToolID, p.ToolName, p.Input, role = ToolCallPart, it.CallID, it.Name, it.Input, "assistant"
		case "function_call_output", "custom_tool_call_output":
			p.Type, p.ToolID, p.Text, role = ToolResultPart, it.CallID, textOf(it.Output), "tool"
		case "additional_tools":
			req.Tools = append(req.Tools, toolNames(it.Tools)...)
			p.Type = OtherPart
		default:
			p.Type = OtherPart
		}
		req.Messages = append(req.Messages, Message{Role: role, Parts: []Part{p}})
	}
	return nil
}

// openaiError answers with the Responses API's error body.
func openaiError(w http.ResponseWriter, status int, message string) {
	typ, code := "server_error", "server_error"
	switch {
	case status == 401:
		typ, code = "invalid_request_error", "invalid_api_key"
	case status == 429:
		typ, code = "requests", "rate_limit_exceeded"
	case status == 529 || status == 503:
		typ, code = "server_error", "server_is_overloaded"
	case status < 500:
		typ, code = "invalid_request_error", "invalid_request_error"
	}
	if message == "" && status == 401 {
		message = "Incorrect API key provided"
	}
	if message == "" {
		message = defaultMessage(status)
	}
	writeJSON(w, status, map[string]any{
		"error": map[string]any{"message": message, "type": typ, "param": nil, "code": code},
	})
}

// openaiAPI is the Responses API for serveModel.
func (s *Server) openaiAPI() wireAPI {
	return wireAPI{
		decode:   decodeOpenAI,
		fail:     openaiError,
		idHeader: "X-Request-Id",
		answer: func(req *Request, reply Reply) answer {
			return s.openaiResponse(req, reply)
		},
	}
}

// openaiResponse is one reply as a Responses API response.
type openaiResponse struct {
	id, model string
	created   int64
	reply     Reply
	usage     Usage
	itemIDs   []string // reasoning, message, then one per tool call (only those present)
	callIDs   []string
}

func (s *Server) openaiResponse(req *Request, reply Reply) *openaiResponse {
	o := &openaiResponse{
		id:      s.newID("resp_"),
		model:   req.Model,
		created: time.Now().Unix(),
		reply:   reply,
		usage:   reply.usageFor(len(req.Body)),
	}
	if reply.Thinking != "" {
		o.itemIDs = append(o.itemIDs, s.newID("rs_"))
	}
	if reply.Text != "" {
		o.itemIDs = append(o.itemIDs, s.newID("msg_"))
	}
	for _, tc := range reply.Tools {
		prefix := "fc_"
		if tc.Custom {
			prefix = "ctc_"
		}
		o.itemIDs = append(o.itemIDs, s.newID(prefix))
		id := tc.ID
		if id == "" {
			id = s.newID("call_")
		}
		o.callIDs = append(o.callIDs, id)
	}
	return o
}

func (o *openaiResponse) full() any { return o.object("completed", o.items(), true) }

func (o *openaiResponse) object(status string, output []map[string]any, withUsage bool) map[string]any {
	resp := map[string]any{
		"id": o.id, "object": "response", "created_at": o.created, "status": status,
		"model": o.model, "output": output,
	}
	if withUsage {
		u := o.usage
		resp["usage"] = map[string]any{
			"input_tokens":          u.InputTokens + u.CacheReadTokens,
			"input_tokens_details":  map[string]any{"cached_tokens": u.CacheReadTokens},
			"output_tokens":         u.OutputTokens,
			"output_tokens_details": map[string]any{"reasoning_tokens": u.ReasoningTokens},
			"total_tokens":          u.InputTokens + u.CacheReadTokens + u.OutputTokens,
		}
	}
	return resp
}

// items are the response's output items, complete, in itemIDs order.
func (o *openaiResponse) items() []map[string]any {
	var out []map[string]any
	i := 0
	if o.reply.Thinking != "" {
		out = append(out, map[string]any{"id": o.itemIDs[i], "type": "reasoning",
			"summary":           []any{map[string]any{"type": "summary_text", "text": o.reply.Thinking}},
			"encrypted_content": "modelserver-reasoning-" + o.itemIDs[i]})
		i++
	}
	if o.reply.Text != "" {
		out = append(out, map[string]any{"id": o.itemIDs[i], "type": "message", "status": "completed", "role": "assistant",
			"content": []any{map[string]any{"type": "output_text", "text": o.reply.Text, "annotations": []any{}}}})
		i++
	}
	for k, tc := range o.reply.Tools {
		item := map[string]any{"id": o.itemIDs[i], "status": "completed", "call_id": o.callIDs[k], "name": tc.Name}
		if tc.Custom {
			item["type"], item["input"] = "custom_tool_call", tc.Input
		} else {
			item["type"], item["arguments"] = "function_call", tc.inputJSON()
		}
		out = append(out, item)
		i++
	}
	return out
}

// stream writes the response as Responses API events.
func (o *openaiResponse) stream(s *sse) error {
	ev := func(typ string, fields map[string]any) map[string]any {
		fields["type"] = typ
		fields["sequence_number"] = s.seq
		s.seq++
		return fields
	}
	send := func(typ string, fields map[string]any) error { return s.event(typ, ev(typ, fields)) }
	deltas := func(typ string, text string, fields map[string]any) error {
		for _, c := range chunks(text, o.reply.ChunkSize) {
			if err := s.delta(typ, ev(typ, merge(fields, map[string]any{"delta": c}))); err != nil {
				return err
			}
		}
		return nil
	}
	if err := send("response.created", map[string]any{"response": o.object("in_progress", []map[string]any{}, false)}); err != nil {
		return err
	}
	if err := send("response.in_progress", map[string]any{"response": o.object("in_progress", []map[string]any{}, false)}); err != nil {
		return err
	}
	items := o.items()
	for idx, done := range items {
		id := done["id"]
		at := map[string]any{"item_id": id, "output_index": idx}
		added := merge(done, nil)
		var err error
		switch done["type"] {
		case "reasoning":
			added["summary"] = []any{}
			err = o.steps(send, deltas, idx, added, done,
				step{typ: "response.reasoning_summary_part.added", fields: merge(at, map[string]any{"summary_index": 0, "part": map[string]any{"type": "summary_text", "text": ""}})},
				step{"response.reasoning_summary_text.delta", merge(at, map[string]any{"summary_index": 0}), o.reply.Thinking},
				step{typ: "response.reasoning_summary_text.done", fields: merge(at, map[string]any{"summary_index": 0, "text": o.reply.Thinking})},
				step{typ: "response.reasoning_summary_part.done", fields: merge(at, map[string]any{"summary_index": 0, "part": map[string]any{"type": "summary_text", "text": o.reply.Thinking}})},
			)
		case "message":
			added["status"], added["content"] = "in_progress", []any{}
			part := func(text string) map[string]any {
				return map[string]any{"type": "output_text", "text": text, "annotations": []any{}}
			}
			err = o.steps(send, deltas, idx, added, done,
				step{typ: "response.content_part.added", fields: merge(at, map[string]any{"content_index": 0, "part": part("")})},
				step{"response.output_text.delta", merge(at, map[string]any{"content_index": 0, "logprobs": []any{}}), o.reply.Text},
				step{typ: "response.output_text.done", fields: merge(at, map[string]any{"content_index": 0, "text": o.reply.Text, "logprobs": []any{}})},
				step{typ: "response.content_part.done", fields: merge(at, map[string]any{"content_index": 0, "part": part(o.reply.Text)})},
			)
		case "function_call":
			added["status"], added["arguments"] = "in_progress", ""
			args, _ := done["arguments"].(string)
			err = o.steps(send, deltas, idx, added, done,
				step{"response.function_call_arguments.delta", at, args},
				step{typ: "response.function_call_arguments.done", fields: merge(at, map[string]any{"arguments": args})},
			)
		case "custom_tool_call":
			added["status"], added["input"] = "in_progress", ""
			input, _ := done["input"].(string)
			err = o.steps(send, deltas, idx, added, done,
				step{"response.custom_tool_call_input.delta", at, input},
				step{typ: "response.custom_tool_call_input.done", fields: merge(at, map[string]any{"input": input})},
			)
		}
		if err != nil {
			return err
		}
	}
	if err := s.finish(); err != nil {
		return err
	}
	return send("response.completed", map[string]any{"response": o.object("completed", items, true)})
}

// A step is one event of an output item's stream; with text, it is a
// run of delta events carrying text in chunks.
type step struct {
	typ    string
	fields map[string]any
	text   string
}

// steps streams one output item: added, its steps, done.
func (o *openaiResponse) steps(send func(string, map[string]any) error, deltas func(string, string, map[string]any) error,
	idx int, added, done map[string]any, steps ...step) error {
	if err := send("response.output_item.added", map[string]any{"output_index": idx, "item": added}); err != nil {
		return err
	}
	for _, st := range steps {
		var err error
		if strings.HasSuffix(st.typ, ".delta") {
			err = deltas(st.typ, st.text, st.fields)
		} else {
			err = send(st.typ, merge(st.fields, nil))
		}
		if err != nil {
			return err
		}
	}
	return send("response.output_item.done", map[string]any{"output_index": idx, "item": done})
}

// merge returns a new map with a's entries and then b's.
func merge(a, b map[string]any) map[string]any {
	out := make(map[string]any, len(a)+len(b))
	maps.Copy(out, a)
	maps.Copy(out, b)
	return out
}

func (s *Server) serveModels(w http.ResponseWriter, req *Request) {
	req.Kind = Aux
	s.record(req, false)
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []any{}, "models": []any{}})
}
