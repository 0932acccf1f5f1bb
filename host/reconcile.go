package host

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/agenthost/agenthost/internal/pluginclient"
	"github.com/agenthost/agenthost/internal/wire"
	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/leasestore"
	"github.com/agenthost/agenthost/probe"
)

// Action is what a host decided for a session whose owner it probed.
type Action string

const (
	// ActionFree: nobody held the lease; nothing to decide.
	ActionFree Action = "free"
	// ActionReadopted: the plugin survived, proved it is the recorded
	// owner, and this host drives it at the next fence.
	ActionReadopted Action = "readopted"
	// ActionEvicted: the owner is proven gone; the lease was released with
	// the evidence and the session is resumable from its provider handle.
	ActionEvicted Action = "evicted"
	// ActionLatched: the evidence is incomplete; the session stays latched
	// (recovering or manual-recovery) until new evidence arrives.
	ActionLatched Action = "latched"
)

// Decision is a host's verdict on one session, with what it rests on.
type Decision struct {
	Action Action
	Probe  probe.Result
	Reason string
}

// ReconcileScope is the scope of reconciliation failures sent to OnError.
const ReconcileScope = "reconcile"

// beginReconcile marks every lease unreconciled and lists the sessions to
// decide; each is undecided until reconcileAll decided it. Unreadable
// records stay unreconciled, so they never get a writer.
//
// In cluster mode only the leases this host must decide are marked
// (MarkHostUnreconciled) and listed: its own, and held ones naming no
// host. Other hosts' sessions are theirs (remote-live) or, once their host
// is lost, taken over (takeoverLoop); released ones need no decision.
func (h *Host) beginReconcile(ctx context.Context) ([]leasestore.Session, error) {
	mark := h.store.MarkAllUnreconciled
	if h.cl != nil {
		mark = func(ctx context.Context) (int, error) { return h.store.MarkHostUnreconciled(ctx, h.cfg.HostID) }
	}
	if _, err := mark(ctx); err != nil {
		return nil, err
	}
	sessions, err := h.store.List(ctx)
	if err != nil {
		if len(sessions) == 0 {
			return nil, err
		}
		h.report(ReconcileScope, err)
	}
	if h.cl != nil {
		sessions = slices.DeleteFunc(sessions, func(s leasestore.Session) bool { return !s.Lease.ReconciledBy(h.cfg.HostID) })
	}
	h.mu.Lock()
	for _, s := range sessions {
		h.undecided[s.ID] = true
	}
	h.mu.Unlock()
	return sessions, nil
}

// reconcileAll decides every session beginReconcile listed (see Open),
// each one's decision recorded as it is made. Sessions are decided
// independently, reconcileParallelism at a time: readopting one is mostly
// waiting (a reconnect, a few RPCs, a durable lease move), and a plugin
// that does not answer holds up only its own decision, for at most
// ReattachTimeout. The pass's readoptions move their leases through one
// leaseBatcher, so the moves that meet share a synced commit; it ends with
// the pass. A decision holds the session's start turn, so no StartSession
// of it runs meanwhile.
func (h *Host) reconcileAll(ctx context.Context, sessions []leasestore.Session) {
	moves := startLeaseBatcher(ctx, h.store)
	h.mu.Lock()
	h.moves = moves
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.moves = nil
		h.mu.Unlock()
		moves.close()
	}()
	results := h.prober.ProbeAll(ctx, sessions)
	sem := make(chan struct{}, reconcileParallelism)
	var wg sync.WaitGroup
	for _, s := range sessions {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			release, err := h.startTurn(ctx, s.ID)
			if err != nil {
				return // the host is closing: the session stays undecided
			}
			defer release()
			d := h.decide(ctx, s, results[s.ID])
			h.mu.Lock()
			h.decisions[s.ID] = d
			delete(h.undecided, s.ID)
			close(h.decided)
			h.decided = make(chan struct{})
			h.mu.Unlock()
			h.log.Info("session reconciled", "session", s.ID, "action", d.Action, "probe", d.Probe.String(), "reason", d.Reason)
		})
	}
	wg.Wait()
}

