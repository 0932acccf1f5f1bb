package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// procRunner is agenthost's go-plugin runner (the RunnerFunc path): it starts
// the plugin as the leader of a new session and process group, with stdin on
// /dev/null, stdout a pipe that carries only go-plugin's handshake line, and
// stderr a per-session log file, so a plugin whose host died never dies of
// SIGPIPE and its logs survive. Its environment is exactly what the host's
// policy built: nothing is inherited wholesale.
//
// It watches the plugin through a pidfd registered with the Go netpoller, so
// an exit is seen within milliseconds (go-plugin's own runner polls once a
// second, and counts a zombie as alive) without tying up a thread, and so
// signals reach exactly the process that was started, never a recycled pid.
type procRunner struct {
	path    string
	args    []string
	env     []string
	logPath string
	log     hclog.Logger
	// onStart runs right after the process exists, alongside the
	// handshake: recording the owner durably takes about as long as the
	// plugin's runtime takes to start, and no agenthost request reaches
	// the plugin before waitStarted has its result (go-plugin's own broker
	// and stdio streams may open meanwhile; no writer is admitted before
	// the owner is proven anyway). Its error aborts the start (the
	// process is killed, which fails the handshake too).
	onStart   func(pid int) error
	onStarted chan error // onStart's result; nil when it never ran

	cmd    *exec.Cmd
	stdout io.ReadCloser
	pid    int
	pidfd  *os.File // non-blocking, registered with the netpoller

	exited chan struct{} // closed once the process has exited and been reaped
	state  *os.ProcessState
	// attachedStatus is the exit of a reattached plugin that was this
	// process's child; nil when unknown.
	attachedStatus *unix.Siginfo
	waitErr        error
	detachMu       sync.Mutex
	detached       bool
	detachedCh     chan struct{} // closed by detach

	sigMu  sync.Mutex // orders signals against reaping
	reaped bool       // the leader was reaped (or let go); guarded by sigMu
}

func (r *procRunner) Start(ctx context.Context) error {
	logFile, err := os.OpenFile(r.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open plugin log %s: %w", r.logPath, err)
	}
	defer logFile.Close() // the child holds its own copy as fd 2

	cmd := exec.Command(r.path, r.args...)
	cmd.Env = r.env
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start plugin %s: %w", r.path, err)
	}
	r.cmd, r.stdout, r.pid = cmd, stdout, cmd.Process.Pid
	r.exited, r.detachedCh = make(chan struct{}), make(chan struct{})
	// A pidfd of our own, opened on the still unreaped child (its pid
	// cannot have been reused). Not the one SysProcAttr.PidFD would give:
	// os.Process keeps a dup of that, and a dup shares the open file
	// description, so making ours non-blocking for the netpoller made
	// Process.Wait's waitid return EAGAIN instead of waiting.
	if pidfd, err := unix.PidfdOpen(r.pid, unix.PIDFD_NONBLOCK); err == nil {
		r.pidfd = os.NewFile(uintptr(pidfd), "pidfd:"+strconv.Itoa(r.pid))
	}
	go r.watch()
	if r.onStart != nil {
		r.onStarted = make(chan error, 1)
		go func() {
			err := r.onStart(r.pid)
			if err != nil {
				_ = r.Kill(context.Background())
			}
			r.onStarted <- err
		}()
	}
	return nil
}

// waitStarted waits for onStart's result. A process that failed it has
// been killed; waitStarted then also waits until it is reaped. It must be
// called once Start returned, whatever the handshake did.
func (r *procRunner) waitStarted() error {
	if r.onStarted == nil {
		return nil
	}
	err := <-r.onStarted
	r.onStarted <- err // later callers see the same result
	if err != nil {
		<-r.exited
	}
	return err
}

