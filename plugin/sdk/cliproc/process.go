package cliproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Fixed bounds of a child's end.
const (
	// KillWait is how long Stop and Kill wait for the child to be reaped
	// after SIGKILL. The kernel normally takes milliseconds; a process
	// stuck in an uninterruptible sleep (a dead network mount) takes as
	// long as that lasts, and then the plugin reports it instead of
	// hanging.
	KillWait = 5 * time.Second
	// DrainWait is how long the child's stdout and stderr are still read
	// after it was reaped: what it wrote before exiting is in the pipes,
	// and a descendant holding them open must not keep a reader waiting.
	DrainWait = 2 * time.Second
	// DefaultGrace is Config.Grace when it is zero.
	DefaultGrace = 5 * time.Second
)

// Config says what to run and how to stop it. Path is required; the zero
// value of every other field works.
type Config struct {
	// Path is the executable, as os/exec takes it.
	Path string
	// Args are its arguments, without the program name.
	Args []string
	// Dir is its working directory; empty means the plugin's.
	Dir string
	// Env is its whole environment (KEY=VALUE); nil means the plugin's.
	Env []string
	// Logger receives the child's lifecycle (start, exit, stop phases) at
	// info level and each stderr line at debug level. Default: none.
	Logger hclog.Logger
	// Grace is the longest Stop waits after closing stdin, and again
	// after SIGTERM, before the next phase; the deadline of Stop's context
	// shortens it (see the package doc). Default: DefaultGrace; negative:
	// no wait, SIGTERM and SIGKILL right away.
	Grace time.Duration
	// WriteTimeout bounds one Write to the child's stdin; a child that
	// has not read for that long fails the write with ErrWriteTimeout.
	// Default: no bound.
	WriteTimeout time.Duration
}

// Typed errors of a Process.
var (
	// ErrStdinClosed is returned by Write after CloseStdin (or Stop).
	ErrStdinClosed = errors.New("the child's stdin is closed")
	// ErrWriteTimeout is wrapped, with os.ErrDeadlineExceeded, by a Write
	// that Config.WriteTimeout cut short.
	ErrWriteTimeout = errors.New("the child has not read its stdin")
	// ErrNotReaped is wrapped by Stop and Kill when the child was not
	// reaped within KillWait of SIGKILL.
	ErrNotReaped = errors.New("the child was not reaped after SIGKILL")
)

// Process is one running child. Its methods are safe for concurrent use.
type Process struct {
	cfg  Config
	log  hclog.Logger
	cmd  *exec.Cmd
	pid  int
	tail Tail

	stdin    *os.File
	stdinMu  sync.Mutex // serialises writes, so lines never interleave
	inClosed atomic.Bool
	stdout   *endReader
	stderr   *endReader

	exited  chan struct{} // closed once reaped
	exitErr error         // cmd.Wait's error, read after exited is closed
	done    chan struct{} // closed once reaped and its pipes drained and closed

	stopOnce sync.Once
	stopped  chan struct{} // closed when the first Stop has finished
	stopErr  error         // read after stopped is closed
}

// Start starts cfg.Path with explicit pipes on its stdin, stdout and
// stderr (*os.File ends, so no os/exec goroutine copies them and ties the
// reap to descendants that hold them), in the plugin's process group and,
// on Linux, with SIGKILL as its parent-death signal. ctx bounds the start
// only: the child lives until it exits or is stopped.
func Start(ctx context.Context, cfg Config) (*Process, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if cfg.Grace == 0 {
		cfg.Grace = DefaultGrace
	}
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	// ends are stdin's, stdout's and stderr's read and write ends.
	var ends [6]*os.File
	closeEnds := func() {
		for _, f := range ends {
			if f != nil {
				f.Close()
			}
		}
	}
	for i := 0; i < len(ends); i += 2 {
		r, w, err := os.Pipe()
		if err != nil {
			closeEnds()
			return nil, fmt.Errorf("create the pipes of %s: %w", cfg.Path, err)
		}
		ends[i], ends[i+1] = r, w
	}
	child := []*os.File{ends[0], ends[3], ends[5]}
	cmd := exec.Command(cfg.Path, cfg.Args...)
	cmd.Dir, cmd.Env = cfg.Dir, cfg.Env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = child[0], child[1], child[2]
	cmd.SysProcAttr = sysProcAttr()
	p := &Process{
		cfg: cfg, log: log, cmd: cmd,
		stdin: ends[1], stdout: newEndReader(ends[2]), stderr: newEndReader(ends[4]),
		exited: make(chan struct{}), done: make(chan struct{}), stopped: make(chan struct{}),
	}
	started := make(chan error, 1)
	go p.run(started)
	if err := <-started; err != nil {
		closeEnds()
		return nil, fmt.Errorf("start %s: %w", cfg.Path, err)
	}
	// The child has its copies; keep only ours.
	for _, f := range child {
		f.Close()
	}
	p.pid = cmd.Process.Pid
	log.Info("started", "pid", p.pid, "path", cfg.Path, "args", strings.Join(cfg.Args, " "), "dir", cfg.Dir)
	go p.readStderr()
	return p, nil
}

