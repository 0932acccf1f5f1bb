package serveproc_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/internal/serveproc"
	"github.com/agenthost/agenthost/internal/serveproc/serveproctest"
)

// answerTimeout bounds the wait for one answer of a host that should give
// it at once: only a failing test waits this long.
const answerTimeout = 20 * time.Second

// startServe starts agenthost serve on a fresh state directory, stopped
// (and its sessions killed) when the test ends.
func startServe(t *testing.T) (*serveproc.Server, string) {
	t.Helper()
	dir := stateDir(t)
	s := serveproctest.Start(t, agenthostBin, dir)
	return s, dir
}

// statusClient is a connection that has sent _agenthost/status and reads
// its answer.
type statusClient struct {
	conn net.Conn
	br   *bufio.Reader
}

func askStatus(t *testing.T, sock string) *statusClient {
	t.Helper()
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatalf("dial %s: %v", sock, err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := fmt.Fprintf(conn, `{"jsonrpc":"2.0","id":1,"method":%q}`+"\n", api.MethodStatus); err != nil {
		t.Fatal(err)
	}
	return &statusClient{conn: conn, br: bufio.NewReader(conn)}
}

// answer waits for the status answer and returns its error, if any.
func (c *statusClient) answer() error {
	_ = c.conn.SetReadDeadline(time.Now().Add(answerTimeout))
	line, err := c.br.ReadString('\n')
	if err != nil {
		return fmt.Errorf("no answer: %w", err)
	}
	var m struct {
		Result *api.StatusResult `json:"result"`
		Error  *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(line), &m); err != nil || m.Result == nil {
		return fmt.Errorf("answered %q", line)
	}
	return nil
}

// answerLater reads the answer on a goroutine of its own, which ends
// within answerTimeout (the read deadline), and sends the result.
func (c *statusClient) answerLater() <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- c.answer() }()
	return ch
}

// openFDs lists the descriptors pid has open.
func openFDs(t *testing.T, pid int) []int {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "fd"))
	if err != nil {
		t.Fatal(err)
	}
	var fds []int
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			fds = append(fds, n)
		}
	}
	return fds
}

