package cliproc

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestStopPhases: each kind of child ends in the phase that suits it.
func TestStopPhases(t *testing.T) {
	const grace = 300 * time.Millisecond
	for _, tt := range []struct {
		mode     string
		status   string
		min, max time.Duration
	}{
		{exitsOnEOF, "exit status 0", 0, grace},
		{needsTERM, "signal: terminated", grace, 2*grace + time.Second},
		{ignoresTERM, "signal: killed", 2 * grace, 2*grace + time.Second},
	} {
		t.Run(tt.mode, func(t *testing.T) {
			t.Parallel()
			p := startHelper(t, tt.mode, grace)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			start := time.Now()
			if err := p.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			d := time.Since(start)
			if p.Running() || p.Status() != tt.status {
				t.Errorf("after Stop: running %v, status %q; want %q", p.Running(), p.Status(), tt.status)
			}
			if d < tt.min || d > tt.max {
				t.Errorf("Stop took %s, want %s to %s", d, tt.min, tt.max)
			}
			select {
			case <-p.Done():
			default:
				t.Error("Stop returned before the output was drained")
			}
			if _, err := p.Write([]byte("x\n")); !errors.Is(err, ErrStdinClosed) {
				t.Errorf("Write after Stop: %v", err)
			}
		})
	}
}

// TestStopSharesTheDeadline: a child that ignores everything but SIGKILL,
// stopped with 1.5 s left and a 5 s grace, gets a third of it after EOF,
// half the rest after SIGTERM, and is killed with the last third left.
func TestStopSharesTheDeadline(t *testing.T) {
	p := startHelper(t, ignoresTERM, 5*time.Second)
	ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// Killed at about 1 s; the reap takes milliseconds.
	if d := time.Since(start); d < 900*time.Millisecond || d > 1500*time.Millisecond {
		t.Errorf("Stop with 1.5s left took %s, want about 1s", d)
	}
	if p.Status() != "signal: killed" {
		t.Errorf("status %q", p.Status())
	}

	// The rule itself.
	q := &Process{cfg: Config{Grace: 5 * time.Second}}
	if d := q.share(context.Background(), 3); d != 5*time.Second {
		t.Errorf("no deadline: %s, want the grace", d)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	for _, tt := range []struct {
		phases int
		want   time.Duration
	}{{3, time.Second}, {2, 1500 * time.Millisecond}, {1, 3 * time.Second}} {
		if d := q.share(ctx, tt.phases); d > tt.want || d < tt.want-100*time.Millisecond {
			t.Errorf("3s left, %d phases: %s, want about %s", tt.phases, d, tt.want)
		}
	}
	short := &Process{cfg: Config{Grace: 200 * time.Millisecond}}
	if d := short.share(ctx, 3); d != 200*time.Millisecond {
		t.Errorf("a grace shorter than the share: %s", d)
	}
	none := &Process{cfg: Config{Grace: -1}}
	if d := none.share(context.Background(), 3); d != 0 {
		t.Errorf("a negative grace: %s", d)
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	dl, cancel := context.WithDeadline(done, time.Now().Add(-time.Second))
	defer cancel()
	if d := q.share(dl, 3); d != 0 {
		t.Errorf("past the deadline: %s", d)
	}
}

// TestStopConcurrent: a second Stop waits for the first, and kills the
// child when its own context ends first.
func TestStopConcurrent(t *testing.T) {
	p := startHelper(t, ignoresTERM, 5*time.Second)
	first := make(chan error, 1)
	go func() { first <- p.Stop(context.Background()) }()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	time.Sleep(50 * time.Millisecond) // the first Stop is waiting after EOF
	start := time.Now()
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the second Stop took %s", d)
	}
	if err := <-first; err != nil || p.Status() != "signal: killed" {
		t.Errorf("first Stop: %v, status %q", err, p.Status())
	}
	if err := p.Kill(); err != nil {
		t.Errorf("Kill of a reaped child: %v", err)
	}
}

// TestWrite: writes reach the child; a child that does not read fails
// them at the write timeout.
func TestWrite(t *testing.T) {
	p := startHelper(t, exitsOnEOF, time.Second)
	if _, err := p.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	if err := p.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	if p.Status() != "exit status 0" {
		t.Errorf("status %q", p.Status())
	}

	cfg := helperConfig(needsTERM)
	cfg.WriteTimeout = 100 * time.Millisecond
	q, err := Start(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Kill() })
	ready(q)
	big := make([]byte, 1<<20) // more than a pipe holds
	if _, err := q.Write(big); !errors.Is(err, ErrWriteTimeout) || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("write to a child that does not read: %v", err)
	}
}

