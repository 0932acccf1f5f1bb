// Package plugintest holds the test helpers the reference plugins' tests
// share: building their binaries, the path of a real CLI to test against,
// the check that an error says everything a user needs, the harness calls
// a test cannot go on without, and what a test needs to know of the
// processes a plugin starts and of the environment an in-process agent
// reads.
//
// The plugins' tests drive their agent in the test process
// (sdktest.NewHarness), where the agent reads its configuration from the
// process environment: a test sets it with Setenv (t.Setenv), which also
// rules out t.Parallel, and Unsetenv removes what the test inherited. A
// CLI the agent starts is then a child of the test process.
package plugintest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agenthost/agenthost/plugin/sdk/sdktest"
)

// Build builds the main package pkg (a path relative to the current
// directory, or an import path) into dir and returns the binary's path:
// dir and the last element of pkg.
func Build(dir, pkg string) (string, error) {
	bin := filepath.Join(dir, filepath.Base(pkg))
	if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
	}
	return bin, nil
}

// BuildPlugin builds a plugin's main package as Build does, with the race
// detector when the tests run with it, so the code a plugin process runs
// (its serve path, what a test reaches only by killing it) is race-checked
// too. It also makes a race halt the plugin (GORACE halt_on_error, which
// the plugins it starts inherit): a race ends its test with a dead plugin
// instead of a report nobody reads in a log.
func BuildPlugin(dir, pkg string) (string, error) {
	bin := filepath.Join(dir, filepath.Base(pkg))
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
		if err := os.Setenv("GORACE", "halt_on_error=1"); err != nil {
			return "", err
		}
	}
	if out, err := exec.Command("go", append(args, pkg)...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
	}
	return bin, nil
}

// RealCLI is the absolute path of the real CLI named by the environment
// variable envVar (the realclis tests' opt-in); the test is skipped when
// it is not set.
func RealCLI(tb testing.TB, envVar string) string {
	tb.Helper()
	p := os.Getenv(envVar)
	if p == "" {
		tb.Skip(envVar + " is not set")
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		tb.Fatal(err)
	}
	return abs
}

// ErrorContains fails the test when err is nil (what names the call that
// should have failed) and reports each of want that its message lacks.
func ErrorContains(tb testing.TB, err error, what string, want ...string) {
	tb.Helper()
	if err == nil {
		tb.Fatalf("%s succeeded", what)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			tb.Errorf("%s error:\n%v\nwant it to contain:\n%s", what, err, w)
		}
	}
}

// Prompt starts a turn of text and returns its id; it fails the test on
// error.
func Prompt(tb testing.TB, h *sdktest.Harness, text string) string {
	tb.Helper()
	turn, err := h.Prompt(tb.Context(), text)
	if err != nil {
		tb.Fatalf("Prompt(%q): %v", text, err)
	}
	return turn
}

// Cancel cancels the running turn; it fails the test on error.
func Cancel(tb testing.TB, h *sdktest.Harness) {
	tb.Helper()
	if err := h.Cancel(tb.Context()); err != nil {
		tb.Fatalf("Cancel: %v", err)
	}
}

// Answer answers permission request requestID with optionID; it fails the
// test on error.
func Answer(tb testing.TB, h *sdktest.Harness, requestID, optionID string) {
	tb.Helper()
	if err := h.AnswerPermission(tb.Context(), requestID, optionID); err != nil {
		tb.Fatalf("AnswerPermission(%s, %s): %v", requestID, optionID, err)
	}
}

// CloseWithin closes the session with a deadline d from now, as a host
// stopping the plugin does.
func CloseWithin(h *sdktest.Harness, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return h.Close(ctx)
}

