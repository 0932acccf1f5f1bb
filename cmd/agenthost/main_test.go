package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/internal/serveproc"
	"go.uber.org/goleak"
)

// bins are built once per test run: the agenthost binary under test, the
// standalone scripted plugin, and a plugin that breaks the protocol.
var bins struct {
	dir       string
	agenthost string
	scripted  string
	broken    string
}

func TestMain(m *testing.M) {
	code := func() int {
		dir, err := os.MkdirTemp("", "ahcli-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		bins.dir = dir
		bins.agenthost = filepath.Join(dir, "agenthost")
		bins.scripted = filepath.Join(dir, "agenthost-plugin-scripted")
		bins.broken = filepath.Join(dir, "wrongidentity")
		args := []string{"build", "-o", dir + "/"}
		// The binaries are built without the race detector (their tests
		// run fast); AGENTHOST_TEST_RACE_BINARIES=1 builds them with it, so
		// races in the real host and plugins end serve with status 66.
		if os.Getenv("AGENTHOST_TEST_RACE_BINARIES") == "1" {
			args = append(args, "-race")
		}
		args = append(args, ".", "../../examples/scripted/cmd/agenthost-plugin-scripted", "../../plugin/sdk/conformance/testdata/wrongidentity")
		cmd := exec.Command("go", args...)
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
			return 1
		}
		code := m.Run()
		if code == 0 {
			if err := goleak.Find(); err != nil {
				fmt.Fprintln(os.Stderr, "goleak:", err)
				code = 1
			}
		}
		return code
	}()
	os.Exit(code)
}

// stateDir returns a new, short state directory (unix socket paths must
// stay short), removed after the test.
func stateDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ahc-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// testEnv is the environment of the binaries the tests run: this
// process's, without the variables that set agenthost's flag defaults.
func testEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "AGENTHOST_STATE_DIR=") || strings.HasPrefix(kv, "AGENTHOST_LOG_LEVEL=") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// result is what one run of the binary printed and how it exited.
type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// ah runs the agenthost binary with args to completion (at most a minute).
func ah(t *testing.T, args ...string) result {
	t.Helper()
	return ahInput(t, "", args...)
}

func ahInput(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bins.agenthost, args...)
	cmd.Env = testEnv()
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	case err != nil:
		t.Fatalf("agenthost %q: %v", args, err)
	}
	return r
}

// mustAH runs agenthost and fails the test unless it exits 0.
func mustAH(t *testing.T, args ...string) result {
	t.Helper()
	r := ah(t, args...)
	if r.code != 0 {
		t.Fatalf("agenthost %q: %s", args, r)
	}
	return r
}

// server is an agenthost serve process.
type server struct {
	t     *testing.T
	dir   string
	cmd   *exec.Cmd
	ready api.ServeReady

	mu      sync.Mutex
	stderr  bytes.Buffer
	stdout  bytes.Buffer
	done    chan struct{}
	err     error
	stopped bool // the test stopped or killed it
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// serve starts agenthost serve on dir with --shutdown-sessions (so that a
// test's end leaves no plugin behind) and waits for its ready line. At the
// end of the test it is stopped, and every plugin process of dir must be
// gone.
func serve(t *testing.T, dir string, extra ...string) *server {
	t.Helper()
	return serveCmd(t, dir, nil, extra...)
}

// serveCmd is serve with a chance to change the command (setup may be nil)
// before it starts.
func serveCmd(t *testing.T, dir string, setup func(*exec.Cmd), extra ...string) *server {
	t.Helper()
	s := startServeCmd(t, dir, setup, extra...)
	t.Cleanup(func() {
		select {
		case <-s.done:
			if !s.stopped {
				t.Errorf("agenthost serve exited before the test stopped it: %v", s.err)
			}
		default:
		}
		s.stop()
		noPluginsLeft(t, dir)
		if t.Failed() {
			t.Logf("agenthost serve's stderr:\n%s", s.stderrText())
		}
	})
	return s
}

func startServe(t *testing.T, dir string, extra ...string) *server {
	t.Helper()
	return startServeCmd(t, dir, nil, extra...)
}

// startServeCmd is startServe with a chance to change the command (setup
// may be nil) before it starts.
func startServeCmd(t *testing.T, dir string, setup func(*exec.Cmd), extra ...string) *server {
	t.Helper()
	args := append([]string{"--state-dir", dir, "serve", "--shutdown-sessions"}, extra...)
	s := &server{t: t, dir: dir, cmd: exec.Command(bins.agenthost, args...), done: make(chan struct{})}
	s.cmd.Env = testEnv()
	if setup != nil {
		setup(s.cmd)
	}
	s.cmd.Stderr = lockedWriter{&s.mu, &s.stderr}
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1)
	go func() {
		br := bufio.NewReader(out)
		line, _ := br.ReadString('\n')
		lines <- line
		rest, _ := io.ReadAll(br)
		s.mu.Lock()
		s.stdout.Write(rest)
		s.mu.Unlock()
		s.err = s.cmd.Wait()
		close(s.done)
	}()
	select {
	case line := <-lines:
		if err := json.Unmarshal([]byte(line), &s.ready); err != nil || !s.ready.Ready {
			<-s.done
			t.Fatalf("agenthost serve printed %q instead of its ready line (%v); stderr:\n%s", line, err, s.stderrText())
		}
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
		t.Fatalf("agenthost serve was not ready within 30s; stderr:\n%s", s.stderrText())
	}
	return s
}