// watch waits for the process to exit, sweeps what is left of its process
// group while the unreaped leader still pins the group id (so the sweep can
// only reach the plugin's own tree), then reaps it. Reaping and signalling
// exclude each other (sigMu), so no signal is ever sent to a group whose
// leader has been reaped.
func (r *procRunner) watch() {
	exitKnown := false
	if r.pidfd != nil {
		switch err := r.waitPidfd(); {
		case err == nil:
			exitKnown = true
		case errors.Is(err, os.ErrDeadlineExceeded):
			r.letGo()
			return
		case r.cmd == nil:
			// Not our child: there is no wait(2) to fall back to, and
			// declaring it exited on a failed watch would let a second
			// writer start beside it. Check its pidfd until it exits.
			r.log.Warn("watching the plugin's pidfd failed; checking it every 100ms instead", "pid", r.pid, "error", err)
			if !r.pollUntilExit() {
				r.letGo()
				return
			}
			exitKnown = true
		default:
			r.log.Warn("watching the plugin's pidfd failed; waiting for its exit instead", "pid", r.pid, "error", err)
		}
	}
	if r.cmd != nil && !exitKnown {
		// No pidfd (an old kernel), or it could not be watched: wait
		// without holding sigMu, which would block every signal until
		// the plugin exits.
		state, err := r.cmd.Process.Wait()
		r.sigMu.Lock()
		r.state, r.waitErr, r.reaped = state, err, true
		r.sigMu.Unlock()
	} else {
		r.sigMu.Lock()
		if r.cmd != nil {
			// Our own child: its zombie pins the group until we reap it.
			if !r.isDetached() {
				_ = unix.Kill(-r.pid, unix.SIGKILL)
			}
			r.state, r.waitErr = r.cmd.Process.Wait()
		} else {
			r.reapIfChild()
		}
		r.reaped = true
		r.sigMu.Unlock()
	}
	if r.stdout != nil {
		_ = r.stdout.Close()
	}
	if r.pidfd != nil {
		_ = r.pidfd.Close()
	}
	close(r.exited)
}

// waitPidfd waits, through the netpoller, until the pidfd reports the
// process exited. It returns os.ErrDeadlineExceeded when the host detached,
// and any other error when the pidfd could not be watched: then nothing is
// known about the process.
func (r *procRunner) waitPidfd() error {
	rc, err := r.pidfd.SyscallConn()
	if err != nil {
		return err
	}
	var pollErr error
	err = rc.Read(func(fd uintptr) bool {
		var exited bool
		exited, pollErr = pidfdExited(int(fd))
		return exited || pollErr != nil
	})
	if err != nil {
		return err
	}
	return pollErr
}

// pollUntilExit checks the pidfd every 100ms until the process has exited
// (true) or the host detached (false). It is the fallback for a plugin that
// is not our child when the netpoller cannot watch its pidfd; a check that
// keeps failing keeps the plugin counted as running.
func (r *procRunner) pollUntilExit() bool {
	rc, err := r.pidfd.SyscallConn()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		exited := false
		if err == nil {
			_ = rc.Control(func(fd uintptr) { exited, _ = pidfdExited(int(fd)) })
		}
		if exited {
			return true
		}
		select {
		case <-r.detachedCh:
			return false
		case <-t.C:
		}
	}
}

// pidfdExited reports whether the process behind pidfd has exited (its
// pidfd is readable then), without blocking. An interrupted poll is
// retried: Go's runtime signals its own threads all the time (preemption),
// and a poll cut short by a signal says nothing about the process; taking
// it for an exit once made the watcher SIGKILL live plugins.
func pidfdExited(pidfd int) (bool, error) {
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("poll pidfd: %w", err)
		}
		return n > 0, nil
	}
}

// letGo stops watching a detached plugin: the host lets it outlive it, and
// it is no longer this runner's to signal.
func (r *procRunner) letGo() {
	r.sigMu.Lock()
	r.reaped = true
	_ = r.pidfd.Close()
	r.sigMu.Unlock()
}

// reapIfChild reaps a reattached plugin that happens to be this process's
// child (a host reopened within one process); for anyone else's child the
// kernel's reaper does it and the exit status stays unknown.
func (r *procRunner) reapIfChild() {
	if r.pidfd == nil {
		return
	}
	rc, err := r.pidfd.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		var info unix.Siginfo
		if err := unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED, nil); err == nil {
			r.attachedStatus = &info
		}
	})
}

// attach builds a runner for a plugin this host did not start (or started
// before it restarted): pid must already have been verified against the
// lease through pidfd, whose ownership passes to the runner.
func attachRunner(pid int, pidfd int, logPath string, log hclog.Logger) (*procRunner, error) {
	if err := unix.SetNonblock(pidfd, true); err != nil {
		_ = unix.Close(pidfd)
		return nil, err
	}
	r := &procRunner{pid: pid, logPath: logPath, log: log, exited: make(chan struct{}), detachedCh: make(chan struct{}),
		pidfd: os.NewFile(uintptr(pidfd), "pidfd:"+strconv.Itoa(pid))}
	go r.watch()
	return r, nil
}