// waitFor polls cond (cheap reads of /proc or of the server's stderr)
// until it holds or d passes.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// A host out of file descriptors goes on serving once descriptors free:
// accept errors are retried with backoff, not the end of the API (the
// host used to exit with "accept4: too many open files", or, with a
// client connected, stop accepting while it kept the state directory's
// lock).
//
// The test does not predict how many connections the lowered limit
// leaves room for (serve may have holes below its highest descriptor,
// or none): it connects clients until serve reports an accept failure,
// and it holds two connections of its own from before the fault, so
// that at least two descriptors free when it lets go.
func TestAcceptSurvivesRunningOutOfDescriptors(t *testing.T) {
	t.Parallel()
	s, _ := startServe(t)
	var release []*statusClient
	for range 2 {
		c := askStatus(t, s.Socket)
		if err := c.answer(); err != nil {
			t.Fatalf("before the fault: %v", err)
		}
		release = append(release, c)
	}
	pid := s.PID()
	var old unix.Rlimit
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, nil, &old); err != nil {
		t.Fatal(err)
	}
	fds := openFDs(t, pid)
	highest := 0
	for _, fd := range fds {
		highest = max(highest, fd)
	}
	// No descriptor above the highest open one: the holes below it go to
	// the first connections, the next connection finds none.
	limit := unix.Rlimit{Cur: uint64(highest + 1), Max: old.Max}
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &limit, nil); err != nil {
		t.Fatal(err)
	}
	injected(t, "RLIMIT_NOFILE of serve (pid %d) lowered to %d with %d descriptors open", pid, limit.Cur, len(fds))
	failures := func() int { return strings.Count(s.Stderr(), "too many open files") }
	// maxHoles bounds the search: the holes the listing shows, and a few
	// descriptors serve may have held for a moment while it was read. A
	// limit that never bites within it was not applied.
	maxHoles := highest + 1 - len(fds) + 8
	var extra []<-chan error
	for len(extra) == 0 && len(release) < 2+maxHoles {
		before := failures()
		c := askStatus(t, s.Socket)
		answered := c.answerLater()
		var err error
		var got bool
		if !waitFor(answerTimeout, func() bool {
			select {
			case err = <-answered:
				got = true
				return true
			case <-s.Done():
				return true
			default:
				return failures() > before
			}
		}) {
			t.Fatalf("client %d neither answered nor reported as refused within %s:\n%s", len(release)+1, answerTimeout, s.Stderr())
		}
		switch {
		case got && err != nil:
			t.Fatalf("client %d, in a hole below the limit: %v\n%s", len(release)+1, err, s.Stderr())
		case got:
			release = append(release, c)
		default:
			select {
			case <-s.Done():
				t.Fatalf("serve exited once out of descriptors:\n%s", s.Stderr())
			default:
			}
			extra = append(extra, answered)
		}
	}
	if len(extra) == 0 {
		t.Fatalf("%d clients past the lowered limit were all served; serve never ran out:\n%s", maxHoles, s.Stderr())
	}
	extra = append(extra, askStatus(t, s.Socket).answerLater())
	// Descriptors free: the clients that hold them leave.
	for _, c := range release {
		c.conn.Close()
	}
	for i, answered := range extra {
		if err := <-answered; err != nil {
			t.Fatalf("client %d past the limit, once descriptors were free again: %v\nstderr:\n%s", i+1, err, s.Stderr())
		}
	}
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &old, nil); err != nil {
		t.Fatal(err)
	}
	if err := askStatus(t, s.Socket).answer(); err != nil {
		t.Fatalf("a new client after the fault: %v", err)
	}
	held(t, "serve reported the accept failure after %d clients, retried, and answered both clients past the limit once %d connections left", len(release)-2, len(release))
}

func injected(t *testing.T, format string, args ...any) {
	t.Helper()
	t.Logf("injected: "+format, args...)
}

func held(t *testing.T, format string, args ...any) {
	t.Helper()
	t.Logf("held: "+format, args...)
}

// A socket deleted under a running host is made again, private as before
// (mode 0600, this user's), and a client connected before goes on; the
// host used to stay unreachable for good.
func TestDeletedSocketIsMadeAgain(t *testing.T) {
	t.Parallel()
	s, _ := startServe(t)
	before, err := net.Dial("unix", s.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()
	if err := os.Remove(s.Socket); err != nil {
		t.Fatal(err)
	}
	injected(t, "removed %s under serve (pid %d)", s.Socket, s.PID())
	if !waitFor(answerTimeout, func() bool { _, err := os.Lstat(s.Socket); return err == nil }) {
		t.Fatalf("the socket was not made again within %s:\n%s", answerTimeout, s.Stderr())
	}
	if err := askStatus(t, s.Socket).answer(); err != nil {
		t.Fatalf("a client of the new socket: %v\n%s", err, s.Stderr())
	}
	fi, err := os.Lstat(s.Socket)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 || int(st.Uid) != os.Getuid() {
		t.Errorf("the new socket has mode %s, uid %d; want a socket, 0600, uid %d", fi.Mode(), st.Uid, os.Getuid())
	}
	old := &statusClient{conn: before, br: bufio.NewReader(before)}
	if _, err := fmt.Fprintf(before, `{"jsonrpc":"2.0","id":1,"method":%q}`+"\n", api.MethodStatus); err != nil {
		t.Fatal(err)
	}
	if err := old.answer(); err != nil {
		t.Fatalf("the client connected before the removal: %v", err)
	}
	if _, err := os.Lstat(s.Socket + "~"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the temporary name the socket was made under is left: %v", err)
	}
	// Stopped, serve removes the socket it made again, as it would its
	// first.
	if err := s.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(s.Socket); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the remade socket is left after serve stopped: %v", err)
	}
	held(t, "the socket was made again (mode %s) and both the old and a new client were answered", fi.Mode().Perm())
}

