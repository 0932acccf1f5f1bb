package leasestoretest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/agenthost/agenthost/leasestore"
)

// ClusterStore is a store that several hosts share: a leasestore.Store
// that is also a leasestore.Cluster.
type ClusterStore interface {
	leasestore.Store
	leasestore.Cluster
}

// ClusterHarness is what RunCluster asks of a backend.
type ClusterHarness struct {
	// Open opens a new store on the cluster state named name, as another
	// host process would (its own connection): two stores opened under
	// one name in a test are two hosts of one cluster; different names
	// share nothing. Open closes the store when t ends.
	Open func(t *testing.T, name string) ClusterStore
	// Pause stops m's keepalives for d without revoking anything, as a
	// frozen or cut-off process would: the cluster expires the lease on
	// its TTL, and m registers again once d is over.
	Pause func(m leasestore.Membership, d time.Duration)
	// TTL is the liveness TTL the loss tests join with: short (a second
	// or two), it bounds how long they run.
	TTL time.Duration
}

// steadyTTL is the liveness TTL of the tests whose host must stay
// registered until it closes: a host of a machine starved long enough
// loses a short one, as it should, which is what the loss tests test and
// these do not.
const steadyTTL = 30 * time.Second

// RunCluster runs the conformance tests of leasestore.Cluster: joining,
// duplicate host ids, the hosts list and its watch, the loss of a host
// whose keepalives stop and its registration again under a new epoch,
// and takeovers (ApplyIfHostLost) refused while the owner's host is
// registered, accepted once it is lost, and won by one of two racers.
func RunCluster(t *testing.T, h ClusterHarness) {
	tests := []struct {
		name string
		fn   func(t *testing.T, h ClusterHarness, name string)
	}{
		{"JoinAndHosts", testJoin},
		{"DuplicateHostIDRefused", testDuplicateHost},
		{"WatchHostsJoinsAndLosses", testWatchHosts},
		{"LossAfterTTLAndRegistrationAgain", testLossAfterTTL},
		{"TakeoverOnlyOfALostHost", testTakeover},
		{"OneWinnerOfRacingTakeovers", testRacingTakeovers},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, h, t.TempDir()) })
	}
}

func join(t *testing.T, ctx context.Context, c leasestore.Cluster, host string, ttl time.Duration) leasestore.Membership {
	t.Helper()
	m, err := c.Join(ctx, leasestore.JoinRequest{HostID: host, TTL: ttl, Address: "sock-of-" + host})
	if err != nil {
		t.Fatalf("join %q: %v", host, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = m.Close(ctx)
	})
	return m
}

func testJoin(t *testing.T, h ClusterHarness, name string) {
	ctx := ctxFor(t)
	a, b := h.Open(t, name), h.Open(t, name)
	before := time.Now()
	m := join(t, ctx, a, "host-a", steadyTTL)
	until, epoch := m.Valid()
	if epoch != 1 || !until.After(before) || until.After(time.Now().Add(m.TTL())) {
		t.Errorf("a new member: valid until %v (now %v, TTL %v), epoch %d; want within the TTL from now, epoch 1", until, time.Now(), m.TTL(), epoch)
	}
	if m.TTL() < steadyTTL {
		t.Errorf("granted TTL %v below the %v asked for", m.TTL(), steadyTTL)
	}
	rec := m.Record()
	if rec.HostID != "host-a" || rec.Incarnation == "" || rec.Registered.IsZero() || rec.Address != "sock-of-host-a" {
		t.Errorf("record %+v", rec)
	}
	for _, c := range []leasestore.Cluster{a, b} {
		hosts, err := c.Hosts(ctx)
		must(t, err)
		if got, ok := hosts["host-a"]; !ok || got.Incarnation != rec.Incarnation || got.Address != rec.Address || len(hosts) != 1 {
			t.Errorf("hosts %+v, want host-a as registered (%+v)", hosts, rec)
		}
	}
	// Close revokes: the others see the host gone at once.
	must(t, m.Close(ctx))
	must(t, m.Close(ctx))
	hosts, err := b.Hosts(ctx)
	must(t, err)
	if _, ok := hosts["host-a"]; ok {
		t.Errorf("host-a still registered after its membership closed: %+v", hosts)
	}
	if until, _ := m.Valid(); !until.IsZero() && until.After(time.Now()) {
		t.Errorf("a closed membership is valid until %v", until)
	}
	_, err = a.Join(ctx, leasestore.JoinRequest{TTL: steadyTTL})
	wantErr(t, err, leasestore.ErrInvalidArgument)
}

