package host

import (
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
// plugin.
func notDispatchedEntry(turnID string, err error) leasestore.EntryInput {
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
