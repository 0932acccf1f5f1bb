package probe

import (
	"fmt"
	"strings"
	"time"

	"github.com/agenthost/agenthost/leasestore"
)

// Outcome is the answer a probe gives about a lease's owner.
type Outcome string

const (
	// ExitObserved: this host watched the exact process exit, or the
	// kernel shows the recorded process exited (a zombie awaiting reaping).
	ExitObserved Outcome = "exit-observed"
	// PIDAbsent: the kernel says no process has the recorded pid.
	PIDAbsent Outcome = "pid-absent"
	// IdentityMismatch: a process has the pid, but it is provably another
	// process (see Result.Field).
	IdentityMismatch Outcome = "identity-mismatch"
	// IdentityMatched: the recorded process is alive, proven by something
	// PID-reuse-safe (see Result.MatchedOn).
	IdentityMatched Outcome = "identity-matched"
	// ReservationUnused: the lease names no owner, and no process can be
	// carrying what it reserved.
	ReservationUnused Outcome = "reservation-unused"
	// Indeterminate: the evidence is incomplete or contradictory. Never
	// grounds for eviction.
	Indeterminate Outcome = "indeterminate"
)

// Field is a piece of identity evidence.
type Field string

const (
	FieldSpawnToken Field = "spawn-token"
	FieldStartTime  Field = "start-time"
	FieldBootID     Field = "boot-id"
)

// Result is one probe's verdict with what it rests on.
type Result struct {
	Outcome Outcome
	// Field is the evidence that differed, for IdentityMismatch.
	Field Field
	// MatchedOn is the evidence that agreed, for IdentityMatched.
	MatchedOn []Field
	// Reason explains an Indeterminate result (or adds detail to others).
	Reason string
}

func indeterminate(format string, args ...any) Result {
	return Result{Outcome: Indeterminate, Reason: fmt.Sprintf(format, args...)}
}

func mismatch(f Field, format string, args ...any) Result {
	return Result{Outcome: IdentityMismatch, Field: f, Reason: fmt.Sprintf(format, args...)}
}

// ProvenDead reports whether the result proves the owner gone. Only these
// outcomes may evict a lease.
func (r Result) ProvenDead() bool {
	switch r.Outcome {
	case ExitObserved, PIDAbsent, IdentityMismatch:
		return true
	}
	return false
}

// ProvenAlive reports whether the result proves the recorded owner alive: a
// matched pid counts only when something PID-reuse-safe matched with it.
func (r Result) ProvenAlive() bool {
	return r.Outcome == IdentityMatched && len(r.MatchedOn) > 0
}

// Evidence converts a result that frees the lease (a proven death, or an
// unused reservation) into the evidence an eviction records. ok is false for
// every other result.
func (r Result) Evidence(now time.Time) (ev leasestore.DeathEvidence, ok bool) {
	switch r.Outcome {
	case ExitObserved:
		return leasestore.DeathEvidence{Kind: leasestore.EvidenceExitObserved, Detail: r.Reason, ObservedAt: now}, true
	case PIDAbsent:
		return leasestore.DeathEvidence{Kind: leasestore.EvidencePIDAbsent, Detail: r.Reason, ObservedAt: now}, true
	case IdentityMismatch:
		return leasestore.DeathEvidence{Kind: leasestore.EvidenceIdentityMismatch, Detail: string(r.Field) + ": " + r.Reason, ObservedAt: now}, true
	case ReservationUnused:
		return leasestore.DeathEvidence{Kind: leasestore.EvidencePIDAbsent, Detail: "reservation never spawned: " + r.Reason, ObservedAt: now}, true
	}
	return leasestore.DeathEvidence{}, false
}

func (r Result) String() string {
	var b strings.Builder
	b.WriteString(string(r.Outcome))
	switch {
	case r.Field != "":
		fmt.Fprintf(&b, "{%s}", r.Field)
	case len(r.MatchedOn) > 0:
		fields := make([]string, len(r.MatchedOn))
		for i, f := range r.MatchedOn {
			fields[i] = string(f)
		}
		fmt.Fprintf(&b, "{%s}", strings.Join(fields, ","))
	}
	if r.Reason != "" {
		b.WriteString(": " + r.Reason)
	}
	return b.String()
}
