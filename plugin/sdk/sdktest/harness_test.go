package sdktest

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/examples/scripted/scripted"
	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/plugin/sdk"
)

const wait = 20 * time.Second

func kinds(ups []Update) string {
	var out []string
	for _, u := range ups {
		out = append(out, u.Kind)
	}
	return strings.Join(out, ",")
}

// as returns the agent update u carries as a T, failing the test when it
// carries another.
func as[T journal.SessionUpdate](t *testing.T, u Update) T {
	t.Helper()
	v, ok := u.SessionUpdate().(T)
	if !ok {
		t.Fatalf("update %d is a %s (%T), not a %T", u.Seq, u.Kind, u.SessionUpdate(), v)
	}
	return v
}

// The scripted example agent, driven through every method of the harness.
func TestHarnessDrivesTheScriptedAgent(t *testing.T) {
	h := NewHarness(t, scripted.New)
	ctx := t.Context()

	id, err := h.Identify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if id.SessionID != SessionID || id.Fence != 1 || id.PID != os.Getpid() || id.AgentName != "sdktest" ||
		id.ProtocolVersion != sdk.ProtocolVersion || id.Handle != "" {
		t.Errorf("identity before a session: %+v", id)
	}

	// A readiness failure is the agent's, with its message.
	_, err = h.NewSession(ctx, sdk.NewSessionRequest{Workspace: t.TempDir(), Options: map[string]string{"require_model": "true"}})
	if !errors.Is(err, ErrAgent) || !strings.Contains(err.Error(), "no model configured") {
		t.Fatalf("NewSession without a model: %v, want ErrAgent with the agent's message", err)
	}
	info, err := h.NewSession(ctx, sdk.NewSessionRequest{Workspace: t.TempDir(), Options: map[string]string{"model": "m"}})
	if err != nil || !strings.HasPrefix(info.Handle, "scripted-") || info.Options["model"] != "m" {
		t.Fatalf("NewSession: %+v, %v", info, err)
	}
	if id, _ := h.Identify(ctx); id.Handle != info.Handle || id.AgentVersion != scripted.Version {
		t.Errorf("identity after NewSession: %+v", id)
	}

	ups, stop := h.Run("count 3", wait)
	if stop.StopReason != string(sdk.StopEndTurn) || Messages(ups) != "123" || kinds(ups) != "agent_message_chunk,agent_message_chunk,agent_message_chunk,turn_stopped" {
		t.Errorf("count 3: %s, %s", stop.StopReason, Describe(ups))
	}

	ups, _ = h.Run("tool", wait)
	if got := kinds(ups); got != "tool_call,tool_call_update,tool_call_update,agent_message_chunk,turn_stopped" {
		t.Errorf("tool: %s", Describe(ups))
	} else if c, cu := as[*journal.ToolCall](t, ups[0]), as[*journal.ToolCallUpdate](t, ups[2]); c.Title != "list files" ||
		string(c.RawInput) != `{"command":"ls"}` || cu.Content[0].Text() != "README.md\nmain.go\n" {
		t.Errorf("tool call %+v, update %+v", *c, *cu)
	}

	ups, stop = h.Run("fail broken on purpose", wait)
	if stop.StopReason != string(sdk.StopFailed) || stop.Error != "broken on purpose" {
		t.Errorf("fail: %+v after %s", stop, Describe(ups))
	}

	// A permission request waits for the answer, which is journaled
	// before the agent acts on it.
	turn, err := h.Prompt(ctx, "ask")
	if err != nil {
		t.Fatal(err)
	}
	ups = h.Until(wait, "permission request", func(u Update) bool { return u.Kind == "permission_request" })
	req := as[*journal.PermissionRequest](t, ups[len(ups)-1])
	if len(req.Options) != 2 || req.ToolCall.Title != "write notes.txt" {
		t.Errorf("permission request %+v", *req)
	}
	if err := h.AnswerPermission(ctx, req.RequestID, "allow"); err != nil {
		t.Fatal(err)
	}
	ups, stop = h.Turn(turn, wait)
	if kinds(ups) != "permission_resolved,agent_message_chunk,turn_stopped" || Messages(ups) != "permission: selected allow" ||
		as[*journal.PermissionResolved](t, ups[0]).Outcome.OptionID != "allow" || stop.StopReason != string(sdk.StopEndTurn) {
		t.Errorf("after the answer: %s", Describe(ups))
	}

	// One turn at a time; Cancel ends it as cancelled.
	turn, err = h.Prompt(ctx, "sleep 30s")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Prompt(ctx, "count 1"); !errors.Is(err, ErrBusy) {
		t.Errorf("Prompt during a turn: %v, want ErrBusy", err)
	}
	if err := h.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	if _, stop := h.Turn(turn, wait); stop.StopReason != string(sdk.StopCancelled) {
		t.Errorf("cancelled turn: %+v", stop)
	}

	// A new host attaches at fence 2: the updates go on, none lost or
	// repeated.
	turn, err = h.Prompt(ctx, "count 20 5ms")
	if err != nil {
		t.Fatal(err)
	}
	h.Until(wait, "the first chunk", func(u Update) bool { return u.Kind == "agent_message_chunk" })
	if err := h.Attach(ctx); err != nil {
		t.Fatal(err)
	}
	ups, stop = h.Turn(turn, wait)
	if stop.StopReason != string(sdk.StopEndTurn) || len(ups) != 20 { // chunks 2…20 and the stop
		t.Errorf("the turn across Attach: %s", Describe(ups))
	}
	for i := 1; i < len(ups); i++ {
		if ups[i].Seq != ups[i-1].Seq+1 {
			t.Fatalf("seqs across Attach: %s", Describe(ups))
		}
	}
	if id, _ := h.Identify(ctx); id.Fence != 2 {
		t.Errorf("fence after Attach: %d", id.Fence)
	}

	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Prompt(ctx, "count 1"); !errors.Is(err, ErrClosed) {
		t.Errorf("Prompt after Close: %v, want ErrClosed", err)
	}
}

