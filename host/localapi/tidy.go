package localapi

import (
	"context"
	"errors"
	"fmt"
	"time"

	acp "github.com/coder/acp-go-sdk"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/leasestore"
)

// The methods that tidy the state directory: stop (one session), stopAll,
// remove and prune. Each answers for sessions by id; the host decides what
// may be removed (host.RemoveSession).

// stop stops one session. A stopped, idle or failed session the host knows
// that does not run in it was stopped already: that is the answer, not an
// error, so stopping is idempotent for a client. A latched or held one is
// not: its plugin may be alive in another process, and "stopped already"
// would tell the client a lie it acts on, so it is CodeSessionHeld with
// the reason. An unknown session is CodeNotFound.
func (a *agent) stop(ctx context.Context, id string) (api.StopResult, error) {
	h := a.srv.Host
	if s, ok := h.Session(id); ok {
		if err := s.Stop(ctx); err != nil {
			return api.StopResult{}, apiError(err)
		}
		return api.StopResult{}, nil
	}
	if h.Undecided(id) {
		return api.StopResult{}, apiError(fmt.Errorf("session %q: %w", id, host.ErrUndecided))
	}
	if rec, err := h.Store().Get(ctx, id); err != nil {
		if errors.Is(err, leasestore.ErrNotFound) {
			return api.StopResult{}, &acp.RequestError{Code: api.CodeNotFound, Message: fmt.Sprintf("no session %q in this host", id)}
		}
		return api.StopResult{}, apiError(err)
	} else if msg := heldReason(rec); msg != "" {
		return api.StopResult{}, &acp.RequestError{Code: api.CodeSessionHeld, Message: fmt.Sprintf(
			"session %q was not stopped: %s; its plugin may still run in another process (agenthost status and agenthost sessions show %s say what holds it)", id, msg, id)}
	}
	return api.StopResult{AlreadyStopped: true}, nil
}

// heldReason says why rec's lease is held or latched, or "" when it is
// neither (host.StateOf of a session not running here).
func heldReason(rec leasestore.Session) string {
	l := rec.Lease
	switch host.StateOf(rec, false) {
	case api.StateLatched:
		if l.LatchReason != "" {
			return fmt.Sprintf("it is latched (%s)", l.LatchReason)
		}
		return fmt.Sprintf("its lease is latched (%s, %s)", l.Claim, l.Stage)
	case api.StateHeld:
		return fmt.Sprintf("its lease is %s at fence %d by a plugin this host does not run", l.Claim, l.Fence)
	}
	return ""
}

// runs reports whether session id runs in this host.
func (a *agent) runs(id string) bool {
	_, ok := a.srv.Host.Session(id)
	return ok
}

func (a *agent) stopAll(ctx context.Context) api.StopAllResult {
	rep := a.srv.Host.StopAll(ctx)
	return api.StopAllResult{Stopped: rep.Stopped, Failed: errorTexts(rep.Failed)}
}

func (a *agent) remove(ctx context.Context, p api.Params) (api.RemoveResult, error) {
	rem, err := a.srv.Host.RemoveSession(ctx, p.SessionID, p.Force)
	if err != nil {
		return api.RemoveResult{}, apiError(err)
	}
	return api.RemoveResult{Stopped: rem.Stopped, FreedBytes: rem.FreedBytes}, nil
}

func (a *agent) prune(ctx context.Context, p api.Params) (api.PruneResult, error) {
	age, err := pruneAge(p.OlderThan)
	if err != nil {
		return api.PruneResult{}, errf("%v", err)
	}
	rep, err := a.srv.Host.Prune(ctx, age, p.DryRun)
	if err != nil {
		return api.PruneResult{}, apiError(err)
	}
	out := api.PruneResult{Removed: rep.Removed, DryRun: p.DryRun, Failed: errorTexts(rep.Failed)}
	if rep.Unlisted != nil {
		out.Unlisted = rep.Unlisted.Error()
	}
	return out, nil
}

// pruneAge parses prune's olderThan: a Go duration, not negative.
func pruneAge(s string) (time.Duration, error) {
	const how = `write a Go duration such as "72h" or "30m" (days are hours: "168h" for a week)`
	if s == "" {
		return 0, fmt.Errorf("olderThan is required: %s", how)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("olderThan %q is not a duration: %s", s, how)
	}
	if d < 0 {
		return 0, fmt.Errorf("olderThan %q is negative: %s", s, how)
	}
	return d, nil
}

func errorTexts(errs map[string]error) map[string]string {
	if len(errs) == 0 {
		return nil
	}
	out := make(map[string]string, len(errs))
	for id, err := range errs {
		out[id] = err.Error()
	}
	return out
}
