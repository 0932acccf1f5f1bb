package sdk

import (
	"context"
	"runtime"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/agenthost/agenthost/internal/agentpb"
	"github.com/agenthost/agenthost/internal/logtest"
)

// newTestTurn returns a turn of a server that runs it, and the server's log.
func newTestTurn(t *testing.T, id string) (*Turn, *logtest.Buffer) {
	t.Helper()
	var log logtest.Buffer
	srv := newServer("test", Capabilities{}, nil, Environment{Logger: hclog.New(&hclog.LoggerOptions{Output: &log})}, 1, "", 0)
	t.Cleanup(srv.box.close)
	srv.turn = &runningTurn{id: id, cancel: func() {}, done: make(chan struct{})}
	return &Turn{id: id, srv: srv}, &log
}

func TestTurnStampsTheTurnIDSeqAndTime(t *testing.T) {
	turn, _ := newTestTurn(t, "turn-1")
	if err := turn.Message("hello"); err != nil {
		t.Fatalf("Message in a running turn: %v", err)
	}
	if err := turn.Emit(Update{UserMessage: &ContentBlock{Type: "text", Text: "hi"}}); err != nil {
		t.Fatalf("Emit of a user message: %v", err)
	}
	got, _, err := turn.srv.box.read(1, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("outbox holds %d updates, want 2", len(got))
	}
	for i, u := range got {
		if u.Seq != uint64(i+1) || u.TurnId != "turn-1" || u.TimeUnixNano == 0 {
			t.Errorf("update %d: seq %d, turn %q, time %d; want seq %d, turn-1 and a time", i, u.Seq, u.TurnId, u.TimeUnixNano, i+1)
		}
	}
	if got[0].GetAgentMessageChunk().GetContent().GetText() != "hello" || got[1].GetUserMessageChunk().GetContent().GetText() != "hi" {
		t.Errorf("updates are %v, want the message then the user message", got)
	}
}

func TestEmitRefusesAnUpdateWithoutExactlyOneKind(t *testing.T) {
	turn, _ := newTestTurn(t, "turn-1")
	if err := turn.Emit(Update{}); err == nil {
		t.Error("Emit of an update without a kind succeeded")
	}
	both := Update{AgentMessage: &ContentBlock{Text: "a"}, AgentThought: &ContentBlock{Text: "b"}}
	if err := turn.Emit(both); err == nil {
		t.Error("Emit of an update with two kinds succeeded")
	}
	if n := turn.srv.box.lastSeq(); n != 0 {
		t.Errorf("the outbox holds %d updates after refused ones, want 0", n)
	}
}

func TestMessageAndThoughtAfterTheTurnEndedFailAndLog(t *testing.T) {
	turn, log := newTestTurn(t, "turn-1")
	turn.srv.turn = nil // the turn has ended
	if err := turn.Message("late"); err == nil {
		t.Error("Message after the turn ended succeeded")
	}
	if err := turn.Thought("late"); err == nil {
		t.Error("Thought after the turn ended succeeded")
	}
	turn.ToolCall(ToolCall{ToolCallID: "t1"})
	if n := turn.srv.box.lastSeq(); n != 0 {
		t.Errorf("the outbox holds %d updates of an ended turn, want 0", n)
	}
	if got := strings.Count(log.String(), "update dropped"); got != 3 {
		t.Errorf("logged %d dropped updates, want 3 (every one, whether or not its error was looked at):\n%s", got, log.String())
	}
}

// Identify reports the permission requests the agent waits on, oldest
// first, until each is answered: a host that readopts the plugin learns
// them from it, whatever its journal holds.
func TestIdentifyReportsPendingPermissionsUntilAnswered(t *testing.T) {
	turn, _ := newTestTurn(t, "turn-1")
	srv := turn.srv
	srv.bound, srv.fence = true, 1
	ctx := context.Background()
	answers := make(chan PermissionOutcome, 2)
	for i, id := range []string{"p1", "p2"} {
		go func() {
			out, _ := turn.RequestPermission(ctx, PermissionRequest{RequestID: id, ToolCall: ToolCall{ToolCallID: "tc-" + id},
				Options: []PermissionOption{{OptionID: "allow", Name: "Allow", Kind: "allow_once"}}})
			answers <- out
		}()
		// Asked in this order: wait for each before the next.
		for {
			id, err := srv.Identify(ctx, &agentpb.IdentifyRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if len(id.PendingPermissions) == i+1 {
				break
			}
			runtime.Gosched()
		}
	}
	id, _ := srv.Identify(ctx, &agentpb.IdentifyRequest{})
	if got := id.PendingPermissions; len(got) != 2 || got[0].RequestId != "p1" || got[1].GetToolCall().GetToolCallId() != "tc-p2" ||
		got[0].GetOptions()[0].GetOptionId() != "allow" {
		t.Fatalf("pending permissions %v; want p1 then p2, with their tool calls and options", got)
	}
	if _, err := srv.AnswerPermission(ctx, &agentpb.AnswerPermissionRequest{Fence: 1, RequestId: "p1",
		Outcome: &agentpb.PermissionOutcome{Outcome: "selected", OptionId: "allow"}}); err != nil {
		t.Fatal(err)
	}
	if out := <-answers; out.OptionID != "allow" {
		t.Fatalf("the agent got %+v, want allow", out)
	}
	id, _ = srv.Identify(ctx, &agentpb.IdentifyRequest{})
	if got := id.PendingPermissions; len(got) != 1 || got[0].RequestId != "p2" {
		t.Fatalf("after p1 was answered, pending permissions %v; want p2 alone", got)
	}
	if _, err := srv.AnswerPermission(ctx, &agentpb.AnswerPermissionRequest{Fence: 1, RequestId: "p2"}); err != nil {
		t.Fatal(err)
	}
	<-answers
}
