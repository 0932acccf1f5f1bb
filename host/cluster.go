package host

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/agenthost/agenthost/internal/pluginclient"
	"github.com/agenthost/agenthost/internal/wire"
	"github.com/agenthost/agenthost/leasestore"
)

// Cluster mode: see "Several machines" in the package doc for the model
// and the bound this file keeps.

// Defaults of cluster mode (Config.LivenessTTL, DriftMargin, SelfFence).
const (
	DefaultLivenessTTL = 5 * time.Second
	DefaultDriftMargin = 1 * time.Second
)

// EnvSelfFence is the environment variable that tells a plugin started in
// cluster mode its self-fence bound, as Go duration text: the plugin takes
// no new turn, and cancels the running one, once that long has passed
// since its start or since the host's last heartbeat said it may go on
// (whichever is later, each heartbeat bounded by the host's own liveness).
const EnvSelfFence = wire.EnvSelfFence

var (
	// ErrSessionElsewhere matches an *ElsewhereError: the session runs on
	// another live host of the cluster, which this host never touches.
	ErrSessionElsewhere = errors.New("the session runs on another host")
	// ErrNotLive: this host's liveness lease in the cluster is not proven
	// now (it was paused or cut off and registers again), so it takes no
	// turn and starts no plugin. Retry shortly. It matches
	// leasestore.ErrReconciling.
	ErrNotLive = fmt.Errorf("this host has not proven its liveness in the cluster: retry shortly: %w", leasestore.ErrReconciling)
	// ErrOwnerHostLost: the session's owner host is not registered in the
	// cluster; this host takes the session over once the documented bound
	// has passed (then it resumes here). Retry then. It matches
	// leasestore.ErrOwnershipUnknown.
	ErrOwnerHostLost = fmt.Errorf("the session's owner host is not registered in the cluster: %w", leasestore.ErrOwnershipUnknown)
	// ErrDeposed: the session was taken over by another host while this
	// one was not live (its fence moved); its plugin here is stopped.
	ErrDeposed = fmt.Errorf("the session was taken over while this host was not live: %w", leasestore.ErrStaleFence)
	// ErrNotPortable matches a *NotPortableError: the session's
	// conversation is on another host's machine and its provider state is
	// not stored, so it cannot be resumed here.
	ErrNotPortable = errors.New("the session's conversation cannot move to this host")
	// ErrNoHeartbeat: the plugin has no Heartbeat RPC, so it cannot fence
	// itself, and a plugin that outlives its host would be a second
	// writer once another host takes its session over: it cannot run in
	// cluster mode.
	ErrNoHeartbeat = errors.New("the plugin does not implement Heartbeat (an SDK older than cluster mode): it cannot run on a cluster; rebuild it with the current plugin SDK")
)

// ElsewhereError says which host a session runs on, and where that host's
// clients connect. It matches ErrSessionElsewhere.
type ElsewhereError struct {
	SessionID string
	HostID    string
	// Address is the host's local API address on its machine, when it
	// published one.
	Address string
}

func (e *ElsewhereError) Error() string {
	where := "connect to that host's agenthost"
	if e.Address != "" {
		where = "connect to its local API at " + e.Address + " on that machine"
	}
	return fmt.Sprintf("session %q runs on host %q: %s", e.SessionID, e.HostID, where)
}

// Is matches ErrSessionElsewhere.
func (e *ElsewhereError) Is(target error) bool { return target == ErrSessionElsewhere }

// NotPortableError refuses the resume of a session, in cluster mode, on
// another host than the one whose machine holds its conversation: the
// session's newest provider handle was minted on HostID, and no provider
// state of it is stored (its agent does not export state, or no turn
// exported it yet). It matches ErrNotPortable.
type NotPortableError struct {
	SessionID string
	// HostID is the host the conversation's state is on; empty when its
	// handle was recorded before handles named their host.
	HostID string
}

func (e *NotPortableError) Error() string {
	where := fmt.Sprintf("is on host %q", e.HostID)
	there := "resume it on that host"
	if e.HostID == "" {
		where = "is on the machine of the host that last ran it (the record predates naming hosts)"
		there = "resume it on the host that ran it"
	}
	return fmt.Sprintf("session %q cannot be resumed on this host: its conversation's state %s and is not stored with the session (its agent does not export its state, or no turn has exported it yet), so it cannot move: %s",
		e.SessionID, where, there)
}