// TestStderrTail: the child's stderr is kept, tidied, for messages.
func TestStderrTail(t *testing.T) {
	p, err := Start(t.Context(), helperConfig(chatty))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, p.Stdout())
	<-p.Done()
	if p.Status() != "exit status 3" {
		t.Errorf("status %q", p.Status())
	}
	got := p.Stderr().Last(100)
	if len(got) != TailLines {
		t.Fatalf("kept %d lines, want %d: %q", len(got), TailLines, got)
	}
	// 29 non-blank lines, lines 0 to 9, 11 to 19, the long one and 21 to
	// 29: the last 20 start at line 9.
	if got[0] != "line 9" || got[1] != "line 11" || got[len(got)-1] != "line 29" {
		t.Errorf("tail %q", got)
	}
	long := got[10]
	if len(long) > TailLineMax+len("…") || !strings.HasSuffix(long, "…") || !strings.HasPrefix(long, "éé") {
		t.Errorf("the over-long line was kept as %d bytes %q…", len(long), long[:10])
	}
	if last := p.Stderr().Last(2); len(last) != 2 || last[1] != "line 29" {
		t.Errorf("Last(2) = %q", last)
	}
}

// TestParentDeath: a plugin SIGKILLed takes its CLI with it, although the
// CLI ignores stdin EOF and SIGTERM and nobody signals it.
func TestParentDeath(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("only Linux has a parent-death signal")
	}
	p, err := Start(t.Context(), helperConfig(plugin))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Kill() })
	line, err := NewLineReader(p.Stdout(), 0).ReadLine()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := strconv.Atoi(string(line))
	if err != nil {
		t.Fatalf("the plugin said %q", line)
	}
	if gone(cli) {
		t.Fatalf("CLI %d is not running", cli)
	}
	if err := syscall.Kill(p.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.Exited()
	if !eventually(5*time.Second, func() bool { return gone(cli) }) {
		_ = syscall.Kill(cli, syscall.SIGKILL)
		t.Fatalf("CLI %d still runs after its plugin was SIGKILLed", cli)
	}
}

// TestPdeathsigFollowsTheThread shows why Start forks from a thread of its
// own: a child forked with Pdeathsig from a thread that then ends dies with
// the thread, while the plugin lives; a child started by Start from such a
// thread does not, nor when other threads end.
func TestPdeathsigFollowsTheThread(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("only Linux has a parent-death signal")
	}
	cfg := helperConfig(ignoresTERM)

	// onDoomedThread runs f on a thread that ends when f returns: a
	// goroutine locked to it returns without unlocking. The process's
	// main thread is never ended (the runtime parks it instead), so a
	// goroutine that lands there keeps it and another one tries.
	onDoomedThread := func(f func()) {
		release := make(chan struct{})
		defer close(release)
		for {
			ran := make(chan bool)
			go func() {
				runtime.LockOSThread()
				if syscall.Gettid() == os.Getpid() {
					ran <- false
					<-release
					runtime.UnlockOSThread()
					return
				}
				f()
				ran <- true
			}()
			if <-ran {
				return
			}
		}
	}

	// os/exec alone: the child dies with the thread.
	raw := exec.Command(cfg.Path)
	raw.Env = cfg.Env
	raw.SysProcAttr = sysProcAttr()
	var startErr error
	onDoomedThread(func() { startErr = raw.Start() })
	if startErr != nil {
		t.Fatal(startErr)
	}
	waited := make(chan error, 1)
	go func() { waited <- raw.Wait() }()
	select {
	case err := <-waited:
		if err == nil || err.Error() != "signal: killed" {
			t.Errorf("the raw child ended with %v, want its parent-death signal", err)
		}
	case <-time.After(5 * time.Second):
		_ = raw.Process.Kill()
		t.Fatal("a child forked from a thread that ended still runs: the hazard is gone, and so is the reason for Start's locked thread")
	}

	// Start: the fork happens on Start's own locked thread.
	var p *Process
	onDoomedThread(func() { p, startErr = Start(context.Background(), cfg) })
	if startErr != nil {
		t.Fatal(startErr)
	}
	t.Cleanup(func() { _ = p.Kill() })
	ready(p)
	// Other code ending threads of the pool (here: fifty goroutines that
	// lock theirs and return) cannot reach the forking thread either: it
	// stays locked to Start's goroutine until the reap.
	for range 50 {
		onDoomedThread(func() {})
	}
	time.Sleep(300 * time.Millisecond)
	if !p.Running() {
		t.Fatalf("the child of Start died with a thread that ended: %s", p.Status())
	}
}

// TestStartFails: a missing executable fails Start and leaks nothing.
func TestStartFails(t *testing.T) {
	_, err := Start(t.Context(), Config{Path: "/nonexistent/cli"})
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Start: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := Start(ctx, helperConfig(exitsOnEOF)); !errors.Is(err, context.Canceled) {
		t.Errorf("Start with a cancelled context: %v", err)
	}
}
