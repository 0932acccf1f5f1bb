package host

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/agenthost/agenthost/internal/logtest"
	"github.com/agenthost/agenthost/internal/wire"
	"github.com/agenthost/agenthost/leasestore"
	"github.com/agenthost/agenthost/leasestore/badgerstore"
	"github.com/agenthost/agenthost/leasestore/leasestoretest"
	"github.com/agenthost/agenthost/probe"
)

func stateDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ah-rec-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func hostConfig(t *testing.T, dir string) Config {
	return Config{
		StateDir:       dir,
		Agents:         map[string]AgentPlugin{"scripted": {Path: bins.scripted}},
		StartupTimeout: 20 * time.Second, StopTimeout: 3 * time.Second, ReattachTimeout: 5 * time.Second,
		Logger: logtest.New(t),
	}
}

func mustOpen(t *testing.T, cfg Config) *Host {
	t.Helper()
	h, err := openOnBadger(testCtx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// pluginSeqs returns the plugin sequence numbers journaled for a session,
// in journal order.
func pluginSeqs(t *testing.T, h *Host, id string) []uint64 {
	t.Helper()
	var seqs []uint64
	for _, e := range journalOf(t, h, id) {
		if e.Kind != leasestore.KindUpdate && e.Kind != leasestore.KindStop {
			continue
		}
		var r struct {
			PluginSeq uint64 `json:"pluginSeq"`
		}
		if err := json.Unmarshal(e.Payload, &r); err != nil {
			t.Fatal(err)
		}
		if r.PluginSeq == 0 {
			continue // the host wrote it (the title it derived)
		}
		seqs = append(seqs, r.PluginSeq)
	}
	return seqs
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// A host that closes mid-turn leaves the plugin running; the next host
// readopts it at the next fence and drains everything it produced meanwhile,
// each update exactly once: with the combined Open of protocol version 2,
// and with a plugin that offers only version 1 (one built before version
// 2), which the host starts and readopts with version 1's calls, the
// lease recording the version each negotiated.
func TestRestartReadoptsAndDrainsTheOutbox(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     []string
		version int
	}{
		{"v2", nil, wire.ProtocolVersion2},
		{"v1-only-plugin", []string{wire.EnvProtocolVersions + "=1"}, wire.ProtocolVersion1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			restartReadoptsAndDrains(t, tc.env, tc.version)
		})
	}
}

func restartReadoptsAndDrains(t *testing.T, env []string, version int) {
	ctx := testCtx(t)
	dir := stateDir(t)
	cfg := func() Config {
		cfg := hostConfig(t, dir)
		cfg.Agents["scripted"] = AgentPlugin{Path: bins.scripted, Env: env}
		return cfg
	}
	h1 := mustOpen(t, cfg())
	s, err := h1.StartSession(ctx, SessionRequest{ID: "keep\x00going", Agent: "scripted", Workspace: dir})
	if err != nil {
		t.Fatal(err)
	}
	if v := s.proc.version; v != version || s.proc.direct != (version >= wire.ProtocolVersion2) {
		t.Fatalf("negotiated protocol version %d (dialed directly %v), want %d (directly at version 2 only)", v, s.proc.direct, version)
	}
	pid, fence := s.PID(), s.Fence()
	turn := make(chan TurnResult, 1)
	go func() {
		r, _ := s.Prompt(ctx, "count 40 20ms")
		turn <- r
	}()
	waitFor(t, "the turn to start streaming", func() bool { return len(pluginSeqs(t, h1, s.ID())) >= 5 })
	if err := h1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if r := <-turn; r.StopReason != "failed" || !strings.Contains(r.Error, "detached") {
		t.Errorf("the waiting prompt ended %+v", r)
	}
	if !alive(t, pid) {
		t.Fatal("closing the host stopped the plugin")
	}

	time.Sleep(300 * time.Millisecond) // the plugin keeps producing while no host is attached
	h2 := mustOpen(t, cfg())
	t.Cleanup(func() { _ = h2.Shutdown(context.Background()) })
	d := h2.Decisions()[s.ID()]
	if d.Action != ActionReadopted {
		t.Fatalf("decision %+v, want readopted", d)
	}
	rec, err := h2.store.Get(ctx, s.ID())
	if err != nil {
		t.Fatal(err)
	}
	if rec.Lease.Fence != fence+1 || rec.Lease.Owner.PID != pid || !rec.Lease.AdmitsWriter() {
		t.Fatalf("readopted lease %+v", rec.Lease)
	}
	if rec.Lease.Reattach == nil || rec.Lease.Reattach.ProtocolVersion != version {
		t.Fatalf("readopted lease records reattach %+v, want protocol version %d", rec.Lease.Reattach, version)
	}
	if s2 := h2.sessions[s.ID()]; s2.proc.version != version || (version >= wire.ProtocolVersion2) != (s2.proc.client == nil) {
		t.Fatalf("readopted at protocol version %d (go-plugin client %v), want %d (a go-plugin client only at version 1)", s2.proc.version, s2.proc.client != nil, version)
	}
	waitFor(t, "the rest of the turn", func() bool {
		seqs := pluginSeqs(t, h2, s.ID())
		return len(seqs) > 0 && seqs[len(seqs)-1] >= 41
	})
	seqs := pluginSeqs(t, h2, s.ID())
	for i, q := range seqs {
		if q != uint64(i+1) {
			t.Fatalf("journaled plugin updates %v: gap or duplicate at %d", seqs, i)
		}
	}
	// The readopted session takes prompts, once the pump handed it the
	// turn's stop (which it does after journaling it).
	s2 := h2.sessions[s.ID()]
	waitFor(t, "the readopted turn to end", func() bool {
		s2.mu.Lock()
		defer s2.mu.Unlock()
		return s2.turn == ""
	})
	if r, err := s2.Prompt(ctx, "count 2"); err != nil || r.StopReason != "end_turn" {
		t.Fatalf("prompt after readoption: %+v, %v", r, err)
	}
}

func TestPluginKilledWhileHostIsDownIsEvicted(t *testing.T) {
	ctx := testCtx(t)
	dir := stateDir(t)
	h1 := mustOpen(t, hostConfig(t, dir))
	s, err := h1.StartSession(ctx, SessionRequest{ID: "gone", Agent: "scripted", Workspace: dir})
	if err != nil {
		t.Fatal(err)
	}
	pid, fence, handle := s.PID(), s.Fence(), s.Handle()
	if err := h1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the plugin to die", func() bool { return !alive(t, pid) })

	h2 := mustOpen(t, hostConfig(t, dir))
	t.Cleanup(func() { _ = h2.Shutdown(context.Background()) })
	d := h2.Decisions()["gone"]
	// In production the dead plugin has been reaped (pid-absent); here it
	// was this test process's child, so it may still be a zombie, whose
	// exit the kernel shows (exit-observed). Both are proof of death.
	if d.Action != ActionEvicted || !d.Probe.ProvenDead() {
		t.Fatalf("decision %+v, want evicted on proof of death", d)
	}
	rec, _ := h2.store.Get(ctx, "gone")
	if rec.Lease.Claim != leasestore.ClaimReleased || rec.Lease.Fence != fence+1 || rec.Lease.DeathEvidence == nil {
		t.Errorf("lease after eviction %+v", rec.Lease)
	}
	// The session stays resumable from its provider handle.
	s2, err := h2.StartSession(ctx, SessionRequest{ID: "gone", Agent: "scripted"})
	if err != nil {
		t.Fatal(err)
	}
	if s2.Handle() != handle {
		t.Errorf("resumed handle %q, want %q", s2.Handle(), handle)
	}
}

// spawnAt starts `sleep` as the given pid by steering the kernel's pid
// allocation (root only); ok is false when that is not possible here.
func spawnAt(t *testing.T, pid int) (*exec.Cmd, bool) {
	t.Helper()
	for range 50 {
		if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(pid-1)), 0); err != nil {
			return nil, false
		}
		cmd := exec.Command("sleep", "300")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if cmd.Process.Pid == pid {
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			return cmd, true
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	return nil, false
}

// A recorded owner's pid now held by an unrelated process is a mismatch:
// the session is evicted and the unrelated process is never signalled.
func TestReusedPIDIsEvictedAndNeverSignalled(t *testing.T) {
	ctx := testCtx(t)
	dir := stateDir(t)
	h1 := mustOpen(t, hostConfig(t, dir))
	s, err := h1.StartSession(ctx, SessionRequest{ID: "reused", Agent: "scripted", Workspace: dir})
	if err != nil {
		t.Fatal(err)
	}
	pid := s.PID()
	if err := h1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(30 * time.Millisecond) // let the clock tick past the plugin's start
	_ = syscall.Kill(pid, syscall.SIGKILL)
	waitFor(t, "the plugin to die", func() bool { return !alive(t, pid) })
	impostor, ok := spawnAt(t, pid)
	if !ok {
		t.Skip("pid reuse cannot be forced on this machine (needs root and ns_last_pid); probe tests cover it with a synthetic /proc")
	}
	h2 := mustOpen(t, hostConfig(t, dir))
	t.Cleanup(func() { _ = h2.Shutdown(context.Background()) })
	d := h2.Decisions()["reused"]
	if d.Action != ActionEvicted || d.Probe.Outcome != probe.IdentityMismatch {
		t.Fatalf("decision %+v, want evicted on identity mismatch", d)
	}
	<-h2.reaped // the reaper's pass is over: a wrong one would have acted
	if !alive(t, impostor.Process.Pid) {
		t.Fatal("the unrelated process that reused the pid was signalled")
	}
}

// A plugin that is alive but does not answer its identity keeps the
// session: it is latched, and no second writer is ever started.
func TestAliveButSilentOwnerIsLatched(t *testing.T) {
	ctx := testCtx(t)
	dir := stateDir(t)
	h1 := mustOpen(t, hostConfig(t, dir))
	silent, f := silentOwner(t, h1, "silent")
	if err := h1.Close(ctx); err != nil {
		t.Fatal(err)
	}

	cfg := hostConfig(t, dir)
	cfg.ReprobeInterval = 50 * time.Millisecond
	h2 := mustOpen(t, cfg)
	t.Cleanup(func() { _ = h2.Shutdown(context.Background()) })
	d := h2.Decisions()["silent"]
	if d.Action != ActionLatched || !strings.Contains(d.Reason, "could not be readopted") {
		t.Fatalf("decision %+v, want latched", d)
	}
	_, err := h2.StartSession(ctx, SessionRequest{ID: "silent", Agent: "scripted"})
	if !errors.Is(err, leasestore.ErrOwnershipUnknown) {
		t.Fatalf("starting a latched session: %v, want ErrOwnershipUnknown", err)
	}
	time.Sleep(200 * time.Millisecond) // several re-probes
	rec, _ := h2.store.Get(ctx, "silent")
	if rec.Lease.Stage != leasestore.StageRecovering || !alive(t, silent.Process.Pid) {
		t.Fatalf("lease %+v; the silent owner must stay latched and untouched", rec.Lease)
	}
	// New evidence unlatches: once the owner is gone, the next attach
	// attempt evicts it and starts a fresh owner.
	_ = silent.Process.Kill()
	_ = silent.Wait()
	s, err := h2.StartSession(ctx, SessionRequest{ID: "silent", Agent: "scripted"})
	if err != nil {
		t.Fatalf("start after the owner died: %v", err)
	}
	if s.Fence() <= f {
		t.Errorf("new owner at fence %d, the latched one held %d", s.Fence(), f)
	}
}

func TestSecondHostIsToldWhoHoldsTheStateDir(t *testing.T) {
	dir := stateDir(t)
	h := mustOpen(t, hostConfig(t, dir))
	t.Cleanup(func() { _ = h.Shutdown(context.Background()) })
	_, err := openOnBadger(testCtx(t), hostConfig(t, dir))
	var locked *badgerstore.LockedError
	if !errors.As(err, &locked) || locked.PID != os.Getpid() {
		t.Fatalf("second open: %v", err)
	}
}

// The orphan reaper runs in the background at open; its failure reaches
// the reporter with a scope and never fails the open.
func TestReaperFailureIsReportedNotFatal(t *testing.T) {
	failure := errors.New("scan failed")
	var mu sync.Mutex
	var scope string
	var got error
	cfg := hostConfig(t, stateDir(t))
	cfg.ReapOrphans = func(context.Context) error { return failure }
	cfg.OnError = func(s string, err error) { mu.Lock(); scope, got = s, err; mu.Unlock() }
	h := mustOpen(t, cfg)
	t.Cleanup(func() { _ = h.Shutdown(context.Background()) })
	waitFor(t, "the reaper's failure report", func() bool { mu.Lock(); defer mu.Unlock(); return got != nil })
	if scope != ReaperScope || !errors.Is(got, failure) {
		t.Errorf("reported %q %v", scope, got)
	}
}

func TestReaperFailureIsLoggedWithoutReporter(t *testing.T) {
	var mu sync.Mutex
	var buf bytes.Buffer
	cfg := hostConfig(t, stateDir(t))
	cfg.ReapOrphans = func(context.Context) error { return errors.New("scan failed") }
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Output: lockedWriter{&mu, &buf}, Level: hclog.Error})
	h := mustOpen(t, cfg)
	t.Cleanup(func() { _ = h.Shutdown(context.Background()) })
	waitFor(t, "the reaper's failure in the log", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(buf.String(), "[ERROR]") && strings.Contains(buf.String(), "orphan-reaper failed") && strings.Contains(buf.String(), "scan failed")
	})
}

