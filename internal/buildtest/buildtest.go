// Package buildtest is the TestMain of a test package that starts
// programs of this module as real processes: it builds each of them once
// per test run, runs the tests, and ends the run with a goroutine-leak
// check.
//
// Building in TestMain rather than in a test keeps the cost out of every
// test's timing and builds each program once however many tests start it;
// the binaries live in a temporary directory removed when the run ends.
// The leak check runs only after passing tests: a failed test may leave
// goroutines behind, and its own failure is the one to read.
package buildtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// Main builds every package of bins (the path the binary's location is
// written to → a package path relative to the test's directory), runs m,
// checks for leaked goroutines when the tests passed, removes the built
// binaries and returns the exit code for os.Exit. A binary is named after
// its package's last element, which tests may look for in process names,
// so two packages of bins must not share one. A build that fails prints go
// build's output and returns 1 without running a test.
func Main(m *testing.M, bins map[*string]string) int {
	dir, err := os.MkdirTemp("", "agenthost-test-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	seen := map[string]string{}
	for dst, pkg := range bins {
		name := filepath.Base(pkg)
		if other, ok := seen[name]; ok {
			fmt.Fprintf(os.Stderr, "buildtest: %s and %s would both build %s\n", other, pkg, name)
			return 1
		}
		seen[name] = pkg
		*dst = filepath.Join(dir, name)
		if out, err := exec.Command("go", "build", "-o", *dst, pkg).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n%s", pkg, err, out)
			return 1
		}
	}
	return LeakCheckedRun(m)
}

// LeakCheckedRun runs m and, when the tests passed, fails the run if a
// goroutine outlived them.
func LeakCheckedRun(m *testing.M) int {
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			return 1
		}
	}
	return code
}
