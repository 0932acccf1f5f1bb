package host

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-plugin"

	"github.com/agenthost/agenthost/internal/logtest"
	"github.com/agenthost/agenthost/internal/pluginclient"
	"github.com/agenthost/agenthost/internal/wire"
	"github.com/agenthost/agenthost/probe"
)

const testTokenVar = "AGENTHOST_SPAWN_TOKEN_HOSTTEST"

// fixtureSpec returns a start spec for the lifecycle fixture plugin, whose
// behaviour the session id selects.
func fixtureSpec(t *testing.T, sessionID string) pluginSpec {
	t.Helper()
	dir := t.TempDir()
	token := rand.Text()
	sock := shortSocketDir(t)
	return pluginSpec{
		Agent: "fixture", Path: bins.fixture, SessionID: sessionID,
		SessionDir: filepath.Join(dir, "session"), SocketDir: sock, SocketRoot: filepath.Dir(sock),
		Env:   []string{"PATH=" + os.Getenv("PATH"), wire.EnvSpawnTokenVar + "=" + testTokenVar, testTokenVar + "=" + token},
		Fence: 1, SpawnToken: token,
		NewSession:     &pluginclient.NewSessionRequest{Workspace: dir},
		StartupTimeout: 10 * time.Second, StopTimeout: 5 * time.Second,
		Logger: logtest.New(t),
	}
}

// shortSocketDir keeps socket paths well under the 107-byte limit.
func shortSocketDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ah-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "s")
}

// alive reports whether pid is a running (not zombie) process.
func alive(t testing.TB, pid int) bool {
	t.Helper()
	procs, err := (&probe.ProcFS{}).Read(context.Background(), []int{pid})
	if err != nil {
		t.Fatal(err)
	}
	return procs[0].Presence == probe.Present && !procs[0].Zombie
}

func mustStart(t *testing.T, spec pluginSpec) *pluginProc {
	t.Helper()
	p, err := startPlugin(context.Background(), spec)
	if err != nil {
		t.Fatalf("start %q: %v", spec.SessionID, err)
	}
	t.Cleanup(func() { _ = p.Stop(context.Background()) })
	return p
}

func TestPluginStartsReadyAndStopsIdempotently(t *testing.T) {
	p := mustStart(t, fixtureSpec(t, "ready"))
	if p.PID() == os.Getpid() || !alive(t, p.PID()) {
		t.Fatalf("plugin pid %d is not a live child", p.PID())
	}
	// The fixture serves Agent alone, as a plugin built before version 2:
	// go-plugin negotiates version 1 with it.
	if p.handle != "fixture-handle" || p.version != wire.ProtocolVersion1 || p.reattach.Address == "" {
		t.Errorf("handle %q, version %d, reattach %+v", p.handle, p.version, p.reattach)
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Go(func() { errs[i] = p.Stop(context.Background()) })
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("concurrent stops: %v", errs)
	}
	if alive(t, p.PID()) {
		t.Fatal("the plugin process is still alive after Stop")
	}
	<-p.Terminated()
	if err := p.TermErr(); err != nil {
		t.Errorf("a requested stop terminated with %v, want nil", err)
	}
	if err := p.Stop(context.Background()); err != nil {
		t.Errorf("a third Stop: %v", err)
	}
}

func TestSessionIDWithNULReachesThePlugin(t *testing.T) {
	// The fixture echoes the id it was attached with; startPlugin refuses
	// any other, so a started plugin proves the id arrived intact.
	p := mustStart(t, fixtureSpec(t, "ready\x00"))
	id, err := p.rpc.Identify(context.Background())
	if err != nil || id.SessionID != "ready\x00" {
		t.Fatalf("identify: %q, %v", id.SessionID, err)
	}
}

func TestRelativeSessionDirIsRejectedBeforeSpawning(t *testing.T) {
	spec := fixtureSpec(t, "ready")
	spawned := false
	spec.OnStart = func(int) error { spawned = true; return nil }
	spec.SessionDir = "relative/session"
	_, err := startPlugin(context.Background(), spec)
	if err == nil || !strings.Contains(err.Error(), "session directory must be absolute") {
		t.Fatalf("got %v, want a session-directory error", err)
	}
	if spawned {
		t.Error("a process was spawned before the directory was checked")
	}
}

// Every way a start can fail yields its own clear error, and never leaves
// the process behind.
func TestFailedStartsAreReapedWithClearErrors(t *testing.T) {
	for _, tc := range []struct {
		session string
		timeout time.Duration
		want    error
		text    string
	}{
		{"startup-hang", 300 * time.Millisecond, ErrStartupTimeout, "startup timed out after 300ms"},
		{"fail", 0, ErrPluginFailed, "fixture startup failed"},
		{"exit", 0, ErrExitedBeforeReady, "exit status 2"},
		{"mismatch", 0, ErrInvalidIdentity, "invalid identity"},
	} {
		t.Run(tc.session, func(t *testing.T) {
			spec := fixtureSpec(t, tc.session)
			if tc.timeout > 0 {
				spec.StartupTimeout = tc.timeout
			}
			var pid int
			spec.OnStart = func(p int) error { pid = p; return nil }
			_, err := startPlugin(context.Background(), spec)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("got %v, want %v mentioning %q", err, tc.want, tc.text)
			}
			if pid == 0 || alive(t, pid) {
				t.Errorf("plugin pid %d left alive after a failed start", pid)
			}
		})
	}
}

