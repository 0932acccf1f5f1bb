package modelserver_test

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/plugin/sdk/modelserver"
)

func TestAnthropicTextStreamsInManyDeltas(t *testing.T) {
	text := "Hello from the scripted server."
	srv := start(t, modelserver.Reply{Text: text, ChunkSize: 2, Usage: modelserver.Usage{InputTokens: 40, OutputTokens: 7, CacheReadTokens: 3}})
	resp := post(t, ctxT(t), client(t), srv.URL()+"/v1/messages?beta=true", anthropicBody(true, "say hello"))
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	evs, err := readEvents(t, resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	var deltas int
	for _, e := range evs {
		if e.name == "content_block_delta" {
			deltas++
			if field(e.data, "delta", "type") != "text_delta" {
				t.Errorf("delta %v", e.data)
			}
			got.WriteString(field(e.data, "delta", "text").(string))
		}
	}
	if got.String() != text || deltas != (len(text)+1)/2 {
		t.Errorf("text %q in %d deltas, want %q in %d", got.String(), deltas, text, (len(text)+1)/2)
	}
	want := []string{"message_start", "ping", "content_block_start"}
	if !slices.Equal(names(evs)[:3], want) {
		t.Errorf("first events %v, want %v", names(evs)[:3], want)
	}
	tail := names(evs)[len(evs)-3:]
	if !slices.Equal(tail, []string{"content_block_stop", "message_delta", "message_stop"}) {
		t.Errorf("last events %v", tail)
	}
	md := evs[len(evs)-2].data
	if field(md, "delta", "stop_reason") != "end_turn" || field(md, "usage", "output_tokens") != 7.0 ||
		field(md, "usage", "input_tokens") != 40.0 || field(md, "usage", "cache_read_input_tokens") != 3.0 {
		t.Errorf("message_delta %v", md)
	}
	if field(evs[0].data, "message", "model") != "claude-test" {
		t.Errorf("message_start %v does not echo the model", evs[0].data)
	}

	reqs := srv.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests recorded", len(reqs))
	}
	r := reqs[0]
	if r.API != modelserver.Anthropic || r.Kind != modelserver.Turn || r.Reply != 0 || r.Seq != 1 ||
		r.Path != "/v1/messages" || r.Query != "beta=true" || r.Model != "claude-test" || !r.Stream ||
		r.System != "be brief" || r.LastUserText() != "say hello" || !slices.Equal(r.Tools, []string{"Bash"}) ||
		r.Header.Get("X-Api-Key") != "test-key" {
		t.Errorf("recorded %+v", r)
	}
	if srv.Pending() != 0 {
		t.Errorf("pending %d", srv.Pending())
	}
}