func testDuplicateHost(t *testing.T, h ClusterHarness, name string) {
	ctx := ctxFor(t)
	a, b := h.Open(t, name), h.Open(t, name)
	m := join(t, ctx, a, "host-a", steadyTTL)
	_, err := b.Join(ctx, leasestore.JoinRequest{HostID: "host-a", TTL: steadyTTL})
	wantErr(t, err, leasestore.ErrHostRegistered)
	_, err = a.Join(ctx, leasestore.JoinRequest{HostID: "host-a", TTL: steadyTTL})
	wantErr(t, err, leasestore.ErrHostRegistered)
	hosts, err := b.Hosts(ctx)
	must(t, err)
	if hosts["host-a"].Incarnation != m.Record().Incarnation {
		t.Errorf("a refused join replaced the registration: %+v", hosts)
	}
	must(t, m.Close(ctx))
	join(t, ctx, b, "host-a", steadyTTL)
}

// watcher collects a WatchHosts run's events.
type watcher struct {
	mu     sync.Mutex
	events []leasestore.HostEvent
	more   chan struct{}
	done   chan error
}

func watch(t *testing.T, ctx context.Context, c leasestore.Cluster) (*watcher, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	w := &watcher{more: make(chan struct{}, 1), done: make(chan error, 1)}
	go func() {
		w.done <- c.WatchHosts(ctx, func(ev leasestore.HostEvent) error {
			w.mu.Lock()
			w.events = append(w.events, ev)
			w.mu.Unlock()
			select {
			case w.more <- struct{}{}:
			default:
			}
			return nil
		})
	}()
	t.Cleanup(func() { cancel(); <-w.done })
	return w, cancel
}

// next waits for the watch's event number i.
func (w *watcher) next(t *testing.T, i int, within time.Duration) leasestore.HostEvent {
	t.Helper()
	deadline := time.After(within)
	for {
		w.mu.Lock()
		if len(w.events) > i {
			ev := w.events[i]
			w.mu.Unlock()
			return ev
		}
		w.mu.Unlock()
		select {
		case <-w.more:
		case err := <-w.done:
			t.Fatalf("the watch ended with %v before its event %d", err, i)
		case <-deadline:
			t.Fatalf("no host event %d within %v", i, within)
		}
	}
}

func wantEvent(t *testing.T, ev leasestore.HostEvent, kind leasestore.HostEventKind, rec leasestore.HostRecord) {
	t.Helper()
	if ev.Kind != kind || ev.Record.HostID != rec.HostID || ev.Record.Incarnation != rec.Incarnation || ev.ObservedAt.IsZero() {
		t.Fatalf("host event %+v, want %s of %q incarnation %q", ev, kind, rec.HostID, rec.Incarnation)
	}
}

func testWatchHosts(t *testing.T, h ClusterHarness, name string) {
	ctx := ctxFor(t)
	a, b := h.Open(t, name), h.Open(t, name)
	ma := join(t, ctx, a, "host-a", steadyTTL)
	w, cancel := watch(t, ctx, b)
	wantEvent(t, w.next(t, 0, 10*time.Second), leasestore.HostJoined, ma.Record())
	mb := join(t, ctx, b, "host-b", steadyTTL)
	wantEvent(t, w.next(t, 1, 10*time.Second), leasestore.HostJoined, mb.Record())
	lostAt := time.Now()
	must(t, ma.Close(ctx))
	ev := w.next(t, 2, 10*time.Second)
	wantEvent(t, ev, leasestore.HostLost, ma.Record())
	if ev.ObservedAt.Before(lostAt) {
		t.Errorf("loss observed at %v, before the host left at %v", ev.ObservedAt, lostAt)
	}
	cancel()
	if err := <-w.done; !errors.Is(err, context.Canceled) {
		t.Errorf("watch ended with %v, want context.Canceled", err)
	}
	w.done <- nil // for the cleanup
	// A failing callback ends the watch with its error.
	stop := errors.New("stop")
	if err := b.WatchHosts(ctx, func(leasestore.HostEvent) error { return stop }); !errors.Is(err, stop) {
		t.Errorf("watch with a failing callback ended with %v", err)
	}
}

