package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agenthost/agenthost/internal/logtest"
	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/leasestore"
	"github.com/agenthost/agenthost/probe"
)

func openHost(t *testing.T) *Host {
	t.Helper()
	return openHostWith(t, nil)
}

// openHostWith is openHost with its config changed by edit first.
func openHostWith(t *testing.T, edit func(*Config)) *Host {
	t.Helper()
	dir, err := os.MkdirTemp("", "ah-host-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cfg := Config{
		StateDir: dir,
		Agents: map[string]AgentPlugin{
			"scripted": {Path: bins.scripted},
			"missing":  {Path: filepath.Join(dir, "no-such-plugin")},
		},
		StartupTimeout: 20 * time.Second, StopTimeout: 5 * time.Second,
		Logger: logtest.New(t),
	}
	if edit != nil {
		edit(&cfg)
	}
	h, err := openOnBadger(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Shutdown(context.Background()); err != nil {
			t.Errorf("shut the host down: %v", err)
		}
	})
	return h
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// journalOf returns the session's journal entries by kind.
func journalOf(t *testing.T, h *Host, id string) []leasestore.Entry {
	t.Helper()
	var out []leasestore.Entry
	if err := h.store.Replay(testCtx(t), id, 0, func(e leasestore.Entry) error { out = append(out, e); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestSessionLifecycleWithLeases(t *testing.T) {
	ctx := testCtx(t)
	h := openHost(t)
	s, err := h.StartSession(ctx, SessionRequest{ID: "s\x00/1", Agent: "scripted", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := h.store.Get(ctx, s.ID())
	if err != nil {
		t.Fatal(err)
	}
	l := rec.Lease
	if !l.AdmitsWriter() || l.Fence != s.Fence() || l.Owner == nil || l.Owner.PID != s.PID() || l.Owner.SpawnToken != l.ReservedSpawnToken {
		t.Fatalf("lease of a started session: %+v", l)
	}
	if rec.Handle() == "" || rec.Handle() != s.Handle() {
		t.Errorf("proved handle %q, session handle %q", rec.Handle(), s.Handle())
	}

	res, err := s.Prompt(ctx, "count 3")
	if err != nil || res.StopReason != "end_turn" {
		t.Fatalf("count turn: %+v, %v", res, err)
	}
	// The prompt is journaled before any of the turn's updates, and every
	// update reaches the journal in order, in ACP shape.
	var kinds []string
	var texts []string
	for _, e := range journalOf(t, h, s.ID()) {
		switch e.Kind {
		case leasestore.KindPrompt, leasestore.KindStop:
			kinds = append(kinds, string(e.Kind))
		case leasestore.KindUpdate:
			rec, err := journal.Decode(e)
			if err != nil {
				t.Fatal(err)
			}
			if r := rec.(*journal.Update); r.PluginSeq == 0 && r.Update.UpdateKind() == journal.KindSessionInfoUpdate {
				continue // the title the host derived from the prompt
			}
			kinds = append(kinds, "update")
			u, ok := rec.(*journal.Update).Update.(*journal.Chunk)
			if !ok || u.Kind != journal.KindAgentMessageChunk {
				t.Fatalf("update %s", e.Payload)
			}
			texts = append(texts, u.Content.Text())
		}
	}
	if strings.Join(kinds, ",") != "prompt,update,update,update,stop" || strings.Join(texts, ",") != "1,2,3" {
		t.Errorf("journal kinds %v, texts %v", kinds, texts)
	}

	// Cancel ends a turn as cancelled, not as an error.
	prompts := func() (n int) {
		for _, e := range journalOf(t, h, s.ID()) {
			if e.Kind == leasestore.KindPrompt {
				n++
			}
		}
		return n
	}
	before := prompts()
	done := make(chan TurnResult, 1)
	go func() {
		r, _ := s.Prompt(ctx, "sleep 30s")
		done <- r
	}()
	// Once the prompt is journaled the turn is the session's: a cancel
	// from then on reaches it, however late the plugin gets the turn.
	waitFor(t, "the prompt to be journaled", func() bool { return prompts() > before })
	if err := s.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.StopReason != "cancelled" {
			t.Errorf("cancelled turn ended %+v", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("cancel did not end the turn")
	}
	if r, err := s.Prompt(ctx, "fail out of tokens"); err != nil || r.StopReason != "failed" || r.Error != "out of tokens" {
		t.Errorf("failing turn: %+v, %v", r, err)
	}

	pid := s.PID()
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if alive(t, pid) {
		t.Error("plugin alive after Stop")
	}
	if s.Err() != nil {
		t.Errorf("a requested stop ended with %v", s.Err())
	}
	rec, err = h.store.Get(ctx, s.ID())
	if err != nil {
		t.Fatal(err)
	}
	if rec.Lease.Claim != leasestore.ClaimReleased || rec.Lease.Fence != l.Fence+1 || rec.Lease.DeathEvidence.Kind != leasestore.EvidenceExitObserved {
		t.Errorf("lease after stop: %+v", rec.Lease)
	}

	// Resuming continues the conversation from its proved handle.
	s2, err := h.StartSession(ctx, SessionRequest{ID: s.ID(), Agent: "scripted"})
	if err != nil {
		t.Fatal(err)
	}
	if s2.Handle() != s.Handle() || s2.Fence() != l.Fence+2 {
		t.Errorf("resumed handle %q fence %d, want %q at %d", s2.Handle(), s2.Fence(), s.Handle(), l.Fence+2)
	}
}

func TestPluginDeathReleasesTheLeaseWithEvidence(t *testing.T) {
	ctx := testCtx(t)
	h := openHost(t)
	s, err := h.StartSession(ctx, SessionRequest{ID: "dies", Agent: "scripted", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(s.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the plugin's death went unnoticed")
	}
	if !errors.Is(s.Err(), ErrExitedUnexpectedly) || !strings.Contains(s.Err().Error(), "SIGKILL") || !strings.Contains(s.Err().Error(), `"dies"`) {
		t.Errorf("session error %v, want one naming the session and SIGKILL", s.Err())
	}
	rec, err := h.store.Get(ctx, "dies")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Lease.Claim != leasestore.ClaimReleased || rec.Lease.DeathEvidence == nil || !strings.Contains(rec.Lease.DeathEvidence.Detail, "SIGKILL") {
		t.Errorf("lease after the plugin died: %+v", rec.Lease)
	}
}

// A session whose plugin died is no longer offered as running, and
// resuming it (without options, as the API's session/resume does) starts
// a plugin with the options the session was started with: here the
// scripted plugin refuses to open without its model.
func TestResumeAfterPluginDeathKeepsTheSessionsOptions(t *testing.T) {
	ctx := testCtx(t)
	h := openHost(t)
	opts := map[string]string{"require_model": "true", "model": "m1"}
	s, err := h.StartSession(ctx, SessionRequest{ID: "keeps", Agent: "scripted", Workspace: t.TempDir(), Options: opts})
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(s.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.proc.Terminated():
	case <-time.After(10 * time.Second):
		t.Fatal("the plugin's death went unnoticed")
	}
	if _, ok := h.Session("keeps"); ok {
		t.Error("a session whose plugin died is still offered as running")
	}
	s2, err := h.StartSession(ctx, SessionRequest{ID: "keeps", Agent: "scripted"})
	if err != nil {
		t.Fatalf("resume after the plugin died: %v", err)
	}
	if s2 == s || s2.PID() == s.PID() {
		t.Errorf("the resume handed back the dead session")
	}
}

func TestMissingPluginRecordsPreSpawnProof(t *testing.T) {
	ctx := testCtx(t)
	h := openHost(t)
	_, err := h.StartSession(ctx, SessionRequest{ID: "nope", Agent: "missing", Workspace: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "plugin not found") {
		t.Fatalf("got %v, want a clear missing-plugin error", err)
	}
	rec, err := h.store.Get(ctx, "nope")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Lease.Claim != leasestore.ClaimReleased || rec.Lease.DeathEvidence == nil || rec.Lease.DeathEvidence.Kind != leasestore.EvidencePIDAbsent {
		t.Errorf("lease after a pre-spawn failure: %+v", rec.Lease)
	}
	var events []string
	for _, e := range journalOf(t, h, "nope") {
		var ev leasestore.LifecycleEvent
		_ = json.Unmarshal(e.Payload, &ev)
		events = append(events, ev.Event)
	}
	if strings.Join(events, ",") != "created,reserved,pre-spawn-failure,released" {
		t.Errorf("lifecycle %v", events)
	}
	if _, err := h.StartSession(ctx, SessionRequest{Agent: "claude"}); !errors.Is(err, ErrUnknownAgent) {
		t.Errorf("unknown agent: %v", err)
	}
}

func TestNoConfiguredModelSurfacesThePluginsMessage(t *testing.T) {
	ctx := testCtx(t)
	h := openHost(t)
	_, err := h.StartSession(ctx, SessionRequest{ID: "no-model", Agent: "scripted", Workspace: t.TempDir(),
		Options: map[string]string{"require_model": "true"}})
	if !errors.Is(err, ErrPluginFailed) || !strings.Contains(err.Error(), "no model configured") {
		t.Fatalf("got %v, want the plugin's own no-model message", err)
	}
	rec, err := h.store.Get(ctx, "no-model")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Lease.Claim != leasestore.ClaimReleased || rec.Lease.Owner != nil {
		t.Errorf("lease after a failed start: %+v", rec.Lease)
	}
}

// Credentials in the resolved environment reach a plugin only when the
// session allows them; the host's own environment never does.
func TestCredentialPolicyStripsProviderKeys(t *testing.T) {
	ctx := testCtx(t)
	dir := stateDir(t)
	t.Setenv("ANTHROPIC_API_KEY", "from-the-host-shell")
	cfg := hostConfig(t, dir)
	cfg.Agents = map[string]AgentPlugin{"claude": {Path: bins.scripted}}
	cfg.Credentials = map[string]CredentialPolicy{"claude": {Variables: []string{"ANTHROPIC_API_KEY"}}}
	cfg.ResolveEnvironment = func(context.Context, string) ([]string, error) {
		return []string{"ANTHROPIC_API_KEY=from-login-shell", "EDITOR=vi"}, nil
	}
	h := mustOpen(t, cfg)
	t.Cleanup(func() { _ = h.Shutdown(context.Background()) })
	envOf := func(s *Session) string {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(s.PID()), "environ"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	s, err := h.StartSession(ctx, SessionRequest{ID: "strict", Agent: "claude", Workspace: dir})
	if err != nil {
		t.Fatal(err)
	}
	if env := envOf(s); strings.Contains(env, "ANTHROPIC_API_KEY") || !strings.Contains(env, "EDITOR=vi") {
		t.Errorf("default policy: plugin environment %q", env)
	}
	s2, err := h.StartSession(ctx, SessionRequest{ID: "allowed", Agent: "claude", Workspace: dir, AllowCredentials: true})
	if err != nil {
		t.Fatal(err)
	}
	if env := envOf(s2); !strings.Contains(env, "ANTHROPIC_API_KEY=from-login-shell") || strings.Contains(env, "from-the-host-shell") {
		t.Errorf("allowed credentials: plugin environment %q", env)
	}
}

// A policy that inherits copies its variables from the host's own
// environment to the plugin's and allows credentials in every session; the
// same variable under the default policy never leaves the host.
func TestCredentialPolicyInheritPassesTheHostsOwnVariables(t *testing.T) {
	ctx := testCtx(t)
	dir := stateDir(t)
	t.Setenv("MY_PROVIDER_KEY", "from-the-host")
	t.Setenv("UNNAMED_SECRET", "never-passed")
	cfg := hostConfig(t, dir)
	cfg.Agents = map[string]AgentPlugin{"inherits": {Path: bins.scripted}, "strips": {Path: bins.scripted}}
	cfg.Credentials = map[string]CredentialPolicy{
		"inherits": {Variables: []string{"MY_PROVIDER_KEY", "ABSENT_KEY"}, Inherit: true},
		"strips":   {Variables: []string{"MY_PROVIDER_KEY"}},
	}
	h := mustOpen(t, cfg)
	t.Cleanup(func() { _ = h.Shutdown(context.Background()) })
	envOf := func(s *Session) []string {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(s.PID()), "environ"))
		if err != nil {
			t.Fatal(err)
		}
		return strings.Split(string(b), "\x00")
	}
	s, err := h.StartSession(ctx, SessionRequest{ID: "inherits", Agent: "inherits", Workspace: dir})
	if err != nil {
		t.Fatal(err)
	}
	env := envOf(s)
	if !slices.Contains(env, "MY_PROVIDER_KEY=from-the-host") || slices.ContainsFunc(env, func(kv string) bool {
		return strings.HasPrefix(kv, "UNNAMED_SECRET=") || strings.HasPrefix(kv, "ABSENT_KEY=")
	}) {
		t.Errorf("inheriting policy: plugin environment %q", env)
	}
	optionsOf := func(id string) map[string]string {
		rec, err := h.store.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return rec.Options
	}
	if got := optionsOf("inherits")["allow_credentials"]; got != "true" {
		t.Errorf("inheriting policy: session option allow_credentials = %q, want true", got)
	}
	s2, err := h.StartSession(ctx, SessionRequest{ID: "strips", Agent: "strips", Workspace: dir})
	if err != nil {
		t.Fatal(err)
	}
	if env := envOf(s2); slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "MY_PROVIDER_KEY=") }) {
		t.Errorf("default policy: plugin environment %q", env)
	}
	if opts := optionsOf("strips"); opts["allow_credentials"] != "" {
		t.Errorf("default policy: session options %q", opts)
	}
}

// A start its caller gives up on during preflight still releases its
// reservation: the rollback does not run on the caller's ended context.
func TestCancelledStartReleasesItsReservation(t *testing.T) {
	dir := stateDir(t)
	cfg := hostConfig(t, dir)
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	cfg.ResolveEnvironment = func(context.Context, string) ([]string, error) {
		cancel() // the caller gives up while the host prepares the spawn
		return nil, errors.New("login shell timed out")
	}
	h := mustOpen(t, cfg)
	t.Cleanup(func() { _ = h.Shutdown(context.Background()) })
	if _, err := h.StartSession(ctx, SessionRequest{ID: "given-up", Agent: "scripted", Workspace: dir}); err == nil {
		t.Fatal("the start succeeded")
	}
	rec, err := h.store.Get(testCtx(t), "given-up")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Lease.Claim != leasestore.ClaimReleased {
		t.Errorf("lease after a start given up in preflight: %+v", rec.Lease)
	}
}

// Stopping a session mid-turn ends the turn and journals its end before the
// plugin goes away: cancelled, whether the plugin had taken the prompt
// (it cancels the turn) or the stop closed its session first, on a busy
// machine (the host ends the turn it could not dispatch).
func TestStopMidTurnJournalsTheTurnsEnd(t *testing.T) {
	ctx := testCtx(t)
	h := openHost(t)
	s, err := h.StartSession(ctx, SessionRequest{ID: "mid-turn", Agent: "scripted", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = s.Prompt(ctx, "sleep 30s") }()
	waitForPrompt(t, h, "mid-turn")
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if stops := stopsOf(t, h, "mid-turn", ""); len(stops) != 1 || stops[0].StopReason != "cancelled" {
		t.Fatalf("stop records %+v, want the turn cancelled", stops)
	}
}

// waitForPrompt waits until session id's journal holds a prompt.
func waitForPrompt(t *testing.T, h *Host, id string) {
	t.Helper()
	waitFor(t, "the prompt to be journaled", func() bool {
		for _, e := range journalOf(t, h, id) {
			if e.Kind == leasestore.KindPrompt {
				return true
			}
		}
		return false
	})
}

// A host that closes while sessions are starting leaves no plugin running
// that it does not account for.
func TestCloseRacingStartLeavesNoPlugin(t *testing.T) {
	ctx := testCtx(t)
	dir := stateDir(t)
	h := mustOpen(t, hostConfig(t, dir))
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			_, _ = h.StartSession(ctx, SessionRequest{ID: fmt.Sprint("race-", i), Agent: "scripted", Workspace: dir})
		})
	}
	time.Sleep(30 * time.Millisecond)
	if err := h.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	procs, err := (&probe.ProcFS{TokenVar: h.tokenVar}).Scan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if p.Token != "" && !p.Zombie {
			t.Errorf("plugin pid %d survived a shutdown that raced its start", p.PID)
		}
	}
}

// A prompt sent while a turn runs is refused with ErrTurnRunning and not
// journaled; once the turn ends (here cancelled), the next prompt runs.
func TestPromptWhileATurnRunsIsRefusedUnjournaled(t *testing.T) {
	ctx := testCtx(t)
	h := openHost(t)
	s, err := h.StartSession(ctx, SessionRequest{ID: "busy", Agent: "scripted", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan TurnResult, 1)
	go func() {
		r, _ := s.Prompt(ctx, "sleep 30s")
		first <- r
	}()
	prompts := func() int {
		n := 0
		for _, e := range journalOf(t, h, "busy") {
			if e.Kind == leasestore.KindPrompt {
				n++
			}
		}
		return n
	}
	waitFor(t, "the first prompt to be journaled", func() bool { return prompts() == 1 })
	if _, err := s.Prompt(ctx, "count 1"); !errors.Is(err, ErrTurnRunning) || !strings.Contains(err.Error(), "cancel it") {
		t.Fatalf("a prompt during a turn: %v; want ErrTurnRunning saying what to do", err)
	}
	if n := prompts(); n != 1 {
		t.Errorf("the journal holds %d prompts after the refused one; want only the running turn's", n)
	}
	if err := s.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	if r := <-first; r.StopReason != "cancelled" {
		t.Fatalf("the first turn ended %+v, want cancelled", r)
	}
	if r, err := s.Prompt(ctx, "count 2"); err != nil || r.StopReason != "end_turn" {
		t.Fatalf("a prompt after the turn ended: %+v, %v", r, err)
	}
	if n := prompts(); n != 2 {
		t.Errorf("the journal holds %d prompts; want 2", n)
	}
}

// A start reads its agent's plugin and credential policy together: a
// SetAgents during the start (here from ResolveWorkspace, after the policy
// was first consulted and before the environment is built) that swaps in
// a new plugin whose policy inherits credentials never gives the old
// plugin, which was never opted in, the new policy's credentials.
func TestAStartNeverGivesTheOldPluginTheNewCredentialPolicy(t *testing.T) {
	ctx := testCtx(t)
	dir := stateDir(t)
	t.Setenv("MY_PROVIDER_KEY", "from-the-host")
	cfg := hostConfig(t, dir)
	cfg.Agents = map[string]AgentPlugin{"a": {Path: bins.scripted, Env: []string{"WHICH_PLUGIN=old"}}}
	cfg.Credentials = map[string]CredentialPolicy{"a": {Variables: []string{"MY_PROVIDER_KEY"}}}
	var h *Host
	swapped := false
	cfg.ResolveWorkspace = func(_ context.Context, _ string, ws string) (string, error) {
		if !swapped {
			swapped = true
			h.SetAgents(map[string]AgentPlugin{"a": {Path: bins.scripted, Env: []string{"WHICH_PLUGIN=new"}}},
				map[string]CredentialPolicy{"a": {Variables: []string{"MY_PROVIDER_KEY"}, Inherit: true}})
		}
		return ws, nil
	}
	h = mustOpen(t, cfg)
	t.Cleanup(func() { _ = h.Shutdown(context.Background()) })
	s, err := h.StartSession(ctx, SessionRequest{ID: "swapped", Agent: "a", Workspace: dir})
	if err != nil {
		t.Fatal(err)
	}
	if !swapped {
		t.Fatal("ResolveWorkspace was not called: the test swapped nothing")
	}
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(s.PID()), "environ"))
	if err != nil {
		t.Fatal(err)
	}
	env := strings.Split(string(b), "\x00")
	if !slices.Contains(env, "WHICH_PLUGIN=old") {
		t.Fatalf("the start did not run the plugin it looked up: environment %q", env)
	}
	if slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "MY_PROVIDER_KEY=") }) {
		t.Errorf("the old plugin got the new policy's credentials: environment %q", env)
	}
}

