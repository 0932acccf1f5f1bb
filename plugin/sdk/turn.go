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

// Emit appends an update built by hand, such as a user_message_chunk, for
// which Turn has no helper; the turn id and sequence number are the SDK's.
// It refuses an update that sets no kind or more than one. After the turn
// has ended it refuses everything: the host has already recorded the
// turn's end. A session-level kind (CurrentMode, ConfigOptions,
// AvailableCommands, SessionInfo) is journaled without the turn id, as
// Environment.Reporter's are: it describes the session, not the turn.
func (t *Turn) Emit(u Update) error {
	if n := u.kinds(); n != 1 {
		return fmt.Errorf("sdk: an update must set exactly one kind, this one sets %d", n)
	}
	u.turnID = t.id
	return t.srv.emitInTurn(t.id, u)
}

// emit is Emit for the helpers below. It also logs an update it cannot
// append, so that none is dropped silently, whether or not the caller
// looks at the error.
func (t *Turn) emit(u Update) error {
	err := t.Emit(u)
	if err != nil {
		t.srv.log.Warn("update dropped", "turn", t.id, "error", err)
	}
	return err
}

// Message streams a chunk of the agent's reply. It fails only once the
// turn has ended (the chunk is dropped, and logged): an agent streaming
// from a goroutine of its own can stop there.
func (t *Turn) Message(text string) error {
	return t.emit(Update{AgentMessage: &ContentBlock{Type: "text", Text: text}})
}

// Thought streams a chunk of the agent's reasoning; it fails as Message
// does.
func (t *Turn) Thought(text string) error {
	return t.emit(Update{AgentThought: &ContentBlock{Type: "text", Text: text}})
}

// ToolCall announces a tool call.
func (t *Turn) ToolCall(c ToolCall) { _ = t.emit(Update{ToolCall: &c}) }

// ToolCallUpdate reports a tool call's progress.
func (t *Turn) ToolCallUpdate(u ToolCallUpdate) { _ = t.emit(Update{ToolCallUpdate: &u}) }

// Plan reports the agent's plan; an empty plan clears it.
func (t *Turn) Plan(entries []PlanEntry) {
	if entries == nil {
		entries = []PlanEntry{}
	}
	_ = t.emit(Update{Plan: entries})
}

// Usage reports token usage.
func (t *Turn) Usage(u Usage) { _ = t.emit(Update{Usage: &u}) }

// HandleChanged reports that the provider minted a new handle for the
// conversation; the host records it in the session's handle chain.
func (t *Turn) HandleChanged(handle, origin string) {
	_ = t.emit(Update{HandleChanged: &HandleChanged{Handle: handle, Origin: origin}})
}

// RequestPermission asks the user and waits for the answer. A request
// raised while no host is attached waits in the outbox and is delivered to
// the next host. A host going away answers nothing: the request stays
// pending, Identify reports it to the host that reattaches, and that host
// asks its clients again. If ctx ends first (the turn was cancelled), the
// outcome is "cancelled" and the error is ctx's.
func (t *Turn) RequestPermission(ctx context.Context, req PermissionRequest) (PermissionOutcome, error) {
	if req.RequestID == "" {
		req.RequestID = "perm-" + rand.Text()[:12]
	}
	return t.srv.requestPermission(ctx, t.id, req)
}

func newTurnID() string { return fmt.Sprintf("turn-%s", rand.Text()[:16]) }
