package host

import (
	"context"
	"errors"
	"time"

	"github.com/agenthost/agenthost/internal/pluginclient"
	"github.com/agenthost/agenthost/leasestore"
)

// Provider state makes a session portable: a plugin whose identity says
// exports_state hands over its provider conversation (a CLI's transcript
// files, whatever its plugin keeps) after every turn, in cluster mode (or
// with ProviderStateAlways), the host keeps the newest with the session in
// the store (Store.PutProviderState, fenced like an append), and
// a resume of that conversation's handle, on any machine, carries it back
// for the plugin to import before it resumes. A session whose plugin does
// not export is resumable only on its own machine.
//
// The export is best effort and never fails a turn: an export or a store
// write that fails is logged, and the stored state stays the previous
// turn's. So a resume may carry a state older than what the plugin's
// machine holds of the conversation; sdk.StateImporter tells importers to
// keep the newer.

// ProviderStateMode says when a turn's provider state is exported and
// stored (Config.ProviderState).
type ProviderStateMode int

const (
	// ProviderStateInCluster stores it in cluster mode only, where another
	// machine may continue the session. On one machine the plugin's own
	// files hold the conversation, and an export (tens of KB and growing,
	// ~80 ms for a reference plugin's turn) would only delay every turn's
	// stop.
	ProviderStateInCluster ProviderStateMode = iota
	// ProviderStateAlways stores it on a single machine too, so a resume
	// carries the conversation even to a plugin whose files of it are gone.
	ProviderStateAlways
)

// storesProviderState reports whether the host exports and stores its
// sessions' provider state.
func (h *Host) storesProviderState() bool {
	return h.cl != nil || h.cfg.ProviderState == ProviderStateAlways
}

// exportTimeout bounds one export and its store write. The turn's Prompt
// is woken only after it (see storeProviderState).
const exportTimeout = 30 * time.Second

// storeProviderState exports the plugin's provider state and stores it,
// once the plugin reported turn's stop and before that stop is journaled
// (and so before the turn's Prompt is woken): a client that saw a turn end
// can count on a host taking the session over to continue from that turn
// (unless the export failed, which is logged). The pump calls it, so the
// session's next updates wait for it.
func (s *Session) storeProviderState(ctx context.Context, turn string) {
	if !s.proc.exports || !s.h.storesProviderState() {
		return
	}
	ectx, cancel := context.WithTimeout(ctx, exportTimeout)
	defer cancel()
	start := time.Now()
	handle, data, err := s.proc.att.ExportState(ectx)
	if err == nil {
		err = s.h.store.PutProviderState(ectx, s.id, s.fence, leasestore.ProviderState{Handle: handle, Data: data})
	}
	if err != nil {
		if ctx.Err() != nil {
			// The host is letting go of the session.
			s.h.log.Debug("the provider state was not stored after a turn", "session", s.id, "turn", turn, "error", err)
			return
		}
		s.h.log.Warn("the provider state was not stored after a turn: a host on another machine would continue the conversation from an earlier turn",
			"session", s.id, "turn", turn, "error", err)
		return
	}
	s.h.log.Debug("provider state stored", "session", s.id, "turn", turn, "handle", handle, "bytes", len(data), "took", time.Since(start))
}

// withProviderState gives the resume of session id the stored provider
// state when it continues the handle resumed; without one (none stored,
// another handle, a store failure, logged) the plugin resumes from what its
// machine holds.
func (h *Host) withProviderState(ctx context.Context, id string, req *pluginclient.ResumeSessionRequest) {
	st, err := h.store.GetProviderState(ctx, id)
	switch {
	case errors.Is(err, leasestore.ErrNotFound):
		return
	case err != nil:
		h.log.Warn("the stored provider state could not be read; resuming from what this machine holds", "session", id, "error", err)
		return
	case st.Handle != req.Handle:
		h.log.Debug("the stored provider state continues another handle; resuming without it", "session", id,
			"stored", st.Handle, "resumed", req.Handle)
		return
	}
	req.ProviderState = st.Data
}
