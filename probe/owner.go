package probe

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/agenthost/agenthost/leasestore"
)

// DefaultStartTolerance is how far a creation time read on a platform
// without exact start ticks may differ from the recorded one and still
// match. gopsutil v4 reports creation times in milliseconds derived from
// the kernel's own start stamp (macOS p_starttime in µs, Windows FILETIME in
// 100 ns), so a same-process reading differs only by rounding; 10 ms covers
// that and is far below the time it takes a pid to be reused. On Linux
// start ticks are compared exactly, with no tolerance at all.
const DefaultStartTolerance = 10 * time.Millisecond

// Prober answers, with evidence, whether the owner a lease records is still
// the process that was started for it. Every question it cannot answer
// PID-reuse-safely comes back Indeterminate: a wrong "dead" puts a second
// writer on one provider conversation, a wrong "alive" only delays.
//
// The zero value is not usable: HostID is required.
type Prober struct {
	// HostID is this host's id. Owners recorded on another host are never
	// probed: their pids mean nothing here.
	HostID string
	// TokenVar is the environment variable plugins of this host carry their
	// spawn token in (see TokenVariable). Used to build the default Table.
	TokenVar string
	// Table reads the process table. Default: the platform's table (ProcFS
	// on Linux) reading TokenVar.
	Table Table
	// ExitObserved reports whether this host watched the given process
	// exit. Default: never.
	ExitObserved func(leasestore.ProcessIdentity) bool
	// StartTolerance applies where only creation times exist (not Linux).
	// Default: DefaultStartTolerance.
	StartTolerance time.Duration
}

func (p *Prober) table() Table {
	if p.Table != nil {
		return p.Table
	}
	return platformTable(p.TokenVar)
}

// IdentifyStarted is Identify for a process the caller has just started.
// The exec that started it may still be under way: the kernel lets the
// parent return from the spawn before the new program's environment is
// readable, and /proc then shows none, so no spawn token. An empty token is
// read again for up to two seconds; a different token is never retried, and
// one still missing afterwards is returned as read (a lease refuses it).
func (p *Prober) IdentifyStarted(ctx context.Context, pid int) (leasestore.ProcessIdentity, error) {
	const (
		settle = 2 * time.Second
		step   = 2 * time.Millisecond
	)
	deadline := time.Now().Add(settle)
	for {
		ident, err := p.Identify(ctx, pid)
		if err != nil || ident.SpawnToken != "" || time.Now().After(deadline) {
			return ident, err
		}
		select {
		case <-ctx.Done():
			return ident, nil
		case <-time.After(step):
		}
	}
}

// Identify reads the identity of a live process on this host, as a lease
// records it. It returns ErrNoProcess when the kernel says the pid is gone
// and ErrUnverifiable when it cannot read enough to identify the process.
func (p *Prober) Identify(ctx context.Context, pid int) (leasestore.ProcessIdentity, error) {
	t := p.table()
	procs, err := t.Read(ctx, []int{pid})
	if err != nil {
		return leasestore.ProcessIdentity{}, fmt.Errorf("%w: pid %d: %v", ErrUnverifiable, pid, err)
	}
	proc := procs[0]
	switch proc.Presence {
	case Absent:
		return leasestore.ProcessIdentity{}, fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
	case Unknown:
		return leasestore.ProcessIdentity{}, fmt.Errorf("%w: pid %d: %v", ErrUnverifiable, pid, proc.Err)
	}
	if proc.StartTicks == 0 && proc.StartTime.IsZero() {
		return leasestore.ProcessIdentity{}, fmt.Errorf("%w: pid %d: no start time", ErrUnverifiable, pid)
	}
	id := leasestore.ProcessIdentity{HostID: p.HostID, PID: pid, StartTicks: proc.StartTicks, StartTime: proc.StartTime, SpawnToken: proc.Token}
	if proc.StartTicks != 0 {
		// Ticks count from boot: they identify a process only together
		// with the boot they count from.
		if id.BootID, err = t.BootID(); err != nil || id.BootID == "" {
			return leasestore.ProcessIdentity{}, fmt.Errorf("%w: pid %d: boot id: %v", ErrUnverifiable, pid, err)
		}
	}
	return id, nil
}

