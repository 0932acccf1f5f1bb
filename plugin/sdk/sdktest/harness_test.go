package sdktest

import (
	"context"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/examples/scripted/scripted"
	"github.com/agenthost/agenthost/plugin/sdk"
)

const wait = 20 * time.Second

func kinds(ups []sdk.Update) string {
	var out []string
	for _, u := range ups {
		out = append(out, Kind(u))
	}
	return strings.Join(out, ",")
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
	if stop.StopReason != sdk.StopEndTurn || Messages(ups) != "123" || kinds(ups) != "agent_message_chunk,agent_message_chunk,agent_message_chunk,turn_stopped" {
		t.Errorf("count 3: %s, %s", stop.StopReason, Describe(ups))
	}

	ups, _ = h.Run("tool", wait)
	if got := kinds(ups); got != "tool_call,tool_call_update,tool_call_update,agent_message_chunk,turn_stopped" {
		t.Errorf("tool: %s", Describe(ups))
	} else if c := ups[0].ToolCall; c.Title != "list files" || c.RawInputJSON != `{"command":"ls"}` ||
		ups[2].ToolCallUpdate.Content[0].Text != "README.md\nmain.go\n" {
		t.Errorf("tool call %+v, update %+v", *c, *ups[2].ToolCallUpdate)
	}

	ups, stop = h.Run("fail broken on purpose", wait)
	if stop.StopReason != sdk.StopFailed || stop.Error != "broken on purpose" {
		t.Errorf("fail: %+v after %s", stop, Describe(ups))
	}

	// A permission request waits for the answer, which is journaled
	// before the agent acts on it.
	turn, err := h.Prompt(ctx, "ask")
	if err != nil {
		t.Fatal(err)
	}
	ups = h.Until(wait, "permission request", func(u sdk.Update) bool { return u.PermissionRequest != nil })
	req := ups[len(ups)-1].PermissionRequest
	if len(req.Options) != 2 || req.ToolCall.Title != "write notes.txt" {
		t.Errorf("permission request %+v", *req)
	}
	if err := h.AnswerPermission(ctx, req.RequestID, "allow"); err != nil {
		t.Fatal(err)
	}
	ups, stop = h.Turn(turn, wait)
	if kinds(ups) != "permission_resolved,agent_message_chunk,turn_stopped" || Messages(ups) != "permission: selected allow" ||
		ups[0].PermissionResolved.Outcome.OptionID != "allow" || stop.StopReason != sdk.StopEndTurn {
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
	if _, stop := h.Turn(turn, wait); stop.StopReason != sdk.StopCancelled {
		t.Errorf("cancelled turn: %+v", stop)
	}

	// A new host attaches at fence 2: the updates go on, none lost or
	// repeated.
	turn, err = h.Prompt(ctx, "count 20 5ms")
	if err != nil {
		t.Fatal(err)
	}
	h.Until(wait, "the first chunk", func(u sdk.Update) bool { return u.AgentMessage != nil })
	if err := h.Attach(ctx); err != nil {
		t.Fatal(err)
	}
	ups, stop = h.Turn(turn, wait)
	if stop.StopReason != sdk.StopEndTurn || len(ups) != 20 { // chunks 2…20 and the stop
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
	ups := h.Until(wait, "permission request", func(u sdk.Update) bool { return u.PermissionRequest != nil })
	if err := h.AnswerPermission(ctx, "p1", "yes"); err != nil {
		t.Fatal(err)
	}
	rest, _ := h.Turn(turn, wait)
	ups = append(ups, rest...)

	want := append([]sdk.Update(nil), emitted...)
	want = append(want,
		sdk.Update{PermissionRequest: &sdk.PermissionRequest{RequestID: "p1",
			ToolCall: sdk.ToolCall{ToolCallID: "t2", Title: "write", Kind: "edit", Status: "pending"},
			Options:  []sdk.PermissionOption{{OptionID: "yes", Name: "Yes", Kind: "allow_once"}}}},
		sdk.Update{PermissionResolved: &sdk.PermissionResolved{RequestID: "p1", Outcome: sdk.PermissionOutcome{Outcome: "selected", OptionID: "yes"}}},
		sdk.Update{TurnStopped: &sdk.TurnStopped{StopReason: sdk.StopMaxTokens}},
	)
	if len(ups) != len(want) {
		t.Fatalf("got %s, want %d updates", Describe(ups), len(want))
	}
	for i, u := range ups {
		if u.Seq != uint64(i+1) || u.TurnID != turn || u.Time.Before(start.Add(-time.Second)) || time.Since(u.Time) > time.Minute {
			t.Errorf("update %d: seq %d, turn %q, time %v", i, u.Seq, u.TurnID, u.Time)
		}
		u.Seq, u.TurnID, u.Time = 0, "", time.Time{}
		if !reflect.DeepEqual(u, want[i]) {
			t.Errorf("update %d (%s):\n got %#v\nwant %#v", i, Kind(u), u, want[i])
		}
	}
}