// Is matches ErrNotPortable.
func (e *NotPortableError) Is(target error) bool { return target == ErrNotPortable }

// cluster is a host's cluster mode state; nil on a single machine.
type cluster struct {
	c                     leasestore.Cluster
	m                     leasestore.Membership
	ttl, drift, selfFence time.Duration

	mu sync.Mutex
	// pending are the lost hosts whose sessions this host takes over, by
	// host id (see takeoverLoop).
	pending map[string]*takeover
	// watching: a WatchHosts runs, so a host's return cancels its
	// pending takeover; none is applied otherwise.
	watching bool
	wake     chan struct{} // buffered 1: look at pending again
}

// takeover is one lost host's pending takeover: observed is when this
// host first learned of the loss, on its own clock; at is observed + TTL +
// drift, the earliest moment the takeover may be applied.
type takeover struct {
	observed, at time.Time
}

// clusterConfig checks and completes the cluster mode fields of cfg.
func clusterConfig(cfg Config) (Config, error) {
	if cfg.Cluster == nil {
		return cfg, nil
	}
	if cfg.LivenessTTL <= 0 {
		cfg.LivenessTTL = DefaultLivenessTTL
	}
	if cfg.DriftMargin <= 0 {
		cfg.DriftMargin = DefaultDriftMargin
	}
	if cfg.SelfFence <= 0 {
		cfg.SelfFence = cfg.LivenessTTL / 2
	}
	if cfg.SelfFence >= cfg.LivenessTTL {
		return cfg, fmt.Errorf("%w: Config.SelfFence (%s) must be shorter than Config.LivenessTTL (%s): a plugin must fence itself before its host's lease can expire",
			leasestore.ErrInvalidArgument, cfg.SelfFence, cfg.LivenessTTL)
	}
	return cfg, nil
}

// join registers the host in its cluster (cluster mode only). A
// registration of the same host id may be this host's own previous
// process, crashed without revoking its lease: that one expires within
// the TTL, so a refused join is retried until LivenessTTL + DriftMargin
// have passed; a registration that outlives that is another live process.
func (h *Host) join(ctx context.Context) error {
	cfg := h.cfg
	// The membership lives until Close, not as long as Open's ctx: Join
	// keeps it alive only while its ctx lasts.
	jctx := context.WithoutCancel(ctx)
	deadline := time.Now().Add(cfg.LivenessTTL + cfg.DriftMargin)
	var (
		m   leasestore.Membership
		err error
	)
	for {
		m, err = cfg.Cluster.Join(jctx, leasestore.JoinRequest{HostID: cfg.HostID, TTL: cfg.LivenessTTL, Address: cfg.Address})
		if !errors.Is(err, leasestore.ErrHostRegistered) || !time.Now().Before(deadline) {
			break
		}
		h.log.Info("host id registered already; waiting for a crashed predecessor's lease to expire", "host", cfg.HostID)
		select {
		case <-ctx.Done():
			return fmt.Errorf("join the cluster as host %q: %w", cfg.HostID, ctx.Err())
		case <-time.After(cfg.LivenessTTL / 10):
		}
	}
	if errors.Is(err, leasestore.ErrHostRegistered) {
		return fmt.Errorf("another agenthost process runs with host id %q in this cluster (it stayed registered for %s; stop it, or give this one another --host-id): %w",
			cfg.HostID, cfg.LivenessTTL+cfg.DriftMargin, err)
	}
	if err != nil {
		return fmt.Errorf("join the cluster as host %q: %w", cfg.HostID, err)
	}
	if granted := m.TTL(); granted > 0 && cfg.SelfFence >= granted {
		_ = m.Close(context.WithoutCancel(ctx))
		return fmt.Errorf("%w: the cluster granted a liveness TTL of %s, not longer than Config.SelfFence (%s)", leasestore.ErrInvalidArgument, granted, cfg.SelfFence)
	}
	h.cl = &cluster{c: cfg.Cluster, m: m, ttl: cfg.LivenessTTL, drift: cfg.DriftMargin, selfFence: cfg.SelfFence,
		pending: map[string]*takeover{}, wake: make(chan struct{}, 1)}
	h.log.Info("joined the cluster", "host", cfg.HostID, "ttl", m.TTL(), "selfFence", cfg.SelfFence, "drift", cfg.DriftMargin)
	return nil
}

