package host

import (
	"context"
	"errors"
	"fmt"

	"github.com/agenthost/agenthost/internal/pluginclient"
	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/leasestore"
)

// The host's writes to a session's journal. Package journal owns every
// record's shape and bytes, and the plugin client hands the pump each
// plugin update as its record; what stays here is which records the
// host writes of its own.

// recordEntry is the journal entry of a record the pump converted from a
// plugin update. The conversion keeps only valid JSON, so a record that
// does not encode is a broken update, and the plugin is stopped for it
// rather than an empty payload journaled.
func recordEntry(r journal.Record) (leasestore.EntryInput, error) {
	e, err := journal.Encode(r)
	if err != nil {
		return e, fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	return e, nil
}

// promptEntry is the record of a prompt, journaled before it is
// dispatched: every block, a text block as the host writes it, any other
// as the ACP JSON the client sent (checkContent made sure it is JSON).
func promptEntry(turnID string, blocks []pluginclient.ContentBlock) leasestore.EntryInput {
	content := make([]journal.Content, len(blocks))
	for i, b := range blocks {
		if b.Type == "text" {
			content[i] = journal.TextContent(b.Text)
		} else {
			content[i] = journal.Content(b.JSON)
		}
	}
	return hostEntry(&journal.Prompt{TurnID: turnID, Prompt: content})
}

// titleEntry is the session_info_update the host journals for a title it
// derived: an update of no turn and no plugin seq.
func titleEntry(title string) leasestore.EntryInput {
	return hostEntry(&journal.Update{Update: &journal.SessionInfo{Title: title}})
}

// notDispatchedEntry ends a turn whose journaled prompt never reached the
// plugin: failed, or cancelled when the session was being stopped (the
// stop closed the plugin's session under the dispatch), as a stop that
// came a moment later would have cancelled it in the plugin.
func notDispatchedEntry(turnID string, err error, stopping bool) leasestore.EntryInput {
	if stopping {
		return hostEntry(&journal.Stop{TurnID: turnID, StopReason: "cancelled", Error: "the session was stopped before its agent took the prompt"})
	}
	return hostEntry(&journal.Stop{TurnID: turnID, StopReason: "failed", Error: "not dispatched: " + err.Error()})
}

// hostEntry encodes a record the host words itself: it holds strings and
// a text block only, so encoding cannot fail.
func hostEntry(r journal.Record) leasestore.EntryInput {
	e, err := journal.Encode(r)
	if err != nil {
		panic(fmt.Sprintf("host: encode a %s record: %v", r.EntryKind(), err))
	}
	return e
}

// walkBack calls fn for the session's journal entries newest first, a
// window at a time, until fn returns true or the journal's start. Seqs
// have no gaps but the jump of a restore or a journal recovery
// (leasestore.RestoredSeqGap ahead), whose lifecycle entry names where the
// entries below it end (GapAfter): the walk goes on from there. A window
// with no entry at all is a jump without such an entry (an older restore
// kept nothing below it): the walk ends, since stepping through 2^32 empty
// seqs a window at a time would take millions of reads.
func (h *Host) walkBack(ctx context.Context, id string, fn func(leasestore.Entry) (stop bool, err error)) error {
	last, err := h.store.LastSeq(ctx, id)
	if err != nil {
		return err
	}
	const window = 256
	errEnough := errors.New("window read")
	for hi := last; hi > 0; {
		lo := uint64(1)
		if hi > window {
			lo = hi - window + 1
		}
		var entries []leasestore.Entry
		err := h.store.Replay(ctx, id, lo, func(e leasestore.Entry) error {
			if e.Seq > hi {
				return errEnough
			}
			entries = append(entries, e)
			return nil
		})
		if err != nil && !errors.Is(err, errEnough) {
			return err
		}
		if len(entries) == 0 {
			return nil
		}
		next := lo - 1
		for i := len(entries) - 1; i >= 0; i-- {
			stop, err := fn(entries[i])
			if stop || err != nil {
				return err
			}
			if gap := gapBelow(entries[i]); gap > 0 {
				next = gap
				break
			}
		}
		if lo == 1 && next == 0 {
			return nil
		}
		hi = next
	}
	return nil
}

// gapBelow is where the entries below e end when e is the lifecycle entry
// of a seq jump (GapAfter), else 0.
func gapBelow(e leasestore.Entry) uint64 {
	if e.Kind != leasestore.KindLifecycle {
		return 0
	}
	rec, err := journal.Decode(e)
	if err != nil {
		return 0
	}
	if r, ok := rec.(*journal.Lifecycle); ok && r.GapAfter > 0 && r.GapAfter < e.Seq {
		return r.GapAfter
	}
	return 0
}
