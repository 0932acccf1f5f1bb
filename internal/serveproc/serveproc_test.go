package serveproc_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/internal/buildtest"
	"github.com/agenthost/agenthost/internal/serveproc"
)

var agenthostBin string

func TestMain(m *testing.M) {
	os.Exit(buildtest.Main(m, map[*string]string{&agenthostBin: "../../cmd/agenthost"}))
}

func stateDir(t *testing.T) string {
	dir, err := os.MkdirTemp("/tmp", "ahsp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// Start returns once serve is ready, with the socket its ready line
// names; Stop ends it with SIGTERM.
func TestStartStop(t *testing.T) {
	t.Parallel()
	dir := stateDir(t)
	s, err := serveproc.Start(serveproc.Config{Bin: agenthostBin, StateDir: dir, Env: append(os.Environ(), "AGENTHOST_LOG_LEVEL=warn")})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(s.Socket, dir+"/") {
		t.Errorf("the socket %q is not in the state directory %s (ready line %s)", s.Socket, dir, s.Ready)
	}
	if fi, err := os.Stat(s.Socket); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Errorf("the ready line names %s, which is not a socket: %v", s.Socket, err)
	}
	pid := s.PID()
	if err := s.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
	default:
		t.Fatal("Stop returned before the server exited")
	}
	if !serveproc.Gone(pid, time.Second) {
		t.Errorf("pid %d still runs after Stop", pid)
	}
	if err := s.Stop(time.Second); err != nil {
		t.Errorf("stopping a stopped server: %v", err)
	}
}

// A server that cannot start is an error quoting its stderr.
func TestStartFails(t *testing.T) {
	t.Parallel()
	_, err := serveproc.Start(serveproc.Config{Bin: agenthostBin, StateDir: stateDir(t), Args: []string{"--no-such-flag"}})
	if err == nil || !strings.Contains(err.Error(), "no-such-flag") {
		t.Fatalf("Start with a bad flag: %v; want an error quoting serve's complaint", err)
	}
}

// SessionProcesses finds the processes of a state directory's sessions
// by the session directory in their environment, and
// KillSessionProcesses ends them.
func TestSessionProcesses(t *testing.T) {
	t.Parallel()
	dir := stateDir(t)
	cmd := exec.Command("sleep", "60")
	cmd.Env = []string{"AGENTHOST_SESSION_DIR=" + dir + "/sessions/s1"}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(waited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-waited })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for got := serveproc.SessionProcesses(dir); len(got) != 1 || got[0] != cmd.Process.Pid; got = serveproc.SessionProcesses(dir) {
		if ctx.Err() != nil {
			t.Fatalf("SessionProcesses(%s) = %v; want [%d]", dir, got, cmd.Process.Pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if other := serveproc.SessionProcesses(stateDir(t)); len(other) != 0 {
		t.Errorf("another state directory's processes: %v", other)
	}
	if killed := serveproc.KillSessionProcesses(dir); len(killed) != 1 {
		t.Errorf("KillSessionProcesses killed %v", killed)
	}
	if !serveproc.Gone(cmd.Process.Pid, 5*time.Second) {
		t.Errorf("pid %d survived KillSessionProcesses", cmd.Process.Pid)
	}
}