// run forks the child and reaps it from one goroutine locked to its OS
// thread: Linux sends the parent-death signal when the forking thread
// exits, and a thread locked to a goroutine blocked in wait4 exits only
// with the process. See the package doc.
func (p *Process) run(started chan<- error) {
	runtime.LockOSThread()
	if err := p.cmd.Start(); err != nil {
		runtime.UnlockOSThread()
		started <- err
		return
	}
	started <- nil
	p.exitErr = p.cmd.Wait()
	runtime.UnlockOSThread()
	close(p.exited)
	p.log.Info("exited", "pid", p.cmd.Process.Pid, "status", p.Status())

	// Drain: what the child wrote is read to the end, unless a descendant
	// holds a pipe open; then its reader fails at the deadline.
	deadline := time.Now().Add(DrainWait)
	_ = p.stdout.f.SetReadDeadline(deadline)
	_ = p.stderr.f.SetReadDeadline(deadline)
	t := time.NewTimer(DrainWait + time.Second) // a stdout nobody reads
	defer t.Stop()
	for _, r := range []*endReader{p.stdout, p.stderr} {
		select {
		case <-r.ended:
		case <-t.C:
		}
	}
	p.stdout.f.Close()
	p.stderr.f.Close()
	close(p.done)
}

// readStderr logs the child's stderr and keeps its tail.
func (p *Process) readStderr() {
	lr := NewLineReader(p.stderr, stderrLineMax)
	for {
		line, err := lr.ReadLine()
		if errors.Is(err, ErrLineTooLong) {
			continue
		}
		if s := tidy(string(line)); s != "" {
			p.tail.add(s)
			p.log.Debug("stderr", "line", s)
		}
		if err != nil {
			return
		}
	}
}

// stderrLineMax caps one stderr line read: the tail keeps TailLineMax
// bytes of a line, so this only bounds the memory of a runaway one, which
// is skipped.
const stderrLineMax = 64 << 10

// Pid is the child's process id.
func (p *Process) Pid() int { return p.pid }

// Stdout is the read end of the child's stdout, for one reader. It ends
// (io.EOF, or os.ErrDeadlineExceeded when a descendant holds it open) at
// the latest DrainWait after the child was reaped.
func (p *Process) Stdout() io.Reader { return p.stdout }

// Stderr is the tail of what the child wrote to its stderr.
func (p *Process) Stderr() *Tail { return &p.tail }

// Write writes b to the child's stdin, whole: concurrent writes never
// interleave. It fails with ErrStdinClosed once stdin is closed, and with
// ErrWriteTimeout when Config.WriteTimeout passes.
func (p *Process) Write(b []byte) (int, error) {
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	if p.inClosed.Load() {
		return 0, ErrStdinClosed
	}
	if d := p.cfg.WriteTimeout; d > 0 {
		_ = p.stdin.SetWriteDeadline(time.Now().Add(d))
	}
	n, err := p.stdin.Write(b)
	switch {
	case err == nil:
		return n, nil
	case p.inClosed.Load():
		return n, ErrStdinClosed
	case errors.Is(err, os.ErrDeadlineExceeded):
		return n, fmt.Errorf("%w for %s: %w", ErrWriteTimeout, p.cfg.WriteTimeout, err)
	}
	return n, fmt.Errorf("write to the child's stdin: %w", err)
}

// CloseStdin closes the child's stdin: the end of its input. A write in
// progress fails with ErrStdinClosed. It is idempotent.
func (p *Process) CloseStdin() error {
	if p.inClosed.Swap(true) {
		return nil
	}
	return p.stdin.Close()
}

// Exited is closed once the child has been reaped.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Done is closed once the child has been reaped and its stdout and stderr
// drained (bounded by DrainWait) and closed: its Stderr tail is complete.
func (p *Process) Done() <-chan struct{} { return p.done }