// live reports whether this host may act as a live member now, and under
// which epoch.
func (cl *cluster) live(now time.Time) (until time.Time, epoch uint64, ok bool) {
	until, epoch = cl.m.Valid()
	return until, epoch, !until.IsZero() && until.After(now)
}

// epoch is the membership's epoch now (0 on a single machine).
func (h *Host) epoch() uint64 {
	if h.cl == nil {
		return 0
	}
	_, e := h.cl.m.Valid()
	return e
}

// checkLive refuses work while the host's liveness is not proven.
func (h *Host) checkLive() error {
	if h.cl == nil {
		return nil
	}
	if _, _, ok := h.cl.live(time.Now()); !ok {
		return ErrNotLive
	}
	return nil
}

// mine reports whether the host must decide the lease at open: always on
// a single machine, and for its own (and unnamed) held leases in a
// cluster (leasestore.Lease.ReconciledBy).
func (h *Host) mine(l leasestore.Lease) bool {
	return h.cl == nil || l.ReconciledBy(h.cfg.HostID)
}

// checkOwnerHost refuses a start of a session another host holds: it
// runs there while that host is registered (*ElsewhereError), and it is
// that host's until this host took it over (ErrOwnerHostLost). A failed
// look-up refuses too: unknown is never "lost".
func (h *Host) checkOwnerHost(ctx context.Context, rec leasestore.Session) error {
	owner := rec.Lease.OwnerHost()
	if h.cl == nil || !rec.Lease.Held() || owner == "" || owner == h.cfg.HostID {
		return nil
	}
	hosts, err := h.cl.c.Hosts(ctx)
	if err != nil {
		return fmt.Errorf("session %q is held by host %q, and the cluster's hosts could not be read: %w", rec.ID, owner, err)
	}
	if r, ok := hosts[owner]; ok {
		return &ElsewhereError{SessionID: rec.ID, HostID: owner, Address: r.Address}
	}
	t := h.cl.noteAbsent(owner, time.Now(), false)
	return fmt.Errorf("session %q: host %q holds it and is not registered; this host takes it over at %s unless that host comes back: %w",
		rec.ID, owner, t.at.Format(time.RFC3339Nano), ErrOwnerHostLost)
}

// CheckOwner refuses session id when another host of the cluster holds
// it: an *ElsewhereError while that host is registered, ErrOwnerHostLost
// until this host took it over. nil on a single machine, and for a
// session this host may run (or that does not exist).
func (h *Host) CheckOwner(ctx context.Context, id string) error {
	if h.cl == nil {
		return nil
	}
	rec, err := h.store.Get(ctx, id)
	if err != nil {
		return nil
	}
	return h.checkOwnerHost(ctx, rec)
}

// noteAbsent records that host is not registered, observed at now, and
// returns its pending takeover. A read of the hosts (lost: false) only
// starts a takeover when none is pending; the watch's HostLost (lost:
// true) always moves it to its own observation, so a takeover is never
// timed from a loss older than the newest one the watch reported (a stale
// read that raced the host's return would otherwise time it from before
// that return).
func (cl *cluster) noteAbsent(host string, now time.Time, lost bool) *takeover {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	t := cl.pending[host]
	if t != nil && lost && now.After(t.observed) {
		t.observed, t.at = now, now.Add(cl.ttl+cl.drift)
	}
	if t == nil {
		t = &takeover{observed: now, at: now.Add(cl.ttl + cl.drift)}
		cl.pending[host] = t
		select {
		case cl.wake <- struct{}{}:
		default:
		}
	}
	return t
}

// TakeoverScope is the scope of failed takeovers sent to OnError.
const TakeoverScope = "takeover"

// takeoverLoop is the owner of cluster mode's background work: it watches
// the cluster's hosts (a loss starts a takeover, a join of that host
// cancels it), scans the sessions other hosts hold for owner hosts that are
// not registered (a loss this host never saw happen: it was down, or its
// watch was), and applies each takeover once its time has come. It also
// relays the membership's changes to the running sessions, which check
// their leases before they heartbeat their plugins again.
func (h *Host) takeoverLoop(ctx context.Context) {
	cl := h.cl
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { h.watchHosts(ctx) })
	wg.Go(func() { h.relayChanges(ctx) })
	scan := time.NewTimer(0)
	defer scan.Stop()
	for {
		next := time.Time{}
		cl.mu.Lock()
		for _, t := range cl.pending {
			if next.IsZero() || t.at.Before(next) {
				next = t.at
			}
		}
		cl.mu.Unlock()
		var (
			due   <-chan time.Time
			timer *time.Timer
		)
		if !next.IsZero() {
			timer = time.NewTimer(time.Until(next))
			due = timer.C
		}
		select {
		case <-ctx.Done():
		case <-cl.wake:
		case <-due:
		case <-scan.C:
			h.scanAbsent(ctx)
			scan.Reset(cl.ttl)
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return
		}
		h.applyDue(ctx)
	}
}