// A turn still running when the test ends is cancelled and the agent
// closed; goleak (TestMain) checks that nothing is left running.
func TestHarnessCleansUpARunningTurn(t *testing.T) {
	closed := make(chan struct{})
	t.Run("inner", func(t *testing.T) {
		h := NewHarness(t, func(ctx context.Context, env sdk.Environment) (sdk.Agent, error) {
			a, err := scripted.New(ctx, env)
			return closeSignal{a, closed}, err
		})
		if _, err := h.ResumeSession(t.Context(), sdk.ResumeSessionRequest{Workspace: t.TempDir(), Handle: "scripted-x"}); err != nil {
			t.Fatal(err)
		}
		if _, err := h.Prompt(t.Context(), "sleep 1m"); err != nil {
			t.Fatal(err)
		}
	})
	select {
	case <-closed:
	default:
		t.Fatal("the agent was not closed when its test ended")
	}
}

type closeSignal struct {
	sdk.Agent
	closed chan struct{}
}

func (c closeSignal) Close(ctx context.Context) error {
	close(c.closed)
	return c.Agent.(sdk.Closer).Close(ctx)
}

// The factory runs at the first NewSession, in the test's process: an
// agent configured through its environment gets what the test set.
func TestHarnessFactorySeesTheTestsEnvironment(t *testing.T) {
	var seen string
	h := NewHarness(t, func(ctx context.Context, env sdk.Environment) (sdk.Agent, error) {
		seen = os.Getenv("SDKTEST_HARNESS_CLI")
		if env.SessionDir == "" || env.Logger == nil {
			t.Errorf("environment %+v", env)
		}
		return scripted.New(ctx, env)
	}, WithAgentName("configured"))
	t.Setenv("SDKTEST_HARNESS_CLI", "/fake/cli")
	if _, err := h.NewSession(t.Context(), sdk.NewSessionRequest{Workspace: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	if id, _ := h.Identify(t.Context()); seen != "/fake/cli" || id.AgentName != "configured" {
		t.Errorf("the factory saw %q, identity %+v", seen, id)
	}
}

// everyKind emits one update of each kind an agent can produce, and asks
// for a permission.
type everyKind struct{ sdk.UnimplementedAgent }

func (everyKind) NewSession(context.Context, sdk.NewSessionRequest) (sdk.SessionInfo, error) {
	return sdk.SessionInfo{Handle: "h"}, nil
}

var emitted = []sdk.Update{
	{AgentMessage: &sdk.ContentBlock{Type: "text", Text: "hi"}},
	{AgentThought: &sdk.ContentBlock{Type: "text", Text: "hmm"}},
	{UserMessage: &sdk.ContentBlock{Type: "image", JSON: `{"type":"image","data":"AA=="}`}},
	{ToolCall: &sdk.ToolCall{ToolCallID: "t1", Title: "read", Kind: "read", Status: "pending", RawInputJSON: `{"path":"a"}`}},
	{ToolCallUpdate: &sdk.ToolCallUpdate{ToolCallID: "t1", Status: "completed",
		Content: []sdk.ContentBlock{{Type: "text", Text: "done"}}, RawOutputJSON: `{"ok":true}`}},
	{Plan: []sdk.PlanEntry{{Content: "step", Priority: "high", Status: "pending"}}},
	{Plan: []sdk.PlanEntry{}},
	{Usage: &sdk.Usage{InputTokens: 1, OutputTokens: 2, CachedInputTokens: 3, ReasoningTokens: 4, CostUSD: 0.5,
		ContextTokens: 6, ContextWindow: 7}},
	{HandleChanged: &sdk.HandleChanged{Handle: "h2", Origin: "forked"}},
}

func (everyKind) Prompt(ctx context.Context, req sdk.PromptRequest, turn *sdk.Turn) (sdk.StopReason, error) {
	for _, u := range emitted {
		if err := turn.Emit(u); err != nil {
			return "", err
		}
	}
	_, err := turn.RequestPermission(ctx, sdk.PermissionRequest{RequestID: "p1",
		ToolCall: sdk.ToolCall{ToolCallID: "t2", Title: "write", Kind: "edit", Status: "pending"},
		Options:  []sdk.PermissionOption{{OptionID: "yes", Name: "Yes", Kind: "allow_once"}}})
	return sdk.StopMaxTokens, err
}

// Every kind reaches the test as the agent emitted it.
func TestHarnessUpdatesRoundTrip(t *testing.T) {
	h := NewHarness(t, func(context.Context, sdk.Environment) (sdk.Agent, error) { return everyKind{}, nil })
	ctx := t.Context()
	if _, err := h.NewSession(ctx, sdk.NewSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	turn, err := h.Prompt(ctx, "go")
	if err != nil {
		t.Fatal(err)
	}
	ups := h.Until(wait, "permission request", func(u Update) bool { return u.Kind == "permission_request" })
	if err := h.AnswerPermission(ctx, "p1", "yes"); err != nil {
		t.Fatal(err)
	}
	rest, _ := h.Turn(turn, wait)
	ups = append(ups, rest...)

	// The journal's payload of each, as API clients receive it.
	want := []string{
		`{"pluginSeq":1,"turnId":"T","update":{"content":{"type":"text","text":"hi"},"sessionUpdate":"agent_message_chunk"}}`,
		`{"pluginSeq":2,"turnId":"T","update":{"content":{"type":"text","text":"hmm"},"sessionUpdate":"agent_thought_chunk"}}`,
		`{"pluginSeq":3,"turnId":"T","update":{"content":{"type":"image","data":"AA=="},"sessionUpdate":"user_message_chunk"}}`,
		`{"pluginSeq":4,"turnId":"T","update":{"kind":"read","rawInput":{"path":"a"},"sessionUpdate":"tool_call","status":"pending","title":"read","toolCallId":"t1"}}`,
		`{"pluginSeq":5,"turnId":"T","update":{"content":[{"content":{"type":"text","text":"done"},"type":"content"}],"rawOutput":{"ok":true},"sessionUpdate":"tool_call_update","status":"completed","toolCallId":"t1"}}`,
		`{"pluginSeq":6,"turnId":"T","update":{"entries":[{"content":"step","priority":"high","status":"pending"}],"sessionUpdate":"plan"}}`,
		`{"pluginSeq":7,"turnId":"T","update":{"entries":[],"sessionUpdate":"plan"}}`,
		`{"pluginSeq":8,"turnId":"T","update":{"_meta":{"agenthost":{"cachedInputTokens":3,"inputTokens":1,"outputTokens":2,"reasoningTokens":4}},"cost":{"amount":0.5,"currency":"USD"},"sessionUpdate":"usage_update","size":7,"used":6}}`,
		`{"pluginSeq":9,"turnId":"T","update":{"handle":"h2","origin":"forked","sessionUpdate":"_agenthost/handle_changed"}}`,
		`{"pluginSeq":10,"turnId":"T","update":{"options":[{"kind":"allow_once","name":"Yes","optionId":"yes"}],"requestId":"p1","sessionUpdate":"_agenthost/permission_request","toolCall":{"kind":"edit","status":"pending","title":"write","toolCallId":"t2"}}}`,
		`{"pluginSeq":11,"turnId":"T","update":{"outcome":{"optionId":"yes","outcome":"selected"},"requestId":"p1","sessionUpdate":"_agenthost/permission_resolved"}}`,
		`{"pluginSeq":12,"turnId":"T","stopReason":"max_tokens"}`,
	}
	if len(ups) != len(want) {
		t.Fatalf("got %s, want %d updates", Describe(ups), len(want))
	}
	for i, u := range ups {
		r, ok := u.Record.(*journal.Update)
		if ok {
			pt := time.Unix(0, r.PluginTime)
			if pt.Before(start.Add(-time.Second)) || time.Since(pt) > time.Minute {
				t.Errorf("update %d: plugin time %v", i, pt)
			}
			r.PluginTime = 0
		}
		if u.Seq != uint64(i+1) || u.TurnID != turn {
			t.Errorf("update %d: seq %d, turn %q", i, u.Seq, u.TurnID)
		}
		e, err := journal.Encode(u.Record)
		if err != nil {
			t.Fatalf("update %d (%s): %v", i, u.Kind, err)
		}
		if got := strings.ReplaceAll(string(e.Payload), turn, "T"); got != want[i] {
			t.Errorf("update %d (%s):\n got %s\nwant %s", i, u.Kind, got, want[i])
		}
	}
}
