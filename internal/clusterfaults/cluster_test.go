package clusterfaults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agenthost/agenthost/leasestore"
	"github.com/agenthost/agenthost/leasestore/etcdstore"
)

// size is how much the test does: small in `make test`, large in `make
// test-faults` (AGENTHOST_CLUSTER_FAULTS=large).
type size struct {
	name                    string
	hosts, sessions, rounds int
}

var (
	small = size{name: "small", hosts: 2, sessions: 3, rounds: 4}
	large = size{name: "large", hosts: 3, sessions: 6, rounds: 16}
)

const (
	// ttl is the hosts' liveness TTL: the shortest etcd grants (see
	// internal/cli), so takeovers come quickly.
	ttl = 2 * time.Second
	// selfFence is the bound within which a plugin that hears no
	// heartbeat fences itself: host.Config.SelfFence's default, ttl/2.
	selfFence = ttl / 2
	// drift is host.Config.DriftMargin's default.
	drift = time.Second
	// callTimeout bounds one API call of a client; a call to a stopped
	// host ends with it and the client tries elsewhere.
	callTimeout = 6 * time.Second
	// healTimeout bounds the wait, once a round's faults are healed, for
	// every session to be acknowledged again (running somewhere or
	// resumed). Only a failing test waits this long.
	healTimeout = 90 * time.Second
)

// run is one test run's processes and record of faults.
type run struct {
	t       *testing.T
	rng     *rand.Rand
	etcd    *etcdCluster
	hosts   []*hostProc
	workers []*worker
	store   leasestore.Store
	gate    *gate

	mu                                             sync.Mutex
	faults                                         []fault
	rounds, kills, stops, memberKills, memberStops int
}

func (r *run) record(host string, kind faultKind) {
	r.mu.Lock()
	r.faults = append(r.faults, fault{host: host, kind: kind, at: time.Now()})
	r.mu.Unlock()
}

// live reports whether host i runs and is not stopped, as far as the
// fault schedule knows.
func (r *run) live(i int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for j := len(r.faults) - 1; j >= 0; j-- {
		if f := r.faults[j]; f.host == r.hosts[i].id {
			return f.kind == faultCont || f.kind == faultUp
		}
	}
	return true
}