// watchHosts follows the cluster's hosts until ctx ends, again after a
// failed watch (a watch that was down misses losses; scanAbsent finds
// their sessions).
func (h *Host) watchHosts(ctx context.Context) {
	cl := h.cl
	for ctx.Err() == nil {
		// A watch that was down may have missed a host's return and its
		// next loss: what was pending is timed afresh, from this watch's
		// snapshot and the next scan, and nothing is taken over while no
		// watch runs (applyDue).
		cl.mu.Lock()
		clear(cl.pending)
		cl.watching = true
		cl.mu.Unlock()
		err := cl.c.WatchHosts(ctx, func(ev leasestore.HostEvent) error {
			if ev.Record.HostID == h.cfg.HostID {
				return nil
			}
			switch ev.Kind {
			case leasestore.HostJoined:
				cl.mu.Lock()
				if t := cl.pending[ev.Record.HostID]; t != nil {
					delete(cl.pending, ev.Record.HostID)
					h.log.Info("a lost host registered again: its sessions stay its own", "host", ev.Record.HostID, "lostSince", t.observed)
				}
				cl.mu.Unlock()
			case leasestore.HostLost:
				at := ev.ObservedAt
				if at.IsZero() {
					at = time.Now()
				}
				t := cl.noteAbsent(ev.Record.HostID, at, true)
				h.log.Info("a host lost its liveness lease; its sessions are taken over unless it comes back", "host", ev.Record.HostID, "observed", t.observed, "takeoverAt", t.at)
			}
			return nil
		})
		cl.mu.Lock()
		cl.watching = false
		cl.mu.Unlock()
		if ctx.Err() != nil || errors.Is(err, leasestore.ErrClosed) {
			return
		}
		h.report(TakeoverScope, fmt.Errorf("watch the cluster's hosts (retrying): %w", err))
		select {
		case <-ctx.Done():
			return
		case <-time.After(cl.selfFence):
		}
	}
}

// scanAbsent notes each owner host of a held session that is not
// registered now: a Hosts read that does not name it is an observation of
// its loss, no earlier than its lease's expiry.
func (h *Host) scanAbsent(ctx context.Context) {
	sessions, err := h.store.List(ctx)
	if err != nil && len(sessions) == 0 {
		if ctx.Err() == nil {
			h.report(TakeoverScope, fmt.Errorf("list sessions to find lost hosts: %w", err))
		}
		return
	}
	owners := map[string]bool{}
	for _, s := range sessions {
		if o := s.Lease.OwnerHost(); s.Lease.Held() && o != "" && o != h.cfg.HostID {
			owners[o] = true
		}
	}
	if len(owners) == 0 {
		return
	}
	hosts, err := h.cl.c.Hosts(ctx)
	if err != nil {
		if ctx.Err() == nil {
			h.report(TakeoverScope, fmt.Errorf("read the cluster's hosts: %w", err))
		}
		return
	}
	now := time.Now()
	for o := range owners {
		if _, ok := hosts[o]; !ok {
			h.cl.noteAbsent(o, now, false)
		}
	}
}

// stillPending reports whether t is still the pending takeover of host.
func (cl *cluster) stillPending(host string, t takeover) bool {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	p := cl.pending[host]
	return cl.watching && p != nil && p.observed.Equal(t.observed)
}

// applyDue takes over the sessions of every lost host whose time has come.
func (h *Host) applyDue(ctx context.Context) {
	cl := h.cl
	now := time.Now()
	cl.mu.Lock()
	due := map[string]takeover{}
	if !cl.watching {
		cl.mu.Unlock()
		return
	}
	for id, t := range cl.pending {
		if !now.Before(t.at) {
			due[id] = *t
		}
	}
	cl.mu.Unlock()
	for _, id := range slices.Sorted(maps.Keys(due)) {
		if ctx.Err() != nil {
			return
		}
		if _, _, ok := cl.live(time.Now()); !ok {
			// A host that is not live itself decides nothing about others.
			return
		}
		if h.takeOver(ctx, id, due[id]) {
			cl.mu.Lock()
			if t := cl.pending[id]; t != nil && t.observed.Equal(due[id].observed) {
				delete(cl.pending, id)
			}
			cl.mu.Unlock()
		}
	}
}

