package host

import (
	"context"
	"errors"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/leasestore"
)

// testIdle is the idle timeout of these tests: short, so a test waits
// little for the stop it expects. A test that shows a session kept
// alive holds it busy for several times as long.
const testIdle = 300 * time.Millisecond

// openIdle opens a host on dir whose sessions are idle after testIdle; it
// is shut down at the end of the test unless the test closed it.
func openIdle(t *testing.T, dir string) *Host {
	t.Helper()
	cfg := hostConfig(t, dir)
	cfg.IdleTimeout = testIdle
	h := mustOpen(t, cfg)
	t.Cleanup(func() { _ = h.Shutdown(context.Background()) })
	return h
}

// waitIdleStopped waits for the session's end (the idle stop is the only
// thing that ends it in these tests) and checks it was an idle stop: no
// error, the plugin process gone, the lease released with IdleStopDetail
// and the journal's release entry saying so.
func waitIdleStopped(t *testing.T, h *Host, s *Session) leasestore.Session {
	t.Helper()
	select {
	case <-s.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("session %q was not stopped after the idle timeout of %s", s.ID(), testIdle)
	}
	if s.Err() != nil {
		t.Errorf("the idle stop ended the session with %v; want a clean stop", s.Err())
	}
	if alive(t, s.PID()) {
		t.Errorf("plugin %d still runs after the idle stop", s.PID())
	}
	rec, err := h.store.Get(testCtx(t), s.ID())
	if err != nil {
		t.Fatal(err)
	}
	if !IdleStopped(rec) || StateOf(rec, false) != api.StateIdle {
		t.Errorf("the lease after the idle stop: %+v (evidence %+v); want released as idle", rec.Lease, rec.Lease.DeathEvidence)
	}
	var last *journal.Lifecycle
	for _, e := range journalOf(t, h, s.ID()) {
		if e.Kind != leasestore.KindLifecycle {
			continue
		}
		r, err := journal.Decode(e)
		if err != nil {
			t.Fatal(err)
		}
		last = r.(*journal.Lifecycle)
	}
	if last == nil || last.Event != "released" || last.Evidence == nil || last.Evidence.Detail != IdleStopDetail {
		t.Errorf("the journal's last lifecycle entry is %+v; want the release saying %q", last, IdleStopDetail)
	}
	return rec
}

// prompts are the texts of the session's journaled prompts, in order.
func prompts(t *testing.T, h *Host, id string) []string {
	t.Helper()
	var out []string
	for _, e := range journalOf(t, h, id) {
		if e.Kind != leasestore.KindPrompt {
			continue
		}
		r, err := journal.Decode(e)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r.(*journal.Prompt).Prompt[0].Text())
	}
	return out
}

// An idle session's plugin is stopped after the timeout, and its next
// prompt (through ResumeIdle, as the API's is) resumes the same provider
// conversation; across a restart of the host too, the marker being
// durable in the lease.
func TestIdleSessionIsStoppedAndResumedOnItsNextPrompt(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dir := stateDir(t)
	h := openIdle(t, dir)
	s, err := h.StartSession(ctx, SessionRequest{ID: "sleepy", Agent: "scripted", Workspace: t.TempDir(), Options: map[string]string{"model": "smart"}})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := s.Prompt(ctx, "count 2"); err != nil || r.StopReason != "end_turn" {
		t.Fatalf("first prompt: %+v, %v", r, err)
	}
	handle := s.Handle()
	waitIdleStopped(t, h, s)
	if st, err := h.Status(ctx); err != nil || len(st.Running) != 0 || st.IdleTimeout != testIdle {
		t.Errorf("status after the idle stop: running %v, idle timeout %s (%v)", st.Running, st.IdleTimeout, err)
	}
	// The stopped session refuses a prompt unjournaled: its caller resumes.
	if _, err := s.Prompt(ctx, "lost?"); !errors.Is(err, ErrIdleStopped) {
		t.Errorf("a prompt on the idle-stopped session: %v; want ErrIdleStopped", err)
	}

	s2, ok, err := h.ResumeIdle(ctx, "sleepy")
	if err != nil || !ok {
		t.Fatalf("resume the idle session: %v, %v", ok, err)
	}
	if s2.Handle() != handle || s2.Options()["model"] != "smart" {
		t.Errorf("resumed with handle %q and options %v; want %q and the stored model", s2.Handle(), s2.Options(), handle)
	}
	if r, err := s2.Prompt(ctx, "count 1"); err != nil || r.StopReason != "end_turn" {
		t.Fatalf("prompt after the resume: %+v, %v", r, err)
	}
	rec := waitIdleStopped(t, h, s2)
	if n := len(rec.Handles); n == 0 || rec.Handles[n-1].Handle != handle || rec.Handles[n-1].Origin != leasestore.HandleResumed {
		t.Errorf("handle chain %+v; want the conversation resumed, not a new one", rec.Handles)
	}

	// Another host finds the session idle, and resumes it the same way.
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	h2 := openIdle(t, dir)
	s3, ok, err := h2.ResumeIdle(ctx, "sleepy")
	if err != nil || !ok || s3.Handle() != handle {
		t.Fatalf("resume the idle session after a restart: %v, %v (handle %q, want %q)", ok, err, s3.Handle(), handle)
	}
	if r, err := s3.Prompt(ctx, "count 1"); err != nil || r.StopReason != "end_turn" {
		t.Fatalf("prompt after the restart: %+v, %v", r, err)
	}
	if got := prompts(t, h2, "sleepy"); len(got) != 3 || got[0] != "count 2" {
		t.Errorf("journaled prompts %q; want the three answered, the refused one not", got)
	}
	// A session stopped on request is not idle: nothing resumes it.
	if err := s3.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := h2.ResumeIdle(ctx, "sleepy"); ok || err != nil {
		t.Errorf("ResumeIdle of a session stopped on request: %v, %v; want not idle", ok, err)
	}
}

