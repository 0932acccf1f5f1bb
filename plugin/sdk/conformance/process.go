package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-plugin/runner"
)

// children maps the pid of every process the kit started to its child, so
// stopWithDeadline knows when one of them has been reaped (a zombie still
// answers kill(pid, 0)).
var children sync.Map // int → *child

// child is one plugin process the kit started. The kit is its parent and
// reaps it as soon as it exits.
type child struct {
	path    string
	pid     int
	logPath string
	stdout  *os.File // read end of the handshake pipe, which go-plugin scans

	exited  chan struct{} // closed once the process has been reaped
	waitErr error         // cmd.Wait's error; read only after exited is closed
}

// spawn starts path in its own process group with stdin on /dev/null,
// stdout on a pipe (the go-plugin handshake) and stderr appended to
// logPath, and reaps it in the background.
func spawn(path string, args, env []string, logPath string) (*child, error) {
	logFile, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, args...)
	cmd.Env = env
	cmd.Stdout = w // an *os.File: it becomes fd 1 with no copying goroutine
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	w.Close()
	if err != nil {
		r.Close()
		return nil, err
	}
	c := &child{path: path, pid: cmd.Process.Pid, logPath: logPath, stdout: r, exited: make(chan struct{})}
	children.Store(c.pid, c)
	go func() {
		c.waitErr = cmd.Wait()
		close(c.exited)
	}()
	return c, nil
}

// gone reports whether the process has exited and been reaped.
func (c *child) gone() bool {
	select {
	case <-c.exited:
		return true
	default:
		return false
	}
}

// waitExit waits up to d for the process to exit.
func (c *child) waitExit(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.exited:
		return true
	case <-t.C:
		return false
	}
}

// exitStatus describes how the process ended ("exit status 3", "signal:
// killed"); it is empty while it runs.
func (c *child) exitStatus() string {
	if !c.gone() {
		return ""
	}
	if c.waitErr == nil {
		return "exit status 0"
	}
	return c.waitErr.Error()
}

// logTail returns the last lines of the plugin's stderr, at most max bytes.
func (c *child) logTail(lines, max int) string {
	b, err := os.ReadFile(c.logPath)
	if err != nil || len(bytes.TrimSpace(b)) == 0 {
		return ""
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	s := strings.Join(all, "\n")
	if len(s) > max {
		s = "…" + s[len(s)-max:]
	}
	return s
}

// kitRunner is the go-plugin runner.Runner the kit starts plugins with
// (ClientConfig.RunnerFunc): it owns the process, so it can put it in its
// own process group, keep its stderr in a file the kit quotes on failure,
// and kill the whole group.
type kitRunner struct {
	path     string
	args     []string
	spec     *exec.Cmd // go-plugin's spec: only its Env is used
	extraEnv []string
	logPath  string

	mu sync.Mutex
	c  *child
}

var _ runner.Runner = (*kitRunner)(nil)

func (r *kitRunner) child() *child {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.c
}

// Start starts the plugin. The context only bounds starting (go-plugin
// cancels it as soon as the handshake is read), so the process is not tied
// to it.
func (r *kitRunner) Start(_ context.Context) error {
	// For duplicate keys os/exec keeps the last one, so the kit's
	// variables win over the spec's (the host environment and go-plugin's).
	env := append(slices.Clone(r.spec.Env), r.extraEnv...)
	c, err := spawn(r.path, r.args, env, r.logPath)
	if err != nil {
		return fmt.Errorf("start %s: %w", r.path, err)
	}
	r.mu.Lock()
	r.c = c
	r.mu.Unlock()
	return nil
}

func (r *kitRunner) Diagnose(context.Context) string {
	c := r.child()
	if c == nil {
		return ""
	}
	var b strings.Builder
	if c.waitExit(200 * time.Millisecond) {
		fmt.Fprintf(&b, "the plugin process exited (%s)", c.exitStatus())
	}
	if tail := c.logTail(8, 2000); tail != "" {
		if b.Len() > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "last lines of its stderr:\n%s", tail)
	}
	return b.String()
}

func (r *kitRunner) Stdout() io.ReadCloser { return r.child().stdout }

// Stderr must be non-nil and reach EOF: the plugin's stderr goes to a file.
func (r *kitRunner) Stderr() io.ReadCloser { return io.NopCloser(strings.NewReader("")) }

func (r *kitRunner) Name() string { return r.path }

func (r *kitRunner) Wait(context.Context) error {
	c := r.child()
	<-c.exited
	return c.waitErr
}

func (r *kitRunner) Kill(context.Context) error { return killGroup(r.child()) }

func (r *kitRunner) ID() string {
	if c := r.child(); c != nil {
		return strconv.Itoa(c.pid)
	}
	return ""
}

func (r *kitRunner) PluginToHost(network, addr string) (string, string, error) {
	return network, addr, nil
}

func (r *kitRunner) HostToPlugin(network, addr string) (string, string, error) {
	return network, addr, nil
}

// attachedRunner is the runner of a client that reattached to a plugin the
// kit started: the kit is still its parent, so it learns of its exit at
// once instead of polling.
type attachedRunner struct{ c *child }

