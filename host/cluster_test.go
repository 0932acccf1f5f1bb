package host

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/agenthost/agenthost/internal/logtest"
	"github.com/agenthost/agenthost/internal/pluginclient"
	"github.com/agenthost/agenthost/internal/wire"
	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/leasestore"
	"github.com/agenthost/agenthost/leasestore/etcdstore"
	"github.com/agenthost/agenthost/leasestore/etcdstore/etcdtest"
)

// Short cluster timings, so that a takeover test fits its budget: the
// ordering the tests check holds at any TTL.
const (
	testTTL       = 2 * time.Second
	testSelfFence = time.Second
	testDrift     = 500 * time.Millisecond
)

// clusterConfig is a host of the test cluster ec with its own state
// directory and id, on its own client of the cluster (as on its own
// machine).
func clusterHostConfig(t *testing.T, endpoints []string, hostID, dir string) Config {
	t.Helper()
	st, err := etcdstore.Open(testCtx(t), etcdstore.Options{Endpoints: endpoints, Logger: logtest.New(t).Named(hostID + ".store")})
	if err != nil {
		t.Fatal(err)
	}
	cfg := hostConfig(t, dir)
	cfg.Logger = logtest.New(t).Named(hostID)
	cfg.Store, cfg.Cluster, cfg.HostID = st, st, hostID
	cfg.LivenessTTL, cfg.SelfFence, cfg.DriftMargin = testTTL, testSelfFence, testDrift
	cfg.Address = filepath.Join(dir, "api.sock")
	return cfg
}

func openClusterHost(t *testing.T, ec *etcdtest.Cluster, hostID, dir string) *Host {
	t.Helper()
	h, err := Open(testCtx(t), clusterHostConfig(t, ec.Endpoints(), hostID, dir))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Shutdown(context.Background()) })
	return h
}

// evictedEntry returns the session's journal entry of its eviction and
// the evidence it carries.
func evictedEntry(t *testing.T, h *Host, id string) (leasestore.Entry, *leasestore.DeathEvidence) {
	t.Helper()
	for _, e := range journalOf(t, h, id) {
		if e.Kind != leasestore.KindLifecycle {
			continue
		}
		rec, err := journal.Decode(e)
		if err != nil {
			continue
		}
		if l, ok := rec.(*journal.Lifecycle); ok && l.Event == "evicted" && l.Evidence != nil {
			return e, l.Evidence
		}
	}
	t.Fatalf("session %q has no eviction in its journal", id)
	return leasestore.Entry{}, nil
}

// outboxStop reads the plugin's outbox through att up to the stop of turn.
func outboxStop(t *testing.T, att *pluginclient.Attachment, turn string) *journal.Stop {
	t.Helper()
	ctx, cancel := context.WithTimeout(testCtx(t), 10*time.Second)
	defer cancel()
	st, err := att.Updates(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	for {
		u, err := st.Recv()
		if err != nil {
			t.Fatalf("no stop of turn %s in the plugin's outbox: %v", turn, err)
		}
		if stop, ok := u.Record.(*journal.Stop); ok && u.TurnID == turn {
			return stop
		}
	}
}

// attachDetached connects to a plugin its host detached from, as a host
// would, at fence.
func attachDetached(t *testing.T, r leasestore.Reattach, id string, fence uint64) *pluginclient.Attachment {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+r.Address, append(wire.HostDialOptions(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, r.Network, r.Address)
		}))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	att, _, err := pluginclient.New(conn, r.ProtocolVersion).Attach(testCtx(t), id, fence)
	if err != nil {
		t.Fatal(err)
	}
	return att
}

