package probe

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"
)

// ReaperScope is the scope name the reaper reports its failures under.
const ReaperScope = "orphan-reaper"

// Reaper stops plugin processes that carry this host's spawn-token variable
// but whose token no lease owns: children started under a reservation whose
// record was lost (the crash beat the durable write, or the store was
// restored from an older backup). They are unreachable, yet still connected
// to a provider conversation.
//
// Only a token match justifies acting on a process; neither age nor CPU is
// evidence. Each process is re-identified right before every signal, through
// a pidfd on Linux, so a recycled pid is never signalled. Stopping is a
// request: it never proves an exit or licenses a new owner; the lease moves
// only on a later probe's evidence.
//
// Reap never fails the caller: every failure goes to OnError (or the log).
type Reaper struct {
	// TokenVar is this host's spawn-token variable (see TokenVariable).
	TokenVar string
	// Table reads the process table. Default: the platform's, reading
	// TokenVar.
	Table Table
	// Owned reports whether some lease owns token, as its reserved spawn
	// token or its owner's. It must read the store's current state when
	// called: the reaper asks after its scan, so a reservation made
	// meanwhile protects its child. When it cannot tell (the store could not
	// be read completely) it returns an error and the reaper stops without
	// signalling anything. Required.
	Owned func(token string) (bool, error)
	// Grace is how long a process group gets between SIGTERM and SIGKILL.
	// Default: 2s.
	Grace time.Duration
	// SocketRoot is the directory holding one socket directory per plugin,
	// named by its spawn token. Entries whose token no lease owns and no
	// live process carries are removed. Empty: no socket cleanup.
	SocketRoot string
	// OnError receives every failure with scope ReaperScope. Default: the
	// failure is logged at error level.
	OnError func(scope string, err error)
	// Logger receives progress. Default: no logging.
	Logger hclog.Logger
}

// ReapReport says what one Reap found and did.
type ReapReport struct {
	// Orphans are the processes found carrying a token no lease owns.
	Orphans []Process
	// Stopped are the orphan pids confirmed gone after signalling.
	Stopped []int
	// RemovedSockets are the socket directories removed.
	RemovedSockets []string
	// Failures counts the errors reported through OnError.
	Failures int
}

func (r *Reaper) log() hclog.Logger {
	if r.Logger == nil {
		return hclog.NewNullLogger()
	}
	return r.Logger
}

func (r *Reaper) report(rep *ReapReport, err error) {
	rep.Failures++
	if r.OnError != nil {
		r.OnError(ReaperScope, err)
		return
	}
	r.log().Error("orphan reaper failed", "error", err)
}

