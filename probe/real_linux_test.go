package probe_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/agenthost/agenthost/internal/logtest"
	"github.com/agenthost/agenthost/leasestore"
	"github.com/agenthost/agenthost/probe"
	"github.com/agenthost/agenthost/probe/probetest"
)

func TestMain(m *testing.M) {
	if os.Getenv("PROBE_TEST_CHILD") == "reap" {
		// Run a reaper that owns nothing, from wherever the test put us.
		rep := (&probe.Reaper{TokenVar: tokenVar, Grace: 200 * time.Millisecond,
			Owned: func(string) (bool, error) { return false, nil }}).Reap(context.Background())
		_ = os.WriteFile(os.Getenv("PROBE_TEST_OUT"), fmt.Appendf(nil, "stopped %v failures %d\n", rep.Stopped, rep.Failures), 0o600)
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// child is a real process started for a test, stopped and reaped when the
// test ends.
type child struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// spawn starts sh -c script with env (PATH added), in its own process group
// when ownGroup is set.
func spawn(t testing.TB, script string, env []string, ownGroup bool) *child {
	t.Helper()
	return start(t, exec.Command("sh", "-c", script), env, ownGroup)
}

// sleeper starts sleep 300 itself (not through sh, whose exec of sleep would
// open a second window with an empty environment).
func sleeper(t testing.TB, env []string, ownGroup bool) *child {
	t.Helper()
	return start(t, exec.Command("sleep", "300"), env, ownGroup)
}

func start(t testing.TB, cmd *exec.Cmd, env []string, ownGroup bool) *child {
	t.Helper()
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: ownGroup}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		if ownGroup {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
		_ = cmd.Process.Kill()
		<-c.done
	})
	// Start returns while the kernel may still be setting up the exec:
	// for a moment /proc shows an empty environment, so a probe would see
	// no spawn token (the host re-reads for this; the tests wait).
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", cmd.Process.Pid))
		if err != nil || len(env) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not exec within 5s", cmd)
		}
	}
	return c
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// running reports whether pid is a live process that started at ticks (0:
// any start). Zombies count as dead: they can no longer write anything.
func running(t testing.TB, pid int, ticks uint64) bool {
	t.Helper()
	procs, err := (&probe.ProcFS{}).Read(context.Background(), []int{pid})
	if err != nil {
		t.Fatal(err)
	}
	p := procs[0]
	return p.Presence == probe.Present && !p.Zombie && (ticks == 0 || p.StartTicks == ticks)
}

func realProber() *probe.Prober { return &probe.Prober{HostID: hostID, TokenVar: tokenVar} }

