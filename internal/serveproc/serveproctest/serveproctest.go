// Package serveproctest starts `agenthost serve` for a test: the one
// place that says how a test's host is started and that it is stopped, and
// its sessions' processes killed, when the test ends.
package serveproctest

import (
	"os"
	"testing"
	"time"

	"github.com/agenthost/agenthost/internal/serveproc"
)

// stopTimeout is how long serve gets to stop on SIGTERM at the end of the
// test before the test reports it.
const stopTimeout = 30 * time.Second

// Start starts bin's serve on stateDir, with this process's environment
// and its log at warn level, and registers its stop (and the killing of
// whatever plugin or CLI of stateDir is left) with t.Cleanup.
func Start(t testing.TB, bin, stateDir string) *serveproc.Server {
	t.Helper()
	s, err := serveproc.Start(serveproc.Config{Bin: bin, StateDir: stateDir, Env: append(os.Environ(), "AGENTHOST_LOG_LEVEL=warn")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(stopTimeout); err != nil {
			t.Error(err)
		}
		serveproc.KillSessionProcesses(stateDir)
	})
	return s
}
