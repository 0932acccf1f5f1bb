package faults

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/internal/logtest"
	"github.com/agenthost/agenthost/probe"
)

// TestCLIGrandchildrenDieWithTheSession: the claude CLI forks grandchildren
// into the plugin's process group (holding its stdout and stderr, as a
// tool's background jobs do), waits for none and dies mid-turn. The turn
// must fail saying the CLI died, the session must live on, and once the
// session is stopped and the host shut down no process of it may be left:
// not the plugin, not one grandchild, even one that ignores SIGTERM.
func TestCLIGrandchildrenDieWithTheSession(t *testing.T) {
	for _, tc := range []struct {
		name       string
		ignoreTerm bool
	}{
		{"grandchildren die on SIGTERM", false},
		{"grandchildren ignore SIGTERM", true},
	} {
		t.Run(tc.name, func(t *testing.T) { testGrandchildren(t, 3, tc.ignoreTerm) })
	}
}

func testGrandchildren(t *testing.T, n int, ignoreTerm bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	marker := "grandchildren-" + rand.Text()
	// Whatever happens, nothing this test started outlives it.
	t.Cleanup(func() {
		for _, pid := range markedProcesses(t, marker) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})

	home, workspace := t.TempDir(), t.TempDir()
	creds := filepath.Join(home, ".claude", ".credentials.json")
	if err := os.MkdirAll(filepath.Dir(creds), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(creds, []byte(`{"claudeAiOauth":{"accessToken":"fake"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"HOME=" + home, "CLAUDE_CONFIG_DIR=" + filepath.Join(home, ".claude"),
		"AGENTHOST_CLAUDE_PATH=" + bins.fakeClaude, markerVar + "=" + marker, "FAKECLAUDE_FORK_AND_DIE=" + strconv.Itoa(n)}
	if ignoreTerm {
		env = append(env, "FAKECLAUDE_GRANDCHILD_IGNORE_SIGTERM=1")
	}
	h, err := openOnBadger(ctx, host.Config{
		StateDir:       t.TempDir(),
		Agents:         map[string]host.AgentPlugin{"claude": {Path: bins.claude, Env: env}},
		StartupTimeout: 30 * time.Second, StopTimeout: 5 * time.Second, ReattachTimeout: 10 * time.Second,
		Logger: logtest.New(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	shutDown := false
	t.Cleanup(func() {
		if !shutDown {
			_ = h.Shutdown(context.Background())
		}
	})

	s, err := h.StartSession(ctx, host.SessionRequest{Agent: "claude", Workspace: workspace})
	if err != nil {
		t.Fatal(err)
	}
	plugin := s.PID()
	r, err := s.Prompt(ctx, "count 3")
	if err != nil {
		t.Fatalf("prompt: %v", err)
	}
	injected(t, "the claude CLI forked %d grandchildren (ignoring SIGTERM: %v) into the plugin's process group, with its stdout and stderr, and exited with status 1 mid-turn", n, ignoreTerm)

	// The turn fails with the plugin's report of the death, which carries
	// the CLI's last stderr line and so the grandchildren's pids.
	want := regexp.MustCompile(`^claude exited during the turn \(exit status 1; its stderr ended with: fakeclaude: forked ` + strconv.Itoa(n) +
		` grandchildren \(pids ([0-9 ]+)\); dying mid-turn as asked\); the next turn restarts it$`)
	m := want.FindStringSubmatch(r.Error)
	if r.StopReason != "failed" || m == nil {
		t.Fatalf("the turn ended %q with error %q; want failed with an error matching %s", r.StopReason, r.Error, want)
	}
	var forked []int
	for _, f := range strings.Fields(m[1]) {
		pid, _ := strconv.Atoi(f)
		forked = append(forked, pid)
	}
	slices.Sort(forked)

	// The session and its plugin live on; the grandchildren, orphaned,
	// are still in the plugin's process group.
	select {
	case <-s.Done():
		t.Fatalf("the session ended with its CLI: %v", s.Err())
	default:
	}
	before := markedProcesses(t, marker)
	if !slices.Contains(before, plugin) {
		t.Fatalf("plugin %d is not running after its CLI died (marked processes: %s)", plugin, describeProcesses(before))
	}
	grandchildren := slices.DeleteFunc(slices.Clone(before), func(pid int) bool { return pid == plugin })
	if !slices.Equal(grandchildren, forked) {
		t.Fatalf("marked processes besides the plugin: %s; the CLI reported forking %v", describeProcesses(grandchildren), forked)
	}
	for _, pid := range grandchildren {
		if p := readProc(t, pid); p.Presence != probe.Present || p.PGID != plugin || p.PPID == plugin {
			t.Fatalf("grandchild %d: %+v; want it orphaned in the plugin's process group %d", pid, p, plugin)
		}
	}

	if err := s.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if err := h.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	shutDown = true

	var left []int
	deadline := time.Now().Add(5 * time.Second)
	for {
		left = markedProcesses(t, marker)
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(left) > 0 {
		t.Fatalf("after stop and shutdown, processes of the session survive: %s", describeProcesses(left))
	}
	if readProc(t, plugin).Presence == probe.Present {
		t.Fatalf("plugin %d still exists after stop and shutdown", plugin)
	}
	how := "SIGTERM"
	if ignoreTerm {
		how = "SIGKILL (they ignored SIGTERM)"
	}
	held(t, "the turn ended %s with %q; the session and plugin %d kept running, with %d orphaned grandchildren %v in its process group; after stop and shutdown 0 survivors: plugin %d and grandchildren %v were killed with the group by %s",
		r.StopReason, r.Error, plugin, len(grandchildren), grandchildren, plugin, grandchildren, how)
}

// markerVar is the environment variable the fake CLI and everything it
// starts inherit, so the test can find them all in the process table.
const markerVar = "FAKECLAUDE_MARKER"

// markedProcesses lists, sorted, the live processes (not zombies) whose
// environment sets markerVar to value.
func markedProcesses(t *testing.T, value string) []int {
	t.Helper()
	procs, err := (&probe.ProcFS{TokenVar: markerVar}).Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, p := range procs {
		if p.Token == value && !p.Zombie && p.PID != os.Getpid() {
			out = append(out, p.PID)
		}
	}
	slices.Sort(out)
	return out
}

// readProc reads one process's entry in /proc; Presence says whether it
// (or its zombie) still exists.
func readProc(t *testing.T, pid int) probe.Process {
	t.Helper()
	procs, err := (&probe.ProcFS{}).Read(context.Background(), []int{pid})
	if err != nil {
		t.Fatal(err)
	}
	return procs[0]
}

// describeProcesses lists pids with their command lines.
func describeProcesses(pids []int) string {
	var parts []string
	for _, pid := range pids {
		parts = append(parts, fmt.Sprintf("%d %q", pid, cmdline(pid)))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