func identify(t testing.TB, pid int) leasestore.ProcessIdentity {
	t.Helper()
	id, err := realProber().Identify(context.Background(), pid)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestIdentifyRealProcess(t *testing.T) {
	c := sleeper(t, []string{tokenVar + "=real-token"}, true)
	id := identify(t, c.pid())
	if id.PID != c.pid() || id.StartTicks == 0 || id.BootID == "" || id.SpawnToken != "real-token" || id.HostID != hostID {
		t.Fatalf("identity %+v", id)
	}
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil || id.BootID != strings.TrimSpace(string(boot)) {
		t.Errorf("boot id %q, /proc says %q (%v)", id.BootID, boot, err)
	}
	self := identify(t, os.Getpid())
	if self.StartTicks == 0 || self.SpawnToken != "" {
		t.Errorf("own identity %+v", self)
	}
	if _, err := realProber().Identify(context.Background(), 1<<30); !errors.Is(err, probe.ErrNoProcess) {
		t.Errorf("a pid beyond pid_max: %v", err)
	}
}

func TestProbeRealProcesses(t *testing.T) {
	ctx := context.Background()
	withToken := sleeper(t, []string{tokenVar + "=token-a"}, true)
	withoutToken := sleeper(t, nil, true)
	dying := sleeper(t, []string{tokenVar + "=token-c"}, true)

	a, b, c := identify(t, withToken.pid()), identify(t, withoutToken.pid()), identify(t, dying.pid())
	b.SpawnToken = "token-b" // recorded at spawn; this child's environment lacks it
	_ = dying.cmd.Process.Kill()
	<-dying.done

	sessions := []leasestore.Session{session("a", &a, nil), session("b", &b, nil), session("c", &c, nil)}
	got := realProber().ProbeAll(ctx, sessions)
	if r := got["a"]; !r.ProvenAlive() || !slices.Equal(r.MatchedOn, []probe.Field{probe.FieldSpawnToken, probe.FieldStartTime}) {
		t.Errorf("child with its token: %v", r)
	}
	if r := got["b"]; !r.ProvenAlive() || !slices.Equal(r.MatchedOn, []probe.Field{probe.FieldStartTime}) {
		t.Errorf("child without a token: %v", r)
	}
	// The exited child is either gone, or its pid was already reused.
	if r := got["c"]; !r.ProvenDead() {
		t.Errorf("exited child: %v", r)
	}

	// The same pid with a different recorded token is someone else.
	wrong := a
	wrong.SpawnToken = "token-z"
	if r := realProber().Probe(ctx, session("w", &wrong, nil)); r.Outcome != probe.IdentityMismatch || r.Field != probe.FieldSpawnToken {
		t.Errorf("wrong token: %v", r)
	}
	// A reservation whose token a live process carries stays latched;
	// once that process is gone the reservation is unused.
	res := session("r", nil, reserved("token-a"))
	if r := realProber().Probe(ctx, res); r.Outcome != probe.Indeterminate {
		t.Errorf("reservation with a live token: %v", r)
	}
	_ = withToken.cmd.Process.Kill()
	<-withToken.done
	if r := realProber().Probe(ctx, res); r.Outcome != probe.ReservationUnused {
		t.Errorf("reservation after its process exited: %v", r)
	}
}

// exitBetweenReads is the real /proc, except that the first open of pid's
// environment first kills and reaps that process: the exit lands between
// the scan's stat and environment reads, every time.
type exitBetweenReads struct {
	fs.FS
	pid  int
	kill func()
	once sync.Once
}

func (e *exitBetweenReads) Open(name string) (fs.File, error) {
	if name == strconv.Itoa(e.pid)+"/environ" {
		e.once.Do(e.kill)
	}
	return e.FS.Open(name)
}

// A real process that exits between the scan's two reads of it is gone:
// the spawn-token scan still answers, and a reservation only it carried is
// freed (on a busy machine some process exits during nearly every scan).
func TestReservationFreedWhenAProcessExitsBetweenReads(t *testing.T) {
	ctx := context.Background()
	dying := sleeper(t, []string{tokenVar + "=token-exiting"}, true)
	hook := &exitBetweenReads{FS: os.DirFS("/proc"), pid: dying.pid(), kill: func() {
		_ = dying.cmd.Process.Kill()
		<-dying.done
	}}
	p := &probe.Prober{HostID: hostID, TokenVar: tokenVar, Table: &probe.ProcFS{FS: hook, TokenVar: tokenVar}}
	if r := p.Probe(ctx, session("r", nil, reserved("token-exiting"))); r.Outcome != probe.ReservationUnused {
		t.Errorf("a reservation whose process exited during the scan: %v, want reservation-unused", r)
	}
	select {
	case <-dying.done:
	default:
		t.Fatal("the scan never read the dying process's environment: the race was not staged")
	}
}

// spawnAtPID starts a child that gets exactly pid, by setting the kernel's
// last-allocated pid (root only); ok is false when that cannot be forced.
func spawnAtPID(t *testing.T, pid int, env []string) (*child, bool) {
	t.Helper()
	for range 50 {
		if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(pid-1)), 0); err != nil {
			t.Logf("cannot steer pid allocation: %v", err)
			return nil, false
		}
		c := sleeper(t, env, true)
		if c.pid() == pid {
			return c, true
		}
		_ = c.cmd.Process.Kill()
		<-c.done
	}
	return nil, false
}

// A pid reused by another process is a mismatch, never the old owner alive.
func TestPIDReuseIsAMismatch(t *testing.T) {
	ctx := context.Background()
	first := sleeper(t, []string{tokenVar + "=first"}, true)
	recorded := identify(t, first.pid())
	// Start ticks are 10 ms apart: a pid reused within the same tick is
	// indistinguishable by start time, which is why identity also carries
	// the spawn token. Natural reuse needs the whole pid space to wrap, far
	// slower than a tick; forced reuse must wait a few ticks to be realistic.
	time.Sleep(50 * time.Millisecond)
	_ = first.cmd.Process.Kill()
	<-first.done

	for _, env := range [][]string{{tokenVar + "=second"}, nil} {
		reuser, ok := spawnAtPID(t, recorded.PID, env)
		if !ok {
			t.Log("pid reuse cannot be forced here: simulating it with a synthetic /proc")
			testPIDReuseSimulated(t)
			return
		}
		now := identify(t, reuser.pid())
		if now.PID != recorded.PID || now.StartTicks == recorded.StartTicks {
			t.Fatalf("reuse did not happen as arranged: %+v vs %+v", now, recorded)
		}
		r := realProber().Probe(ctx, session("s", &recorded, nil))
		if r.Outcome != probe.IdentityMismatch {
			t.Errorf("pid %d reused (env %q): %v, want identity-mismatch", recorded.PID, env, r)
		}
		t.Logf("pid %d reused by a new process (env %q): %v", recorded.PID, env, r)
		_ = reuser.cmd.Process.Kill()
		<-reuser.done
	}
}

