package codex

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Grace periods of Close: after stdin is closed, and after SIGTERM. Both are
// cut short by the deadline of the Close call.
const (
	stdinGrace = 2 * time.Second
	termGrace  = 2 * time.Second
)

// process is one running `codex app-server`. It stays in the plugin's
// process group (the host signals that whole group) and, on Linux, gets
// SIGKILL if the plugin dies (Pdeathsig).
type process struct {
	cmd    *exec.Cmd
	pid    int
	stdin  *os.File // write end of the child's stdin
	stdout *os.File // read end of the child's stdout
	stderr *tail
	// stderrDone is closed when the child's stderr reaches EOF.
	stderrDone chan struct{}

	exited  chan struct{} // closed once the child is reaped
	waitErr error         // read after exited is closed

	stopOnce sync.Once
	stopErr  error
}

// startProcess starts path with args in dir, with env as its whole
// environment and explicit pipes for stdin, stdout and stderr.
func startProcess(path string, args []string, dir string, env []string, log hclog.Logger) (*process, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		outR.Close()
		outW.Close()
		return nil, err
	}
	cmd := exec.Command(path, args...)
	cmd.Dir = dir
	cmd.Env = env
	// *os.File values become the child's fds directly: no copying
	// goroutines, so Wait never waits for our readers.
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	cmd.SysProcAttr = sysProcAttr()
	p := &process{cmd: cmd, stdin: inW, stdout: outR, stderr: newTail(16 << 10), stderrDone: make(chan struct{}), exited: make(chan struct{})}

	// Pdeathsig is delivered when the thread that started the child ends,
	// not the process: start it from a locked thread that lives until the
	// child is reaped.
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	err = <-started
	// The child holds its ends now.
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		errR.Close()
		return nil, err
	}
	p.pid = cmd.Process.Pid
	go func() {
		defer close(p.stderrDone)
		p.stderr.copyFrom(errR, log)
	}()
	return p, nil
}

// done reports whether the child has exited and been reaped.
func (p *process) done() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// waitExit waits up to d, and no longer than ctx, for the child to exit.
func (p *process) waitExit(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.exited:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return p.done()
}

// settle waits up to d for the child to exit and its stderr to be read to
// the end, so an error message can quote its last words.
func (p *process) settle(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	for _, ch := range []chan struct{}{p.exited, p.stderrDone} {
		select {
		case <-ch:
		case <-t.C:
			return
		}
	}
}

// exitStatus says how the child ended ("exit status 3", "signal:
// killed"), or "still running".
func (p *process) exitStatus() string {
	if !p.done() {
		return "still running"
	}
	if p.waitErr == nil {
		return "exit status 0"
	}
	return p.waitErr.Error()
}

// stop ends the child: stdin EOF, a grace period, SIGTERM, another grace
// period, SIGKILL; the grace periods end early when ctx does. It always
// reaps the child, and is idempotent.
func (p *process) stop(ctx context.Context) error {
	p.stopOnce.Do(func() {
		p.stdin.Close()
		if !p.waitExit(ctx, grace(ctx, stdinGrace)) {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			if !p.waitExit(ctx, grace(ctx, termGrace)) {
				_ = p.cmd.Process.Kill()
				select {
				case <-p.exited:
				case <-time.After(10 * time.Second):
					p.stopErr = fmt.Errorf("codex app-server (pid %d) did not exit 10s after SIGKILL", p.pid)
				}
			}
		}
		// A grandchild may hold the stdout pipe open: unblock the reader.
		p.stdout.Close()
	})
	return p.stopErr
}

// grace is d, or a third of the time left before ctx's deadline if that is
// shorter, so a Close bounded by its caller still reaches SIGKILL in time.
func grace(ctx context.Context, d time.Duration) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return min(d, time.Until(dl)/3)
	}
	return d
}

// kill ends the child at once and reaps it.
func (p *process) kill() {
	p.stopOnce.Do(func() {
		p.stdin.Close()
		_ = p.cmd.Process.Kill()
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			p.stopErr = fmt.Errorf("codex app-server (pid %d) did not exit 10s after SIGKILL", p.pid)
		}
		p.stdout.Close()
	})
}

// tail keeps the last bytes a child wrote to stderr, for error messages,
// and logs each line at debug level.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func newTail(max int) *tail { return &tail{max: max} }

func (t *tail) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(b), nil
}

func (t *tail) copyFrom(f *os.File, log hclog.Logger) {
	defer f.Close()
	b := make([]byte, 32<<10)
	var line []byte
	for {
		n, err := f.Read(b)
		if n > 0 {
			t.Write(b[:n])
			line = append(line, b[:n]...)
			for {
				i := bytes.IndexByte(line, '\n')
				if i < 0 {
					break
				}
				if log != nil {
					log.Debug("codex stderr", "line", truncate(stripANSI(string(line[:i])), 2000))
				}
				line = line[i+1:]
			}
			if len(line) > 64<<10 {
				line = line[:0]
			}
		}
		if err != nil {
			return
		}
	}
}

// lines returns the last n non-empty lines, ANSI colours removed, at most
// max bytes.
func (t *tail) lines(n, max int) string {
	t.mu.Lock()
	s := stripANSI(string(t.buf))
	t.mu.Unlock()
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	if len(out) > n {
		out = out[len(out)-n:]
	}
	res := strings.Join(out, "\n")
	if len(res) > max {
		res = "…" + res[len(res)-max:]
	}
	return res
}

var ansi = regexp.MustCompile(`\x1b\[[0-9;?]*[A-Za-z]`)

func stripANSI(s string) string { return ansi.ReplaceAllString(s, "") }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// errProcessGone is wrapped by errors about an app-server that has exited.
var errProcessGone = errors.New("the codex app-server is not running")