// takeOver evicts every held session of lost host, each in one
// transaction that requires the host still unregistered, and ends each one's
// open turn. It reports whether nothing is left to do for that host: its
// sessions are all moved (here or by another host), or it came back.
func (h *Host) takeOver(ctx context.Context, lost string, t takeover) (done bool) {
	sessions, err := h.store.List(ctx)
	if err != nil && len(sessions) == 0 {
		h.report(TakeoverScope, fmt.Errorf("list the sessions of lost host %q: %w", lost, err))
		return false
	}
	done = err == nil
	for _, s := range sessions {
		if !s.Lease.Held() || s.Lease.OwnerHost() != lost {
			continue
		}
		// The loss this takeover is timed from must still be the newest
		// one: a HostJoined meanwhile cancelled it (and a later HostLost
		// timed a new one), so acting on it would take over a host that
		// may have heartbeated its plugins since.
		if !h.cl.stillPending(lost, t) {
			return false
		}
		detail := fmt.Sprintf("host %q lost its liveness lease (observed by host %q at %s); taken over after the liveness TTL %s and drift margin %s",
			lost, h.cfg.HostID, t.observed.Format(time.RFC3339Nano), h.cl.ttl, h.cl.drift)
		ev := leasestore.DeathEvidence{Kind: leasestore.EvidenceHostLost, Detail: detail, ObservedAt: t.observed}
		_, err := h.cl.c.ApplyIfHostLost(ctx, s.ID, lost, leasestore.Evict{Fence: s.Lease.Fence, Evidence: ev})
		switch {
		case err == nil:
			h.log.Info("took over a lost host's session", "session", s.ID, "host", lost, "fence", s.Lease.Fence, "observed", t.observed)
			h.closeOpenTurn(ctx, s.ID, "the host that ran this turn ("+lost+") was lost and the session taken over")
		case errors.Is(err, leasestore.ErrHostAlive):
			h.log.Info("a lost host came back before its session was taken over", "session", s.ID, "host", lost)
			return true
		case errors.Is(err, leasestore.ErrStaleFence), errors.Is(err, leasestore.ErrNotFound):
			// Another host took it over first, or it moved on.
			h.log.Debug("not taking over a session that moved meanwhile", "session", s.ID, "host", lost, "error", err)
		default:
			h.report(TakeoverScope, fmt.Errorf("take over session %q of lost host %q: %w", s.ID, lost, err))
			done = false
		}
	}
	return done
}

// relayChanges tells every running session when the membership changed
// (a new epoch, or the host stopped being live), so each checks its lease
// before it heartbeats its plugin again.
func (h *Host) relayChanges(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.cl.m.Changed():
		}
		until, epoch := h.cl.m.Valid()
		h.log.Info("the host's cluster membership changed", "epoch", epoch, "validUntil", until)
		h.mu.Lock()
		for _, s := range h.sessions {
			s.kick()
		}
		h.mu.Unlock()
	}
}

// kick wakes the session's heartbeat loop.
func (s *Session) kick() {
	select {
	case s.hbKick <- struct{}{}:
	default:
	}
}

// heartbeatLoop heartbeats the session's plugin every SelfFence/5 while
// the host is live, until the plugin is gone or detached; it owns
// nothing else. Under a new epoch it first re-reads the lease (revalidate):
// a session taken over meanwhile has its plugin stopped, never readopted.
func (s *Session) heartbeatLoop() {
	defer close(s.hbDone)
	cl := s.h.cl
	t := time.NewTicker(cl.selfFence / 5)
	defer t.Stop()
	for {
		if !s.beat() {
			// Deposed: stopped here, where the session's watch waits for
			// this loop, so the stop is owned by the session.
			if err := s.proc.Stop(context.Background()); err != nil {
				s.h.log.Warn("stop the plugin of a session taken over", "session", s.id, "error", err)
			}
			return
		}
		select {
		case <-s.proc.Terminated():
			return
		case <-s.proc.Detached():
			return
		case <-t.C:
		case <-s.hbKick:
		}
	}
}

