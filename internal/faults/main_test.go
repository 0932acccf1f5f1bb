package faults

import (
	"fmt"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agenthost/agenthost/internal/buildtest"
)

// bins are the programs the faults start, built once per run.
var bins struct {
	fixture, scripted, claude, fakeClaude string
}

func TestMain(m *testing.M) {
	if role := os.Getenv(roleEnv); role != "" {
		os.Exit(runRole(role))
	}
	// Orphaned descendants of the plugins this process starts are
	// reparented here rather than to init, so the leak checks see them.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "become a child subreaper:", err)
		os.Exit(1)
	}
	os.Exit(buildtest.Main(m, map[*string]string{
		&bins.fixture:    "../../host/testdata/fixture",
		&bins.scripted:   "../../examples/scripted/cmd/agenthost-plugin-scripted",
		&bins.claude:     "../../plugins/claude/cmd/agenthost-plugin-claude",
		&bins.fakeClaude: "../../plugins/claude/testdata/fakeclaude",
	}))
}

// injected and held print what a fault did and what survived it; `make
// test-faults` runs with -v so both are shown.
func injected(t *testing.T, format string, args ...any) {
	t.Helper()
	t.Logf("injected: "+format, args...)
}

func held(t *testing.T, format string, args ...any) {
	t.Helper()
	t.Logf("held: "+format, args...)
}
