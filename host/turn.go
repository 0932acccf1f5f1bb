package host

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"

	"github.com/agenthost/agenthost/internal/pluginclient"
)

// TurnResult is how a turn ended.
type TurnResult struct {
	TurnID     string
	StopReason string
	// Error is the agent's message when StopReason is "failed".
	Error string
}

// Prompt runs one turn: the prompt is journaled durably before it is
// dispatched, then Prompt waits for the turn to end and returns how.
func (s *Session) Prompt(ctx context.Context, text string) (TurnResult, error) {
	turnID := "turn-" + rand.Text()[:16]
	rec := promptEntry(turnID, text)
	ch := make(chan TurnResult, 1)
	s.mu.Lock()
	if running := s.turn; running != "" {
		s.mu.Unlock()
		return TurnResult{}, fmt.Errorf("session %q: %w (%s): wait for it to end, or cancel it, and prompt again", s.id, ErrTurnRunning, running)
	}
	s.turn = turnID
	s.waiters[turnID] = ch
	s.mu.Unlock()
	forget := func() {
		s.mu.Lock()
		delete(s.waiters, turnID)
		s.mu.Unlock()
	}
	// notRun forgets a turn that never reached the plugin.
	notRun := func() {
		s.mu.Lock()
		delete(s.waiters, turnID)
		if s.turn == turnID {
			s.turn = ""
		}
		s.mu.Unlock()
	}
	if _, err := s.journal.Append(ctx, rec); err != nil {
		notRun()
		return TurnResult{}, fmt.Errorf("journal prompt of session %q: %w", s.id, err)
	}
	s.mu.Lock()
	s.dispatching++
	s.mu.Unlock()
	_, err := s.proc.att.Prompt(ctx, pluginclient.PromptRequest{TurnID: turnID, Prompt: pluginclient.Text(text)})
	s.mu.Lock()
	s.dispatching--
	recancel := s.cancelPending && err == nil
	if s.dispatching == 0 {
		s.cancelPending = false
	}
	s.mu.Unlock()
	if recancel {
		// The turn now exists in the plugin: deliver the cancel it missed.
		if cerr := s.Cancel(context.WithoutCancel(ctx)); cerr != nil {
			s.h.log.Warn("deliver a cancel that arrived while the prompt was dispatched", "session", s.id, "error", cerr)
		}
	}
	if err != nil {
		notRun()
		// The journal already holds the prompt: record that it never ran.
		// If that fails too, the journal shows a turn that never ends, and
		// the caller, told only that the dispatch failed, cannot know.
		if _, jerr := s.journal.Append(context.WithoutCancel(ctx), notDispatchedEntry(turnID, err)); jerr != nil {
			s.h.report(JournalScope, fmt.Errorf("session %q: journal that turn %s was not dispatched: %w", s.id, turnID, jerr))
		}
		if cerr := ctx.Err(); cerr != nil {
			// gRPC reports the caller's own deadline as a status; let
			// callers match it as the context error it is.
			err = fmt.Errorf("%w: %w", cerr, err)
		}
		return TurnResult{}, fmt.Errorf("prompt session %q: %w", s.id, err)
	}
	select {
	case r := <-ch:
		return r, nil
	case <-ctx.Done():
		forget()
		return TurnResult{TurnID: turnID}, ctx.Err()
	}
}

// ErrTurnRunning: the session is running a turn, so it takes no prompt
// until that turn ends. The refused prompt is not journaled: it never
// happened as far as the conversation goes.
var ErrTurnRunning = errors.New("a turn is running")

// noteTurn records that the plugin is running turn turnID, seen in a new
// update: a readopted session learns of the turn its previous host
// started this way.
func (s *Session) noteTurn(turnID string) {
	if turnID == "" {
		return
	}
	s.mu.Lock()
	if s.turn == "" && turnID != s.lastTurn {
		s.turn = turnID
	}
	s.mu.Unlock()
}

// Cancel cancels the running turn; it ends with stop reason "cancelled".
func (s *Session) Cancel(ctx context.Context) error {
	s.mu.Lock()
	if s.dispatching > 0 {
		s.cancelPending = true
	}
	s.mu.Unlock()
	return s.proc.att.Cancel(ctx)
}

// AnswerPermission answers a permission request: optionID selects an
// option; empty cancels the request.
func (s *Session) AnswerPermission(ctx context.Context, requestID, optionID string) error {
	return s.proc.att.AnswerPermission(ctx, requestID, pluginclient.Answer(optionID))
}

// finishTurn hands a turn's end to the Prompt waiting for it, if any. The
// pump calls it once the turn's stop is journaled.
func (s *Session) finishTurn(r TurnResult) {
	s.mu.Lock()
	ch, ok := s.waiters[r.TurnID]
	delete(s.waiters, r.TurnID)
	if s.turn == r.TurnID {
		s.turn = ""
	}
	s.lastTurn = r.TurnID
	s.mu.Unlock()
	if ok {
		ch <- r
	}
}
