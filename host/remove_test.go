package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/leasestore"
)

// gone asserts that nothing of session id is left: no record, no journal,
// no session directory.
func gone(t *testing.T, h *Host, id string) {
	t.Helper()
	ctx := testCtx(t)
	if _, err := h.store.Get(ctx, id); !errors.Is(err, leasestore.ErrNotFound) {
		t.Errorf("record of removed session %q: %v, want ErrNotFound", id, err)
	}
	if err := h.store.Replay(ctx, id, 0, func(leasestore.Entry) error { return errors.New("an entry") }); !errors.Is(err, leasestore.ErrNotFound) {
		t.Errorf("journal of removed session %q: %v, want ErrNotFound", id, err)
	}
	if dirs, err := h.sessionDirs(id); err != nil || len(dirs) != 0 {
		t.Errorf("session directories of removed session %q: %v, %v", id, dirs, err)
	}
}

// apiStateOf is the session's api state as the API shows it.
func apiStateOf(t *testing.T, h *Host, id string) string {
	t.Helper()
	rec, err := h.store.Get(testCtx(t), id)
	if err != nil {
		t.Fatal(err)
	}
	_, running := h.Session(id)
	return StateOf(rec, running)
}

func TestRemoveSessionRefusesARunningOneUnlessForced(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	h := openHost(t)
	s, err := h.StartSession(ctx, SessionRequest{ID: "rm-running", Agent: "scripted", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := s.Prompt(ctx, "count 2"); err != nil || res.StopReason != "end_turn" {
		t.Fatalf("turn: %+v, %v", res, err)
	}
	// Refused, and nothing removed: the plugin runs on, its directory and
	// journal are intact.
	if _, err := h.RemoveSession(ctx, "rm-running", false); !errors.Is(err, ErrSessionRunning) || !strings.Contains(err.Error(), "force") {
		t.Fatalf("remove a running session: %v, want ErrSessionRunning saying what to do", err)
	}
	if got := apiStateOf(t, h, "rm-running"); got != api.StateRunning {
		t.Errorf("state after a refused removal: %s", got)
	}
	if dirs, _ := h.sessionDirs("rm-running"); len(dirs) != 1 {
		t.Errorf("session directories after a refused removal: %v", dirs)
	}
	pid := s.PID()
	rem, err := h.RemoveSession(ctx, "rm-running", true)
	if err != nil {
		t.Fatal(err)
	}
	if !rem.Stopped || rem.FreedBytes <= 0 {
		t.Errorf("forced removal: %+v, want stopped and the plugin log's bytes freed", rem)
	}
	select {
	case <-s.Done():
	default:
		t.Error("the session is not done after a forced removal")
	}
	if alive(t, pid) {
		t.Errorf("the plugin (pid %d) runs after a forced removal", pid)
	}
	gone(t, h, "rm-running")
	// The id is free again: a new session of it starts from nothing.
	s2, err := h.StartSession(ctx, SessionRequest{ID: "rm-running", Agent: "scripted", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if rec, _ := h.store.Get(ctx, s2.ID()); len(rec.Handles) != 1 {
		t.Errorf("a session started after the removal has handles %+v, want one new", rec.Handles)
	}
}

func TestRemoveStoppedSessionRemovesRecordJournalAndDirectories(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	h := openHost(t)
	ws := t.TempDir()
	// Two generations: two session directories.
	for range 2 {
		s, err := h.StartSession(ctx, SessionRequest{ID: "rm-stopped", Agent: "scripted", Workspace: ws})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if dirs, _ := h.sessionDirs("rm-stopped"); len(dirs) != 2 {
		t.Fatalf("session directories of two generations: %v", dirs)
	}
	// Another session's directory is never touched.
	other, err := h.StartSession(ctx, SessionRequest{ID: "rm-stopped-2", Agent: "scripted", Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if got := apiStateOf(t, h, "rm-stopped"); got != api.StateStopped {
		t.Errorf("state of a stopped session: %s", got)
	}
	rem, err := h.RemoveSession(ctx, "rm-stopped", false)
	if err != nil || rem.Stopped || rem.FreedBytes <= 0 {
		t.Fatalf("remove a stopped session: %+v, %v", rem, err)
	}
	gone(t, h, "rm-stopped")
	if dirs, _ := h.sessionDirs("rm-stopped-2"); len(dirs) != 1 {
		t.Errorf("the other session's directories: %v", dirs)
	}
	if _, err := h.store.Get(ctx, "rm-stopped-2"); err != nil {
		t.Errorf("the other session's record: %v", err)
	}
	if _, err := h.RemoveSession(ctx, "rm-stopped", false); !errors.Is(err, leasestore.ErrNotFound) {
		t.Errorf("remove it again: %v, want ErrNotFound", err)
	}
}

// A lease reserved by nobody this host runs is held: removing it could
// pull the session from under a plugin that writes to it.
func TestRemoveRefusesAHeldSession(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	h := openHost(t)
	rec, err := h.store.Create(ctx, leasestore.SessionSpec{ID: "rm-held", Agent: "scripted", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.store.Apply(ctx, "rm-held", leasestore.Reserve{ExpectedFence: rec.Lease.Fence}); err != nil {
		t.Fatal(err)
	}
	if got := apiStateOf(t, h, "rm-held"); got != api.StateHeld {
		t.Errorf("state: %s, want held", got)
	}
	if _, err := h.RemoveSession(ctx, "rm-held", true); !errors.Is(err, ErrSessionHeld) || !errors.Is(err, leasestore.ErrOwnershipUnknown) {
		t.Fatalf("forced removal of a held session: %v, want ErrSessionHeld", err)
	}
	if _, err := h.store.Get(ctx, "rm-held"); err != nil {
		t.Errorf("the held session's record after a refused removal: %v", err)
	}
	rep, err := h.Prune(ctx, 0, false)
	if err != nil || slices.Contains(rep.Removed, "rm-held") || len(rep.Failed) != 0 {
		t.Errorf("prune with a held session: %+v, %v", rep, err)
	}
}

// silentOwner makes session id, new in h's store, owned by a live process
// carrying its spawn token that serves no plugin: the next host cannot
// readopt it nor prove it gone, so it latches it. It returns the process
// and the fence it owns.
func silentOwner(t *testing.T, h *Host, id string) (*exec.Cmd, uint64) {
	t.Helper()
	ctx := testCtx(t)
	dir := h.cfg.StateDir
	sess, err := h.store.Create(ctx, leasestore.SessionSpec{ID: id, Agent: "scripted", Workspace: dir})
	if err != nil {
		t.Fatal(err)
	}
	r, err := h.store.Apply(ctx, id, leasestore.Reserve{ExpectedFence: sess.Lease.Fence})
	if err != nil {
		t.Fatal(err)
	}
	silent := exec.Command("sleep", "300")
	silent.Env = []string{h.tokenVar + "=" + r.Lease.ReservedSpawnToken}
	if err := silent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = silent.Process.Kill(); _ = silent.Wait() })
	ident, err := h.prober.IdentifyStarted(ctx, silent.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	f := r.Lease.Fence
	for _, tr := range []leasestore.Transition{
		leasestore.CommitOwner{Fence: f, Owner: ident},
		leasestore.ProveOwner{Fence: f, Handle: "h", Origin: leasestore.HandleCreated,
			Reattach: &leasestore.Reattach{Network: "unix", Address: filepath.Join(dir, "no-such-socket"), ProtocolVersion: 1}},
	} {
		if _, err := h.store.Apply(ctx, id, tr); err != nil {
			t.Fatal(err)
		}
	}
	return silent, f
}

// latchedHost returns a host on which session id is latched (silentOwner).
func latchedHost(t *testing.T, id string) *Host {
	t.Helper()
	dir := stateDir(t)
	h1 := mustOpen(t, hostConfig(t, dir))
	silentOwner(t, h1, id)
	if err := h1.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	h2 := mustOpen(t, hostConfig(t, dir))
	t.Cleanup(func() { _ = h2.Shutdown(context.Background()) })
	if d := h2.Decisions()[id]; d.Action != ActionLatched {
		t.Fatalf("decision %+v, want latched", d)
	}
	return h2
}

func TestRemoveAndPruneNeverTouchALatchedSession(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	h := latchedHost(t, "rm-latched")
	if got := apiStateOf(t, h, "rm-latched"); got != api.StateLatched {
		t.Errorf("state: %s, want latched", got)
	}
	if _, err := h.RemoveSession(ctx, "rm-latched", true); !errors.Is(err, ErrSessionHeld) || !strings.Contains(err.Error(), "latched") {
		t.Fatalf("forced removal of a latched session: %v, want ErrSessionHeld saying it is latched", err)
	}
	rep, err := h.Prune(ctx, 0, false)
	if err != nil || len(rep.Removed) != 0 || len(rep.Failed) != 0 {
		t.Errorf("prune with only a latched session: %+v, %v", rep, err)
	}
	if rec, err := h.store.Get(ctx, "rm-latched"); err != nil || !rec.Lease.Stage.Latched() {
		t.Errorf("the latched session after remove and prune: %+v, %v", rec.Lease, err)
	}
}

// steppedClock is a Now that tests move forward.
type steppedClock struct{ at time.Time }

func (c *steppedClock) now() time.Time { return c.at }

func TestPruneRemovesOnlyOldStoppedAndFailedSessions(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dir := stateDir(t)
	clock := &steppedClock{at: time.Now()}
	cfg := hostConfig(t, dir)
	cfg.Now = clock.now
	cfg.Agents["fails"] = AgentPlugin{Path: "/bin/false"}
	h := mustOpen(t, cfg)
	t.Cleanup(func() { _ = h.Shutdown(context.Background()) })
	ws := t.TempDir()
	start := func(id string) *Session {
		s, err := h.StartSession(ctx, SessionRequest{ID: id, Agent: "scripted", Workspace: ws})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if err := start("old-stopped").Stop(ctx); err != nil {
		t.Fatal(err)
	}
	old := start("old-running")
	if _, err := h.StartSession(ctx, SessionRequest{ID: "old-failed", Agent: "fails", Workspace: ws}); !errors.Is(err, ErrStartFailed) {
		t.Fatalf("start of a plugin that exits at once: %v", err)
	}
	clock.at = clock.at.Add(2 * time.Hour)
	if err := start("new-stopped").Stop(ctx); err != nil {
		t.Fatal(err)
	}

	dry, err := h.Prune(ctx, time.Hour, true)
	if err != nil || strings.Join(dry.Removed, ",") != "old-failed,old-stopped" {
		t.Fatalf("dry run: %+v, %v; want old-failed and old-stopped", dry, err)
	}
	for _, id := range []string{"old-stopped", "old-failed", "old-running", "new-stopped"} {
		if _, err := h.store.Get(ctx, id); err != nil {
			t.Errorf("%s after a dry run: %v", id, err)
		}
	}
	rep, err := h.Prune(ctx, time.Hour, false)
	if err != nil || strings.Join(rep.Removed, ",") != "old-failed,old-stopped" || len(rep.Failed) != 0 {
		t.Fatalf("prune: %+v, %v; want old-failed and old-stopped", rep, err)
	}
	gone(t, h, "old-stopped")
	gone(t, h, "old-failed")
	if got := apiStateOf(t, h, "old-running"); got != api.StateRunning {
		t.Errorf("old-running after prune: %s", got)
	}
	if got := apiStateOf(t, h, "new-stopped"); got != api.StateStopped {
		t.Errorf("new-stopped after prune: %s", got)
	}
	if _, err := old.Prompt(ctx, "count 1"); err != nil {
		t.Errorf("the running session after prune: %v", err)
	}
}

// A session whose first start failed shows as failed, its journal says
// why, and it is prunable: for a plugin that is not there, one that exits
// at once and one that refuses to open the session.
func TestFailedFirstStartIsFailedAndSaysWhy(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dir := stateDir(t)
	cfg := hostConfig(t, dir)
	cfg.Agents["missing"] = AgentPlugin{Path: filepath.Join(dir, "no-such-plugin")}
	cfg.Agents["exits"] = AgentPlugin{Path: "/bin/false"}
	h := mustOpen(t, cfg)
	t.Cleanup(func() { _ = h.Shutdown(context.Background()) })
	for _, c := range []struct {
		id, agent string
		opts      map[string]string
		why       string
	}{
		{"f-missing", "missing", nil, "plugin not found"},
		{"f-exits", "exits", nil, "exited"},
		{"f-refuses", "scripted", map[string]string{"no_such_option": "1"}, "no_such_option"},
	} {
		if _, err := h.StartSession(ctx, SessionRequest{ID: c.id, Agent: c.agent, Workspace: dir, Options: c.opts}); err == nil {
			t.Fatalf("%s: the start succeeded", c.id)
		}
		if got := apiStateOf(t, h, c.id); got != api.StateFailed {
			rec, _ := h.store.Get(ctx, c.id)
			t.Errorf("%s: state %s, want failed (lease %+v)", c.id, got, rec.Lease)
		}
		var said []string
		for _, e := range journalOf(t, h, c.id) {
			said = append(said, string(e.Payload))
		}
		if text := strings.Join(said, "\n"); !strings.Contains(text, c.why) {
			t.Errorf("%s: the journal does not say %q:\n%s", c.id, c.why, text)
		}
	}
	rep, err := h.Prune(ctx, 0, false)
	if err != nil || strings.Join(rep.Removed, ",") != "f-exits,f-missing,f-refuses" {
		t.Fatalf("prune of the failed sessions: %+v, %v", rep, err)
	}
	for _, id := range rep.Removed {
		gone(t, h, id)
	}
	if _, err := os.Stat(filepath.Join(dir, "sessions")); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Error(err)
	}
}

func TestStopAllStopsEveryRunningSession(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	h := openHost(t)
	ws := t.TempDir()
	var pids []int
	for _, id := range []string{"all-b", "all-a"} {
		s, err := h.StartSession(ctx, SessionRequest{ID: id, Agent: "scripted", Workspace: ws})
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, s.PID())
	}
	rep := h.StopAll(ctx)
	if strings.Join(rep.Stopped, ",") != "all-a,all-b" || len(rep.Failed) != 0 {
		t.Fatalf("stop all: %+v", rep)
	}
	for _, pid := range pids {
		if alive(t, pid) {
			t.Errorf("plugin pid %d runs after StopAll", pid)
		}
	}
	for _, id := range []string{"all-a", "all-b"} {
		if got := apiStateOf(t, h, id); got != api.StateStopped {
			t.Errorf("%s after StopAll: %s", id, got)
		}
	}
	if rep := h.StopAll(ctx); len(rep.Stopped) != 0 || len(rep.Failed) != 0 {
		t.Errorf("stop all with nothing running: %+v", rep)
	}
}

// A start of the same id racing a removal either finds the session gone
// and starts a new one, or runs first and has the removal refused: never a
// half-removed session.
func TestStartRacingRemoveNeverResurrectsHalfASession(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	h := openHost(t)
	ws := t.TempDir()
	s, err := h.StartSession(ctx, SessionRequest{ID: "race", Agent: "scripted", Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	type started struct {
		s   *Session
		err error
	}
	// Hold the start turn, as a removal does, so both wait on it.
	release, err := h.startTurn(ctx, "race")
	if err != nil {
		t.Fatal(err)
	}
	removed := make(chan error, 1)
	starts := make(chan started, 1)
	go func() { _, err := h.RemoveSession(ctx, "race", false); removed <- err }()
	go func() {
		s, err := h.StartSession(ctx, SessionRequest{ID: "race", Agent: "scripted", Workspace: ws})
		starts <- started{s, err}
	}()
	release()
	rmErr, st := <-removed, <-starts
	t.Logf("the removal: %v", rmErr)
	if st.err != nil {
		t.Fatalf("start racing a removal: %v", st.err)
	}
	rec, err := h.store.Get(ctx, "race")
	if err != nil {
		t.Fatalf("the started session has no record: %v", err)
	}
	switch {
	case rmErr == nil:
		// Removed first: the start made a new session at its first fence.
		if len(rec.Handles) != 1 || rec.Handles[0].Origin != leasestore.HandleCreated || rec.Handles[0].Fence != st.s.Fence() {
			t.Errorf("session started after a removal: handles %+v, fence %d", rec.Handles, st.s.Fence())
		}
	case errors.Is(rmErr, ErrSessionRunning):
		// Started first: the removal was refused and the session is whole.
		if len(rec.Handles) == 0 || rec.Handles[len(rec.Handles)-1].Origin != leasestore.HandleResumed {
			t.Errorf("session resumed before a refused removal: handles %+v, fence %d", rec.Handles, st.s.Fence())
		}
	default:
		t.Fatalf("removal racing a start: %v", rmErr)
	}
	if dirs, _ := h.sessionDirs("race"); !slices.ContainsFunc(dirs, func(d string) bool { return strings.HasSuffix(d, "-"+strconv.FormatUint(st.s.Fence(), 10)) }) {
		t.Errorf("the running session's directory is missing: %v", dirs)
	}
	if res, err := st.s.Prompt(ctx, "count 1"); err != nil || res.StopReason != "end_turn" {
		t.Errorf("a turn of the session started in the race: %+v, %v", res, err)
	}
}

func TestStatusShowsDiskUse(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	h := openHost(t)
	before, err := h.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if before.DiskBytes <= 0 {
		t.Fatalf("disk use of a fresh state directory: %d, want the store's", before.DiskBytes)
	}
	s, err := h.StartSession(ctx, SessionRequest{ID: "disk", Agent: "scripted", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// A file of known size in the session's directory is counted.
	dirs, _ := h.sessionDirs("disk")
	if len(dirs) != 1 {
		t.Fatalf("session directories: %v", dirs)
	}
	if err := os.WriteFile(filepath.Join(dirs[0], "big"), make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	after, err := h.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.DiskBytes < before.DiskBytes+1<<20 {
		t.Errorf("disk use %d after writing 1 MiB, was %d", after.DiskBytes, before.DiskBytes)
	}
	if n := diskUsage(filepath.Join(t.TempDir(), "vanished")); n != 0 {
		t.Errorf("disk use of a path that does not exist: %d", n)
	}
}

// faultyStore is the real store with faults injected for the tidy code's
// error paths: List also reports a damaged record, Delete fails once.
type faultyStore struct {
	leasestore.Store
	listErr   error
	deleteErr error
}

func (f *faultyStore) List(ctx context.Context) ([]leasestore.Session, error) {
	list, err := f.Store.List(ctx)
	if err == nil {
		err = f.listErr
	}
	return list, err
}

func (f *faultyStore) Delete(ctx context.Context, id string, fence uint64) error {
	if err := f.deleteErr; err != nil {
		f.deleteErr = nil
		return err
	}
	return f.Store.Delete(ctx, id, fence)
}

// openFaulty opens a host on dir over a faultyStore.
func openFaulty(t *testing.T) (*Host, *faultyStore) {
	t.Helper()
	ctx := testCtx(t)
	cfg := hostConfig(t, stateDir(t))
	store, err := openStore(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	f := &faultyStore{Store: store}
	cfg.Store = f
	h, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Shutdown(context.Background()) })
	return h, f
}

// A prune whose listing of the store was partial (a damaged record) prunes
// what it listed and says that some records were not looked at, rather
// than report a clean pass.
func TestPruneReportsTheRecordsItCouldNotList(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	h, f := openFaulty(t)
	s, err := h.StartSession(ctx, SessionRequest{ID: "listed", Agent: "scripted", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	f.listErr = fmt.Errorf("list: session record \"x\" does not decode: %w", leasestore.ErrDamaged)
	rep, err := h.Prune(ctx, 0, false)
	if err != nil || !slices.Equal(rep.Removed, []string{"listed"}) {
		t.Fatalf("prune: %+v, %v; want the listed session removed", rep, err)
	}
	if !errors.Is(rep.Unlisted, leasestore.ErrDamaged) {
		t.Errorf("prune's report %+v hides the records it could not list", rep)
	}
}

// A removal whose store.Delete failed after the session's directories
// were removed says so, and that a retry finishes it; the retry does.
func TestRemoveWhoseDeleteFailedSaysRetryFinishesIt(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	h, f := openFaulty(t)
	s, err := h.StartSession(ctx, SessionRequest{ID: "half", Agent: "scripted", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	f.deleteErr = fmt.Errorf("delete: %w", leasestore.ErrNoSpace)
	_, err = h.RemoveSession(ctx, "half", false)
	if !errors.Is(err, leasestore.ErrNoSpace) || !strings.Contains(err.Error(), "directories") || !strings.Contains(err.Error(), "retry") {
		t.Fatalf("remove with a failing delete: %v; want it to say the directories are gone and to retry", err)
	}
	if _, err := h.RemoveSession(ctx, "half", false); err != nil {
		t.Fatalf("retry of the removal: %v", err)
	}
	gone(t, h, "half")
}

// A session whose lease is reserved (a plugin being started for it) is
// refused as being started, not as held by a plugin this host does not
// run: the host may be the one starting it.
func TestRemoveOfAReservedSessionSaysItIsStarting(t *testing.T) {
	t.Parallel()
	err := removable(leasestore.Session{ID: "s", Lease: leasestore.Lease{Claim: leasestore.ClaimReserved, Fence: 2}})
	if !errors.Is(err, ErrSessionHeld) || strings.Contains(err.Error(), "does not run") || !strings.Contains(err.Error(), "start") {
		t.Errorf("removable of a reserved lease: %v; want held, saying a plugin is being started", err)
	}
}