// SampleLines returns the lines, without their newlines, of the stored
// transcripts testdata/samples/<name> (copies of what a real CLI wrote),
// in order, as keep maps them: keep gets the transcript's name and a line,
// and returns what to use of it and whether to use it at all.
func SampleLines(tb testing.TB, keep func(name string, line []byte) ([]byte, bool), names ...string) [][]byte {
	tb.Helper()
	var out [][]byte
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join("testdata", "samples", name))
		if err != nil {
			tb.Fatal(err)
		}
		for line := range bytes.Lines(b) {
			if l, ok := keep(name, bytes.TrimSuffix(line, []byte("\n"))); ok {
				out = append(out, l)
			}
		}
	}
	return out
}

// Setenv sets each KEY=VALUE of env with tb.Setenv, restored when the
// test ends.
func Setenv(tb testing.TB, env ...string) {
	tb.Helper()
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		tb.Setenv(k, v)
	}
}

// Unsetenv removes keys from the process environment until the test ends,
// which tb.Setenv cannot: the variables a test inherits (a developer's
// provider credentials, say) must not reach an agent that reads the
// process environment.
func Unsetenv(tb testing.TB, keys ...string) {
	tb.Helper()
	for _, k := range keys {
		if v, ok := os.LookupEnv(k); ok {
			tb.Setenv(k, v) // restores v when the test ends
			os.Unsetenv(k)
		}
	}
}

// PluginPID returns the pid of the plugin process h drives
// (sdktest.NewProcessHarness).
func PluginPID(tb testing.TB, h *sdktest.Harness) int {
	tb.Helper()
	id, err := h.Identify(tb.Context())
	if err != nil {
		tb.Fatal(err)
	}
	return id.PID
}

// OnlyChild returns the one live child process of pid, the CLI a plugin
// started; it fails the test when pid has none or several.
func OnlyChild(tb testing.TB, pid int) int {
	tb.Helper()
	kids := Children(pid)
	if len(kids) != 1 {
		tb.Fatalf("process %d has children %v, want its one CLI", pid, kids)
	}
	return kids[0]
}

// KillPlugin sends SIGKILL to the plugin process pid alone, not to its
// process group, and fails the test unless cli, the CLI it started, dies
// with it within 5s: the CLI's parent-death signal must end it, since
// nobody else signals it.
func KillPlugin(tb testing.TB, pid, cli int) {
	tb.Helper()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		tb.Fatal(err)
	}
	if !WaitGone(cli, 5*time.Second) {
		tb.Fatalf("CLI %d still alive 5s after its plugin %d was SIGKILLed", cli, pid)
	}
}

// Alive reports whether pid is a live process, not a zombie (Linux /proc).
func Alive(pid int) bool {
	st, _, ok := procStat(pid)
	return ok && st != 'Z' && st != 'X'
}

// WaitGone waits up to d for pid to be gone, and reports whether it is.
func WaitGone(pid int, d time.Duration) bool {
	return Eventually(d, func() bool { return !Alive(pid) })
}

// Children lists the live child processes of pid (Linux /proc).
func Children(pid int) []int {
	var out []int
	for _, c := range pids() {
		if st, ppid, ok := procStat(c); ok && ppid == pid && st != 'Z' && st != 'X' {
			out = append(out, c)
		}
	}
	return out
}

// EnvHolders lists the live processes other than this one whose initial
// environment holds the entry kv ("NAME=value"): set a marker in the test
// process, and every process started from it carries it, so one still
// running after the tests is a leak.
func EnvHolders(kv string) []int {
	var out []int
	for _, pid := range pids() {
		if pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "environ"))
		if err == nil && bytes.Contains(append([]byte{0}, b...), []byte("\x00"+kv+"\x00")) && Alive(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// Eventually polls cond every few milliseconds for up to d, and returns
// its last result.
func Eventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func pids() []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// procStat reads the state and parent of pid from /proc/pid/stat.
func procStat(pid int) (state byte, ppid int, ok bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, 0, false
	}
	// pid (comm) state ppid …; comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(f[1])
	return f[0][0], ppid, err == nil
}