type lockedWriter struct {
	mu  *sync.Mutex
	buf *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func TestSupportsCreate(t *testing.T) {
	h := mustOpen(t, hostConfig(t, stateDir(t)))
	t.Cleanup(func() { _ = h.Shutdown(context.Background()) })
	if !h.SupportsCreate(probe.Location{HostID: "local"}, "scripted") {
		t.Error("this Linux host cannot create sessions of a configured agent")
	}
	if h.SupportsCreate(probe.Location{HostID: "ssh:build-box"}, "scripted") {
		t.Error("a session on another host id counts as creatable here")
	}
	if h.SupportsCreate(probe.Location{HostID: "local"}, "codex") {
		t.Error("an unconfigured agent counts as creatable")
	}
}

// A stop whose teardown fails reports it, keeps what it was tearing down,
// and the next stop retries it.
func TestFailedTeardownIsRetriedByTheNextStop(t *testing.T) {
	ctx := testCtx(t)
	cfg := hostConfig(t, stateDir(t))
	rt := &Runtime{Config: cfg, OpenStore: func(ctx context.Context) (leasestore.Store, error) { return openStore(ctx, cfg) }}
	h, err := rt.Host(ctx)
	if err != nil {
		t.Fatal(err)
	}
	again, err := rt.Host(ctx)
	if err != nil || again != h {
		t.Fatalf("a second Host call opened another host: %v", err)
	}
	s, err := h.StartSession(ctx, SessionRequest{ID: "session-teardown-retry", Agent: "scripted", Workspace: rt.Config.StateDir})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	real := leasestore.NewJournal(h.store, "session-teardown-retry", s.Fence())
	flaky := &leasestoretest.FlakyJournal{Journal: real, Failures: 2}
	if err := h.store.CloseRetries().CloseOrRetain(ctx, flaky); err == nil {
		t.Fatal("the first close should fail")
	}
	if err := rt.Stop(ctx); err == nil {
		t.Fatal("a stop whose journal close fails reported success")
	}
	if got := h.store.CloseRetries().Pending(); len(got) != 1 || got[0] != flaky.Name() {
		t.Fatalf("pending after the failed stop: %q", got)
	}
	if err := rt.Stop(ctx); err != nil {
		t.Fatalf("the retrying stop: %v", err)
	}
	if got := h.store.CloseRetries().Pending(); len(got) != 0 {
		t.Fatalf("pending after the retry: %q", got)
	}
}

// Closing a host while a background decision waits on a SIGSTOPped
// plugin's reattach returns at once: the decision's context ends with
// the host, the reattach gives up, and the session is left as it was
// (its lease the stopped plugin's, undecided), never evicted: the plugin
// may be alive, and the next host decides it.
func TestCloseCutsShortAReattachToAStoppedPlugin(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dir := stateDir(t)
	h1 := mustOpen(t, hostConfig(t, dir))
	hung, err := h1.StartSession(ctx, SessionRequest{ID: "hung", Agent: "scripted", Workspace: dir})
	if err != nil {
		t.Fatal(err)
	}
	other, err := h1.StartSession(ctx, SessionRequest{ID: "other", Agent: "scripted", Workspace: dir})
	if err != nil {
		t.Fatal(err)
	}
	pid, otherPID := hung.PID(), other.PID()
	t.Cleanup(func() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		_ = syscall.Kill(otherPID, syscall.SIGKILL)
	})
	if err := h1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	cfg := hostConfig(t, dir)
	cfg.ReconcileInBackground = true
	cfg.ReattachTimeout = 30 * time.Second
	h2 := mustOpen(t, cfg)
	// Both were probed at once; the other one decided means the stopped
	// one's decision is past its probe, in the reattach.
	waitFor(t, "the other session's decision", func() bool { _, ok := h2.Decisions()["other"]; return ok })
	if !h2.Undecided("hung") {
		t.Fatalf("the stopped plugin's session was decided %+v while it is stopped", h2.Decisions()["hung"])
	}
	start := time.Now()
	if err := h2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > cfg.ReattachTimeout/3 {
		t.Errorf("Close took %v, waiting on the stopped plugin's reattach (ReattachTimeout %v)", took, cfg.ReattachTimeout)
	}
	if d, ok := h2.Decisions()["hung"]; ok && d.Action != ActionLatched {
		t.Errorf("the stopped plugin's session was decided %+v at Close, want it undecided or latched", d)
	}
	store, err := openStore(ctx, hostConfig(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close(ctx)
	rec, err := store.Get(ctx, "hung")
	if err != nil {
		t.Fatal(err)
	}
	if l := rec.Lease; l.Claim == leasestore.ClaimReleased || l.Owner == nil || l.Owner.PID != pid {
		t.Errorf("the stopped plugin's lease after Close: %+v, want it still the plugin's", l)
	}
	if !alive(t, pid) {
		t.Error("the host killed the stopped plugin")
	}
}
