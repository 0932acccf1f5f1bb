package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agenthost/agenthost/internal/pluginclient"
	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/leasestore"
)

// JournalScope is the scope of journaling failures sent to OnError.
const JournalScope = "journal"

// pump receives the plugin's updates, journals each batch durably and only
// then acknowledges it to the plugin, which may then forget it. A broken
// stream or a failed append is retried from the last journaled update (the
// outbox still holds the rest); if it keeps failing, or a newer host took
// the plugin over, the session is detached: the plugin keeps its updates
// and its lease for the next host.
func (s *Session) pump() {
	defer close(s.pumpDone)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-s.proc.Terminated():
		case <-s.proc.stopRequested:
		case <-ctx.Done():
		}
		cancel()
	}()
	backoff := 100 * time.Millisecond
	var lastFullReport time.Time
	for failures := 0; ; {
		err := s.stream(ctx)
		if ctx.Err() != nil {
			return
		}
		if v := asViolation(err); v != nil {
			// An update the host can never journal would be offered
			// again forever; the plugin is stopped instead, and
			// everything journaled before it stays.
			s.h.report(JournalScope, fmt.Errorf("session %q: stopping its plugin, whose updates cannot be journaled (a bug in the plugin: report it to its author; everything before is journaled and the session can be started again): %w", s.id, v))
			s.mu.Lock()
			s.violation = v
			s.mu.Unlock()
			// Stopped without a drain: the updates it would wait for
			// can no longer be journaled.
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 2*s.h.cfg.StopTimeout)
				defer cancel()
				_ = s.proc.Stop(ctx)
			}()
			return
		}
		if errors.Is(err, pluginclient.ErrStaleFence) {
			// A newer fence attached: this host no longer drives the
			// plugin.
			s.h.report(JournalScope, fmt.Errorf("session %q: the plugin refused this host's fence; detaching: %w", s.id, err))
			go s.proc.Detach()
			return
		}
		if errors.Is(err, pluginclient.ErrNotAttached) || errors.Is(err, pluginclient.ErrNeverAttached) || errors.Is(err, pluginclient.ErrOtherSession) {
			// The plugin no longer holds the attachment this host made
			// (it lost its state, or the address serves another
			// process). That proves no takeover, nor that the process is
			// this host's to stop, and a stop would lose the updates in
			// its outbox: detach, as for a stale fence, and leave the
			// process and its lease to the next host, which verifies its
			// identity before it drives it.
			s.h.report(JournalScope, fmt.Errorf("session %q: the plugin no longer knows this host's attachment; detaching: %w", s.id, err))
			go s.proc.Detach()
			return
		}
		if errors.Is(err, leasestore.ErrNoSpace) {
			// A full disk is not the plugin's fault and ends when space
			// is freed: keep retrying (the plugin's outbox holds every
			// unacknowledged update meanwhile) and say so once a minute.
			if time.Since(lastFullReport) > time.Minute {
				s.h.report(JournalScope, fmt.Errorf("session %q: journaling paused until disk space is freed: %w", s.id, err))
				lastFullReport = time.Now()
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		// Anything else is retried from the last journaled update: a
		// broken stream, and any other refusal (a closed session, a busy
		// plugin, the agent's error, one without a known reason), which
		// says nothing about who holds the plugin: the fence is still
		// this host's. Only a failure that persists detaches, which still
		// keeps every update for the next host.
		failures++
		if failures > 5 {
			s.h.report(JournalScope, fmt.Errorf("session %q: journaling keeps failing; detaching so the plugin keeps its updates for the next host: %w", s.id, err))
			go s.proc.Detach()
			return
		}
		s.h.log.Warn("update stream interrupted; resuming from the last journaled update", "session", s.id, "error", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// stream follows one Updates stream from the update after the last
// journaled one, until it ends.
func (s *Session) stream(ctx context.Context) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := s.proc.att.Updates(sctx, s.journaled()+1)
	if err != nil {
		return err
	}
	updates := make(chan *pluginclient.Update, 256)
	recvErr := make(chan error, 1)
	go func() {
		defer close(updates)
		for {
			u, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case updates <- u:
			case <-sctx.Done():
				recvErr <- sctx.Err()
				return
			}
		}
	}()
	for u := range updates {
		batch := []*pluginclient.Update{u}
	drain:
		for len(batch) < 256 {
			select {
			case more, ok := <-updates:
				if !ok {
					break drain
				}
				batch = append(batch, more)
			default:
				break drain
			}
		}
		if err := s.record(ctx, batch); err != nil {
			cancel()
			for range updates {
			}
			return err
		}
	}
	return <-recvErr
}

// journaled returns the newest plugin update in the journal.
func (s *Session) journaled() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fromSeq - 1
}