// beat sends one heartbeat, when the host is live and the session's lease
// is still its own under the current epoch; false once the session is
// deposed (its plugin stopped).
func (s *Session) beat() bool {
	cl := s.h.cl
	s.mu.Lock()
	deposed := s.deposed
	s.mu.Unlock()
	if deposed {
		return false
	}
	now := time.Now()
	until, epoch, ok := cl.live(now)
	if !ok {
		return true // the plugin fences itself unless the host is live again in time
	}
	ctx, cancel := context.WithTimeout(context.Background(), cl.selfFence)
	defer cancel()
	if epoch != s.validatedEpoch() {
		switch err := s.revalidate(ctx, epoch); {
		case errors.Is(err, ErrDeposed):
			return false
		case err != nil:
			s.h.log.Warn("re-read the lease under a new epoch", "session", s.id, "error", err)
			return true
		}
	}
	validFor := min(cl.selfFence, until.Sub(now))
	fenced, err := s.proc.heartbeat(ctx, validFor)
	switch {
	case err != nil:
		s.h.log.Debug("heartbeat", "session", s.id, "error", err)
	case fenced:
		s.h.log.Warn("the plugin had fenced itself before this heartbeat", "session", s.id)
	}
	return true
}

func (s *Session) validatedEpoch() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.epoch
}

// revalidate re-reads the session's lease after the membership's epoch
// moved to epoch: while this host was not live another host may have taken
// the session over. A lease still at the session's fence and held by this
// host is trusted again under the new epoch; any other stops the plugin
// (ErrDeposed): this host never readopts a session it lost.
func (s *Session) revalidate(ctx context.Context, epoch uint64) error {
	rec, err := s.h.store.Get(ctx, s.id)
	if err != nil && !errors.Is(err, leasestore.ErrNotFound) {
		return err
	}
	l := rec.Lease
	if err == nil && l.Held() && l.Fence == s.fence && l.OwnerHost() == s.h.cfg.HostID {
		s.mu.Lock()
		if epoch > s.epoch {
			s.epoch = epoch
		}
		s.mu.Unlock()
		return nil
	}
	s.mu.Lock()
	first := !s.deposed
	s.deposed = true
	s.mu.Unlock()
	if first {
		s.h.log.Warn("the session was taken over while this host was not live; stopping its plugin", "session", s.id,
			"fence", s.fence, "now", l.Fence, "ownerHost", l.OwnerHost())
		s.kick() // the heartbeat loop stops the plugin
	}
	return fmt.Errorf("session %q at fence %d (the lease is at %d, held by %q): %w", s.id, s.fence, l.Fence, l.OwnerHost(), ErrDeposed)
}

// admitTurn refuses a prompt while the host is not live, and under a new
// epoch until the session's lease was re-read.
func (s *Session) admitTurn(ctx context.Context) error {
	cl := s.h.cl
	if cl == nil {
		return nil
	}
	_, epoch, ok := cl.live(time.Now())
	if !ok {
		return fmt.Errorf("session %q: %w", s.id, ErrNotLive)
	}
	if epoch != s.validatedEpoch() {
		return s.revalidate(ctx, epoch)
	}
	return nil
}

// checkHeartbeat sends a new plugin its first heartbeat (cluster mode
// only), which also refuses a plugin that cannot fence itself.
func (a *startAttempt) checkHeartbeat(ctx context.Context) error {
	cl := a.h.cl
	if cl == nil {
		return nil
	}
	if a.proc.version < wire.ProtocolVersion2 {
		return fmt.Errorf("start session %q: %w (it speaks protocol version %d)", a.id, ErrNoHeartbeat, a.proc.version)
	}
	now := time.Now()
	until, _, ok := cl.live(now)
	if !ok {
		return fmt.Errorf("start session %q: %w", a.id, ErrNotLive)
	}
	if _, err := a.proc.heartbeat(ctx, min(cl.selfFence, until.Sub(now))); err != nil {
		if isNotImplemented(err) {
			return fmt.Errorf("start session %q: %w", a.id, ErrNoHeartbeat)
		}
		return fmt.Errorf("start session %q: heartbeat the plugin: %w", a.id, err)
	}
	return nil
}

func isNotImplemented(err error) bool { return errors.Is(err, pluginclient.ErrNotImplemented) }

// clusterEnv is the environment a plugin gets in cluster mode.
func (h *Host) clusterEnv() []string {
	if h.cl == nil {
		return nil
	}
	return []string{EnvSelfFence + "=" + h.cl.selfFence.String()}
}

