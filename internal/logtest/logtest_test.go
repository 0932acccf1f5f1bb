package logtest

import (
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// fakeTB records Log calls and, like testing.T, panics when Log is called
// after the test has finished.
type fakeTB struct {
	testing.TB // only the methods below are called

	mu       sync.Mutex
	lines    []string
	cleanups []func()
	finished bool
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Log(args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.finished {
		panic("Log called after the test finished")
	}
	if len(args) != 1 {
		panic("logtest must pass exactly one argument to Log")
	}
	f.lines = append(f.lines, args[0].(string))
}

func (f *fakeTB) Logf(format string, args ...any) { f.Log(format) }

func (f *fakeTB) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }

// finish runs the cleanups in reverse order and marks the test finished,
// as testing does.
func (f *fakeTB) finish() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
	f.mu.Lock()
	f.finished = true
	f.mu.Unlock()
}

func TestNewOneLogCallPerEntry(t *testing.T) {
	t.Setenv(LevelEnv, "")
	tb := &fakeTB{}
	log := New(tb)
	log.Debug("first", "key", "value")
	log.Trace("not shown at the default level")
	log.Named("sub").Info("second", "multi", "a\nb")
	tb.finish()

	if len(tb.lines) != 2 {
		t.Fatalf("got %d Log calls, want 2: %q", len(tb.lines), tb.lines)
	}
	if l := tb.lines[0]; !strings.Contains(l, "[DEBUG] first: key=value") || strings.HasSuffix(l, "\n") {
		t.Errorf("first line = %q", l)
	}
	if l := tb.lines[1]; !strings.Contains(l, "[INFO]  sub: second") || !strings.Contains(l, "| b") {
		t.Errorf("second line = %q", l)
	}
}

func TestNewLevelFromEnv(t *testing.T) {
	t.Setenv(LevelEnv, "warn")
	tb := &fakeTB{}
	log := New(tb)
	if got := log.GetLevel(); got != hclog.Warn {
		t.Errorf("level = %v, want warn", got)
	}
	tb.finish()

	t.Setenv(LevelEnv, "loud")
	tb = &fakeTB{}
	if got := New(tb).GetLevel(); got != hclog.Debug {
		t.Errorf("level for an unknown name = %v, want debug", got)
	}
	tb.finish()
}

func TestLogAfterTestFinished(t *testing.T) {
	t.Setenv(LevelEnv, "")
	tb := &fakeTB{}
	log := New(tb)

	// A goroutine that outlives the test keeps logging while the test
	// finishes; none of its lines may reach Log afterwards.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				log.Info("still running")
			}
		}
	}()
	tb.finish()
	log.Info("late") // would panic in fakeTB.Log if it got through
	close(stop)
	wg.Wait()
}