func testPIDReuseSimulated(t *testing.T) {
	p, _, _ := proberOver(treeWith(owner.PID, owner.StartTicks+500, "other"))
	if r := p.Probe(context.Background(), session("s", &owner, nil)); r.Outcome != probe.IdentityMismatch {
		t.Errorf("simulated reuse: %v", r)
	}
}

func TestReaperStopsOnlyOrphans(t *testing.T) {
	ctx := context.Background()
	// An orphan that ignores SIGTERM and has a child in its group.
	stubborn := spawn(t, `trap "" TERM; sleep 300 & wait`, []string{tokenVar + "=orphan-1"}, true)
	polite := sleeper(t, []string{tokenVar + "=orphan-2"}, true)
	owned := sleeper(t, []string{tokenVar + "=owned-1"}, true)
	untokened := sleeper(t, nil, true)
	otherHost := sleeper(t, []string{"AGENTHOST_SPAWN_TOKEN_OTHER=orphan-1"}, true)
	// An orphan in this test's own process group: only it may be signalled,
	// never the group (which holds the test binary).
	inOurGroup := sleeper(t, []string{tokenVar + "=orphan-3"}, false)

	grandchild := waitForGroupMember(t, stubborn.pid())
	tick := func(c *child) uint64 { return identify(t, c.pid()).StartTicks }
	survivors := map[string]struct {
		pid   int
		ticks uint64
	}{
		"owned": {owned.pid(), tick(owned)}, "untokened": {untokened.pid(), tick(untokened)}, "other host": {otherHost.pid(), tick(otherHost)},
	}

	sockets := t.TempDir()
	for _, d := range []string{"orphan-1", "owned-1", "vanished"} {
		if err := os.MkdirAll(filepath.Join(sockets, d), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(sockets, d, "plugin.sock"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var errs []error
	r := &probe.Reaper{
		TokenVar:   tokenVar,
		Owned:      func(token string) (bool, error) { return token == "owned-1", nil },
		Grace:      300 * time.Millisecond,
		SocketRoot: sockets,
		OnError:    func(scope string, err error) { errs = append(errs, fmt.Errorf("%s: %w", scope, err)) },
		Logger:     logtest.New(t),
	}
	rep := r.Reap(ctx)
	if len(errs) > 0 {
		t.Errorf("reaper reported failures: %v", errs)
	}
	for _, c := range []*child{stubborn, polite, inOurGroup} {
		select {
		case <-c.done:
		case <-time.After(10 * time.Second):
			t.Errorf("orphan pid %d is still running after the reap", c.pid())
		}
	}
	if running(t, grandchild, 0) {
		t.Errorf("the stubborn orphan's child %d survived", grandchild)
	}
	for name, s := range survivors {
		if !running(t, s.pid, s.ticks) {
			t.Errorf("the %s process %d was stopped", name, s.pid)
		}
	}
	slices.Sort(rep.Stopped)
	want := []int{stubborn.pid(), polite.pid(), inOurGroup.pid()}
	slices.Sort(want)
	if !slices.Equal(rep.Stopped, want) {
		t.Errorf("report says stopped %v, want %v", rep.Stopped, want)
	}
	entries, err := os.ReadDir(sockets)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "owned-1" {
		t.Errorf("socket directories left: %v, want only the owned plugin's", entries)
	}
}

// waitForGroupMember returns a pid, other than leader, in leader's process
// group.
func waitForGroupMember(t *testing.T, leader int) int {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		procs, err := (&probe.ProcFS{}).Scan(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range procs {
			if p.PGID == leader && p.PID != leader {
				return p.PID
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no member appeared in process group %d", leader)
	return 0
}

// failingScan is a table whose scan fails, to exercise failure reporting.
type failingScan struct{ probe.Table }

var errScan = errors.New("scan failed")

func (failingScan) Scan(context.Context) ([]probe.Process, error) { return nil, errScan }

func TestReaperReportsFailuresWithScope(t *testing.T) {
	var scope string
	var got error
	r := &probe.Reaper{
		TokenVar: tokenVar,
		Table:    failingScan{&probe.ProcFS{TokenVar: tokenVar}},
		Owned:    func(string) (bool, error) { return false, nil },
		OnError:  func(s string, err error) { scope, got = s, err },
	}
	rep := r.Reap(context.Background())
	if scope != probe.ReaperScope || !errors.Is(got, errScan) || rep.Failures != 1 {
		t.Fatalf("reported %q %v (%d failures), want scope %q and the scan error", scope, got, rep.Failures, probe.ReaperScope)
	}
}

func TestReaperLogsFailuresWithoutReporter(t *testing.T) {
	var buf bytes.Buffer
	r := &probe.Reaper{
		TokenVar: tokenVar,
		Table:    failingScan{&probe.ProcFS{TokenVar: tokenVar}},
		Owned:    func(string) (bool, error) { return false, nil },
		Logger:   hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Info}),
	}
	r.Reap(context.Background())
	if line := buf.String(); !strings.Contains(line, "[ERROR]") || !strings.Contains(line, "orphan reaper failed") || !strings.Contains(line, "scan failed") {
		t.Fatalf("log: %q, want an error-level line with the failure", line)
	}
}

func TestReaperWithoutLeaseViewSignalsNothing(t *testing.T) {
	c := sleeper(t, []string{tokenVar + "=orphan-x"}, true)
	var reported error
	rep := (&probe.Reaper{TokenVar: tokenVar, OnError: func(_ string, err error) { reported = err }}).Reap(context.Background())
	if reported == nil || len(rep.Stopped) != 0 || !running(t, c.pid(), 0) {
		t.Fatalf("a reaper without Owned: report %+v, error %v", rep, reported)
	}
}

func TestCanVerifyIdentity(t *testing.T) {
	if !probe.CanVerifyIdentity(hostID, probe.Location{HostID: hostID}) {
		t.Error("this Linux host with /proc cannot verify identities of its own processes")
	}
	if probe.CanVerifyIdentity(hostID, probe.Location{HostID: "ssh:build-box"}) {
		t.Error("a session on another host counts as verifiable here")
	}
}

func treeWith(pid int, ticks uint64, token string) probetest.Tree {
	return probetest.Tree{BootID: bootID, Procs: []probetest.Proc{{PID: pid, StartTicks: ticks, Env: tokenEnv(token)}}}
}

// A host started from inside an old plugin's tree (say, from an agent's
// shell) must not stop its own ancestors or their process group, even when
// they carry a spawn token no lease owns.
func TestReaperSparesItsOwnLineage(t *testing.T) {
	out := filepath.Join(t.TempDir(), "report")
	script := "env " + tokenVar + "=reaper-own PROBE_TEST_CHILD=reap PROBE_TEST_OUT=" + out + " " + os.Args[0] + " -test.run=^$; sleep 300"
	leader := spawn(t, script, []string{tokenVar + "=stale-ancestor"}, true)
	var report []byte
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && len(report) == 0; time.Sleep(20 * time.Millisecond) {
		report, _ = os.ReadFile(out)
	}
	if len(report) == 0 {
		t.Fatal("the reaper child never reported")
	}
	t.Logf("reaper child: %s", report)
	if !running(t, leader.pid(), 0) {
		t.Fatal("the reaper stopped its own ancestor")
	}
}

func TestReaperStopsWhenOwnershipIsUnknown(t *testing.T) {
	c := sleeper(t, []string{tokenVar + "=maybe-owned"}, true)
	var reported error
	rep := (&probe.Reaper{TokenVar: tokenVar, Grace: 100 * time.Millisecond,
		Owned:   func(string) (bool, error) { return false, errors.New("store partly unreadable") },
		OnError: func(_ string, err error) { reported = err }}).Reap(context.Background())
	if reported == nil || !strings.Contains(reported.Error(), "store partly unreadable") || len(rep.Stopped) != 0 || !running(t, c.pid(), 0) {
		t.Fatalf("unknown ownership: report %+v, error %v", rep, reported)
	}
}