// ClusterStatus is a host's view of its cluster (Status.Cluster).
type ClusterStatus struct {
	Live                                bool
	ValidUntil                          time.Time
	Epoch                               uint64
	LivenessTTL, SelfFence, DriftMargin time.Duration
	Hosts                               []leasestore.HostRecord
	// Takeovers are the pending takeovers: lost host id → when.
	Takeovers map[string]time.Time
}

// clusterStatus fills the cluster part of a Status.
func (h *Host) clusterStatus(ctx context.Context) *ClusterStatus {
	cl := h.cl
	if cl == nil {
		return nil
	}
	until, epoch, ok := cl.live(time.Now())
	st := &ClusterStatus{Live: ok, ValidUntil: until, Epoch: epoch, LivenessTTL: cl.ttl, SelfFence: cl.selfFence, DriftMargin: cl.drift}
	if hosts, err := cl.c.Hosts(ctx); err == nil {
		for _, id := range slices.Sorted(maps.Keys(hosts)) {
			st.Hosts = append(st.Hosts, hosts[id])
		}
	}
	cl.mu.Lock()
	for id, t := range cl.pending {
		if st.Takeovers == nil {
			st.Takeovers = map[string]time.Time{}
		}
		st.Takeovers[id] = t.at
	}
	cl.mu.Unlock()
	return st
}

// ClusterHosts returns the hosts registered in the cluster now, by id;
// nil on a single machine.
func (h *Host) ClusterHosts(ctx context.Context) (map[string]leasestore.HostRecord, error) {
	if h.cl == nil {
		return nil, nil
	}
	return h.cl.c.Hosts(ctx)
}

// Elsewhere reports whether rec is held by another host than this one
// that is registered in hosts (ClusterHosts): it runs there, remote-live.
func (h *Host) Elsewhere(rec leasestore.Session, hosts map[string]leasestore.HostRecord) bool {
	o := rec.Lease.OwnerHost()
	if h.cl == nil || !rec.Lease.Held() || o == "" || o == h.cfg.HostID {
		return false
	}
	_, ok := hosts[o]
	return ok
}

// heartbeat tells the plugin it may go on for validFor at its fence; the
// plugin reports whether it had fenced itself before.
func (p *pluginProc) heartbeat(ctx context.Context, validFor time.Duration) (selfFenced bool, err error) {
	if p.att == nil {
		return false, errors.New("the plugin is not attached")
	}
	return p.att.Heartbeat(ctx, validFor)
}

// Portable reports whether rec can be resumed on any host of a cluster: it
// has no provider handle yet (nothing to carry), or the store holds a
// provider state of its current handle (Session.Handle). It is a property
// of the stored session, so every host answers alike, whichever plugin it
// ran last; a state that cannot be read counts as not portable (unknown is
// never "movable"). It reads the state's description only, where the store
// can (leasestore.StoredStateHandle). A host that stores no provider state
// (a single machine, by default) answers without a read: only a session
// with nothing to carry is portable.
func (h *Host) Portable(ctx context.Context, rec leasestore.Session) bool {
	handle := rec.Handle()
	if handle == "" {
		return true
	}
	if !h.storesProviderState() {
		return false
	}
	got, err := leasestore.StoredStateHandle(ctx, h.store, rec.ID)
	return err == nil && got == handle
}

// checkPortable refuses, in cluster mode, the resume of a conversation
// whose provider state is on another host's machine and not in the store:
// the newest handle link names another host (or, recorded before links
// named hosts, none: fail closed), and no stored provider state continues
// that handle. The plugin here would find nothing of the conversation and
// start another, or fail. nil on a single machine, for a session without
// a handle, and for a handle minted on this host.
func (h *Host) checkPortable(ctx context.Context, rec leasestore.Session) error {
	if h.cl == nil || len(rec.Handles) == 0 {
		return nil
	}
	link := rec.Handles[len(rec.Handles)-1]
	if link.HostID == h.cfg.HostID {
		return nil
	}
	got, err := leasestore.StoredStateHandle(ctx, h.store, rec.ID)
	switch {
	case err == nil && got == link.Handle:
		return nil
	case err != nil && !errors.Is(err, leasestore.ErrNotFound):
		return fmt.Errorf("session %q: its conversation was last on host %q, and whether its provider state is stored could not be read: %w",
			rec.ID, link.HostID, err)
	}
	return &NotPortableError{SessionID: rec.ID, HostID: link.HostID}
}
