package faults

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/leasestore"
	"github.com/agenthost/agenthost/leasestore/badgerstore"
)

// nobody is the unprivileged user the writer child runs as: root ignores
// directory permissions, so a directory made read-only under a running
// host only bites a host that is not root.
const nobody = 65534

// writerRole is a host run as a child: it opens the state directory in
// $AGENTHOST_FAULTS_DIR with the scripted plugin at $AGENTHOST_FAULTS_PLUGIN
// and follows commands read from stdin, one a line, answering each with one
// line on stdout: "start ID", "prompt ID TEXT", "wait ID N" (until the
// journal holds N plugin updates), "pid ID", "close" (detach and exit),
// "shutdown" (stop every session and exit). Background
// reports are printed as "report: ..." lines.
func writerRole() int {
	ctx := context.Background()
	out := bufio.NewWriter(os.Stdout)
	say := func(format string, args ...any) {
		// One answer a line: Badger's errors span several.
		fmt.Fprintln(out, strings.ReplaceAll(fmt.Sprintf(format, args...), "\n", " "))
		out.Flush()
	}
	cfg := host.Config{
		StateDir:       os.Getenv("AGENTHOST_FAULTS_DIR"),
		Agents:         map[string]host.AgentPlugin{"scripted": {Path: os.Getenv("AGENTHOST_FAULTS_PLUGIN")}},
		StartupTimeout: 30 * time.Second, StopTimeout: 2 * time.Second,
		OnError: func(scope string, err error) { say("report: %s: %v", scope, err) },
	}
	h, err := openOnBadger(ctx, cfg)
	if err != nil {
		say("error: %v", err)
		return 1
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		cmd, arg, _ := strings.Cut(in.Text(), " ")
		switch cmd {
		case "start":
			if _, err := h.StartSession(ctx, host.SessionRequest{ID: arg, Agent: "scripted", Workspace: os.TempDir()}); err != nil {
				say("error: %v", err)
				continue
			}
			say("ok")
		case "prompt":
			id, text, _ := strings.Cut(arg, " ")
			s, ok := h.Session(id)
			if !ok {
				say("error: no session %q", id)
				continue
			}
			res, err := s.Prompt(ctx, text)
			if err != nil {
				say("error: %v", err)
				continue
			}
			say("ok %s %s", res.StopReason, res.Error)
		case "wait":
			id, n, _ := strings.Cut(arg, " ")
			var want, got int
			fmt.Sscan(n, &want)
			deadline := time.Now().Add(time.Minute)
			for got < want && time.Now().Before(deadline) {
				got = 0
				_ = h.Store().Replay(ctx, id, 1, func(e leasestore.Entry) error {
					// The plugin's updates and stops; the host's own (the
					// title it derives from the first prompt) have no
					// plugin seq.
					var rec struct {
						PluginSeq uint64 `json:"pluginSeq"`
					}
					if (e.Kind == leasestore.KindUpdate || e.Kind == leasestore.KindStop) &&
						json.Unmarshal(e.Payload, &rec) == nil && rec.PluginSeq > 0 {
						got++
					}
					return nil
				})
				time.Sleep(50 * time.Millisecond)
			}
			say("ok %d", got)
		case "pid":
			s, ok := h.Session(arg)
			if !ok {
				say("error: no session %q", arg)
				continue
			}
			say("ok %d", s.PID())
		case "shutdown":
			ctx, cancel := context.WithTimeout(ctx, time.Minute)
			err := h.Shutdown(ctx)
			cancel()
			say("shut down %v", err)
			return 0
		case "close":
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := h.Close(ctx)
			cancel()
			say("closed %v", err)
			return 0
		}
	}
	return 0
}

// writer is a running writerRole child.
type writer struct {
	t     *testing.T
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
}

func startWriter(t *testing.T, bin, state, plugin string) *writer {
	t.Helper()
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"=writer", "AGENTHOST_FAULTS_DIR="+state, "AGENTHOST_FAULTS_PLUGIN="+plugin, "HOME="+filepath.Dir(state))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	cmd.Dir = filepath.Dir(state)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &writer{t: t, cmd: cmd, stdin: stdin, lines: make(chan string, 64)}
	go func() {
		defer close(w.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			w.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		_ = w.cmd.Process.Kill()
		_ = w.cmd.Wait()
	})
	return w
}