// A turn longer than the timeout keeps the session: the turn's end is
// the event that shows the whole turn ran, five times the idle timeout,
// in the plugin it started in. The idle stop follows it.
func TestIdleTimeoutWaitsForARunningTurn(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	h := openIdle(t, stateDir(t))
	s, err := h.StartSession(ctx, SessionRequest{ID: "turn", Agent: "scripted", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := s.Prompt(ctx, "sleep 1500ms"); err != nil || r.StopReason != "end_turn" {
		t.Fatalf("a turn of five idle timeouts: %+v, %v; want it to run to its end", r, err)
	}
	if s.gone() || s.IdleStopping() {
		t.Fatal("the session was stopped during its turn")
	}
	waitIdleStopped(t, h, s)
}

// Neither a follower nor a pending permission request lets the session
// go idle; once they are gone it does. Nothing observable happens while
// they hold it, so each holds it for five idle timeouts (the timer would
// have fired, and the stop begun, four times over) before the test looks.
func TestIdleTimeoutWaitsForFollowersAndPermissions(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	h := openIdle(t, stateDir(t))
	hold := 5 * testIdle
	t.Run("follower", func(t *testing.T) {
		t.Parallel()
		s, err := h.StartSession(ctx, SessionRequest{ID: "followed", Agent: "scripted", Workspace: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		release := s.Followed()
		time.Sleep(hold)
		if s.gone() || s.IdleStopping() {
			t.Fatal("a followed session was stopped as idle")
		}
		release()
		waitIdleStopped(t, h, s)
	})
	t.Run("permission", func(t *testing.T) {
		t.Parallel()
		s, err := h.StartSession(ctx, SessionRequest{ID: "asking", Agent: "scripted", Workspace: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		// A request pending with no turn, as a readopted plugin's may be:
		// the permission alone holds the session.
		s.addPermission(&journal.PermissionRequest{RequestID: "q1", ToolCall: journal.ToolCall{ToolCallID: "t1"}}, true)
		time.Sleep(hold)
		if s.gone() || s.IdleStopping() {
			t.Fatal("a session with a pending permission request was stopped as idle")
		}
		s.forgetPermission("q1")
		waitIdleStopped(t, h, s)
	})
}

// A host closing (a detach) stops no idle session: its plugin lives on
// for the next host, whose own timer stops it.
func TestClosingHostLeavesIdleSessionsToTheNextHost(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dir := stateDir(t)
	cfg := hostConfig(t, dir)
	cfg.IdleTimeout = time.Hour
	h := mustOpen(t, cfg)
	s, err := h.StartSession(ctx, SessionRequest{ID: "kept", Agent: "scripted", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	pid := s.PID()
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if !alive(t, pid) {
		t.Fatal("the detached plugin is gone")
	}
	h2 := openIdle(t, dir)
	if d := h2.Decisions()["kept"]; d.Action != ActionReadopted {
		t.Fatalf("decision %+v; want readopted", d)
	}
	s2, ok := h2.Session("kept")
	if !ok {
		t.Fatal("the readopted session is not running")
	}
	waitIdleStopped(t, h2, s2)
}

// Resuming an idle session that a prune removed after the resume read its
// record (the removal won the session's start turn) fails as not found:
// it never creates a new, empty session under the same id, which would
// answer the client's prompt with no context and bring the removed
// session back into the list.
func TestResumeOfAnIdleSessionPrunedMeanwhileFindsItGone(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	h := openIdle(t, stateDir(t))
	s, err := h.StartSession(ctx, SessionRequest{ID: "pruned", Agent: "scripted", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := s.Prompt(ctx, "count 1"); err != nil || r.StopReason != "end_turn" {
		t.Fatalf("first prompt: %+v, %v", r, err)
	}
	rec := waitIdleStopped(t, h, s)
	// ResumeIdle's read of the record, then the prune, then its start.
	rep, err := h.Prune(ctx, 0, false)
	if err != nil || !slices.Contains(rep.Removed, "pruned") {
		t.Fatalf("prune: %+v, %v; want the idle session removed", rep, err)
	}
	s2, err := h.resumeIdleRecord(ctx, rec)
	if !errors.Is(err, leasestore.ErrNotFound) || !strings.Contains(err.Error(), "removed") {
		t.Errorf("resume of the pruned session: %v; want ErrNotFound saying it was removed", err)
	}
	if s2 != nil {
		t.Errorf("the resume started session %q anew (pid %d)", s2.ID(), s2.PID())
	}
	gone(t, h, "pruned")
}

// A follower counts for the session id, not for one host.Session: when
// the plugin dies and another client's request starts the session again
// (a new host.Session), the client still following it keeps the new one
// from going idle, and its release is what lets it go.
func TestAFollowerCountsForTheSessionStartedAgain(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	h := openIdle(t, stateDir(t))
	s1, err := h.StartSession(ctx, SessionRequest{ID: "followed-again", Agent: "scripted", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	release := s1.Followed()
	if err := syscall.Kill(s1.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s1.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the plugin's death went unnoticed")
	}
	s2, err := h.StartSession(ctx, SessionRequest{ID: "followed-again", Agent: "scripted"})
	if err != nil {
		t.Fatal(err)
	}
	if n := s2.Followers(); n != 1 {
		t.Fatalf("the session started again counts %d followers; want the one still following", n)
	}
	time.Sleep(5 * testIdle)
	if s2.gone() || s2.IdleStopping() {
		t.Fatal("a followed session started again was stopped as idle")
	}
	release()
	if n := s2.Followers(); n != 0 {
		t.Errorf("after the release: %d followers; want 0", n)
	}
	waitIdleStopped(t, h, s2)
}

// A host closing while an idle stop is under way (decided before the
// close) waits for that stop rather than detaching the plugin midway: a
// detach that won would leave a plugin whose agent session the stop had
// already closed, holding the lease for the next host to readopt.
func TestCloseWaitsForAnIdleStopUnderWay(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	cfg := hostConfig(t, stateDir(t))
	cfg.IdleTimeout = time.Hour
	h := mustOpen(t, cfg)
	s, err := h.StartSession(ctx, SessionRequest{ID: "closing-idle", Agent: "scripted", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	pid := s.PID()
	// The timer's decision, as idleFired takes it.
	s.mu.Lock()
	s.idle.stopping, s.idle.stopped = true, make(chan struct{})
	s.mu.Unlock()
	closed := make(chan error, 1)
	go func() { closed <- h.Close(ctx) }()
	// The close has reached the session: it marked its idle timer over
	// (or, detaching it, the session's end did).
	waitFor(t, "the close to reach the session", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.idle.over
	})
	s.idleStop()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if alive(t, pid) {
		t.Fatalf("plugin %d still runs: the close detached it midway through its idle stop", pid)
	}
	h2 := mustOpen(t, hostConfig(t, cfg.StateDir))
	t.Cleanup(func() { _ = h2.Shutdown(context.Background()) })
	rec, err := h2.store.Get(ctx, "closing-idle")
	if err != nil {
		t.Fatal(err)
	}
	if !IdleStopped(rec) {
		t.Errorf("the lease after the close: %+v (evidence %+v); want released as idle", rec.Lease, rec.Lease.DeathEvidence)
	}
}
