package sdk

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
)

// Turn is how an Agent reports a turn's progress. Every call appends an
// update to the outbox, which keeps it until the host has journaled it, so
// reporting never blocks on the host and nothing is lost while no host is
// attached. A Turn is safe for concurrent use.
type Turn struct {
	id  string
	srv *server
}

// ID returns the turn's id.
func (t *Turn) ID() string { return t.id }

// Emit appends an update built by hand. Its TurnID, Seq and Time are filled
// in. It refuses an update that sets no kind or more than one, and the kinds
// only the SDK may produce (turn ends and permission requests and answers:
// use Prompt's return and RequestPermission). After the turn has ended it
// refuses everything: the host has already recorded the turn's end.
func (t *Turn) Emit(u Update) error {
	switch n := u.kinds(); {
	case n != 1:
		return fmt.Errorf("sdk: an update must set exactly one kind, this one sets %d", n)
	case u.TurnStopped != nil || u.PermissionRequest != nil || u.PermissionResolved != nil:
		return errors.New("sdk: turn ends and permission updates are produced by the SDK, not emitted")
	}
	u.TurnID = t.id
	return t.srv.emitInTurn(t.id, u)
}

func (t *Turn) emit(u Update) {
	if err := t.Emit(u); err != nil {
		t.srv.log.Warn("update dropped", "turn", t.id, "error", err)
	}
}

// Message streams a chunk of the agent's reply.
func (t *Turn) Message(text string) {
	t.Emit(Update{AgentMessage: &ContentBlock{Type: "text", Text: text}})
}

// Thought streams a chunk of the agent's reasoning.
func (t *Turn) Thought(text string) {
	t.Emit(Update{AgentThought: &ContentBlock{Type: "text", Text: text}})
}

// ToolCall announces a tool call.
func (t *Turn) ToolCall(c ToolCall) { t.emit(Update{ToolCall: &c}) }

// ToolCallUpdate reports a tool call's progress.
func (t *Turn) ToolCallUpdate(u ToolCallUpdate) { t.emit(Update{ToolCallUpdate: &u}) }

// Plan reports the agent's plan; an empty plan clears it.
func (t *Turn) Plan(entries []PlanEntry) {
	if entries == nil {
		entries = []PlanEntry{}
	}
	t.emit(Update{Plan: entries})
}

// Usage reports token usage.
func (t *Turn) Usage(u Usage) { t.emit(Update{Usage: &u}) }

// HandleChanged reports that the provider minted a new handle for the
// conversation; the host records it in the session's handle chain.
func (t *Turn) HandleChanged(handle, origin string) {
	t.emit(Update{HandleChanged: &HandleChanged{Handle: handle, Origin: origin}})
}

// RequestPermission asks the user and waits for the answer. A request
// raised while no host is attached waits in the outbox and is delivered to
// the next host. If ctx ends first (the turn was cancelled), the outcome is
// "cancelled" and the error is ctx's.
func (t *Turn) RequestPermission(ctx context.Context, req PermissionRequest) (PermissionOutcome, error) {
	if req.RequestID == "" {
		req.RequestID = "perm-" + rand.Text()[:12]
	}
	return t.srv.requestPermission(ctx, t.id, req)
}

func newTurnID() string { return fmt.Sprintf("turn-%s", rand.Text()[:16]) }