// do sends one command and returns its answer; reports seen meanwhile are
// returned too.
func (w *writer) do(command string, timeout time.Duration) (answer string, reports []string) {
	w.t.Helper()
	if _, err := io.WriteString(w.stdin, command+"\n"); err != nil {
		w.t.Fatalf("send %q: %v", command, err)
	}
	deadline := time.After(timeout)
	for {
		select {
		case line, ok := <-w.lines:
			if !ok {
				w.t.Fatalf("the writer exited during %q (reports: %q)", command, reports)
			}
			if r, ok := strings.CutPrefix(line, "report: "); ok {
				reports = append(reports, r)
				continue
			}
			return line, reports
		case <-deadline:
			w.t.Fatalf("no answer to %q within %v (reports: %q)", command, timeout, reports)
		}
	}
}

// The store directory becomes read-only under a running, unprivileged host
// while a plugin streams more updates than one memtable holds, so Badger
// must create a file it may not. The host does not crash: journaling
// fails, the session is detached with the plugin keeping its updates, and
// once the directory is writable again the next host readopts the plugin
// and journals every update exactly once.
func TestStoreDirectoryTurnsReadOnlyUnderARunningHost(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("this fault runs its host as another user (nobody) and needs root for that")
	}
	dir, err := os.MkdirTemp("", "ah-faults-ro-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "faults.test")
	plugin := filepath.Join(dir, "scripted")
	state := filepath.Join(dir, "state")
	for src, dst := range map[string]string{os.Args[0]: bin, bins.scripted: plugin} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, state} {
		if err := os.Chown(p, nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}

	w := startWriter(t, bin, state, plugin)
	if a, _ := w.do("start ro", time.Minute); a != "ok" {
		t.Fatalf("start: %s", a)
	}
	if a, _ := w.do("prompt ro count 5", time.Minute); !strings.HasPrefix(a, "ok end_turn") {
		t.Fatalf("first turn: %s", a)
	}
	store := filepath.Join(state, "store")
	if err := os.Chmod(store, 0o500); err != nil {
		t.Fatal(err)
	}
	const n = 40000 // ~14 MiB of journal: more than one 8 MiB memtable
	injected(t, "the store directory of a host running as uid %d is made read-only (0500) while its plugin streams %d updates", nobody, n)
	a, reports := w.do(fmt.Sprintf("prompt ro count %d", n), 2*time.Minute)
	if !strings.HasPrefix(a, "ok failed") {
		t.Fatalf("the turn on a read-only store: %s, want it to fail (reports: %q)", a, reports)
	}
	detached := false
	for _, r := range reports {
		detached = detached || strings.Contains(r, "detaching so the plugin keeps its updates")
	}
	if !detached {
		t.Fatalf("no report that the session was detached for the next host: %q", reports)
	}
	closed, _ := w.do("close", 2*time.Minute)
	if err := w.cmd.Wait(); err != nil {
		t.Fatalf("the host did not exit cleanly: %v (%s)", err, closed)
	}
	held(t, "the turn ended %q; the host reported %q, detached, and its Close returned within its deadline: %s", a, reports, closed)

	if err := os.Chmod(store, 0o700); err != nil {
		t.Fatal(err)
	}
	w2 := startWriter(t, bin, state, plugin)
	if a, _ := w2.do(fmt.Sprintf("wait ro %d", 5+1+n+1), 2*time.Minute); a != fmt.Sprintf("ok %d", 5+1+n+1) {
		t.Fatalf("after the directory is writable again: %s", a)
	}
	a, _ = w2.do("pid ro", time.Minute)
	var pid int
	if _, err := fmt.Sscanf(a, "ok %d", &pid); err != nil {
		t.Fatalf("pid: %s", a)
	}
	if a, _ := w2.do("shutdown", 2*time.Minute); a != "shut down <nil>" {
		t.Fatalf("shutdown: %s", a)
	}
	if err := w2.cmd.Wait(); err != nil {
		t.Fatalf("the second host did not exit cleanly: %v", err)
	}
	gone(t, pid, 5*time.Second)
	s, err := badgerstore.Open(context.Background(), state, badgerstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	checkOnceInOrder(t, pluginSeqs(t, journal(t, s, "ro")), 1, uint64(5+1+n+1))
	held(t, "writable again, the next host readopted plugin %d and journaled all %d updates once, in order; its shutdown left no process", pid, 5+1+n+1)
}
