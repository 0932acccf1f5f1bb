package logtest

import (
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// LevelEnv names the environment variable that sets the level of loggers
// returned by New.
const LevelEnv = "AGENTHOST_TEST_LOG_LEVEL"

// New returns an hclog.Logger that writes each log entry to t with one
// t.Log call. Entries logged after t has finished are dropped: plugin
// processes and background goroutines routinely outlive the test that
// started them, and t.Log panics once a test has completed.
func New(t testing.TB) hclog.Logger {
	t.Helper()
	level := hclog.Debug
	if s := os.Getenv(LevelEnv); s != "" {
		if level = hclog.LevelFromString(s); level == hclog.NoLevel {
			t.Logf("logtest: ignoring unknown %s=%q, using debug", LevelEnv, s)
			level = hclog.Debug
		}
	}
	w := &writer{t: t}
	t.Cleanup(w.stop)
	return hclog.New(&hclog.LoggerOptions{
		Level:  level,
		Output: w,
		// t.Log does not prefix a time, but the time is what shows how
		// long a step took when a slow test is read afterwards.
		TimeFormat: "15:04:05.000",
		Color:      hclog.ColorOff,
	})
}

// writer forwards hclog entries to t.Log until stop is called. hclog calls
// Write once per entry, so one Write is one t.Log call; a multi-line value
// stays together in one call.
type writer struct {
	t testing.TB

	mu   sync.Mutex
	done bool // set by stop; guarded by mu
}

func (w *writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

// stop makes later writes no-ops. Holding mu while setting done ensures no
// t.Log call is still running once the test's cleanup has returned.
func (w *writer) stop() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}