// Two hosts on one cluster: B refuses A's session as running elsewhere
// while A is registered; once A is lost (its host closed: plugin detached,
// liveness lease revoked) A's plugin fences itself within SelfFence, B
// takes the session over no sooner than LivenessTTL + DriftMargin after it
// observed the loss, and resumes it; A, opened again, finds the session no
// longer its own, refuses it as B's and stops its old plugin.
func TestClusterTakeoverAfterTheBound(t *testing.T) {
	t.Parallel() // on its own etcd cluster
	ctx := testCtx(t)
	ec := etcdtest.StartCluster(t, 1)
	dirA, dirB := stateDir(t), stateDir(t)
	a, err := Open(ctx, clusterHostConfig(t, ec.Endpoints(), "host-a", dirA))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Shutdown(context.Background()) }) // after the test's own Close, a no-op
	s, err := a.StartSession(ctx, SessionRequest{ID: "c1", Agent: "scripted", Workspace: dirA})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := s.Prompt(ctx, "echo one"); err != nil || r.StopReason != "end_turn" {
		t.Fatalf("prompt on A: %+v, %v", r, err)
	}
	pidA, fenceA := s.PID(), s.Fence()
	recA, err := a.store.Get(ctx, "c1")
	if err != nil || recA.Lease.Reattach == nil {
		t.Fatalf("A's lease: %+v, %v", recA.Lease, err)
	}

	b := openClusterHost(t, ec, "host-b", dirB)
	_, err = b.StartSession(ctx, SessionRequest{ID: "c1", Agent: "scripted"})
	var ee *ElsewhereError
	if !errors.As(err, &ee) || !errors.Is(err, ErrSessionElsewhere) || ee.HostID != "host-a" || ee.Address != filepath.Join(dirA, "api.sock") {
		t.Fatalf("B started A's session: %v", err)
	}
	if st, err := b.Status(ctx); err != nil || st.Owners["c1"] != "host-a" || st.Cluster == nil || !st.Cluster.Live {
		t.Fatalf("B's status: %+v, %v", st, err)
	}

	// A is lost mid-turn: its host closes, its plugin lives on without
	// heartbeats.
	turn := make(chan TurnResult, 1)
	go func() {
		r, _ := s.Prompt(ctx, "sleep 30s")
		turn <- r
	}()
	waitFor(t, "the plugin to take the turn", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.turn != "" && s.dispatching == 0
	})
	beforeClose := time.Now()
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	closedAt := time.Now()
	sleeping := (<-turn).TurnID
	lastSeqA, err := b.store.LastSeq(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if !alive(t, pidA) {
		t.Fatal("closing host A stopped its plugin")
	}
	// No heartbeat reached the plugin after closedAt, so by closedAt +
	// SelfFence it has fenced itself: it refuses a turn.
	time.Sleep(time.Until(closedAt.Add(testSelfFence)))
	att := attachDetached(t, *recA.Lease.Reattach, "c1", fenceA)
	_, perr := att.Prompt(ctx, pluginclient.PromptRequest{TurnID: "turn-after-loss", Prompt: pluginclient.Text("echo late")})
	refusedAt := time.Now()
	if !errors.Is(perr, pluginclient.ErrSelfFenced) {
		t.Fatalf("A's plugin, SelfFence after its host left, answered a prompt with %v", perr)
	}
	// And it cancelled the turn it ran: its outbox, which no host
	// journals any more, ends that turn as cancelled.
	if stop := outboxStop(t, att, sleeping); stop.StopReason != "cancelled" {
		t.Fatalf("A's plugin ended its running turn %+v", stop)
	}

	waitFor(t, "B to take the session over and end A's turn", func() bool {
		rec, err := b.store.Get(ctx, "c1")
		if err != nil || rec.Lease.Held() || rec.Lease.Fence <= fenceA {
			return false
		}
		open, err := b.openTurn(ctx, "c1")
		return err == nil && open == nil
	})
	e, ev := evictedEntry(t, b, "c1")
	if ev.Kind != leasestore.EvidenceHostLost {
		t.Fatalf("evicted with %+v", ev)
	}
	if e.Fence != fenceA+1 && e.Fence != fenceA {
		t.Errorf("eviction journaled at fence %d, A held %d", e.Fence, fenceA)
	}
	// Never before the bound: the loss was observed after A began to
	// leave, and the takeover came TTL + drift after that observation,
	// after A's plugin had fenced itself.
	if ev.ObservedAt.Before(beforeClose) {
		t.Errorf("loss observed at %s, before host A began to close at %s", ev.ObservedAt, beforeClose)
	}
	if e.Time.Before(ev.ObservedAt.Add(testTTL + testDrift)) {
		t.Errorf("taken over at %s, sooner than TTL %s + drift %s after the loss was observed at %s", e.Time, testTTL, testDrift, ev.ObservedAt)
	}
	if !refusedAt.Before(e.Time) {
		t.Errorf("A's plugin refused its turn at %s, not before the takeover at %s", refusedAt, e.Time)
	}
	if !strings.Contains(ev.Detail, "host-a") {
		t.Errorf("evidence %q does not name the lost host", ev.Detail)
	}

	// The journal holds one end of A's turn, journaled by B after the
	// takeover at the next fence: nothing of A's plugin after its loss.
	var stops []leasestore.Entry
	for _, e := range journalOf(t, b, "c1") {
		if e.Kind == leasestore.KindStop {
			if rec, err := journal.Decode(e); err == nil && rec.(*journal.Stop).TurnID == sleeping {
				stops = append(stops, e)
			}
		}
		if e.Fence == fenceA && e.Seq > lastSeqA && e.Kind != leasestore.KindLifecycle {
			t.Errorf("entry %d (%s) written at A's fence after A left", e.Seq, e.Kind)
		}
	}
	if len(stops) != 1 || stops[0].Seq < e.Seq || stops[0].Fence <= fenceA {
		t.Fatalf("ends of A's turn in the journal: %+v (eviction at seq %d)", stops, e.Seq)
	}

	// B resumes the conversation.
	sb, err := b.StartSession(ctx, SessionRequest{ID: "c1", Agent: "scripted", MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := sb.Prompt(ctx, "echo two"); err != nil || r.StopReason != "end_turn" {
		t.Fatalf("prompt on B: %+v, %v", r, err)
	}
	if rec, _ := b.store.Get(ctx, "c1"); rec.Lease.OwnerHost() != "host-b" {
		t.Fatalf("owner host after B resumed: %q", rec.Lease.OwnerHost())
	}

	// A restarted: the session is not its own, its old plugin is stopped.
	a2 := openClusterHost(t, ec, "host-a", dirA)
	if d, ok := a2.Decisions()["c1"]; ok {
		t.Errorf("A decided B's session at restart: %+v", d)
	}
	if _, err := a2.StartSession(ctx, SessionRequest{ID: "c1", Agent: "scripted"}); !errors.As(err, &ee) || ee.HostID != "host-b" {
		t.Errorf("A restarted started B's session: %v", err)
	}
	<-a2.reaped
	waitFor(t, "A's old plugin to be stopped", func() bool { return !alive(t, pidA) })
}

// A second process with a host id already registered is refused before it
// touches any lease.
func TestClusterRefusesADuplicateHostID(t *testing.T) {
	t.Parallel() // on its own etcd cluster
	ec := etcdtest.StartCluster(t, 1)
	openClusterHost(t, ec, "host-a", stateDir(t))
	_, err := Open(testCtx(t), clusterHostConfig(t, ec.Endpoints(), "host-a", stateDir(t)))
	if !errors.Is(err, leasestore.ErrHostRegistered) || !strings.Contains(err.Error(), "another agenthost process") {
		t.Fatalf("second host-a: %v", err)
	}
}

// A plugin that cannot fence itself (protocol version 1 has no Heartbeat)
// is refused at start in cluster mode, and nothing of it is left running.
func TestClusterRefusesAPluginWithoutHeartbeat(t *testing.T) {
	t.Parallel() // on its own etcd cluster
	ec := etcdtest.StartCluster(t, 1)
	dir := stateDir(t)
	cfg := clusterHostConfig(t, ec.Endpoints(), "host-a", dir)
	cfg.Agents["old"] = AgentPlugin{Path: bins.scripted, Env: []string{wire.EnvProtocolVersions + "=1"}}
	h, err := Open(testCtx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Shutdown(context.Background()) })
	_, err = h.StartSession(testCtx(t), SessionRequest{ID: "old", Agent: "old", Workspace: dir})
	if !errors.Is(err, ErrNoHeartbeat) || !errors.Is(err, ErrStartFailed) {
		t.Fatalf("start of a plugin without Heartbeat: %v", err)
	}
	rec, err := h.store.Get(testCtx(t), "old")
	if err != nil || rec.Lease.Held() {
		t.Fatalf("lease after the refused start: %+v, %v", rec.Lease, err)
	}
}

// A host cut off from the cluster past its TTL (its only etcd member
// stopped) takes no turn while it is not live; the others take its
// session over; when it is back, under a new epoch, it re-reads the lease,
// finds the session taken and stops its plugin, writing nothing at its
// old fence.
func TestClusterHostCutOffComesBackDeposed(t *testing.T) {
	t.Parallel() // on its own etcd cluster
	ctx := testCtx(t)
	ec := etcdtest.StartCluster(t, 3)
	dirA, dirB := stateDir(t), stateDir(t)
	// A reaches the cluster through member 0 only, B through the others.
	a, err := Open(ctx, clusterHostConfig(t, []string{ec.Endpoint(0)}, "host-a", dirA))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Shutdown(context.Background()) })
	b, err := Open(ctx, clusterHostConfig(t, []string{ec.Endpoint(1), ec.Endpoint(2)}, "host-b", dirB))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Shutdown(context.Background()) })

	s, err := a.StartSession(ctx, SessionRequest{ID: "c2", Agent: "scripted", Workspace: dirA})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := s.Prompt(ctx, "echo one"); err != nil || r.StopReason != "end_turn" {
		t.Fatalf("prompt on A: %+v, %v", r, err)
	}
	pidA, fenceA := s.PID(), s.Fence()
	_, epoch := a.cl.m.Valid()

	ec.Stop(0)
	waitFor(t, "A to stop being live", func() bool { _, _, ok := a.cl.live(time.Now()); return !ok })
	if _, err := s.Prompt(ctx, "echo cut off"); !errors.Is(err, ErrNotLive) || !errors.Is(err, leasestore.ErrReconciling) {
		t.Fatalf("prompt on a host that is not live: %v", err)
	}
	waitFor(t, "B to take the session over", func() bool {
		rec, err := b.store.Get(ctx, "c2")
		return err == nil && rec.Lease.Fence > fenceA
	})
	lastSeq, err := b.store.LastSeq(ctx, "c2")
	if err != nil {
		t.Fatal(err)
	}

	ec.Restart(0)
	waitFor(t, "A's plugin to be stopped", func() bool {
		select {
		case <-s.Done():
			return true
		default:
			return false
		}
	})
	if !errors.Is(s.Err(), ErrDeposed) {
		t.Errorf("A's session ended with %v", s.Err())
	}
	if _, now := a.cl.m.Valid(); now <= epoch {
		t.Errorf("A came back under epoch %d, was %d", now, epoch)
	}
	waitFor(t, "A's plugin to exit", func() bool { return !alive(t, pidA) })
	for _, e := range journalOf(t, b, "c2") {
		if e.Seq > lastSeq && e.Fence <= fenceA {
			t.Errorf("entry %d (%s) at fence %d after the takeover", e.Seq, e.Kind, e.Fence)
		}
	}
}

