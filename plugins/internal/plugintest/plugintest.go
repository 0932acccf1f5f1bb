// Package plugintest holds the test helpers the reference plugins' tests
// share: the path of a real CLI to test against, and the check that an
// error says everything a user needs.
package plugintest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

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