// ErrUndecided matches a request on a session the host has not decided
// yet since it opened (see Config.ReconcileInBackground); it matches
// leasestore.ErrReconciling too. Retry once _agenthost/status shows its
// decision.
var ErrUndecided = fmt.Errorf("not decided yet since the host started: %w", leasestore.ErrReconciling)

// reconcileMoves returns the batcher of the reconcile pass under way, or
// nil.
func (h *Host) reconcileMoves() *leaseBatcher {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.moves
}

// Undecided reports whether session id is still waiting for its restart
// decision.
func (h *Host) Undecided(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.undecided[id]
}

// AwaitDecision returns once session id is not waiting for its decision
// since open: at once when it never was. It waits up to
// Config.DecisionWait, then returns ErrUndecided; or ctx's error.
func (h *Host) AwaitDecision(ctx context.Context, id string) error {
	var timeout <-chan time.Time
	for {
		h.mu.Lock()
		undecided, decided := h.undecided[id], h.decided
		h.mu.Unlock()
		if !undecided {
			return nil
		}
		if timeout == nil {
			t := time.NewTimer(h.cfg.DecisionWait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-decided:
		case <-timeout:
			return fmt.Errorf("session %q (waited %s): %w", id, h.cfg.DecisionWait, ErrUndecided)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// reconcileParallelism bounds how many sessions are decided at once at
// open. Enough that the readoptions' lease moves meet in the batcher (at 8
// a pass of 100 sessions moved them in ~50 commits, at 32 in ~16), and that
// a plugin that does not answer holds up only its own decision: it keeps
// one of these slots until ReattachTimeout, and only this many silent
// plugins at once would delay the rest. More buys nothing: past it the host
// is bound by its CPU (BENCHMARKS.md).
const reconcileParallelism = 32

// decide applies the restart decision for one session. Every path fails
// closed: only proof of death frees a lease, only a verified identity
// readopts one, and anything else latches.
func (h *Host) decide(ctx context.Context, s leasestore.Session, res probe.Result) Decision {
	l := s.Lease
	// latchAt latches the lease at the fence this decision knows it holds,
	// never at whatever fence the store shows now: a re-probe runs on a
	// snapshot, and a session started since then holds a newer fence that
	// this stale decision must not touch (the store refuses it as stale).
	latchAt := func(fence uint64, reason string) Decision {
		cur, err := h.store.Get(ctx, s.ID)
		if err != nil {
			h.report(ReconcileScope, fmt.Errorf("latch session %q: %w", s.ID, err))
			return Decision{Action: ActionLatched, Probe: res, Reason: reason}
		}
		if cur.Lease.Fence != fence {
			// Someone else acted on the session since the snapshot.
			h.log.Debug("not latching: the lease moved since it was probed", "session", s.ID, "fence", fence, "now", cur.Lease.Fence)
			return Decision{Action: ActionLatched, Probe: res, Reason: reason}
		}
		stage := leasestore.StageManualRecovery
		if cur.Lease.Owner != nil && cur.Lease.Claim != leasestore.ClaimConflicted {
			stage = leasestore.StageRecovering
		}
		// An already latched lease stays as it is: re-latching on every
		// re-probe would only grow its journal.
		if cur.Lease.Stage != stage || cur.Lease.Unreconciled {
			_, err := h.store.Apply(ctx, s.ID, leasestore.Latch{Fence: fence, Stage: stage, Reason: reason})
			if err != nil && !errors.Is(err, leasestore.ErrStaleFence) {
				h.report(ReconcileScope, fmt.Errorf("latch session %q: %w", s.ID, err))
			}
		}
		return Decision{Action: ActionLatched, Probe: res, Reason: reason}
	}
	latch := func(reason string) Decision { return latchAt(l.Fence, reason) }
	switch {
	case l.Claim == leasestore.ClaimReleased && !l.Stage.Latched():
		if _, err := h.store.Apply(ctx, s.ID, leasestore.Reconciled{Fence: l.Fence}); err != nil {
			h.report(ReconcileScope, fmt.Errorf("reconcile session %q: %w", s.ID, err))
		}
		// A host that died between a plugin's death and journaling its
		// turn's end left the turn open.
		h.closeOpenTurn(ctx, s.ID, "the plugin that ran this turn was gone when the host restarted")
		return Decision{Action: ActionFree, Probe: res}
	case l.Claim == leasestore.ClaimConflicted && l.Owner == nil:
		return latch("conflicted, and no process is named to probe")
	case res.ProvenDead() || res.Outcome == probe.ReservationUnused:
		ev, _ := res.Evidence(h.cfg.Now())
		if _, err := h.store.Apply(ctx, s.ID, leasestore.Evict{Fence: l.Fence, Evidence: ev}); err != nil {
			h.report(ReconcileScope, fmt.Errorf("evict session %q: %w", s.ID, err))
			return Decision{Action: ActionLatched, Probe: res, Reason: err.Error()}
		}
		h.closeOpenTurn(ctx, s.ID, "the host restarted and the plugin that ran this turn is gone: "+ev.Detail)
		return Decision{Action: ActionEvicted, Probe: res, Reason: ev.Detail}
	case res.ProvenAlive() && l.Claim == leasestore.ClaimLive:
		if fence, err := h.readopt(ctx, s); err != nil {
			// A readoption that failed after moving the lease latches at the
			// fence it moved to.
			return latchAt(fence, "the owner is alive but could not be readopted: "+err.Error())
		}
		return Decision{Action: ActionReadopted, Probe: res}
	case res.ProvenAlive() && l.Claim == leasestore.ClaimReserved:
		// The plugin never became the writer. Stop it (it is verified to
		// be the recorded owner) and evict on the observed exit; the next
		// start resumes the conversation at a new fence.
		if err := h.stopUnproven(ctx, s); err != nil {
			return latch("the owner never proved itself and could not be stopped: " + err.Error())
		}
		ev := leasestore.DeathEvidence{Kind: leasestore.EvidenceExitObserved, Detail: "stopped at restart before it proved itself"}
		if _, err := h.store.Apply(ctx, s.ID, leasestore.Evict{Fence: l.Fence, Evidence: ev}); err != nil {
			return latch(err.Error())
		}
		h.closeOpenTurn(ctx, s.ID, "the host restarted and stopped the plugin, which never proved itself")
		return Decision{Action: ActionEvicted, Probe: res, Reason: ev.Detail}
	case l.Owner == nil && l.Claim == leasestore.ClaimReserved && l.ReservedSpawnToken != "" && res.Outcome == probe.Indeterminate:
		// The previous host died between spawning a plugin and committing
		// it. Only a process started for this very reservation carries its
		// token: stop exactly those (each re-identified before every
		// signal), then decide again on the new evidence.
		if err := h.stopTokenHolders(ctx, l.ReservedSpawnToken); err != nil {
			return latch(res.String() + "; stopping the unproven plugin failed: " + err.Error())
		}
		again := h.prober.Probe(ctx, s)
		if again.Outcome == probe.ReservationUnused {
			ev, _ := again.Evidence(h.cfg.Now())
			ev.Detail = "this host stopped the plugin started for the reservation before it was committed"
			if _, err := h.store.Apply(ctx, s.ID, leasestore.Evict{Fence: l.Fence, Evidence: ev}); err == nil {
				h.closeOpenTurn(ctx, s.ID, "the host restarted and "+ev.Detail)
				return Decision{Action: ActionEvicted, Probe: again, Reason: ev.Detail}
			}
		}
		return latch(again.String())
	default:
		return latch(res.String())
	}
}

// stopTokenHolders stops the processes carrying token, and nothing else.
func (h *Host) stopTokenHolders(ctx context.Context, token string) error {
	var failures []error
	r := &probe.Reaper{
		TokenVar: h.tokenVar, Table: h.cfg.ProcessTable, Grace: h.cfg.StopTimeout,
		Owned:   func(t string) (bool, error) { return t != token, nil },
		OnError: func(_ string, err error) { failures = append(failures, err) },
		Logger:  h.log.Named("reaper"),
	}
	r.Reap(ctx)
	return errors.Join(failures...)
}

// readopt reconnects to a live owner, moves the lease to the next fence,
// attaches the plugin there, and drains its outbox into the journal from
// the last update already journaled. It shares the tail of StartSession's
// steps (own, openJournal, launch) as an adopted attempt: a step that fails
// detaches the plugin, never stops it, and leaves the lease at the fence it
// returns, where decide latches it; the plugin will be re-probed and
// readopted again rather than trusted half-way.
//
// At protocol version 2 the attach comes first: one Open identifies the
// plugin, attaches it at the lease's next fence and starts its update
// stream from the last journaled update, and only then does the lease
// move. That is safe because the fence the plugin holds is not what
// guards the session; the store is. The next fence is known before the
// move (the lease's fence + 1, and the move is refused unless the lease
// still holds the fence it was read at), and nothing durable happens at
// it until the move succeeded: the journal opens, and updates are
// journaled and acknowledged, only at a fence the store holds. A host
// whose move fails (refused, the store failing) detaches at once, before
// it prompted, acknowledged or answered anything: the plugin is left
// attached at a fence no lease holds, which only means that whoever
// holds the lease at the old fence is refused as stale by the plugin —
// exactly what happens to it when a readoption succeeds — and the next
// readoption computes the same next fence, which the plugin admits
// (attaching at the fence it holds is allowed), or a higher one. Two
// hosts racing for one plugin (only possible over one store, which Badger
// locks to one process) both attach at the same fence and both read the
// same stream, but only the one whose move succeeds journals it. Reading
// the journal's last update before the move is sound for the same
// reason: only the lease's holder appends to it, and the holder at the
// old fence is gone (the probe proved its plugin alive, not its host; a
// host still appending would be refused by the store at the moved fence).
func (h *Host) readopt(ctx context.Context, s leasestore.Session) (uint64, error) {
	l := s.Lease
	if l.Owner == nil || l.Reattach == nil || l.Reattach.Address == "" {
		return l.Fence, errors.New("the lease records no reattach address")
	}
	// The membership epoch under which the lease is read as this host's.
	epoch := h.epoch()
	// The plugin configured now, read before the reattach: what the
	// readopted plugin declares is kept only if no SetAgents replaced it
	// meanwhile (learnCapabilities).
	plug, configured := h.agent(s.Agent)
	var last uint64
	v2 := l.Reattach.ProtocolVersion >= wire.ProtocolVersion2
	if v2 {
		var err error
		if last, err = h.lastPluginSeq(ctx, s.ID); err != nil {
			return l.Fence, fmt.Errorf("find the last journaled update: %w", err)
		}
	}
	proc, err := reattachPlugin(ctx, reattachSpec{
		SessionID: s.ID, Owner: *l.Owner, Reattach: *l.Reattach, Fence: l.NextFence(), FromSeq: last + 1,
		StopTimeout: h.cfg.StopTimeout, Timeout: h.cfg.ReattachTimeout,
		Logger: h.log.Named("plugin").With("session", s.ID, "agent", s.Agent), Prober: h.prober, SocketRoot: h.socketRoot(),
	})
	if err != nil {
		return l.Fence, err
	}
	if configured {
		h.learnCapabilities(s.Agent, plug, proc.caps)
	}
	a := &startAttempt{h: h, id: s.ID, agent: s.Agent, fence: l.Fence, proc: proc, adopted: true, epoch: epoch}
	rec, err := a.own(ctx, leasestore.Readopt{Fence: l.Fence, Owner: *l.Owner, Reattach: l.Reattach}, "")
	if err != nil {
		return a.fence, fmt.Errorf("move the lease: %w", err)
	}
	if err := a.checkHeartbeat(ctx); err != nil {
		// It fenced itself while no host heartbeat it, and stays fenced.
		a.abandon(ctx, "")
		return a.fence, err
	}
	pluginLast := proc.lastSeq
	if !v2 {
		var attached pluginclient.AttachResult
		if proc.att, attached, err = proc.rpc.Attach(ctx, s.ID, a.fence); err != nil {
			a.abandon(ctx, "")
			return a.fence, fmt.Errorf("attach at fence %d: %w", a.fence, err)
		}
		pluginLast = attached.LastSeq
		if last, err = h.lastPluginSeq(ctx, s.ID); err != nil {
			a.abandon(ctx, "")
			return a.fence, fmt.Errorf("find the last journaled update: %w", err)
		}
	} else if proc.att.Fence() != a.fence {
		// The store moved the lease elsewhere than the fence the plugin
		// was attached at (it never does: Readopt moves to NextFence).
		a.abandon(ctx, "")
		return a.fence, fmt.Errorf("the lease moved to fence %d, the plugin was attached at %d", a.fence, proc.att.Fence())
	}
	open, err := h.openTurn(ctx, s.ID)
	if err != nil {
		a.abandon(ctx, "")
		return a.fence, fmt.Errorf("find the open turn: %w", err)
	}
	journal, err := a.openJournal(ctx)
	if err != nil {
		return a.fence, err
	}
	handle := rec.Handle()
	if proc.handle != "" && proc.handle != handle {
		// The provider minted a handle the previous host did not record.
		// Failing to record it keeps the recorded one, which the plugin
		// reports again at the next readoption.
		if _, err := h.store.Apply(ctx, s.ID, leasestore.RecordHandle{Fence: a.fence, Handle: proc.handle, Origin: leasestore.HandleResumed}); err != nil {
			h.log.Warn("record the provider handle the readopted plugin reports", "session", s.ID, "handle", proc.handle, "error", err)
		} else {
			handle = proc.handle
		}
	}
	// No update of this plugin in the journal (last == 0): either it
	// produced none, or a restore from backup lost the ones it journaled
	// (and the plugin, whose outbox dropped them once acknowledged, cannot
	// send them again). Its stream then starts wherever its outbox does.
	// The requests the plugin asked before the previous host went away
	// still wait: the next client that follows is asked (one the plugin
	// gave up on meanwhile is refused by it as unknown, and forgotten),
	// or the host answers one of a scope allowed always itself.
	var auto []grantedAnswer
	st := stateOf(rec)
	for _, q := range h.readoptedPermissions(ctx, s.ID, proc.waiting) {
		if opt := grantedOption(st.allowed, q); opt != "" {
			auto = append(auto, grantedAnswer{req: q, option: opt})
			continue
		}
		a.pending = append(a.pending, q)
	}
	if open != nil {
		a.openTurn = open.TurnID
	}
	sess, ok := a.launch(ctx, handle, journal, last+1, last == 0, st)
	if !ok {
		return a.fence, errors.New("the host is closing")
	}
	sess.answerGranted(ctx, auto)
	if open != nil {
		sess.resumeOpenTurn(ctx, open, pluginLast)
	}
	return a.fence, nil
}

// stopUnproven stops a verified-alive plugin that never proved its session:
// the processes carrying its spawn token, each re-identified before every
// signal. It returns once a probe shows the owner gone.
func (h *Host) stopUnproven(ctx context.Context, s leasestore.Session) error {
	if err := h.stopTokenHolders(ctx, s.Lease.Owner.SpawnToken); err != nil {
		return err
	}
	if res := h.prober.Probe(ctx, s); !res.ProvenDead() {
		return fmt.Errorf("the owner is still not proven gone: %v", res)
	}
	return nil
}

// lastPluginSeq returns the newest plugin sequence number journaled for the
// session's current plugin process: the update entries after that process's
// owner-committed entry. 0 when none is journaled.
func (h *Host) lastPluginSeq(ctx context.Context, id string) (uint64, error) {
	var last uint64
	err := h.walkBack(ctx, id, func(e leasestore.Entry) (bool, error) {
		if seq, ok := journal.PluginSeq(e); ok {
			last = seq
			return true, nil
		}
		if e.Kind != leasestore.KindLifecycle {
			return false, nil
		}
		rec, err := journal.Decode(e)
		if err != nil {
			return false, nil
		}
		r, ok := rec.(*journal.Lifecycle)
		return ok && r.Event == "owner-committed", nil
	})
	return last, err
}

// permissionWindow bounds how far back unansweredPermissions reads.
const permissionWindow = 1024

// unansweredPermissions returns the permission requests among the
// journal's newest entries that no permission_resolved answers, oldest
// first: only those of the current plugin process, whose turn may wait on
// them (an earlier process that died mid-request took its requests with
// it), so the list restarts at every lifecycle entry that marks a process
// start or end. Registered pending, they are asked of the next client and
// bounded by Config.PermissionTimeout. A failure to read is logged as an
// error: the plugin waits on them with no timeout of its own, and this
// host, not knowing them, neither asks a client nor times them out, so the
// turn waits until it is cancelled.
func (h *Host) unansweredPermissions(ctx context.Context, id string) []*journal.PermissionRequest {
	last, err := h.store.LastSeq(ctx, id)
	if err != nil {
		h.log.Error("find the journal's end to read unanswered permission requests; a turn waiting on one waits until cancelled", "session", id, "error", err)
		return nil
	}
	if last == 0 {
		return nil
	}
	from := uint64(1)
	if last > permissionWindow {
		from = last - permissionWindow + 1
	}
	var reqs []*journal.PermissionRequest
	answered := map[string]bool{}
	err = h.store.Replay(ctx, id, from, func(e leasestore.Entry) error {
		if (e.Kind != leasestore.KindUpdate && e.Kind != leasestore.KindLifecycle) || e.Seq > last {
			return nil
		}
		rec, err := journal.Decode(e)
		if err != nil {
			return nil
		}
		if l, ok := rec.(*journal.Lifecycle); ok {
			switch l.Event {
			case "owner-committed", "owner-proven", "released", "evicted":
				// A process started or ended: what came before is no
				// longer waited on.
				reqs, answered = nil, map[string]bool{}
			}
			return nil
		}
		u, ok := rec.(*journal.Update)
		if !ok {
			return nil
		}
		switch u := u.Update.(type) {
		case *journal.PermissionRequest:
			reqs = append(reqs, u)
		case *journal.PermissionResolved:
			answered[u.RequestID] = true
		}
		return nil
	})
	if err != nil {
		h.log.Error("read the journal for unanswered permission requests; a turn waiting on one waits until cancelled", "session", id, "error", err)
		return nil
	}
	var out []*journal.PermissionRequest
	for _, q := range reqs {
		if !answered[q.RequestID] {
			out = append(out, q)
		}
	}
	return out
}

// ReprobeScope is the scope of re-probe failures sent to OnError.
const ReprobeScope = "reprobe"

// reprobeLoop probes latched sessions again every ReprobeInterval; only new
// evidence moves them.
func (h *Host) reprobeLoop(ctx context.Context) {
	t := time.NewTicker(h.cfg.ReprobeInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := h.reprobeLatched(ctx, ""); err != nil && ctx.Err() == nil {
				h.report(ReprobeScope, err)
			}
		}
	}
}

// reprobeLatched probes latched sessions (only id when it is not empty)
// and applies a new decision where the evidence changed.
func (h *Host) reprobeLatched(ctx context.Context, id string) error {
	var sessions []leasestore.Session
	if id != "" {
		s, err := h.store.Get(ctx, id)
		if err != nil {
			return err
		}
		sessions = []leasestore.Session{s}
	} else {
		all, err := h.store.List(ctx)
		if err != nil && len(all) == 0 {
			return err
		}
		sessions = all
	}
	var latched []leasestore.Session
	for _, s := range sessions {
		if s.Lease.Stage.Latched() && h.mine(s.Lease) {
			latched = append(latched, s)
		}
	}
	if len(latched) == 0 {
		return nil
	}
	results := h.prober.ProbeAll(ctx, latched)
	for _, s := range latched {
		res := results[s.ID]
		// Only evidence moves a latch: proven dead evicts, a verified
		// identity readopts; anything else leaves it as it is.
		if !res.ProvenDead() && res.Outcome != probe.ReservationUnused && !res.ProvenAlive() {
			continue
		}
		d := h.decide(ctx, s, res)
		h.mu.Lock()
		h.decisions[s.ID] = d
		h.mu.Unlock()
	}
	return nil
}