// Hosts on a 3-member etcd cluster, with clients prompting every session
// through whichever host owns it, while a seeded schedule SIGKILLs or
// SIGSTOPs a host or a member each round; after each round the journals,
// the acknowledged updates and the hosts' fence logs are checked (see the
// package doc).
func TestClusterUnderKillsAndStops(t *testing.T) {
	sz := small
	if os.Getenv("AGENTHOST_CLUSTER_FAULTS") == "large" {
		sz = large
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("AGENTHOST_CLUSTER_FAULTS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("AGENTHOST_CLUSTER_FAULTS_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t.Logf("size %s (%d hosts, %d sessions, %d rounds), seed %d (AGENTHOST_CLUSTER_FAULTS_SEED=%d replays the schedule)",
		sz.name, sz.hosts, sz.sessions, sz.rounds, seed, seed)
	r := &run{t: t, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), gate: newGate()}
	r.etcd = startEtcd(t, 3)
	for i := range sz.hosts {
		h := newHost(t, fmt.Sprintf("h%d", i), r.etcd.endpoints(), ttl)
		if err := h.start(time.Now().Add(readyTimeout)); err != nil {
			t.Fatal(err)
		}
		r.hosts = append(r.hosts, h)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store, err := etcdstore.Open(ctx, etcdstore.Options{Endpoints: r.etcd.endpointList()})
	if err != nil {
		t.Fatalf("open the store to read the journals: %v", err)
	}
	defer store.Close(context.Background())
	r.store = store

	workspace := t.TempDir()
	for i := range sz.sessions {
		w := newWorker(i, r.hosts, workspace, callTimeout)
		w.id = fmt.Sprintf("s%d", i)
		if err := w.create(ctx, i%len(r.hosts)); err != nil {
			t.Fatal(err)
		}
		r.workers = append(r.workers, w)
	}
	r.gate.workers = len(r.workers)
	var wg sync.WaitGroup
	for _, w := range r.workers {
		wg.Go(func() {
			defer w.close()
			for r.gate.wait(ctx) {
				if !w.step(ctx, r.live) {
					select {
					case <-ctx.Done():
					case <-time.After(200 * time.Millisecond):
					}
				}
			}
		})
	}
	defer func() {
		cancel()
		r.gate.release()
		wg.Wait()
	}()

	for round := 1; round <= sz.rounds && !t.Failed(); round++ {
		r.round(ctx, round)
		r.rounds = round
	}
	cancel()
	r.gate.release()
	wg.Wait()
	r.figures()
}

// round injects one fault, heals it, waits for every session to be
// acknowledged again and checks.
func (r *run) round(ctx context.Context, n int) {
	t := r.t
	// Hold the fault from half the TTL (no takeover) to past the TTL plus
	// the drift margin (a takeover of a lost host's sessions).
	hold := ttl/2 + time.Duration(r.rng.Int64N(int64(3*ttl+drift)))
	kill := r.rng.IntN(2) == 0
	var what string
	if r.rng.IntN(2) == 0 {
		// The host a random session last ran on: a fault of a host that
		// runs nothing tests little.
		i := int(r.workers[r.rng.IntN(len(r.workers))].ranOn.Load())
		h := r.hosts[i]
		s := h.current()
		if kill {
			r.record(h.id, faultKill)
			s.Kill()
			r.kills++
			what = fmt.Sprintf("SIGKILL host %s (pid %d), restarted after %s", h.id, s.PID(), hold.Round(time.Millisecond))
		} else {
			if err := signal(s.PID(), syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			r.record(h.id, faultStop)
			r.stops++
			what = fmt.Sprintf("SIGSTOP host %s (pid %d) for %s", h.id, s.PID(), hold.Round(time.Millisecond))
		}
		sleep(ctx, hold)
		if kill {
			if err := h.start(time.Now().Add(readyTimeout)); err != nil {
				t.Fatalf("round %d: %v", n, err)
			}
			r.record(h.id, faultUp)
		} else {
			if err := signal(s.PID(), syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			r.record(h.id, faultCont)
		}
	} else {
		m := r.etcd.members[r.rng.IntN(len(r.etcd.members))]
		pid := m.pid()
		if kill {
			r.record(memberTarget(m.name), faultKill)
			m.kill()
			r.memberKills++
			what = fmt.Sprintf("SIGKILL etcd member %s (pid %d), restarted after %s", m.name, pid, hold.Round(time.Millisecond))
		} else {
			if err := signal(pid, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			r.record(memberTarget(m.name), faultStop)
			r.memberStops++
			what = fmt.Sprintf("SIGSTOP etcd member %s (pid %d) for %s", m.name, pid, hold.Round(time.Millisecond))
		}
		sleep(ctx, hold)
		if kill {
			if err := m.start("existing"); err != nil {
				t.Fatalf("round %d: %v", n, err)
			}
			r.record(memberTarget(m.name), faultUp)
		} else {
			if err := signal(pid, syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			r.record(memberTarget(m.name), faultCont)
		}
	}
	t.Logf("round %d injected: %s", n, what)
	healed := time.Now()
	// Every session running somewhere or resumable: each is acknowledged
	// again after the heal.
	deadline := healed.Add(healTimeout)
	for _, w := range r.workers {
		for {
			_, _, last, lastErr := w.snapshot()
			if last.After(healed) {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("round %d: session %s not acknowledged within %s of the heal (neither running on a host nor resumed); last error: %v", n, w.id, healTimeout, lastErr)
				break
			}
			sleep(ctx, 50*time.Millisecond)
		}
	}
	// A host continued after its session was taken over stops that
	// plugin only once it has registered again and re-read the lease
	// (until then it is not live: it takes no turn and heartbeats
	// nothing, so the plugin stays fenced). The session's client may be
	// acknowledged on the taker before that; wait for the stop too.
	if len(r.stale()) > 0 {
		acked := time.Now()
		for len(r.stale()) > 0 && time.Now().Before(deadline) {
			sleep(ctx, 50*time.Millisecond)
		}
		// Still stale past the deadline: check reports it.
		if len(r.stale()) == 0 {
			t.Logf("round %d: the lost host stopped its taken-over plugin %s after the heal (%s after every session was acknowledged again)",
				n, time.Since(healed).Round(time.Millisecond), time.Since(acked).Round(time.Millisecond))
		}
	}
	r.gate.pause()
	defer r.gate.resume()
	r.check(ctx, n)
}

// stale lists the sessions taken over from a host that has not yet logged
// the end of its plugin.
func (r *run) stale() []string {
	r.mu.Lock()
	faults := slices.Clone(r.faults)
	r.mu.Unlock()
	_, stale := intervals(r.fenceEvents(), r.takeovers(), faults, selfFence, ttl+drift, time.Now())
	return stale
}

// check reads every journal and every host's fence log.
func (r *run) check(ctx context.Context, n int) {
	t := r.t
	var problems []string
	entries, acks := 0, 0
	for _, w := range r.workers {
		acked, _, _, _ := w.snapshot()
		var es []leasestore.Entry
		if err := r.store.Replay(ctx, w.id, 1, func(e leasestore.Entry) error {
			es = append(es, e)
			return nil
		}); err != nil {
			t.Fatalf("round %d: read the journal of %s: %v", n, w.id, err)
		}
		entries += len(es)
		acks += len(acked)
		problems = append(problems, checkJournal(w.id, es, acked)...)
	}
	events := r.fenceEvents()
	r.mu.Lock()
	faults := slices.Clone(r.faults)
	r.mu.Unlock()
	problems = append(problems, fenceOrder(events)...)
	ivs, stale := intervals(events, r.takeovers(), faults, selfFence, ttl+drift, time.Now())
	problems = append(problems, overlaps(ivs)...)
	problems = append(problems, stale...)
	for _, p := range problems {
		t.Errorf("round %d: %s", n, p)
	}
	if len(problems) == 0 {
		t.Logf("round %d held: %d journal entries with seqs once each and fences in order, %d acknowledged updates journaled once each, %d admissions with no two hosts running one session at once", n, entries, acks, admissions(events))
	}
}

func (r *run) fenceEvents() []fenceEvent {
	var all []fenceEvent
	for _, h := range r.hosts {
		evs, err := parseFenceEvents(h.id, h.logs())
		if err != nil {
			r.t.Fatal(err)
		}
		all = append(all, evs...)
	}
	return all
}

func (r *run) takeovers() []takeover {
	var tks []takeover
	for _, h := range r.hosts {
		got, err := parseTakeovers(h.id, h.logs())
		if err != nil {
			r.t.Fatal(err)
		}
		tks = append(tks, got...)
	}
	return tks
}

func admissions(evs []fenceEvent) int {
	n := 0
	for _, e := range evs {
		if e.admitted {
			n++
		}
	}
	return n
}

// figures logs what the run did: rounds, kills, stops, takeovers (a
// host's fenced transaction releasing a lost host's session) and the
// longest, from the fault of the lost host to that transaction; and the
// longest a session went from its host's fault to running on another
// host (its admission there, which waits for the client's next try too).
func (r *run) figures() {
	events := r.fenceEvents()
	slices.SortStableFunc(events, func(a, b fenceEvent) int { return a.at.Compare(b.at) })
	r.mu.Lock()
	faults := slices.Clone(r.faults)
	r.mu.Unlock()
	// faultBefore is the last kill or stop of host before t.
	faultBefore := func(host string, t time.Time) (time.Time, bool) {
		for i := len(faults) - 1; i >= 0; i-- {
			f := faults[i]
			if f.host == host && (f.kind == faultKill || f.kind == faultStop) && f.at.Before(t) {
				return f.at, true
			}
		}
		return time.Time{}, false
	}
	// cause is the last kill or stop before t of host or of an etcd
	// member: a host loses its liveness lease when its keepalives go to
	// a member that stopped, too.
	cause := func(host string, t time.Time) (fault, bool) {
		for i := len(faults) - 1; i >= 0; i-- {
			f := faults[i]
			if (f.host == host || strings.HasPrefix(f.host, memberPrefix)) && (f.kind == faultKill || f.kind == faultStop) && f.at.Before(t) {
				return f, true
			}
		}
		return fault{}, false
	}
	tks := r.takeovers()
	var longestTakeover time.Duration
	afterMember := 0
	slices.SortFunc(tks, func(a, b takeover) int { return a.at.Compare(b.at) })
	for _, tk := range tks {
		f, ok := cause(tk.lost, tk.at)
		if !ok {
			r.t.Logf("takeover: host %s took session %s of host %s over at %s, after no fault of that host or of etcd", tk.host, tk.session, tk.lost, tk.at.Format(time.StampMilli))
			continue
		}
		if strings.HasPrefix(f.host, memberPrefix) {
			afterMember++
		}
		longestTakeover = max(longestTakeover, tk.at.Sub(f.at))
		r.t.Logf("takeover: host %s took session %s of host %s over %s after the %s of %s", tk.host, tk.session, tk.lost, tk.at.Sub(f.at).Round(time.Millisecond), f.kind, f.host)
	}
	last := map[string]fenceEvent{}
	var longestMove time.Duration
	moves := 0
	for _, e := range events {
		if !e.admitted {
			continue
		}
		p, ok := last[e.session]
		last[e.session] = e
		if !ok || p.host == e.host {
			continue
		}
		moves++
		if at, ok := faultBefore(p.host, e.at); ok && at.After(p.at) {
			longestMove = max(longestMove, e.at.Sub(at))
		}
	}
	acks := 0
	for _, w := range r.workers {
		_, n, _, _ := w.snapshot()
		acks += n
	}
	r.t.Logf("figures: %d rounds; host SIGKILLs %d, host SIGSTOPs %d, etcd member SIGKILLs %d, etcd member SIGSTOPs %d; %d prompts acknowledged; "+
		"%d takeovers (%d of them after an etcd member's fault, not the lost host's own), the longest %s after the fault (liveness TTL %s, drift margin %s); %d sessions moved to another host, the longest %s from the fault to running there",
		r.rounds, r.kills, r.stops, r.memberKills, r.memberStops, acks, len(tks), afterMember, longestTakeover.Round(time.Millisecond), ttl, drift, moves, longestMove.Round(time.Millisecond))
}

// memberPrefix marks an etcd member's faults in the record.
const memberPrefix = "etcd/"

func memberTarget(name string) string { return memberPrefix + name }

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// gate pauses the workers between their steps while a round is checked.
type gate struct {
	mu       sync.Mutex
	cond     *sync.Cond
	paused   bool
	released bool
	parked   int
	workers  int
}

func newGate() *gate {
	g := &gate{}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// wait returns false once ctx ended or the gate was released; it blocks
// while the gate is paused.
func (g *gate) wait(ctx context.Context) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.paused && !g.released {
		g.parked++
		g.cond.Broadcast()
		g.cond.Wait()
		g.parked--
	}
	return ctx.Err() == nil && !g.released
}

func (g *gate) pause() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.paused = true
	for g.parked < g.workers && !g.released {
		g.cond.Wait()
	}
}

func (g *gate) resume() {
	g.mu.Lock()
	g.paused = false
	g.cond.Broadcast()
	g.mu.Unlock()
}

func (g *gate) release() {
	g.mu.Lock()
	g.released = true
	g.cond.Broadcast()
	g.mu.Unlock()
}