func TestPluginIgnoringShutdownIsKilledWithItsGroup(t *testing.T) {
	spec := fixtureSpec(t, "hang")
	spec.StopTimeout = 300 * time.Millisecond
	p := mustStart(t, spec)
	// The hang fixture started a child in its group and named it in its
	// handle.
	_, childPID, ok := strings.Cut(p.handle, "-child-")
	if !ok {
		t.Fatalf("the fixture reported no child: %q", p.handle)
	}
	child, err := strconv.Atoi(childPID)
	if err != nil || !alive(t, child) {
		t.Fatalf("fixture child %q not running: %v", childPID, err)
	}
	if err := p.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if alive(t, p.PID()) {
		t.Fatal("a plugin that ignores shutdown survived Stop")
	}
	if alive(t, child) {
		t.Fatal("the plugin's child survived: Stop did not kill the whole group")
	}
}

// A plugin that cannot be executed (ENOEXEC here) fails the start cleanly;
// the failure must never turn into a signal to some other process group.
func TestUnexecutablePluginFailsWithoutCollateral(t *testing.T) {
	spec := fixtureSpec(t, "ready")
	garbage := filepath.Join(t.TempDir(), "not-a-program")
	if err := os.WriteFile(garbage, []byte("\x00\x01garbage"), 0o755); err != nil {
		t.Fatal(err)
	}
	spec.Path = garbage
	_, err := startPlugin(context.Background(), spec)
	if err == nil || !strings.Contains(err.Error(), "start plugin") {
		t.Fatalf("got %v, want a start error", err)
	}
	// Reaching this line means the test process was not SIGKILLed.
}

func TestUnexpectedExitAfterReadinessIsReported(t *testing.T) {
	p := mustStart(t, fixtureSpec(t, "ready"))
	if err := syscall.Kill(p.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Terminated():
	case <-time.After(10 * time.Second):
		t.Fatal("the plugin's death went unnoticed")
	}
	err := p.TermErr()
	if !errors.Is(err, ErrExitedUnexpectedly) || !strings.Contains(err.Error(), "SIGKILL") || !strings.Contains(err.Error(), `"ready"`) {
		t.Fatalf("termination error %v, want one naming the session and SIGKILL", err)
	}
	if alive(t, p.PID()) {
		t.Error("the killed plugin was not reaped")
	}
	if err := p.Stop(context.Background()); err != nil {
		t.Errorf("stop after death: %v", err)
	}
}

func TestPluginEnvironmentIsBuiltByPolicy(t *testing.T) {
	t.Setenv("AGENTHOST_TEST_SECRET", "must-not-leak")
	spec := fixtureSpec(t, "ready")
	p := mustStart(t, spec)
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", p.PID()))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(env), "must-not-leak") {
		t.Error("the host's environment leaked into the plugin")
	}
	if !strings.Contains(string(env), testTokenVar+"="+spec.SpawnToken) {
		t.Error("the plugin does not carry its spawn token")
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.PID()))
	if err != nil {
		t.Fatal(err)
	}
	stdin, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/0", p.PID()))
	stderr, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/2", p.PID()))
	if stdin != "/dev/null" || stderr != filepath.Join(spec.SessionDir, "plugin.log") {
		t.Errorf("plugin fds: stdin %q, stderr %q (%d fds)", stdin, stderr, len(fds))
	}
	// The plugin leads its own session, so the host's signals do not reach it.
	sid, err := unixGetsid(p.PID())
	if err != nil || sid != p.PID() {
		t.Errorf("plugin session id %d (%v), want its own pid %d", sid, err, p.PID())
	}
}

// A plugin started by hand in debug mode prints a reattach config that a
// host (or a debugger session) can connect with.
func TestPluginDebugModePrintsReattachConfig(t *testing.T) {
	cmd := exec.Command(bins.scripted)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), wire.EnvDebug + "=1"}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	var rc struct {
		R struct {
			Network, Address string
			PID              int
			ProtocolVersion  int `json:"protocol_version"`
		} `json:"agenthost_reattach"`
	}
	if err := json.Unmarshal([]byte(line), &rc); err != nil || rc.R.Address == "" || rc.R.PID != cmd.Process.Pid {
		t.Fatalf("debug line %q: %+v, %v", line, rc, err)
	}
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig: wire.Handshake(), Plugins: wire.PluginSets(nil)[rc.R.ProtocolVersion],
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC}, Logger: logtest.New(t),
		Reattach: &plugin.ReattachConfig{Protocol: plugin.ProtocolGRPC, ProtocolVersion: rc.R.ProtocolVersion, Pid: rc.R.PID,
			Addr: &net.UnixAddr{Net: rc.R.Network, Name: rc.R.Address}, Test: true},
	})
	defer client.Kill()
	rpc, err := client.Client()
	if err != nil {
		t.Fatal(err)
	}
	agent, err := pluginclient.Dispense(rpc, rc.R.ProtocolVersion)
	if err != nil {
		t.Fatal(err)
	}
	id, err := agent.Identify(context.Background())
	if err != nil || id.PID != cmd.Process.Pid || id.AgentName != "scripted" {
		t.Fatalf("identify over the debug reattach config: %+v, %v", id, err)
	}
	// A test-mode client owns no process: Kill leaves the connection open.
	_ = rpc.(*plugin.GRPCClient).Conn.Close()
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a debug-mode plugin did not stop on SIGINT")
	}
	// go-plugin's own reattach runner polls the pid once a second.
	waitFor(t, "the go-plugin client to notice the exit", client.Exited)
}