// openPortabilityHost is a host of ec with two agents: "scripted", whose
// plugin exports its provider state, and "local", the same plugin told
// not to (scripted.EnvNoExport), like a third-party plugin without the
// interface.
func openPortabilityHost(t *testing.T, ec *etcdtest.Cluster, hostID, dir string) *Host {
	t.Helper()
	cfg := clusterHostConfig(t, ec.Endpoints(), hostID, dir)
	cfg.Agents["local"] = AgentPlugin{Path: bins.scripted, Env: []string{"AGENTHOST_SCRIPTED_NO_EXPORT=1"}}
	h, err := Open(testCtx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Shutdown(context.Background()) })
	return h
}

// Portability is the stored session's, the same on every host: a session
// whose plugin exports its state is portable on A and on B, one whose
// plugin does not is portable on neither. Once A is lost and B took both
// over, B continues the portable conversation and refuses the other with
// ErrNotPortable naming host A, reserving nothing; A, back, resumes its own
// session there.
func TestClusterResumesANonPortableSessionOnlyOnItsOwnHost(t *testing.T) {
	t.Parallel() // on its own etcd cluster
	ctx := testCtx(t)
	ec := etcdtest.StartCluster(t, 1)
	dirA, dirB := stateDir(t), stateDir(t)
	a := openPortabilityHost(t, ec, "host-a", dirA)
	b := openPortabilityHost(t, ec, "host-b", dirB)

	var pids []int
	fences := map[string]uint64{}
	for _, c := range []struct{ id, agent string }{{"moves", "scripted"}, {"stays", "local"}} {
		s, err := a.StartSession(ctx, SessionRequest{ID: c.id, Agent: c.agent, Workspace: dirA})
		if err != nil {
			t.Fatal(err)
		}
		if r, err := s.Prompt(ctx, "echo one"); err != nil || r.StopReason != "end_turn" {
			t.Fatalf("prompt %s on A: %+v, %v", c.id, r, err)
		}
		pids = append(pids, s.PID())
		fences[c.id] = s.Fence()
	}
	portable := func(h *Host, id string) bool {
		t.Helper()
		rec, err := h.store.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(rec.Handles); n == 0 || rec.Handles[n-1].HostID != "host-a" {
			t.Fatalf("session %s's handle chain %+v does not name host-a", id, rec.Handles)
		}
		return h.Portable(ctx, rec)
	}
	for name, h := range map[string]*Host{"A": a, "B": b} {
		if !portable(h, "moves") || portable(h, "stays") {
			t.Fatalf("on %s: moves portable %v, stays portable %v; want true, false", name, portable(h, "moves"), portable(h, "stays"))
		}
	}

	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "B to take both sessions over", func() bool {
		for id, fence := range fences {
			if rec, err := b.store.Get(ctx, id); err != nil || rec.Lease.Held() || rec.Lease.Fence <= fence {
				return false
			}
		}
		return true
	})
	if !portable(b, "moves") || portable(b, "stays") {
		t.Fatal("portability changed with the takeover")
	}

	_, err := b.StartSession(ctx, SessionRequest{ID: "stays", Agent: "local", MustExist: true})
	var np *NotPortableError
	if !errors.As(err, &np) || !errors.Is(err, ErrNotPortable) || np.HostID != "host-a" || np.SessionID != "stays" ||
		!strings.Contains(err.Error(), `"host-a"`) || !strings.Contains(err.Error(), "resume it on that host") {
		t.Fatalf("B resumed a session whose state is on host A only: %v", err)
	}
	before, err := b.store.Get(ctx, "stays")
	if err != nil || before.Lease.Held() || before.Lease.Fence != fences["stays"]+1 {
		t.Fatalf("lease after the refused resume: %+v, %v", before.Lease, err)
	}

	sb, err := b.StartSession(ctx, SessionRequest{ID: "moves", Agent: "scripted", MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := sb.Prompt(ctx, "history"); err != nil || r.StopReason != "end_turn" {
		t.Fatalf("prompt on B: %+v, %v", r, err)
	}
	if texts := agentText(t, b, "moves"); texts[len(texts)-1] != "history: 1 earlier prompts: echo one" {
		t.Errorf("B's plugin continued with %q, want the earlier prompt", texts[len(texts)-1])
	}
	if rec, err := b.store.Get(ctx, "moves"); err != nil || rec.Handles[len(rec.Handles)-1].HostID != "host-b" || !b.Portable(ctx, rec) {
		t.Errorf("after B's turn: handles %+v, portable on B %v (%v)", rec.Handles, b.Portable(ctx, rec), err)
	}

	// A, back, stops its old plugins and resumes its own session.
	a2 := openPortabilityHost(t, ec, "host-a", dirA)
	<-a2.reaped
	for _, pid := range pids {
		waitFor(t, "A's old plugins to be stopped", func() bool { return !alive(t, pid) })
	}
	sa, err := a2.StartSession(ctx, SessionRequest{ID: "stays", Agent: "local", MustExist: true})
	if err != nil {
		t.Fatalf("A resuming its own session: %v", err)
	}
	if r, err := sa.Prompt(ctx, "echo two"); err != nil || r.StopReason != "end_turn" {
		t.Fatalf("prompt on A: %+v, %v", r, err)
	}
}
