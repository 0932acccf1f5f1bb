package cliproc

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The children of these tests are the test binary itself, re-executed
// with helperVar naming what to be: TestMain runs the helper instead of
// the tests. Every helper says "ready" on stdout once its signal handling
// is in place, so a test never signals one that is still starting.
const helperVar = "CLIPROC_TEST_HELPER"

// Helper modes.
const (
	// exitsOnEOF reads stdin to its end and exits 0.
	exitsOnEOF = "eof"
	// needsTERM ignores stdin and dies of SIGTERM.
	needsTERM = "term"
	// ignoresTERM ignores stdin and SIGTERM: only SIGKILL ends it.
	ignoresTERM = "ignore"
	// chatty writes 30 stderr lines (colour, blanks, one over-long) and
	// exits 3.
	chatty = "chatty"
	// plugin starts an ignoresTERM child through Start, prints its pid
	// and sleeps: a plugin and its CLI.
	plugin = "plugin"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperVar); mode != "" {
		runHelper(mode)
		return
	}
	os.Exit(m.Run())
}

func runHelper(mode string) {
	switch mode {
	case exitsOnEOF:
		fmt.Println("ready")
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	case needsTERM:
		fmt.Println("ready")
	case ignoresTERM:
		signal.Ignore(syscall.SIGTERM)
		fmt.Println("ready")
	case chatty:
		for i := range 30 {
			switch i {
			case 10:
				fmt.Fprintln(os.Stderr, "   ")
			case 20:
				fmt.Fprintln(os.Stderr, strings.Repeat("é", 3000))
			default:
				fmt.Fprintf(os.Stderr, "\x1b[31mline %d\x1b[0m\n", i)
			}
		}
		fmt.Println("ready")
		os.Exit(3)
	case plugin:
		p, err := Start(context.Background(), helperConfig(ignoresTERM))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		ready(p)
		fmt.Println(p.Pid())
	default:
		fmt.Fprintln(os.Stderr, "unknown helper mode", mode)
		os.Exit(2)
	}
	for { // not select{}: the runtime would call that a deadlock
		time.Sleep(time.Hour)
	}
}

// helperConfig runs the test binary as the helper mode.
func helperConfig(mode string) Config {
	exe, err := os.Executable()
	if err != nil {
		panic(err)
	}
	// A race-enabled helper would sleep a second before exiting.
	env := append(os.Environ(), helperVar+"="+mode, "GORACE=atexit_sleep_ms=0")
	return Config{Path: exe, Env: env}
}

// ready reads the helper's "ready" line; it panics (in a helper) on any
// other.
func ready(p *Process) {
	line, err := NewLineReader(p.Stdout(), 0).ReadLine()
	if err != nil || string(line) != "ready" {
		panic(fmt.Sprintf("helper %d: %q, %v", p.Pid(), line, err))
	}
}

// startHelper starts a helper child, waits until it is ready, reads the
// rest of its stdout as a plugin would, and kills it at the end of the
// test.
func startHelper(t *testing.T, mode string, grace time.Duration) *Process {
	t.Helper()
	cfg := helperConfig(mode)
	cfg.Grace = grace
	p, err := Start(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Kill() })
	ready(p)
	go func() { _, _ = io.Copy(io.Discard, p.Stdout()) }()
	return p
}

// gone reports whether pid no longer runs: it does not exist, or it is a
// zombie its new parent has not reaped yet.
func gone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// pid (comm) state …: comm may hold spaces and parentheses.
	rest := string(b[strings.LastIndexByte(string(b), ')')+1:])
	state := strings.Fields(rest)[0]
	return state == "Z" || state == "X"
}

func eventually(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); ; time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(end) {
			return false
		}
	}
}