func (r *procRunner) isDetached() bool {
	r.detachMu.Lock()
	defer r.detachMu.Unlock()
	return r.detached
}

// detach stops watching without stopping the process: the plugin outlives
// this host and a later host reattaches to it.
func (r *procRunner) detach() {
	r.detachMu.Lock()
	defer r.detachMu.Unlock()
	if r.detached {
		return
	}
	r.detached = true
	close(r.detachedCh)
	if r.pidfd != nil {
		_ = r.pidfd.SetReadDeadline(time.Now())
	}
	// go-plugin reads the handshake pipe until EOF before it waits for the
	// process; a plugin that lives on never closes it, so close our end.
	// The plugin's later writes to fd 1 fail with EPIPE, which the SDK
	// handles.
	if r.stdout != nil {
		_ = r.stdout.Close()
	}
}

// Wait implements runner.AttachedRunner: it returns once the process has
// exited and been reaped (or the host detached).
func (r *procRunner) Wait(ctx context.Context) error {
	select {
	case <-r.exited:
		return r.waitErr
	case <-r.detachedCh:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// signal sends sig to the plugin's whole process group. For the host's own
// child the unreaped leader pins the group id. A reattached plugin is not
// our child and may be reaped by someone else: it is signalled through its
// pidfd first, and its group only while the leader is verifiably alive.
func (r *procRunner) signal(sig syscall.Signal) error {
	if r.pid <= 0 {
		return nil // nothing was started
	}
	r.sigMu.Lock()
	defer r.sigMu.Unlock()
	if r.reaped {
		return nil
	}
	if r.cmd == nil {
		if r.pidfd == nil {
			return nil
		}
		rc, err := r.pidfd.SyscallConn()
		if err != nil {
			return err
		}
		var sigErr error
		_ = rc.Control(func(fd uintptr) {
			if sigErr = unix.PidfdSendSignal(int(fd), 0, nil, 0); sigErr == nil {
				sigErr = unix.PidfdSendSignal(int(fd), sig, nil, 0)
			}
		})
		if errors.Is(sigErr, unix.ESRCH) {
			return nil // gone: its group id is no longer pinned
		}
		if sigErr != nil {
			return fmt.Errorf("signal plugin %d: %w", r.pid, sigErr)
		}
	}
	if err := unix.Kill(-r.pid, sig); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("signal plugin group %d: %w", r.pid, err)
	}
	return nil
}

// Kill implements runner.AttachedRunner: SIGKILL to the whole group.
func (r *procRunner) Kill(ctx context.Context) error { return r.signal(unix.SIGKILL) }

func (r *procRunner) ID() string { return strconv.Itoa(r.pid) }

func (r *procRunner) Stdout() io.ReadCloser { return r.stdout }

// Stderr returns an empty reader: the plugin's stderr goes to its log file,
// and go-plugin needs a non-nil reader that ends.
func (r *procRunner) Stderr() io.ReadCloser { return io.NopCloser(strings.NewReader("")) }

func (r *procRunner) Name() string { return r.path }

// Diagnose returns the tail of the plugin's log, which go-plugin appends to
// its "Unrecognized remote plugin message" so start-up failures show the
// plugin's own words.
func (r *procRunner) Diagnose(ctx context.Context) string {
	return "plugin log tail:\n" + tailFile(r.logPath, 2048)
}

func (r *procRunner) PluginToHost(n, a string) (string, string, error) { return n, a, nil }
func (r *procRunner) HostToPlugin(n, a string) (string, string, error) { return n, a, nil }

// exitDescription says how the process ended: "exit status N" or
// "signal: killed".
func (r *procRunner) exitDescription() string {
	select {
	case <-r.exited:
	default:
		return "still running"
	}
	if r.cmd == nil {
		if r.attachedStatus == nil {
			return "exited (status unknown: this host did not start it)"
		}
		return "exited"
	}
	if r.state == nil {
		return fmt.Sprintf("unknown (%v)", r.waitErr)
	}
	if ws, ok := r.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return "signal " + unix.SignalName(ws.Signal())
	}
	return "exit status " + strconv.Itoa(r.state.ExitCode())
}

func tailFile(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(fi.Size()-n, 0)
	buf := make([]byte, fi.Size()-off)
	_, _ = f.ReadAt(buf, off)
	return string(buf)
}
