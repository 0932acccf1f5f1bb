package sdk

import (
	"context"
	"crypto/rand"
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

// Emit appends any update. Its TurnID, Seq and Time are filled in.
func (t *Turn) Emit(u Update) {
	u.TurnID = t.id
	t.srv.emit(u)
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
func (t *Turn) ToolCall(c ToolCall) { t.Emit(Update{ToolCall: &c}) }

// ToolCallUpdate reports a tool call's progress.
func (t *Turn) ToolCallUpdate(u ToolCallUpdate) { t.Emit(Update{ToolCallUpdate: &u}) }

// Plan reports the agent's plan.
func (t *Turn) Plan(entries []PlanEntry) { t.Emit(Update{Plan: entries}) }

// Usage reports token usage.
func (t *Turn) Usage(u Usage) { t.Emit(Update{Usage: &u}) }

// HandleChanged reports that the provider minted a new handle for the
// conversation; the host records it in the session's handle chain.
func (t *Turn) HandleChanged(handle, origin string) {
	t.Emit(Update{HandleChanged: &HandleChanged{Handle: handle, Origin: origin}})
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
