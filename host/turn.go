package host

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/agenthost/agenthost/internal/pluginclient"
	"github.com/agenthost/agenthost/leasestore"
)

// TurnResult is how a turn ended.
type TurnResult struct {
	TurnID     string
	StopReason string
	// Error is the agent's message when StopReason is "failed".
	Error string
	// AuthRequired: the turn failed because the agent's provider needs
	// authentication.
	AuthRequired bool
}

// Prompt runs one turn of one text block; see PromptContent.
func (s *Session) Prompt(ctx context.Context, text string) (TurnResult, error) {
	return s.PromptContent(ctx, pluginclient.Text(text))
}

// ErrUnsupportedContent: a prompt block of a type the agent does not
// declare (its capabilities), or one that is not valid ACP JSON. The
// prompt is refused whole, never passed on without the block, and not
// journaled.
var ErrUnsupportedContent = errors.New("prompt content the agent does not take")

// checkContent refuses blocks the agent's capabilities exclude.
func checkContent(caps pluginclient.Capabilities, blocks []pluginclient.ContentBlock) error {
	for i, b := range blocks {
		ok := false
		switch b.Type {
		case "text":
			ok = true
		case "image":
			ok = caps.Image
		case "audio":
			ok = caps.Audio
		case "resource":
			ok = caps.EmbeddedContext
		case "resource_link":
			ok = caps.ResourceLink
		}
		if !ok {
			return fmt.Errorf("%w: block %d is of type %q, which the agent does not declare", ErrUnsupportedContent, i, b.Type)
		}
		if b.Type != "text" && !json.Valid([]byte(b.JSON)) {
			return fmt.Errorf("%w: block %d (%s) is not valid JSON", ErrUnsupportedContent, i, b.Type)
		}
	}
	return nil
}

// PromptContent runs one turn: the prompt, every block of it, is
// journaled durably before it is dispatched, then PromptContent waits for
// the turn to end and returns how. A block of a type the agent does not
// declare refuses the prompt (ErrUnsupportedContent). The first prompt of
// a session without a title gives it one (see deriveTitle).
func (s *Session) PromptContent(ctx context.Context, blocks []pluginclient.ContentBlock) (TurnResult, error) {
	// The session's own plugin declared what it takes (its Identify, at
	// start or reattach): the host-wide cache may be empty while an
	// initialize probe runs, or after one failed.
	if err := checkContent(s.proc.caps, blocks); err != nil {
		return TurnResult{}, fmt.Errorf("session %q: %w", s.id, err)
	}
	turnID := "turn-" + rand.Text()[:16]
	rec := promptEntry(turnID, blocks)
	ch := make(chan TurnResult, 1)
	s.mu.Lock()
	if running := s.turn; running != "" {
		s.mu.Unlock()
		return TurnResult{}, fmt.Errorf("session %q: %w (%s): wait for it to end, or cancel it, and prompt again", s.id, ErrTurnRunning, running)
	}
	s.turn = turnID
	s.waiters[turnID] = ch
	// Counted as dispatching from the moment the turn is the session's: a
	// client sees the prompt's echo as soon as it is journaled, below,
	// and may cancel at once; that cancel finds no turn in the plugin yet,
	// so it is remembered and delivered once the plugin has the turn.
	s.dispatching++
	s.mu.Unlock()
	// dispatched ends the dispatch and says whether a cancel arrived
	// during it that the plugin must still be given.
	dispatched := func(ran bool) (recancel bool) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.dispatching--
		recancel = s.cancelPending && ran
		if s.dispatching == 0 {
			s.cancelPending = false
		}
		return recancel
	}
	forget := func() {
		s.mu.Lock()
		delete(s.waiters, turnID)
		s.mu.Unlock()
	}
	// notRun forgets a turn that never reached the plugin, and says
	// whether it was still the session's: a plugin that died meanwhile
	// had its turn ended by Session.failTurn.
	notRun := func() (owned bool) {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.waiters, turnID)
		if owned = s.turn == turnID; owned {
			s.turn = ""
		}
		return owned
	}
	// The first prompt of a session without a title names it, journaled
	// in the prompt's own commit.
	entries := []leasestore.EntryInput{rec}
	title := s.derivedTitle(blocks)
	if title != "" {
		entries = append(entries, titleEntry(title))
	}
	if _, err := s.journal.Append(ctx, entries...); err != nil {
		dispatched(false)
		notRun()
		return TurnResult{}, fmt.Errorf("journal prompt of session %q: %w", s.id, err)
	}
	// The title is journaled: store it now, whether or not the plugin
	// takes the prompt, so the next prompt derives no second one.
	if err := s.noteTitle(ctx, title); err != nil {
		s.h.report(JournalScope, err)
	}
	_, err := s.proc.att.Prompt(ctx, pluginclient.PromptRequest{TurnID: turnID, Prompt: blocks})
	if dispatched(err == nil) {
		// The turn now exists in the plugin: deliver the cancel it missed.
		if cerr := s.Cancel(context.WithoutCancel(ctx)); cerr != nil {
			s.h.log.Warn("deliver a cancel that arrived while the prompt was dispatched", "session", s.id, "error", cerr)
		}
	}
	if err != nil {
		// The journal already holds the prompt: record that it never ran.
		// If that fails too, the journal shows a turn that never ends, and
		// the caller, told only that the dispatch failed, cannot know.
		// A plugin that died meanwhile had the turn ended already
		// (notRun says so), by Session.failTurn.
		if notRun() {
			if _, jerr := s.journal.Append(context.WithoutCancel(ctx), notDispatchedEntry(turnID, err)); jerr != nil {
				s.h.report(JournalScope, fmt.Errorf("session %q: journal that turn %s was not dispatched: %w", s.id, turnID, jerr))
			}
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

// TitleLength bounds the title the host derives from a first prompt, in
// runes.
const TitleLength = 80

// derivedTitle is the title the host gives a session without one: the
// first line of the prompt's first text block, trimmed to TitleLength
// runes. It is journaled as a session_info_update of no turn, as an
// agent's own title would be, and stored with the session; an agent's
// later title replaces it. "" when the session has a title.
func (s *Session) derivedTitle(blocks []pluginclient.ContentBlock) string {
	if s.Title() != "" {
		return ""
	}
	for _, b := range blocks {
		if b.Type == "text" && strings.TrimSpace(b.Text) != "" {
			return titleOf(b.Text)
		}
	}
	return ""
}

// titleOf is the first non-empty line of text, trimmed to TitleLength
// runes (an ellipsis marks a cut).
func titleOf(text string) string {
	line := ""
	for l := range strings.SplitSeq(text, "\n") {
		if line = strings.TrimSpace(l); line != "" {
			break
		}
	}
	if utf8.RuneCountInString(line) <= TitleLength {
		return line
	}
	r := []rune(line)
	return strings.TrimSpace(string(r[:TitleLength-1])) + "…"
}
