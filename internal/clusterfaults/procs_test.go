package clusterfaults

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agenthost/agenthost/internal/logtest"
	"github.com/agenthost/agenthost/internal/serveproc"
)

// readyTimeout bounds the wait for a process's ready line; only a failing
// start waits this long.
const readyTimeout = 60 * time.Second

// freePorts returns n loopback ports that were free a moment ago.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ls []net.Listener
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// member is one etcd member process (internal/etcdmember), started again
// with its data directory after a kill.
type member struct {
	name, dir, client, peer, initial string

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	stderr *logtest.Buffer
}

// etcdCluster is three members on loopback.
type etcdCluster struct {
	members []*member
}

func startEtcd(t *testing.T, n int) *etcdCluster {
	t.Helper()
	ports := freePorts(t, 2*n)
	c := &etcdCluster{}
	var initial []string
	for i := range n {
		m := &member{
			name:   fmt.Sprintf("m%d", i),
			dir:    filepath.Join(t.TempDir(), "etcd"),
			client: fmt.Sprintf("http://127.0.0.1:%d", ports[2*i]),
			peer:   fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1]),
		}
		initial = append(initial, m.name+"="+m.peer)
		c.members = append(c.members, m)
	}
	for _, m := range c.members {
		m.initial = strings.Join(initial, ",")
	}
	t.Cleanup(func() {
		for _, m := range c.members {
			m.stop(t)
		}
	})
	// A member is ready only once a quorum runs: start them all, then
	// wait for each.
	errs := make(chan error, n)
	for _, m := range c.members {
		go func() { errs <- m.start("new") }()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func (c *etcdCluster) endpointList() []string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.client)
	}
	return eps
}

func (c *etcdCluster) endpoints() string { return strings.Join(c.endpointList(), ",") }

// start starts the member and waits for its ready line.
func (m *member) start(state string) error {
	cmd := exec.Command(bins.etcdmember, "--name", m.name, "--data-dir", m.dir,
		"--listen-client", m.client, "--listen-peer", m.peer,
		"--initial-cluster", m.initial, "--initial-cluster-state", state, "--unsafe-no-fsync")
	stderr := &logtest.Buffer{}
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start etcd member %s: %w", m.name, err)
	}
	done := make(chan struct{})
	lines := make(chan string, 1)
	go func() {
		br := bufio.NewReader(out)
		line, _ := br.ReadString('\n')
		lines <- line
		_, _ = br.WriteTo(discard{})
		_ = cmd.Wait()
		close(done)
	}()
	m.mu.Lock()
	m.cmd, m.done, m.stderr = cmd, done, stderr
	m.mu.Unlock()
	select {
	case line := <-lines:
		var ready struct {
			Ready bool `json:"ready"`
		}
		if json.Unmarshal([]byte(line), &ready) != nil || !ready.Ready {
			_ = cmd.Process.Kill()
			<-done
			return fmt.Errorf("etcd member %s printed %q instead of its ready line: %s", m.name, line, stderr)
		}
		return nil
	case <-time.After(readyTimeout):
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("etcd member %s not ready within %s: %s", m.name, readyTimeout, stderr)
	}
}

func (m *member) pid() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cmd.Process.Pid
}

func (m *member) kill() {
	m.mu.Lock()
	cmd, done := m.cmd, m.done
	m.mu.Unlock()
	_ = cmd.Process.Kill()
	<-done
}

// stop ends the member at the test's end: SIGCONT (it may be stopped),
// SIGTERM, then SIGKILL.
func (m *member) stop(t *testing.T) {
	m.mu.Lock()
	cmd, done := m.cmd, m.done
	m.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Errorf("etcd member %s did not exit within 10s of SIGTERM", m.name)
		_ = cmd.Process.Kill()
		<-done
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// hostProc is one host id: a state directory and the serve processes run
// on it, one after another (a SIGKILLed one is started again).
type hostProc struct {
	id, dir string
	args    []string

	mu    sync.Mutex
	lives []*serveproc.Server // every process run, the current one last
}

func newHost(t *testing.T, id, endpoints string, ttl time.Duration) *hostProc {
	t.Helper()
	// A short directory: the socket path lives in it.
	dir, err := os.MkdirTemp("/tmp", "ahcf-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cfg := fmt.Sprintf(`{"agents": {"scripted": {"path": %q}}}`, bins.scripted)
	if err := os.WriteFile(filepath.Join(dir, "agenthost.json"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	h := &hostProc{id: id, dir: dir, args: []string{"--store", "etcd", "--etcd-endpoints", endpoints,
		"--host-id", id, "--liveness-ttl", ttl.String()}}
	t.Cleanup(func() {
		if s := h.current(); s != nil {
			_ = syscall.Kill(s.PID(), syscall.SIGCONT)
			if err := s.Stop(30 * time.Second); err != nil {
				t.Error(err)
			}
		}
		serveproc.KillSessionProcesses(dir)
	})
	return h
}

// start starts a serve process on the host's state directory. A start
// soon after a kill may be refused while the killed process's liveness
// lease has not expired (the host id is still registered): it is retried
// until deadline.
func (h *hostProc) start(deadline time.Time) error {
	for {
		s, err := serveproc.Start(serveproc.Config{Bin: bins.agenthost, StateDir: h.dir, Args: h.args, ReadyTimeout: readyTimeout,
			Env: append(os.Environ(), "AGENTHOST_LOG_LEVEL=info")})
		if err == nil {
			h.mu.Lock()
			h.lives = append(h.lives, s)
			h.mu.Unlock()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("start host %s: %w", h.id, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func (h *hostProc) current() *serveproc.Server {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.lives) == 0 {
		return nil
	}
	return h.lives[len(h.lives)-1]
}

// socket is the current process's API socket (the same path every life).
func (h *hostProc) socket() string {
	if s := h.current(); s != nil {
		return s.Socket
	}
	return filepath.Join(h.dir, "agenthost.sock")
}

// logs is every life's stderr, in order.
func (h *hostProc) logs() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, s := range h.lives {
		out = append(out, s.Stderr())
	}
	return out
}

func signal(pid int, sig syscall.Signal) error {
	if err := syscall.Kill(pid, sig); err != nil {
		return fmt.Errorf("signal %s to pid %d: %w", sig, pid, err)
	}
	return nil
}