// Reap finds and stops orphans, then removes stale socket directories.
func (r *Reaper) Reap(ctx context.Context) (rep ReapReport) {
	defer func() {
		// A bug here must not take the host down with it.
		if p := recover(); p != nil {
			r.report(&rep, fmt.Errorf("orphan reaper panicked: %v", p))
		}
	}()
	if r.Owned == nil {
		r.report(&rep, errors.New("orphan reaper has no lease view (Owned is nil); refusing to judge any process"))
		return rep
	}
	if r.TokenVar == "" && r.Table == nil {
		r.report(&rep, errors.New("orphan reaper has no spawn-token variable; refusing to judge any process"))
		return rep
	}
	table := r.Table
	if table == nil {
		table = platformTable(r.TokenVar)
	}
	procs, err := table.Scan(ctx)
	if errors.Is(err, ErrCannotEnumerate) {
		r.log().Debug("this host cannot enumerate spawn tokens; no orphans can be proven", "error", err)
		return rep
	}
	if err != nil {
		r.report(&rep, fmt.Errorf("scan for orphan plugins: %w", err))
		return rep
	}
	// Never touch this process, its ancestors (the host may have been
	// started from inside an old plugin's tree, say from an agent's shell),
	// or their process groups; and never a token this process inherited.
	self := os.Getpid()
	protected, protectedGroups := lineage(procs, self)
	protectedGroups[ownGroup()] = true
	inherited := ""
	if r.TokenVar != "" {
		inherited = os.Getenv(r.TokenVar)
	}
	for _, p := range procs {
		if p.Token == "" || protected[p.PID] || (inherited != "" && p.Token == inherited) {
			continue
		}
		owned, err := r.Owned(p.Token)
		if err != nil {
			r.report(&rep, fmt.Errorf("cannot tell which spawn tokens leases own, so no process is judged an orphan: %w", err))
			return rep
		}
		if !owned {
			rep.Orphans = append(rep.Orphans, p)
		}
	}
	grace := r.Grace
	if grace <= 0 {
		grace = 2 * time.Second
	}
	for _, orphan := range rep.Orphans {
		// A non-leader whose group leader is an orphan too is stopped with
		// that group.
		if orphan.PGID != orphan.PID && slices.ContainsFunc(rep.Orphans, func(o Process) bool {
			return o.PID == orphan.PGID && o.PGID == o.PID
		}) {
			continue
		}
		// The group is signalled only when the orphan leads it and it is
		// not a group this process or its ancestors belong to.
		group := orphan.PGID == orphan.PID && !protectedGroups[orphan.PGID]
		var members []Process
		if group {
			for _, p := range procs {
				if p.PGID == orphan.PGID && p.PID != orphan.PID && !protected[p.PID] {
					members = append(members, p)
				}
			}
		}
		r.log().Info("stopping orphan plugin", "pid", orphan.PID, "whole_group", group, "group_members", len(members))
		gone, err := stopOrphan(ctx, table, orphan, members, group, grace)
		if err != nil {
			r.report(&rep, fmt.Errorf("stop orphan pid %d: %w", orphan.PID, err))
		}
		if gone {
			rep.Stopped = append(rep.Stopped, orphan.PID)
		}
	}
	if r.SocketRoot != "" {
		r.removeStaleSockets(ctx, table, &rep)
	}
	return rep
}

// removeStaleSockets removes socket directories whose token no lease owns
// and no live process carries.
func (r *Reaper) removeStaleSockets(ctx context.Context, table Table, rep *ReapReport) {
	entries, err := os.ReadDir(r.SocketRoot)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	if err != nil {
		r.report(rep, fmt.Errorf("list socket directory %s: %w", r.SocketRoot, err))
		return
	}
	if len(entries) == 0 {
		return
	}
	procs, err := table.Scan(ctx)
	if err != nil {
		// Without a fresh scan a live plugin's socket could be removed.
		r.report(rep, fmt.Errorf("scan before removing stale sockets: %w", err))
		return
	}
	live := make(map[string]bool)
	for _, p := range procs {
		if p.Token != "" && !p.Zombie {
			live[p.Token] = true
		}
	}
	for _, e := range entries {
		token := e.Name()
		if live[token] {
			continue
		}
		owned, err := r.Owned(token)
		if err != nil {
			r.report(rep, fmt.Errorf("cannot tell whether socket %s is owned; leaving it: %w", token, err))
			return
		}
		if owned {
			continue
		}
		path := filepath.Join(r.SocketRoot, token)
		if err := os.RemoveAll(path); err != nil {
			r.report(rep, fmt.Errorf("remove stale socket %s: %w", path, err))
			continue
		}
		rep.RemovedSockets = append(rep.RemovedSockets, path)
	}
}

// sameOrphan reports whether cur, read right before a signal, is still the
// process the scan found: same start, and no other token.
func sameOrphan(scanned, cur Process) bool {
	if cur.Presence != Present {
		return false
	}
	if scanned.StartTicks != 0 || cur.StartTicks != 0 {
		if cur.StartTicks != scanned.StartTicks {
			return false
		}
	} else if !cur.StartTime.Equal(scanned.StartTime) {
		return false
	}
	return !cur.TokenRead || cur.Token == "" || cur.Token == scanned.Token
}

// lineage returns self and its ancestors as the scan saw them, and their
// process groups.
func lineage(procs []Process, self int) (pids, groups map[int]bool) {
	byPID := make(map[int]Process, len(procs))
	for _, p := range procs {
		byPID[p.PID] = p
	}
	pids, groups = map[int]bool{}, map[int]bool{}
	for pid := self; pid > 0 && !pids[pid]; {
		pids[pid] = true
		p, ok := byPID[pid]
		if !ok {
			break
		}
		if p.PGID > 0 {
			groups[p.PGID] = true
		}
		pid = p.PPID
	}
	return pids, groups
}