func (s *server) stderrText() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stderr.String()
}

// stop sends SIGTERM and waits for the server to exit, at most 30 s.
func (s *server) stop() {
	s.stopped = true
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
		s.t.Errorf("agenthost serve did not exit within 30s of SIGTERM; stderr:\n%s", s.stderrText())
	}
}

// kill SIGKILLs the server, as a crash would.
func (s *server) kill() {
	s.stopped = true
	_ = s.cmd.Process.Kill()
	<-s.done
}

// pluginsOf lists the live processes started for state directory dir.
func pluginsOf(dir string) []int { return serveproc.SessionProcesses(dir) }

// noPluginsLeft fails the test if a plugin of dir still runs, and kills it.
func noPluginsLeft(t *testing.T, dir string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := pluginsOf(dir)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, pid := range left {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			t.Errorf("plugin processes %v of %s outlived the host that was told to shut its sessions down", left, dir)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestVersion(t *testing.T) {
	r := mustAH(t, "version")
	want := regexp.MustCompile(`^agenthost \S+ \(` + regexp.QuoteMeta(runtime.Version()) + `\)\n$`)
	if !want.MatchString(r.stdout) || r.stderr != "" {
		t.Errorf("agenthost version: %s; want stdout matching %s", r, want)
	}
	if r := mustAH(t, "--version"); !want.MatchString(r.stdout) {
		t.Errorf("agenthost --version: %s", r)
	}
}

func TestUnknownCommand(t *testing.T) {
	r := ah(t, "frobnicate")
	if r.code != 2 || r.stdout != "" || !strings.Contains(r.stderr, `unknown command "frobnicate"`) || !strings.Contains(r.stderr, "agenthost help") {
		t.Errorf("agenthost frobnicate: %s; want exit 2 pointing at 'agenthost help'", r)
	}
	r = ah(t, "run", "--no-such-flag", "x")
	if r.code != 2 || !strings.Contains(r.stderr, "no-such-flag") {
		t.Errorf("unknown flag: %s", r)
	}
	r = ah(t, "sessions", "frob")
	if r.code != 2 || !strings.Contains(r.stderr, "use list, show, stop, rm or prune") {
		t.Errorf("agenthost sessions frob: %s", r)
	}
}

// Every command's --help teaches: what it does and an example or the
// flags it takes.
func TestHelp(t *testing.T) {
	r := mustAH(t, "help")
	for _, c := range []string{"serve", "acp", "status", "run", "sessions", "journal", "conformance", "agents", "version", "completion"} {
		if !strings.Contains(r.stdout, "  "+c+" ") {
			t.Errorf("agenthost help does not list %s:\n%s", c, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "__plugin") {
		t.Error("agenthost help lists the hidden __plugin command")
	}
	for _, args := range [][]string{
		{"serve", "--help"}, {"acp", "--help"}, {"run", "--help"}, {"sessions", "list", "--help"}, {"sessions", "show", "--help"},
		{"sessions", "stop", "--help"}, {"journal", "--help"}, {"status", "--help"}, {"conformance", "--help"}, {"agents", "--help"},
	} {
		r := mustAH(t, args...)
		if !strings.Contains(r.stdout, "Usage:") || !strings.Contains(r.stdout, "--state-dir") || len(r.stdout) < 400 {
			t.Errorf("agenthost %s: a short or unhelpful help:\n%s", strings.Join(args, " "), r.stdout)
		}
	}
}

func TestRun(t *testing.T) {
	for _, tt := range []struct {
		args   []string
		code   int
		stdout string // substring
		stderr string // substring
	}{
		{args: nil, code: 0, stdout: "Commands:"},
		{args: []string{"help"}, code: 0, stdout: "version"},
		{args: []string{"version"}, code: 0, stdout: "agenthost "},
		{args: []string{"version", "extra"}, code: 2, stderr: "no arguments"},
		{args: []string{"nope"}, code: 2, stderr: `unknown command "nope"`},
		{args: []string{"run"}, code: 2, stderr: "needs a PROMPT"},
		{args: []string{"journal"}, code: 2, stderr: "expects SESSION"},
		{args: []string{"--log-level", "loud", "status"}, code: 2, stderr: "--log-level"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(tt.args, &stdout, &stderr)
		if code != tt.code || !strings.Contains(stdout.String(), tt.stdout) || !strings.Contains(stderr.String(), tt.stderr) {
			t.Errorf("run(%q) = %d, stdout %q, stderr %q; want %d, stdout containing %q, stderr containing %q",
				tt.args, code, stdout.String(), stderr.String(), tt.code, tt.stdout, tt.stderr)
		}
		if tt.code == 0 && stderr.Len() != 0 {
			t.Errorf("run(%q) wrote to stderr: %q", tt.args, stderr.String())
		}
	}
}

func TestCompletion(t *testing.T) {
	if r := mustAH(t, "completion", "bash"); !strings.Contains(r.stdout, "__start_agenthost") {
		t.Errorf("agenthost completion bash: %s", r)
	}
	dir := stateDir(t)
	r := mustAH(t, "--state-dir", dir, "__complete", "run", "--agent", "")
	for _, a := range []string{"scripted", "claude", "codex"} {
		if !strings.Contains(r.stdout, a+"\t") {
			t.Errorf("completing --agent does not offer %s:\n%s", a, r.stdout)
		}
	}
}