var _ runner.AttachedRunner = attachedRunner{}

func (a attachedRunner) Wait(context.Context) error { <-a.c.exited; return a.c.waitErr }
func (a attachedRunner) Kill(context.Context) error { return killGroup(a.c) }
func (a attachedRunner) ID() string                 { return strconv.Itoa(a.c.pid) }
func (a attachedRunner) PluginToHost(network, addr string) (string, string, error) {
	return network, addr, nil
}
func (a attachedRunner) HostToPlugin(network, addr string) (string, string, error) {
	return network, addr, nil
}

// reattachFunc returns the go-plugin ReattachFunc for c at addr. Like
// go-plugin's own, it dials the socket, so a dead plugin fails here and not
// at the first RPC.
func reattachFunc(c *child, addr net.Addr) runner.ReattachFunc {
	return func() (runner.AttachedRunner, error) {
		if c.gone() {
			return nil, fmt.Errorf("reattach: plugin process %d has exited (%s)", c.pid, c.exitStatus())
		}
		conn, err := net.DialTimeout(addr.Network(), addr.String(), 2*time.Second)
		if err != nil {
			return nil, fmt.Errorf("reattach: %w", err)
		}
		conn.Close()
		return attachedRunner{c}, nil
	}
}

// killGroup sends SIGKILL to the process group of c (its pgid is its pid).
// Nothing to kill is not an error.
func killGroup(c *child) error {
	if c == nil {
		return nil
	}
	if err := syscall.Kill(-c.pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

// leaderGone reports whether pid has exited: reaped if the kit started it,
// otherwise gone or a zombie.
func leaderGone(pid int) bool {
	if v, ok := children.Load(pid); ok {
		return v.(*child).gone()
	}
	if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		return true
	}
	st, _, ok := procStat(pid)
	return ok && (st == 'Z' || st == 'X')
}

// stopWithDeadline stops the process group led by pid: SIGTERM to the
// leader, up to d for it to exit, then SIGKILL to the whole group; and
// always a SIGKILL sweep of the group afterwards, since children survive a
// graceful exit of their parent. It returns an error if the leader or a
// live member of the group remains 2 s later.
func stopWithDeadline(pid int, d time.Duration) error {
	if pid <= 0 {
		return fmt.Errorf("stop: invalid pid %d", pid)
	}
	if !leaderGone(pid) {
		_ = syscall.Kill(pid, syscall.SIGTERM)
		poll(d, func() bool { return leaderGone(pid) })
	}
	// A pgid is not reused while its group has members, so the sweep
	// cannot hit another group; once the group is empty it is ESRCH.
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	if poll(2*time.Second, func() bool { return leaderGone(pid) && len(groupMembers(pid)) == 0 }) {
		return nil
	}
	if !leaderGone(pid) {
		return fmt.Errorf("process %d still running 2s after SIGKILL", pid)
	}
	return fmt.Errorf("process group %d still has live members %v 2s after SIGKILL", pid, groupMembers(pid))
}

// poll calls cond every few milliseconds until it is true or d has passed,
// and returns its last result.
func poll(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if !time.Now().Before(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// procStat reads the state and process group of pid from /proc (Linux).
func procStat(pid int) (state byte, pgrp int, ok bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, 0, false
	}
	// pid (comm) state ppid pgrp …; comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 3 {
		return 0, 0, false
	}
	pgrp, err = strconv.Atoi(f[2])
	if err != nil {
		return 0, 0, false
	}
	return f[0][0], pgrp, true
}

// pids lists the processes in /proc; ok is false without a readable /proc.
func pids() (out []int, ok bool) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, false
	}
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out, true
}

// groupMembers lists the live (not zombie) processes of process group
// pgid. Without /proc it falls back to kill(-pgid, 0), which counts zombies
// too, and reports the group as one member named by pgid.
func groupMembers(pgid int) []int {
	all, ok := pids()
	if !ok {
		if syscall.Kill(-pgid, 0) == nil {
			return []int{pgid}
		}
		return nil
	}
	var out []int
	for _, pid := range all {
		if st, pg, ok := procStat(pid); ok && pg == pgid && st != 'Z' && st != 'X' {
			out = append(out, pid)
		}
	}
	return out
}

// envHolders lists the live processes whose initial environment holds the
// entry kv ("NAME=value"), wherever they are: a plugin's children inherit
// the spawn token even when they leave its process group. It returns nil
// without /proc.
func envHolders(kv string) []int {
	all, _ := pids()
	self := os.Getpid()
	var out []int
	for _, pid := range all {
		if pid == self {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "environ"))
		if err != nil || !hasEntry(b, kv) {
			continue
		}
		if st, _, ok := procStat(pid); ok && st != 'Z' && st != 'X' {
			out = append(out, pid)
		}
	}
	return out
}

func hasEntry(environ []byte, kv string) bool {
	for e := range bytes.SplitSeq(environ, []byte{0}) {
		if string(e) == kv {
			return true
		}
	}
	return false
}