// Running reports whether the child has not been reaped yet.
func (p *Process) Running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// ExitErr is what waiting for the child returned: nil for exit status 0,
// an *exec.ExitError for another status or a signal. It is nil while the
// child runs.
func (p *Process) ExitErr() error {
	if p.Running() {
		return nil
	}
	return p.exitErr
}

// Status says how the child ended, for messages: "exit status 3",
// "signal: killed", or "still running".
func (p *Process) Status() string {
	switch {
	case p.Running():
		return "still running"
	case p.exitErr == nil:
		return "exit status 0"
	}
	return p.exitErr.Error()
}

// Stop ends the child: it closes its stdin, waits, sends SIGTERM, waits,
// sends SIGKILL, and waits up to KillWait for the reap. The two waits share
// ctx's deadline with the kill: each is the smaller of Config.Grace and an
// even share of the time left among the phases still to come (EOF, TERM
// and KILL: a third, then a half), so the child is killed with a third of
// the time left for the reap. Once ctx has ended Stop kills at once. It
// returns when the child is reaped and its output drained, or when ctx
// ends after the reap; an error only when the child was not reaped
// (ErrNotReaped).
//
// Stop is idempotent: a concurrent call waits for the first one, and
// kills the child when its own ctx ends first.
func (p *Process) Stop(ctx context.Context) error {
	first := false
	p.stopOnce.Do(func() { first = true })
	if !first {
		select {
		case <-p.stopped:
			return p.stopErr
		case <-ctx.Done():
			return p.Kill()
		}
	}
	defer close(p.stopped)
	p.stopErr = p.stop(ctx)
	return p.stopErr
}

func (p *Process) stop(ctx context.Context) error {
	_ = p.CloseStdin()
	if p.waitExit(ctx, p.share(ctx, 3)) {
		return p.drain(ctx)
	}
	if ctx.Err() == nil {
		p.log.Info("still running after its stdin closed; sending SIGTERM", "pid", p.pid)
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		if p.waitExit(ctx, p.share(ctx, 2)) {
			return p.drain(ctx)
		}
	}
	p.log.Warn("still running; killing it", "pid", p.pid)
	if err := p.Kill(); err != nil {
		return err
	}
	return p.drain(ctx)
}

// share is the wait of a stop phase: Grace, or less, an even share of
// what is left of ctx's deadline among the phases still to come.
func (p *Process) share(ctx context.Context, phases int) time.Duration {
	d := max(0, p.cfg.Grace)
	if dl, ok := ctx.Deadline(); ok {
		d = max(0, min(d, time.Until(dl)/time.Duration(phases)))
	}
	return d
}

// waitExit waits up to d, and no longer than ctx, for the reap.
func (p *Process) waitExit(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.exited:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return !p.Running()
}

// drain waits for the reaped child's output to be drained, or for ctx.
func (p *Process) drain(ctx context.Context) error {
	select {
	case <-p.done:
	case <-ctx.Done():
	}
	return nil
}

// Kill sends SIGKILL (unless the child was reaped) and waits up to
// KillWait for the reap; past that it returns an error wrapping
// ErrNotReaped.
func (p *Process) Kill() error {
	_ = p.CloseStdin()
	_ = p.cmd.Process.Kill() // a reaped child is not signalled
	if p.waitExit(context.Background(), KillWait) {
		return nil
	}
	p.log.Error("not reaped after SIGKILL", "pid", p.pid, "waited", KillWait)
	// The reaper still waits in wait4 and has not closed the read ends:
	// end their readers now, so nobody draining stdout or stderr waits
	// for a child that may never be reaped.
	_ = p.stdout.f.SetReadDeadline(time.Now())
	_ = p.stderr.f.SetReadDeadline(time.Now())
	return fmt.Errorf("%w: %s (pid %d), %s after SIGKILL", ErrNotReaped, p.cfg.Path, p.pid, KillWait)
}

// endReader is one read end of a child's pipe; ended is closed by the
// first read that fails, which tells the reaper its reader is done.
type endReader struct {
	f     *os.File
	once  sync.Once
	ended chan struct{}
}

func newEndReader(f *os.File) *endReader { return &endReader{f: f, ended: make(chan struct{})} }

func (r *endReader) Read(b []byte) (int, error) {
	n, err := r.f.Read(b)
	if err != nil {
		r.once.Do(func() { close(r.ended) })
	}
	return n, err
}