func TestAnthropicThinkingAndToolUse(t *testing.T) {
	input := `{"command":"echo hi","description":"say hi"}`
	srv := start(t,
		modelserver.Reply{Thinking: "I will run it.", Text: "Running.", Tools: []modelserver.ToolCall{{Name: "Bash", Input: input}}},
		modelserver.Text("done"),
	)
	c, ctx := client(t), ctxT(t)
	evs, err := readEvents(t, post(t, ctx, c, srv.URL()+"/v1/messages", anthropicBody(true, "run")).Body)
	if err != nil {
		t.Fatal(err)
	}
	type block struct {
		typ, id, name string
		deltas        map[string]string // delta type → concatenation
	}
	var blocks []*block
	var stop any
	for _, e := range evs {
		switch e.name {
		case "content_block_start":
			cb := e.data["content_block"].(map[string]any)
			if int(e.data["index"].(float64)) != len(blocks) {
				t.Errorf("block index %v, want %d", e.data["index"], len(blocks))
			}
			b := &block{typ: cb["type"].(string), deltas: map[string]string{}}
			b.id, _ = cb["id"].(string)
			b.name, _ = cb["name"].(string)
			blocks = append(blocks, b)
		case "content_block_delta":
			d := e.data["delta"].(map[string]any)
			typ := d["type"].(string)
			for k, v := range d {
				if k != "type" {
					blocks[len(blocks)-1].deltas[typ] += v.(string)
				}
			}
		case "message_delta":
			stop = field(e.data, "delta", "stop_reason")
		}
	}
	if len(blocks) != 3 || blocks[0].typ != "thinking" || blocks[1].typ != "text" || blocks[2].typ != "tool_use" {
		t.Fatalf("blocks %+v", blocks)
	}
	if blocks[0].deltas["thinking_delta"] != "I will run it." || blocks[0].deltas["signature_delta"] == "" {
		t.Errorf("thinking block %+v", blocks[0])
	}
	if blocks[1].deltas["text_delta"] != "Running." {
		t.Errorf("text block %+v", blocks[1])
	}
	tool := blocks[2]
	if tool.name != "Bash" || !strings.HasPrefix(tool.id, "toolu_") || tool.deltas["input_json_delta"] != input {
		t.Errorf("tool block %+v", tool)
	}
	if stop != "tool_use" {
		t.Errorf("stop_reason %v", stop)
	}

	// The CLI's next request carries the call and its result.
	next := anthropicBody(true, "run")
	next["messages"] = append(next["messages"].([]any),
		map[string]any{"role": "assistant", "content": []any{
			map[string]any{"type": "thinking", "thinking": "I will run it.", "signature": "sig"},
			map[string]any{"type": "tool_use", "id": tool.id, "name": "Bash", "input": json.RawMessage(input)},
		}},
		map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "tool_result", "tool_use_id": tool.id, "content": "hi", "is_error": false},
			map[string]any{"type": "tool_result", "tool_use_id": "other", "content": []any{map[string]any{"type": "text", "text": "denied"}}, "is_error": true},
		}},
	)
	if _, err := readEvents(t, post(t, ctx, c, srv.URL()+"/v1/messages", next).Body); err != nil {
		t.Fatal(err)
	}
	reqs, err := srv.WaitModelRequests(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	r := reqs[1]
	calls, results := r.ToolCalls(), r.ToolResults()
	if len(calls) != 1 || calls[0].ToolID != tool.id || calls[0].ToolName != "Bash" || calls[0].Input != input {
		t.Errorf("tool calls %+v", calls)
	}
	if len(results) != 2 || results[0].ToolID != tool.id || results[0].Text != "hi" || results[0].IsError ||
		results[1].Text != "denied" || !results[1].IsError {
		t.Errorf("tool results %+v", results)
	}
	if r.Messages[1].Parts[0].Type != modelserver.ThinkingPart || r.Messages[1].Parts[0].Text != "I will run it." {
		t.Errorf("thinking part %+v", r.Messages[1].Parts[0])
	}
}

func TestAnthropicNonStreamingAnswersAMessage(t *testing.T) {
	srv := start(t, modelserver.Reply{Text: "a title", Tools: []modelserver.ToolCall{{ID: "toolu_x", Name: "Write", Input: `{"file_path":"a"}`}}})
	resp := post(t, ctxT(t), client(t), srv.URL()+"/v1/messages", anthropicBody(false, "title please"))
	var msg struct {
		Type       string
		StopReason string `json:"stop_reason"`
		Content    []struct {
			Type, Text, ID, Name string
			Input                json.RawMessage
		}
		Usage map[string]int
	}
	if err := json.NewDecoder(resp.Body).Decode(&msg); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || msg.Type != "message" || msg.StopReason != "tool_use" || len(msg.Content) != 2 || msg.Content[0].Text != "a title" ||
		msg.Content[1].ID != "toolu_x" || string(msg.Content[1].Input) != `{"file_path":"a"}` || msg.Usage["output_tokens"] == 0 {
		t.Errorf("status %d, message %+v", resp.StatusCode, msg)
	}
	if r := srv.Requests()[0]; r.Stream || r.Kind != modelserver.Turn {
		t.Errorf("recorded %+v", r)
	}
}

func TestAuxiliaryAndUnknownRequestsDoNotTakeTheScript(t *testing.T) {
	srv := start(t, modelserver.Text("kept"))
	c, ctx := client(t), ctxT(t)
	resp := post(t, ctx, c, srv.URL()+"/v1/messages/count_tokens", anthropicBody(false, "count me"))
	var count map[string]int
	if err := json.NewDecoder(resp.Body).Decode(&count); err != nil || count["input_tokens"] <= 0 {
		t.Errorf("count_tokens: %v %v", count, err)
	}
	resp = post(t, ctx, c, srv.URL()+"/v1/complete", map[string]any{})
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(b), "no route for POST /v1/complete") {
		t.Errorf("unknown route: %d %s", resp.StatusCode, b)
	}
	reqs := srv.Requests()
	if len(reqs) != 2 || reqs[0].Kind != modelserver.Aux || reqs[0].LastUserText() != "count me" || reqs[1].Kind != modelserver.Unmatched || reqs[1].Reply != -1 {
		t.Errorf("recorded %+v", reqs)
	}
	if srv.Pending() != 1 || len(srv.ModelRequests()) != 0 {
		t.Errorf("pending %d, model requests %d", srv.Pending(), len(srv.ModelRequests()))
	}
}
