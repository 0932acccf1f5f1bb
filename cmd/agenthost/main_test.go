package main

import (
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// buildBinary builds the command into a temporary directory, so the test
// covers what a user runs, including the exit code.
func buildBinary(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go") // go test puts its own go first on PATH
	if err != nil {
		t.Fatalf("the go command is needed to build agenthost: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "agenthost")
	if runtime.GOOS == "windows" {
		bin += ".exe"
	}
	if out, err := exec.Command(goBin, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func TestBinary(t *testing.T) {
	bin := buildBinary(t)

	t.Run("version", func(t *testing.T) {
		out, err := exec.Command(bin, "version").Output()
		if err != nil {
			t.Fatalf("agenthost version: %v", err)
		}
		want := regexp.MustCompile(`^agenthost \S+ \(` + regexp.QuoteMeta(runtime.Version()) + `\)\n$`)
		if !want.Match(out) {
			t.Errorf("agenthost version printed %q, want a match for %s", out, want)
		}
	})

	t.Run("unknown command", func(t *testing.T) {
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(bin, "frobnicate")
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Fatalf("agenthost frobnicate: err = %v, want exit status 2", err)
		}
		if stdout.Len() != 0 {
			t.Errorf("stdout = %q, want nothing", stdout.String())
		}
		if !strings.Contains(stderr.String(), "agenthost help") {
			t.Errorf("stderr = %q, want it to point at 'agenthost help'", stderr.String())
		}
	})
}

func TestRun(t *testing.T) {
	for _, tt := range []struct {
		args   []string
		code   int
		stdout string // substring
		stderr string // substring
	}{
		{args: nil, code: 0, stdout: "Commands:"},
		{args: []string{"help"}, code: 0, stdout: "version"},
		{args: []string{"version"}, code: 0, stdout: "agenthost "},
		{args: []string{"version", "extra"}, code: 2, stderr: "no arguments"},
		{args: []string{"nope"}, code: 2, stderr: `unknown command "nope"`},
	} {
		var stdout, stderr bytes.Buffer
		code := run(tt.args, &stdout, &stderr)
		if code != tt.code || !strings.Contains(stdout.String(), tt.stdout) || !strings.Contains(stderr.String(), tt.stderr) {
			t.Errorf("run(%q) = %d, stdout %q, stderr %q; want %d, stdout containing %q, stderr containing %q",
				tt.args, code, stdout.String(), stderr.String(), tt.code, tt.stdout, tt.stderr)
		}
		if tt.code == 0 && stderr.Len() != 0 {
			t.Errorf("run(%q) wrote to stderr: %q", tt.args, stderr.String())
		}
	}
}