// A socket path that some other file took over ends serve with an error
// that says so (for a supervisor to restart it), and the file is left
// alone.
func TestReplacedSocketEndsServeClearly(t *testing.T) {
	t.Parallel()
	s, _ := startServe(t)
	if err := os.Remove(s.Socket); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.Socket, []byte("not a socket"), 0o600); err != nil {
		t.Fatal(err)
	}
	injected(t, "replaced %s by a regular file under serve (pid %d)", s.Socket, s.PID())
	select {
	case <-s.Done():
	case <-time.After(answerTimeout):
		t.Fatalf("serve still runs %s after its socket was replaced:\n%s", answerTimeout, s.Stderr())
	}
	if !strings.Contains(s.Stderr(), "no longer this host's socket") {
		t.Errorf("serve's stderr does not say why it exited:\n%s", s.Stderr())
	}
	if b, err := os.ReadFile(s.Socket); err != nil || string(b) != "not a socket" {
		t.Errorf("the file that replaced the socket: %q, %v", b, err)
	}
	held(t, "serve exited: %s", strings.TrimSpace(s.Stderr()))
}

// agenthost acp exits on SIGTERM even while the editor has stopped
// reading its stdout and every write there blocks: shutdown does not wait
// on a blocked write (it used to outlive its 30 s close timeout).
func TestACPExitsOnSIGTERMWithStdoutBlocked(t *testing.T) {
	t.Parallel()
	dir := stateDir(t)
	t.Cleanup(func() { serveproc.KillSessionProcesses(dir) })
	cmd := exec.Command(agenthostBin, "--state-dir", dir, "acp", "--agent", "scripted")
	cmd.Env = append(os.Environ(), "AGENTHOST_LOG_LEVEL=warn")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	waited := false
	defer func() {
		if !waited {
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	// The editor starts a session, prompts, and never reads an answer:
	// the session's updates fill the pipe, and the follower's next write
	// blocks.
	rd := stdout.(*os.File)
	capacity, err := unix.FcntlInt(rd.Fd(), unix.F_GETPIPE_SZ, 0)
	if err != nil {
		t.Fatal(err)
	}
	send := func(line string) {
		t.Helper()
		if _, err := fmt.Fprintln(stdin, line); err != nil {
			t.Fatal(err)
		}
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}`)
	send(`{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"/","mcpServers":[],"_meta":{"agenthost":{"sessionId":"blocked"}}}}`)
	// Read up to the session's start, then no more.
	br := bufio.NewReaderSize(rd, 4096)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("acp's stdout before the session started: %v; stderr:\n%s", err, stderr.String())
		}
		if strings.HasPrefix(line, `{"jsonrpc":"2.0","id":2,`) {
			if !strings.Contains(line, `"result"`) {
				t.Fatalf("session/new: %s", line)
			}
			break
		}
	}
	send(`{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"blocked","prompt":[{"type":"text","text":"count 100000"}]}}`)
	// Lines shorter than PIPE_BUF (4096 bytes) are written whole: a pipe
	// with less room than that left blocks the next one.
	var unread int
	full := waitFor(answerTimeout, func() bool {
		n, err := unix.IoctlGetInt(int(rd.Fd()), unix.TIOCINQ) // FIONREAD
		unread = n
		return err == nil && n > capacity-4096
	})
	if !full {
		t.Fatalf("acp's stdout pipe did not fill (capacity %d, %d unread); stderr:\n%s", capacity, unread, stderr.String())
	}
	injected(t, "acp's stdout pipe is full (%d of %d bytes unread); SIGTERM", unread, capacity)
	sent := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		waited = true
		held(t, "acp exited %.1fs after SIGTERM (%v)", time.Since(sent).Seconds(), err)
	case <-time.After(answerTimeout):
		t.Fatalf("acp still runs %s after SIGTERM with its stdout blocked; stderr:\n%s", answerTimeout, stderr.String())
	}
}