// testLossAfterTTL: a host whose keepalives stop is lost once its TTL
// passed: it reports itself not live, the others see the loss, and once it
// can it registers again, as a new incarnation under the next epoch; until
// then a takeover of its sessions is allowed, and after it refused.
func testLossAfterTTL(t *testing.T, h ClusterHarness, name string) {
	ctx := ctxFor(t)
	a, b := h.Open(t, name), h.Open(t, name)
	m := join(t, ctx, a, "host-a", h.TTL)
	first := m.Record()
	w, _ := watch(t, ctx, b)
	wantEvent(t, w.next(t, 0, 10*time.Second), leasestore.HostJoined, first)
	drain(m.Changed())

	pause := 3*m.TTL() + time.Second
	paused := time.Now()
	h.Pause(m, pause)
	lost := w.next(t, 1, pause)
	wantEvent(t, lost, leasestore.HostLost, first)
	if since := lost.ObservedAt.Sub(paused); since < m.TTL()/2 {
		t.Errorf("loss observed %v after the keepalives stopped, the TTL is %v", since, m.TTL())
	}
	// The paused host knows it is not live: it says so by the time the
	// others see the loss (Valid is the last answered keepalive's send
	// time plus the TTL, and the cluster counts the TTL from later).
	if until, _ := m.Valid(); !until.IsZero() && until.After(lost.ObservedAt) {
		t.Errorf("the paused host is valid until %v, after the others saw it lost at %v", until, lost.ObservedAt)
	}
	select {
	case <-m.Changed():
	case <-time.After(pause):
		t.Fatal("the lost membership did not signal Changed")
	}
	again := w.next(t, 2, pause+10*time.Second)
	if again.Kind != leasestore.HostJoined || again.Record.HostID != "host-a" || again.Record.Incarnation == first.Incarnation {
		t.Fatalf("after the pause: %+v, want host-a joined under a new incarnation", again)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		until, epoch := m.Valid()
		if epoch == 2 && until.After(time.Now()) && m.Record().Incarnation == again.Record.Incarnation {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after registering again: valid until %v, epoch %d, record %+v", until, epoch, m.Record())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func drain(ch <-chan struct{}) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

func hostLost(fence uint64) leasestore.Evict {
	return leasestore.Evict{Fence: fence, Evidence: leasestore.DeathEvidence{Kind: leasestore.EvidenceHostLost, Detail: "liveness lease expired"}}
}

func testTakeover(t *testing.T, h ClusterHarness, name string) {
	ctx := ctxFor(t)
	a, b := h.Open(t, name), h.Open(t, name)
	m := join(t, ctx, a, "host-a", steadyTTL)
	sess := LiveOn(t, ctx, a, "s", "host-a")
	fence := sess.Lease.Fence

	_, err := b.ApplyIfHostLost(ctx, "s", "host-a", hostLost(fence))
	wantErr(t, err, leasestore.ErrHostAlive)
	if got := mustGet(t, ctx, b, "s"); got.Lease.Fence != fence || got.Lease.Claim != leasestore.ClaimLive {
		t.Fatalf("a refused takeover moved the lease: %+v", got.Lease)
	}
	// A host that is not the owner's proves nothing about the session.
	_, err = b.ApplyIfHostLost(ctx, "s", "host-c", hostLost(fence))
	wantErr(t, err, leasestore.ErrInvalidArgument)
	// The owner's writer goes on while its host is registered.
	_, err = a.Append(ctx, "s", fence, leasestore.EntryInput{Kind: leasestore.KindUpdate, Payload: []byte("a")})
	must(t, err)

	must(t, m.Close(ctx))
	got, err := b.ApplyIfHostLost(ctx, "s", "host-a", hostLost(fence))
	must(t, err)
	if got.Lease.Claim != leasestore.ClaimReleased || got.Lease.Fence != fence+1 ||
		got.Lease.DeathEvidence == nil || got.Lease.DeathEvidence.Kind != leasestore.EvidenceHostLost {
		t.Fatalf("after the takeover: %+v", got.Lease)
	}
	// The deposed writer's late append is refused.
	_, err = a.Append(ctx, "s", fence, leasestore.EntryInput{Kind: leasestore.KindUpdate, Payload: []byte("late")})
	wantErr(t, err, leasestore.ErrStaleFence)
	es := entries(t, ctx, b, "s", 0)
	if last := es[len(es)-1]; last.Kind != leasestore.KindLifecycle || last.Fence != fence+1 {
		t.Errorf("the journal ends with %+v, want the takeover's lifecycle entry", last)
	}
	_, err = b.ApplyIfHostLost(ctx, "missing", "host-a", hostLost(1))
	wantErr(t, err, leasestore.ErrNotFound)
}

func testRacingTakeovers(t *testing.T, h ClusterHarness, name string) {
	ctx := ctxFor(t)
	a, b, c := h.Open(t, name), h.Open(t, name), h.Open(t, name)
	const sessions = 5
	ids := make([]string, sessions)
	fences := make([]uint64, sessions)
	for i := range ids {
		ids[i] = "s" + string(rune('0'+i))
		fences[i] = LiveOn(t, ctx, a, ids[i], "host-a").Lease.Fence
	}
	for i, id := range ids {
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for k, taker := range []leasestore.Cluster{b, c} {
			wg.Go(func() { _, errs[k] = taker.ApplyIfHostLost(ctx, id, "host-a", hostLost(fences[i])) })
		}
		wg.Wait()
		won := 0
		for _, err := range errs {
			switch {
			case err == nil:
				won++
			case !errors.Is(err, leasestore.ErrStaleFence) && !errors.Is(err, leasestore.ErrInvalidTransition):
				t.Errorf("%s: the losing takeover failed with %v, want a stale fence", id, err)
			}
		}
		if won != 1 {
			t.Fatalf("%s: %d takeovers won (%v), want exactly one", id, won, errs)
		}
		if got := mustGet(t, ctx, a, id); got.Lease.Fence != fences[i]+1 {
			t.Errorf("%s: fence %d after the race, want %d", id, got.Lease.Fence, fences[i]+1)
		}
	}
}