// Probe probes one session's owner. It is ProbeAll for one session.
func (p *Prober) Probe(ctx context.Context, s leasestore.Session) Result {
	return p.ProbeAll(ctx, []leasestore.Session{s})[s.ID]
}

// ProbeAll probes every session's owner with at most one read of the
// process table for all local owners and at most one spawn-token scan for
// all ownerless reservations. The result has an entry for every session.
func (p *Prober) ProbeAll(ctx context.Context, sessions []leasestore.Session) map[string]Result {
	out := make(map[string]Result, len(sessions))
	var local []leasestore.Session
	var scan tokenScan
	for _, s := range sessions {
		owner := s.Lease.Owner
		switch {
		case owner == nil:
			out[s.ID] = p.probeReservation(ctx, s, &scan)
		case owner.HostID != p.HostID:
			out[s.ID] = indeterminate("the owner runs on host %q, which this host (%q) cannot probe", owner.HostID, p.HostID)
		case p.ExitObserved != nil && p.ExitObserved(*owner):
			out[s.ID] = Result{Outcome: ExitObserved, Reason: fmt.Sprintf("this host watched pid %d exit", owner.PID)}
		default:
			local = append(local, s)
		}
	}
	if len(local) == 0 {
		return out
	}
	t := p.table()
	pids := make([]int, len(local))
	for i, s := range local {
		pids[i] = s.Lease.Owner.PID
	}
	procs, err := t.Read(ctx, pids)
	if err != nil {
		for _, s := range local {
			out[s.ID] = indeterminate("could not read the process table: %v", err)
		}
		return out
	}
	boot, bootErr := t.BootID()
	for i, s := range local {
		out[s.ID] = p.judge(*s.Lease.Owner, procs[i], boot, bootErr)
	}
	return out
}

// probeReservation judges a lease that names no owner process.
func (p *Prober) probeReservation(ctx context.Context, s leasestore.Session, scan *tokenScan) Result {
	l := s.Lease
	if !l.ProcesslessAt.IsZero() {
		return Result{Outcome: ReservationUnused, Reason: "the acquisition durably failed before any spawn attempt"}
	}
	if l.ReservedBy != "" && l.ReservedBy != p.HostID {
		// The token was minted for a child on that host: a scan here
		// would find no process carrying it and wrongly answer unused.
		return indeterminate("reserved by host %q, which this host (%q) cannot probe", l.ReservedBy, p.HostID)
	}
	if l.ReservedSpawnToken == "" {
		if l.Claim == leasestore.ClaimReserved {
			return indeterminate("the reservation recorded no spawn token to scan for")
		}
		// Nothing was minted that a child could carry: answering
		// indeterminate here would latch every released record.
		return Result{Outcome: ReservationUnused, Reason: "the lease names neither an owner nor a spawn token"}
	}
	pids, err := scan.find(ctx, p.table(), l.ReservedSpawnToken)
	switch {
	case err != nil:
		return indeterminate("this host could not enumerate spawn tokens: %v", err)
	case len(pids) > 0:
		// Evicting here would put a second writer on a live conversation.
		return indeterminate("the reserved spawn token is live on %d process(es) %v", len(pids), pids)
	}
	if n := len(s.Handles); n > 0 && s.Handles[n-1].Fence == l.Fence {
		return indeterminate("the provider reported a handle at this reservation's fence %d", l.Fence)
	}
	return Result{Outcome: ReservationUnused, Reason: "no process carries the reserved spawn token"}
}

// tokenScan runs the spawn-token scan at most once per ProbeAll, however many
// reservations need it.
type tokenScan struct {
	done   bool
	tokens map[string][]int
	err    error
}

// errHiddenEnvironment: a process that could be one of this host's plugins
// has an environment the scan cannot read, so "no process carries the
// token" cannot be proven.
var errHiddenEnvironment = errors.New("cannot read the environment of a process this host may have started")

func (ts *tokenScan) find(ctx context.Context, t Table, token string) ([]int, error) {
	if !ts.done {
		ts.done = true
		ts.tokens, ts.err = scanTokens(ctx, t)
	}
	return ts.tokens[token], ts.err
}

