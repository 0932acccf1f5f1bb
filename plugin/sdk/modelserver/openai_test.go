package modelserver_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/plugin/sdk/modelserver"
)

func TestOpenAITextStreamsInManyDeltas(t *testing.T) {
	text := "Hello from the scripted server."
	srv := start(t, modelserver.Reply{Text: text, Usage: modelserver.Usage{InputTokens: 40, CacheReadTokens: 10, OutputTokens: 7, ReasoningTokens: 2}})
	evs, err := readEvents(t, post(t, ctxT(t), client(t), srv.OpenAIBaseURL()+"/responses", openaiBody("say hello")).Body)
	if err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	var deltas int
	for i, e := range evs {
		if e.data["sequence_number"] != float64(i) {
			t.Errorf("event %d has sequence_number %v", i, e.data["sequence_number"])
		}
		if e.name == "response.output_text.delta" {
			deltas++
			got.WriteString(e.data["delta"].(string))
		}
	}
	if got.String() != text || deltas < 10 {
		t.Errorf("text %q in %d deltas", got.String(), deltas)
	}
	n := names(evs)
	if n[0] != "response.created" || n[len(n)-1] != "response.completed" {
		t.Errorf("events %v", n)
	}
	for _, want := range []string{"response.output_item.added", "response.content_part.added", "response.output_text.done", "response.output_item.done"} {
		if !slices.Contains(n, want) {
			t.Errorf("no %s in %v", want, n)
		}
	}
	done := evs[len(evs)-1].data
	if field(done, "response", "status") != "completed" || field(done, "response", "usage", "input_tokens") != 50.0 ||
		field(done, "response", "usage", "input_tokens_details", "cached_tokens") != 10.0 ||
		field(done, "response", "usage", "output_tokens") != 7.0 ||
		field(done, "response", "usage", "output_tokens_details", "reasoning_tokens") != 2.0 ||
		field(done, "response", "model") != "gpt-test" {
		t.Errorf("response.completed %v", done)
	}
	r := srv.Requests()[0]
	if r.API != modelserver.OpenAI || r.Kind != modelserver.Turn || r.Model != "gpt-test" || r.System != "be brief" ||
		r.LastUserText() != "say hello" || !slices.Equal(r.Tools, []string{"exec_command", "apply_patch", "web_search"}) {
		t.Errorf("recorded %+v", r)
	}
}

func TestOpenAIReasoningFunctionAndCustomToolCalls(t *testing.T) {
	args := `{"cmd":"echo hi"}`
	patch := "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch\n"
	srv := start(t, modelserver.Reply{Thinking: "Plan it.", Tools: []modelserver.ToolCall{
		{Name: "exec_command", Input: args},
		{ID: "call_patch", Name: "apply_patch", Input: patch, Custom: true},
	}})
	c, ctx := client(t), ctxT(t)
	evs, err := readEvents(t, post(t, ctx, c, srv.OpenAIBaseURL()+"/responses", openaiBody("go")).Body)
	if err != nil {
		t.Fatal(err)
	}
	var reasoning, fargs, cinput string
	var doneItems []map[string]any
	for _, e := range evs {
		switch e.name {
		case "response.reasoning_summary_text.delta":
			reasoning += e.data["delta"].(string)
		case "response.function_call_arguments.delta":
			fargs += e.data["delta"].(string)
		case "response.custom_tool_call_input.delta":
			cinput += e.data["delta"].(string)
		case "response.output_item.done":
			doneItems = append(doneItems, e.data["item"].(map[string]any))
		}
	}
	if reasoning != "Plan it." || fargs != args || cinput != patch {
		t.Errorf("reasoning %q, arguments %q, custom input %q", reasoning, fargs, cinput)
	}
	if len(doneItems) != 3 || doneItems[0]["type"] != "reasoning" || doneItems[1]["type"] != "function_call" ||
		doneItems[1]["name"] != "exec_command" || doneItems[1]["arguments"] != args ||
		!strings.HasPrefix(doneItems[1]["call_id"].(string), "call_") ||
		doneItems[2]["type"] != "custom_tool_call" || doneItems[2]["call_id"] != "call_patch" || doneItems[2]["input"] != patch {
		t.Errorf("items %v", doneItems)
	}
	if out := field(evs[len(evs)-1].data, "response", "output").([]any); len(out) != 3 {
		t.Errorf("response.completed output %v", out)
	}

	// The next request as codex sends it: the calls and their outputs as
	// input items, tools inside an additional_tools item.
	callID := doneItems[1]["call_id"].(string)
	next := openaiBody("go")
	delete(next, "tools")
	next["input"] = append([]any{map[string]any{"type": "additional_tools", "role": "developer",
		"tools": []any{map[string]any{"type": "namespace", "name": "functions", "tools": []any{map[string]any{"type": "custom", "name": "exec"}}}}}},
		append(next["input"].([]any),
			doneItems[0],
			map[string]any{"type": "function_call", "call_id": callID, "name": "exec_command", "arguments": args},
			map[string]any{"type": "function_call_output", "call_id": callID, "output": "hi\n"},
			map[string]any{"type": "custom_tool_call", "call_id": "call_patch", "name": "apply_patch", "input": patch},
			map[string]any{"type": "custom_tool_call_output", "call_id": "call_patch", "output": []any{map[string]any{"type": "input_text", "text": "Success"}}},
		)...)
	resp := post(t, ctx, c, srv.OpenAIBaseURL()+"/responses", next)
	var body map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != 400 {
		t.Fatalf("exhausted script: %d %v %v", resp.StatusCode, body, err)
	}
	r := srv.Requests()[1]
	calls, results := r.ToolCalls(), r.ToolResults()
	if len(calls) != 2 || calls[0].ToolName != "exec_command" || calls[0].Input != args || calls[1].Input != patch {
		t.Errorf("calls %+v", calls)
	}
	if len(results) != 2 || results[0].ToolID != callID || results[0].Text != "hi\n" || results[1].Text != "Success" {
		t.Errorf("results %+v", results)
	}
	if !slices.Equal(r.Tools, []string{"exec"}) || r.Messages[2].Parts[0].Type != modelserver.ThinkingPart {
		t.Errorf("tools %v, messages %+v", r.Tools, r.Messages)
	}
}

func TestOpenAIStringInput(t *testing.T) {
	srv := start(t, modelserver.Text("ok"))
	resp := post(t, ctxT(t), client(t), srv.OpenAIBaseURL()+"/responses", map[string]any{"model": "m", "input": "plain prompt"})
	var body map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if body["object"] != "response" || body["status"] != "completed" {
		t.Errorf("non-streaming response %v", body)
	}
	if got := srv.Requests()[0].LastUserText(); got != "plain prompt" {
		t.Errorf("user text %q", got)
	}
}
