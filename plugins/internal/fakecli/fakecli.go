// Package fakecli holds what the reference plugins' fake CLIs share
// (plugins/claude/testdata/fakeclaude, plugins/codex/testdata/fakecodex):
// the prompt that is their "model", a turn the client can interrupt, and
// how a CLI that ignores stdin EOF and SIGTERM waits for its SIGKILL. The fakes are the programs the
// plugins' tests run in place of the real CLIs; nothing else imports it.
package fakecli

import (
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Prompt is a fake's "model": the prompt's first word says what to do and
// the rest are its arguments ("count 3 10ms").
type Prompt struct {
	Word string
	Args []string
}

// ParsePrompt splits a prompt's text into its word and arguments.
func ParsePrompt(text string) Prompt {
	f := strings.Fields(text)
	if len(f) == 0 {
		return Prompt{}
	}
	return Prompt{Word: f[0], Args: f[1:]}
}

// Int is argument i as a whole number, or def when it is absent or
// malformed.
func (p Prompt) Int(i, def int) int {
	if i < len(p.Args) {
		if n, err := strconv.Atoi(p.Args[i]); err == nil {
			return n
		}
	}
	return def
}

// Duration is argument i as a Go duration ("10ms"), or def when it is
// absent or malformed.
func (p Prompt) Duration(i int, def time.Duration) time.Duration {
	if i < len(p.Args) {
		if d, err := time.ParseDuration(p.Args[i]); err == nil {
			return d
		}
	}
	return def
}

// Turn is a fake turn in progress, which the client may interrupt.
type Turn struct {
	interrupted chan struct{}
	once        sync.Once
}

// NewTurn starts a turn.
func NewTurn() *Turn { return &Turn{interrupted: make(chan struct{})} }

// Interrupt ends the turn's waits. It is idempotent.
func (t *Turn) Interrupt() { t.once.Do(func() { close(t.interrupted) }) }

// Interrupted is closed by Interrupt.
func (t *Turn) Interrupted() <-chan struct{} { return t.interrupted }

// Wait sleeps d (not at all when d <= 0) and reports whether the turn was
// not interrupted meanwhile.
func (t *Turn) Wait(d time.Duration) bool {
	if d <= 0 {
		select {
		case <-t.interrupted:
			return false
		default:
			return true
		}
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-t.interrupted:
		return false
	}
}

// IgnoreSIGTERM makes the program ignore SIGTERM, as a CLI that only
// SIGKILL stops (and its children, which inherit the disposition).
func IgnoreSIGTERM() { signal.Ignore(syscall.SIGTERM) }

// Forever blocks for good: the end of a CLI that ignores its stdin's EOF
// and SIGTERM, which only SIGKILL stops. It sleeps rather than select{},
// which the runtime would call a deadlock once no other goroutine runs.
func Forever() {
	for {
		time.Sleep(time.Hour)
	}
}