// scanTokens indexes the spawn tokens of every process. A live process whose
// environment cannot be read, and that runs as this user (or whose owner is
// unknown), could be carrying any token: the scan then fails rather than
// answer "none". Exempt are processes that cannot be a plugin this host
// started: other users' (a non-dumpable process shows as root and is
// exempt on the same grounds), the namespace's init (pid 1), and kernel
// threads (kthreadd, pid 2, and its children).
func scanTokens(ctx context.Context, t Table) (map[string][]int, error) {
	procs, err := t.Scan(ctx)
	if err != nil {
		return nil, err
	}
	uid := os.Getuid()
	tokens := make(map[string][]int)
	for _, proc := range procs {
		if proc.Token != "" {
			tokens[proc.Token] = append(tokens[proc.Token], proc.PID)
			continue
		}
		exempt := proc.PID == 1 || proc.PID == 2 || proc.PPID == 2 || proc.PID == os.Getpid()
		if !proc.TokenRead && !proc.Zombie && !exempt && (proc.UID < 0 || proc.UID == uid) {
			return nil, fmt.Errorf("%w: pid %d: %v", errHiddenEnvironment, proc.PID, proc.Err)
		}
	}
	return tokens, nil
}

// judge compares a recorded owner with what the table read at its pid.
func (p *Prober) judge(owner leasestore.ProcessIdentity, proc Process, boot string, bootErr error) Result {
	switch proc.Presence {
	case Absent:
		return Result{Outcome: PIDAbsent, Reason: fmt.Sprintf("no process has pid %d", owner.PID)}
	case Unknown:
		// Permission and transient failures fail closed.
		return indeterminate("pid %d cannot be inspected: %v", owner.PID, proc.Err)
	}
	var matched []Field
	if proc.TokenRead && proc.Token != "" {
		if proc.Token != owner.SpawnToken {
			return mismatch(FieldSpawnToken, "pid %d carries another spawn token", owner.PID)
		}
		matched = append(matched, FieldSpawnToken)
	}
	// A boot id is part of the start evidence: start ticks count from a
	// boot. Another boot means the recorded process cannot be running —
	// unless the token says it is, and then the evidence contradicts itself.
	if owner.StartTicks != 0 && owner.BootID != "" && bootErr == nil && boot != "" && boot != owner.BootID {
		if len(matched) > 0 {
			return indeterminate("pid %d echoes the spawn token but the owner was recorded in another boot: contradictory evidence", owner.PID)
		}
		return mismatch(FieldBootID, "the owner was started in boot %s; this is boot %s", owner.BootID, boot)
	}
	if same, known := p.sameStart(owner, proc, boot, bootErr); known {
		switch {
		case same && proc.Zombie:
			// The recorded process itself has exited and awaits reaping:
			// the kernel shows its exit.
			return Result{Outcome: ExitObserved, Reason: fmt.Sprintf("pid %d has exited and awaits reaping (zombie)", owner.PID)}
		case !same && len(matched) > 0:
			return indeterminate("pid %d echoes the spawn token but its start time differs: contradictory evidence", owner.PID)
		case !same:
			return mismatch(FieldStartTime, "pid %d started at another time than the recorded owner", owner.PID)
		default:
			matched = append(matched, FieldStartTime)
		}
	}
	if len(matched) == 0 {
		// Reporting a match on a bare pid is exactly what produces two
		// writers after a pid is reused.
		return indeterminate("pid %d is present but neither its spawn token nor its start time could be verified", owner.PID)
	}
	return Result{Outcome: IdentityMatched, MatchedOn: matched}
}

// sameStart compares start evidence; known is false when there is nothing
// comparable on both sides.
func (p *Prober) sameStart(owner leasestore.ProcessIdentity, proc Process, boot string, bootErr error) (same, known bool) {
	if owner.StartTicks != 0 && proc.StartTicks != 0 {
		// Ticks are exact within one boot; without knowing the boot they
		// are not comparable.
		if owner.BootID != "" && (bootErr != nil || boot == "") {
			return false, false
		}
		return owner.StartTicks == proc.StartTicks, true
	}
	if !owner.StartTime.IsZero() && !proc.StartTime.IsZero() {
		tol := p.StartTolerance
		if tol <= 0 {
			tol = DefaultStartTolerance
		}
		d := owner.StartTime.Sub(proc.StartTime)
		return d <= tol && d >= -tol, true
	}
	return false, false
}