// record journals a batch, acknowledges it and wakes whoever waits for a
// turn that ended in it. Provider handle changes are recorded in the lease
// before the batch is journaled: if the append then fails, the replayed
// change is recorded again as a no-op, and no handle is ever lost.
func (s *Session) record(ctx context.Context, batch []*pluginclient.Update) error {
	wctx := context.WithoutCancel(ctx)
	s.mu.Lock()
	if s.baseUnknown && len(batch) > 0 {
		s.baseUnknown = false
		if batch[0].Seq > s.fromSeq {
			s.h.log.Warn("the journal holds no update of this plugin; its updates resume at its outbox's oldest",
				"session", s.id, "seq", batch[0].Seq)
			s.fromSeq = batch[0].Seq
		}
	}
	s.mu.Unlock()
	// The updates before a breach are journaled; the breach ends the
	// stream after them.
	good, violation := checkUpdates(s.journaled()+1, batch)
	if batch = batch[:good]; len(batch) == 0 {
		return violation
	}
	for _, u := range batch {
		if u.Seq < s.journaled()+1 {
			continue
		}
		if hc, ok := u.SessionUpdate().(*journal.HandleChanged); ok {
			origin := leasestore.HandleOrigin(hc.Origin)
			if origin == "" {
				origin = leasestore.HandleResumed
			}
			if _, err := s.h.store.Apply(wctx, s.id, leasestore.RecordHandle{Fence: s.fence, Handle: hc.Handle, Origin: origin}); err != nil {
				return fmt.Errorf("record provider handle change: %w", err)
			}
			s.mu.Lock()
			s.handle = hc.Handle
			s.mu.Unlock()
		}
	}
	// Updates already journaled (replayed after an interrupted stream)
	// are skipped: each is journaled exactly once.
	var entries []leasestore.EntryInput
	first := s.journaled() + 1
	// A permission request is pending before anyone can read it.
	granted := s.notePermissions(batch, first)
	for _, u := range batch {
		if u.Seq >= first {
			e, err := recordEntry(u.Record)
			if err != nil {
				return err
			}
			entries = append(entries, e)
		}
	}
	// A turn's provider state is stored before its stop is journaled, and
	// the turn is finished right after the append: a client that sees the
	// stop may prompt at once, and must not find the turn still running
	// for the length of an export.
	for _, u := range batch {
		if ts := u.Stop(); ts != nil && u.Seq >= first {
			s.storeProviderState(ctx, ts.TurnID)
		}
	}
	if len(entries) > 0 {
		if _, err := s.journal.Append(wctx, entries...); err != nil {
			return err
		}
	}
	last := batch[len(batch)-1].Seq
	s.mu.Lock()
	s.fromSeq = max(s.fromSeq, last+1)
	s.mu.Unlock()
	s.notePermissionsResolved(batch, first)
	s.answerGranted(ctx, granted)
	// Before the acknowledgement's round trip to the plugin: a follower
	// may read the stop from the journal already, and prompt at once.
	for _, u := range batch {
		if u.Seq < first {
			continue
		}
		if ts := u.Stop(); ts != nil {
			s.finishTurn(TurnResult{TurnID: ts.TurnID, StopReason: ts.StopReason, Error: ts.Error, AuthRequired: ts.AuthRequired})
		} else {
			s.noteTurn(u.TurnID)
			if su := u.SessionUpdate(); su != nil {
				s.noteAgentUpdate(ctx, su)
			}
		}
	}
	if err := s.proc.att.Acknowledge(ctx, last); err != nil && ctx.Err() == nil {
		s.h.log.Warn("acknowledging updates failed; the plugin will replay them", "session", s.id, "error", err)
	}
	return violation
}

// ErrProtocol matches the error of a session whose plugin broke the update
// protocol (an update too large to carry or journal, one without a kind, a
// gap in its sequence numbers); the host stopped that plugin.
var ErrProtocol = errors.New("plugin broke the update protocol")

// checkUpdates checks a batch against the stream's contract: every update
// has a kind, and sequence numbers run on without gaps from next (updates
// below next are replays of journaled ones and are skipped later). It
// returns how many leading updates keep the contract, and the breach that
// stopped it there, if any.
func checkUpdates(next uint64, batch []*pluginclient.Update) (int, error) {
	for i, u := range batch {
		if u.Record == nil {
			return i, fmt.Errorf("%w: update %d has no kind", ErrProtocol, u.Seq)
		}
		switch {
		case u.Seq < next:
		case u.Seq == next:
			next++
		default:
			return i, fmt.Errorf("%w: update %d arrived where %d was due; the plugin skipped updates", ErrProtocol, u.Seq, next)
		}
	}
	return len(batch), nil
}

// asViolation returns the protocol breach err describes, or nil: a gRPC
// message over the transport's limit, an entry the journal refuses as
// invalid (too large, malformed), or a failed checkUpdates.
func asViolation(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrProtocol):
		return err
	case errors.Is(err, pluginclient.ErrTooLarge):
		return fmt.Errorf("%w: an update larger than the transport carries: %w", ErrProtocol, err)
	case errors.Is(err, leasestore.ErrInvalidArgument):
		return fmt.Errorf("%w: the journal refuses an update: %w", ErrProtocol, err)
	}
	return nil
}
