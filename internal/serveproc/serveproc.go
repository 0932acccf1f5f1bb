// Package serveproc runs `agenthost serve` as a child process, the way an
// app that launches the host does, for the programs that drive the built
// binary end to end: `make demo`, `make demo-real` and `make bench`. It
// builds bin/agenthost, starts serve on a state directory, reads its ready
// line (which names the API socket), and stops it with SIGTERM or kills
// it; KillSessionProcesses ends whatever plugin or CLI of that state
// directory is left.
//
// # Hazards
//
//   - A plugin outlives its host by design (it runs in a session of its
//     own): stopping serve does not stop the sessions unless serve was
//     started with --shutdown-sessions or they were stopped first. A
//     caller that must leave nothing behind calls KillSessionProcesses
//     after Stop.
//   - The host's unix socket lives in the state directory, and a socket
//     path is limited to about 100 bytes: use a short directory, such as
//     one made by os.MkdirTemp("/tmp", …).
//   - The process runs until Stop or Kill; its owner must call one of them
//     on every path (a deferred Stop is the usual way).
package serveproc

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
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agenthost/agenthost/api"
)

// ModuleRoot is the root directory of the agenthost module the working
// directory is in, as go env GOMOD tells.
func ModuleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	mod := strings.TrimSpace(string(out))
	if err != nil || mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("run from inside the agenthost module (go env GOMOD: %q, %v)", mod, err)
	}
	return filepath.Dir(mod), nil
}

// Build builds the agenthost command of the module at root into bin.
func Build(ctx context.Context, root, bin string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/agenthost")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/agenthost: %w\n%s", err, out)
	}
	return nil
}

// Config says how to start agenthost serve.
type Config struct {
	// Bin is the agenthost binary.
	Bin string
	// StateDir is passed as --state-dir.
	StateDir string
	// Env is the process's whole environment; nil means os.Environ().
	Env []string
	// Args are appended to `serve` (for example --shutdown-sessions).
	Args []string
	// ReadyTimeout bounds the wait for the ready line; zero means 30 s.
	ReadyTimeout time.Duration
}

// Server is a running agenthost serve.
type Server struct {
	// Ready is the ready line serve printed on its stdout.
	Ready string
	// Socket is the API socket the ready line names.
	Socket string

	cmd    *exec.Cmd
	stderr buffer
	done   chan struct{} // closed once the process has been waited for
}

// Start starts agenthost serve and waits for its ready line. A server
// that exits first, or prints something else, is an error quoting its
// stderr.
func Start(cfg Config) (*Server, error) {
	s := &Server{done: make(chan struct{})}
	s.cmd = exec.Command(cfg.Bin, append([]string{"--state-dir", cfg.StateDir, "serve"}, cfg.Args...)...)
	s.cmd.Env = cfg.Env
	s.cmd.Stderr = &s.stderr
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start agenthost serve: %w", err)
	}
	lines := make(chan string, 1)
	go func() {
		br := bufio.NewReader(out)
		line, _ := br.ReadString('\n')
		lines <- strings.TrimSpace(line)
		_, _ = io.Copy(io.Discard, br)
		_ = s.cmd.Wait()
		close(s.done)
	}()
	timeout := cfg.ReadyTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	var ready api.ServeReady
	select {
	case line := <-lines:
		if json.Unmarshal([]byte(line), &ready) != nil || !ready.Ready {
			s.Kill()
			return nil, fmt.Errorf("agenthost serve printed %q instead of its ready line: %s", line, s.Stderr())
		}
		s.Ready, s.Socket = line, ready.Socket
		return s, nil
	case <-time.After(timeout):
		s.Kill()
		return nil, fmt.Errorf("agenthost serve was not ready within %s: %s", timeout, s.Stderr())
	}
}

// PID is the server's process id.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Done is closed once the server has exited.
func (s *Server) Done() <-chan struct{} { return s.done }

// Stderr is what the server has written to its stderr so far.
func (s *Server) Stderr() string { return s.stderr.String() }

// Stop sends SIGTERM and waits up to timeout for the server to exit; then
// it kills it and says so. Stopping a server that has exited does nothing.
func (s *Server) Stop(timeout time.Duration) error {
	select {
	case <-s.done:
		return nil
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
		return nil
	case <-time.After(timeout):
		s.Kill()
		return fmt.Errorf("agenthost serve did not exit within %s of SIGTERM", timeout)
	}
}

// Kill SIGKILLs the server, as a crash would, and waits for it.
func (s *Server) Kill() {
	_ = s.cmd.Process.Kill()
	<-s.done
}

// SessionProcesses lists the live processes started for the sessions of
// stateDir: every plugin carries its session directory in its
// environment, and so does a CLI whose plugin leaves it there (the claude
// plugin removes it; its CLI dies with the plugin, by the parent-death
// signal). Exited processes nobody has reaped yet do not count.
func SessionProcesses(stateDir string) []int {
	prefix := "AGENTHOST_SESSION_DIR=" + filepath.Join(stateDir, "sessions") + "/"
	return ProcessesWith(func(kv string) bool { return strings.HasPrefix(kv, prefix) })
}

// ProcessesWith lists the live processes with an environment entry
// (KEY=VALUE) that match accepts, this process excluded. Exited processes
// nobody has reaped yet do not count.
func ProcessesWith(match func(kv string) bool) []int {
	ents, _ := os.ReadDir("/proc")
	self := os.Getpid()
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !slices.ContainsFunc(strings.Split(string(env), "\x00"), match) || exited(pid) {
			continue
		}
		out = append(out, pid)
	}
	return out
}

// KillSessionProcesses SIGKILLs every process SessionProcesses lists and
// returns their ids.
func KillSessionProcesses(stateDir string) []int {
	pids := SessionProcesses(stateDir)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return pids
}

// Gone waits up to d for pid to exit and reports whether it did; an
// exited process its new parent has not reaped yet (a zombie) counts as
// gone.
func Gone(pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if syscall.Kill(pid, 0) != nil || exited(pid) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// exited reports whether pid is a zombie or dead process.
func exited(pid int) bool {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	i := bytes.LastIndexByte(stat, ')')
	return i > 0 && i+2 < len(stat) && (stat[i+2] == 'Z' || stat[i+2] == 'X')
}

// buffer is a bytes.Buffer safe for the process's writer and a reader.
type buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
