package host

import (
	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/leasestore"
)

// IdleStopDetail is the release detail (the lease's death evidence) of a
// session whose plugin the host stopped after Config.IdleTimeout: durable,
// so a host started later still knows the session only sleeps and resumes
// it on its next prompt.
const IdleStopDetail = "stopped after the idle timeout"

// IdleStopped reports whether rec's lease was released by an idle stop
// and nobody took it since.
func IdleStopped(rec leasestore.Session) bool {
	l := rec.Lease
	return l.Claim == leasestore.ClaimReleased && l.DeathEvidence != nil && l.DeathEvidence.Detail == IdleStopDetail
}

// StartFailed reports whether rec's first start failed: its lease is
// released and no provider handle was ever proven, so it has no
// conversation to resume (its journal says why it failed).
func StartFailed(rec leasestore.Session) bool {
	return rec.Lease.Claim == leasestore.ClaimReleased && len(rec.Handles) == 0 && !rec.Lease.Stage.Latched()
}

// StateOf is rec's api.Session.State, given whether it runs in this host.
func StateOf(rec leasestore.Session, running bool) string {
	l := rec.Lease
	switch {
	case running:
		return api.StateRunning
	case l.Stage.Latched() || l.Claim == leasestore.ClaimConflicted:
		return api.StateLatched
	case l.Claim == leasestore.ClaimReserved || l.Claim == leasestore.ClaimLive:
		return api.StateHeld
	case StartFailed(rec):
		return api.StateFailed
	case IdleStopped(rec):
		return api.StateIdle
	default:
		return api.StateStopped
	}
}
