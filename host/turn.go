package host

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agenthost/agenthost/internal/pluginclient"
	"github.com/agenthost/agenthost/journal"
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
	// In a cluster a turn is taken only while this host's liveness is
	// proven and the lease is known to be its own (cluster.go).
	if err := s.admitTurn(ctx); err != nil {
		return TurnResult{}, err
	}
	turnID := "turn-" + rand.Text()[:16]
	rec := promptEntry(turnID, blocks)
	ch := make(chan TurnResult, 1)
	s.mu.Lock()
	if s.idle.stopping {
		// Not journaled: the caller resumes the session and prompts again.
		s.mu.Unlock()
		return TurnResult{}, fmt.Errorf("session %q: %w", s.id, ErrIdleStopped)
	}
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
	s.idleCheckLocked()
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
		s.idleCheckLocked()
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
		s.idleCheckLocked()
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
			if _, jerr := s.journal.Append(context.WithoutCancel(ctx), notDispatchedEntry(turnID, err, s.stopping())); jerr != nil {
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
	s.reported = turnID
	if s.turn == "" && turnID != s.lastTurn {
		s.turn = turnID
		s.idleCheckLocked()
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
	s.idleCheckLocked()
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

// openTurn returns the prompt of the session's open turn: the newest
// prompt journaled with no stop after it. nil when every turn ended. Turns
// never overlap (a prompt is refused while one runs), so the newest prompt
// or stop entry decides.
func (h *Host) openTurn(ctx context.Context, id string) (*journal.Prompt, error) {
	var newest *leasestore.Entry
	err := h.walkBack(ctx, id, func(e leasestore.Entry) (bool, error) {
		if e.Kind == leasestore.KindPrompt || e.Kind == leasestore.KindStop {
			newest = &e
			return true, nil
		}
		return false, nil
	})
	if err != nil || newest == nil || newest.Kind == leasestore.KindStop {
		return nil, err
	}
	rec, err := journal.Decode(*newest)
	if err != nil {
		return nil, fmt.Errorf("decode the prompt at seq %d: %w", newest.Seq, err)
	}
	return rec.(*journal.Prompt), nil
}

// closeTurnOffline journals the end of an open turn no plugin can end, of
// a session whose lease nobody holds (its plugin is proven gone): the host
// reserves the lease for no plugin, journals the stop, records that no
// plugin was started, and releases it again, each step durable. A restart
// in between finds a reservation that never spawned, and frees it.
func (h *Host) closeTurnOffline(ctx context.Context, id, turn, why string) error {
	rec, err := h.store.Get(ctx, id)
	if err != nil {
		return err
	}
	if rec, err = h.store.Apply(ctx, id, leasestore.Reserve{ExpectedFence: rec.Lease.Fence, ClaimKeyID: h.cfg.ClaimKeyID, HostID: h.cfg.HostID}); err != nil {
		return fmt.Errorf("reserve the lease to journal the turn's end: %w", err)
	}
	fence := rec.Lease.Fence
	_, err = h.store.Append(ctx, id, fence, hostEntry(&journal.Stop{TurnID: turn, StopReason: "failed", Error: why}))
	if perr := func() error {
		if _, err := h.store.Apply(ctx, id, leasestore.PreSpawnFailure{Fence: fence, Reason: "no plugin: the host only closed an open turn"}); err != nil {
			return err
		}
		_, err := h.store.Apply(ctx, id, leasestore.Release{Fence: fence, Detail: "closed the open turn " + turn})
		return err
	}(); perr != nil {
		h.report(ReleaseScope, fmt.Errorf("session %q: release the lease reserved to close turn %s: %w", id, turn, perr))
	}
	if err != nil {
		return fmt.Errorf("journal the turn's end: %w", err)
	}
	return nil
}

// closeOpenTurn ends the open turn, if any, of a session whose plugin is
// gone (decide evicted it, or found it released): stop reason failed,
// saying why. A failure is reported: the journal then shows the turn open
// until the session's next start ends it.
func (h *Host) closeOpenTurn(ctx context.Context, id, why string) {
	p, err := h.openTurn(ctx, id)
	if err == nil && p != nil {
		err = h.closeTurnOffline(ctx, id, p.TurnID, why)
	}
	if err != nil {
		h.report(ReconcileScope, fmt.Errorf("session %q: close its open turn: %w", id, err))
	}
}

// resumeOpenTurn settles the open turn p of a session readopted at
// restart (the session's turn from its launch, so a prompt meanwhile is
// refused with ErrTurnRunning and never journaled), once the plugin's
// outbox is drained into the journal up to lastSeq (the newest update it had produced when attached): a turn whose
// stop or updates arrived is the plugin's and goes on. Otherwise the
// previous host journaled the prompt and died before or while it
// dispatched it, and the prompt is dispatched again with its turn id: a
// plugin that runs that turn already refuses it as busy with it (it ran
// silently), one that never had it runs it now. A dispatch the plugin did
// not answer (the transport or the deadline ended it) may have reached it:
// the turn goes on if the plugin's updates name it within
// ReattachTimeout. Any other outcome (the drain does not complete within
// ReattachTimeout, the plugin refuses or runs another turn) ends the turn
// as failed, so it never stays open. A host closing meanwhile (a detach)
// decides nothing: the next host settles the turn.
//
// A turn that ran silently and ended between the drain and the dispatch
// is not run twice: the SDK refuses a prompt for a turn id it already
// started (pluginclient.ErrTurnStarted, running or ended), and the host
// then takes the turn's stop from the outbox, writing none of its own. A
// plugin built on an older SDK refuses only its running turn (as busy
// with it); with one of those, such a turn (no update at all, ending
// within that window of milliseconds) still runs twice.
func (s *Session) resumeOpenTurn(parent context.Context, p *journal.Prompt, lastSeq uint64) {
	// The waits are bounded by ReattachTimeout; the host closing (parent
	// ends: a detach for an app update) decides nothing, and the turn is
	// the next host's to settle: the plugin may be running it. A stop is
	// written even when the wait that decided it timed out.
	budget := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(parent, s.h.cfg.ReattachTimeout)
	}
	write := context.WithoutCancel(parent)
	wait := func(cond func() bool) (timedOut bool) {
		ctx, cancel := budget()
		defer cancel()
		return s.await(ctx, cond) == errAwaitTimeout && parent.Err() == nil
	}
	if parent.Err() != nil {
		return
	}
	if wait(func() bool { return s.journaled() >= lastSeq }) {
		s.failTurnOf(write, p.TurnID, "the host restarted and could not read the plugin's updates to tell whether it ran this turn")
		return
	}
	if parent.Err() != nil || s.gone() {
		return
	}
	s.mu.Lock()
	known := s.reported == p.TurnID || s.lastTurn == p.TurnID
	other := s.reported
	s.mu.Unlock()
	switch {
	case known:
		return
	case other != "":
		s.failTurnOf(write, p.TurnID, "the host restarted, and the plugin runs turn "+other+" instead")
		// That turn is the session's now, unless it ended already.
		s.mu.Lock()
		if s.turn == "" && s.lastTurn != other {
			s.turn = other
			s.idleCheckLocked()
		}
		s.mu.Unlock()
		return
	}
	blocks := make([]pluginclient.ContentBlock, 0, len(p.Prompt))
	for _, c := range p.Prompt {
		blocks = append(blocks, promptBlock(c))
	}
	dctx, dcancel := budget()
	_, err := s.proc.att.Prompt(dctx, pluginclient.PromptRequest{TurnID: p.TurnID, Prompt: blocks})
	dcancel()
	var (
		started *pluginclient.TurnStartedError
		perr    *pluginclient.Error
	)
	switch {
	case err == nil:
		s.h.log.Info("dispatched a prompt the previous host journaled but never dispatched", "session", s.id, "turn", p.TurnID)
	case parent.Err() != nil:
		// Closing: the next host settles the turn.
	case errors.As(err, &started) && started.Running:
		// The plugin runs the turn: its stop comes through the pump.
	case errors.As(err, &started):
		// The turn ended after the drain: its stop is in the outbox, past
		// lastSeq, and the pump journals it. Only if it never arrives is the
		// turn ended here.
		if wait(func() bool { return s.ended(p.TurnID) }) {
			s.failTurnOf(write, p.TurnID, "the host restarted; the plugin says it ran this turn, but its end never arrived")
		}
	case errors.As(err, &perr) && errors.Is(err, pluginclient.ErrBusy) && strings.HasPrefix(perr.Message, "turn "+p.TurnID+" "):
		// A plugin on an older SDK names its running turn only in its
		// refusal's message.
	case errors.As(err, &perr) && !perr.Answered():
		// Unanswered (the transport or the deadline ended the call): the
		// plugin may have taken the prompt. Its updates would say so; only
		// without any is the turn ended here.
		if wait(func() bool { return s.turnReported(p.TurnID) || s.ended(p.TurnID) }) {
			s.failTurnOf(write, p.TurnID, "the host restarted, and dispatching this prompt again got no answer: "+err.Error())
		}
	default:
		s.failTurn(write, "the host restarted before the plugin took this prompt, and dispatching it again failed: "+err.Error())
	}
}

// turnReported reports whether the plugin's newest update names turn.
func (s *Session) turnReported(turn string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reported == turn
}

// gone reports whether the session has ended.
func (s *Session) gone() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// Outcomes of Session.await other than the condition holding.
var (
	errAwaitTimeout = errors.New("the wait timed out")
	errAwaitGone    = errors.New("the session ended")
)

// await polls cond until it holds (nil), ctx ends (errAwaitTimeout) or
// the session does (errAwaitGone).
func (s *Session) await(ctx context.Context, cond func() bool) error {
	for !cond() {
		select {
		case <-ctx.Done():
			return errAwaitTimeout
		case <-s.done:
			return errAwaitGone
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// ended reports whether turn's stop has been journaled and handed on.
func (s *Session) ended(turn string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastTurn == turn && s.turn != turn
}

// failTurnOf ends turn, whose prompt the journal holds, as failed: as
// failTurn when it is the session's running turn or none runs, and
// journaled on its own when the plugin runs another (it never had this
// one). Nothing when its stop is journaled already.
func (s *Session) failTurnOf(ctx context.Context, turn, why string) {
	s.mu.Lock()
	if s.lastTurn == turn && s.turn != turn {
		s.mu.Unlock()
		return
	}
	if s.turn == "" {
		s.turn = turn
	}
	mine := s.turn == turn
	s.mu.Unlock()
	if mine {
		s.failTurn(ctx, why)
		return
	}
	s.journalFailed(ctx, turn, why)
}

// promptBlock is the prompt block a journaled content block was made from
// (promptEntry): a text block as text, any other as its ACP JSON.
func promptBlock(c journal.Content) pluginclient.ContentBlock {
	if c.Type() == "text" {
		return pluginclient.ContentBlock{Type: "text", Text: c.Text()}
	}
	return pluginclient.ContentBlock{Type: c.Type(), JSON: string(c)}
}