// A stop that closes the plugin's session before the plugin took the
// prompt being dispatched (a busy machine's order of events, made certain
// by the fixture, which answers that prompt only once it is closed) ends
// the turn cancelled, as the stop would have cancelled it a moment later:
// the user stopped it, nothing failed.
func TestStopBeforeThePromptReachedThePluginEndsTheTurnCancelled(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	cfg := hostConfig(t, stateDir(t))
	cfg.Agents["fixture"] = AgentPlugin{Path: bins.fixture}
	h := mustOpen(t, cfg)
	t.Cleanup(func() { _ = h.Shutdown(testCtx(t)) })
	s, err := h.StartSession(ctx, SessionRequest{ID: "prompt-until-close", Agent: "fixture", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	prompted := make(chan error, 1)
	go func() {
		_, err := s.Prompt(ctx, "never taken")
		prompted <- err
	}()
	waitForPrompt(t, h, s.ID())
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-prompted; err == nil {
		t.Error("the prompt the plugin never took was answered without an error")
	}
	if stops := stopsOf(t, h, s.ID(), ""); len(stops) != 1 || stops[0].StopReason != "cancelled" || !strings.Contains(stops[0].Error, "stopped before") {
		t.Fatalf("stop records %+v, want the turn cancelled, saying the session was stopped before its agent took the prompt", stops)
	}
}
