package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/internal/buildtest"
	"github.com/agenthost/agenthost/internal/serveproc"
	"github.com/agenthost/agenthost/internal/serveproc/serveproctest"
)

// agenthostBin is the agenthost binary, built once by TestMain.
var agenthostBin string

func TestMain(m *testing.M) {
	os.Exit(buildtest.Main(m, map[*string]string{&agenthostBin: "github.com/agenthost/agenthost/cmd/agenthost"}))
}

// copied are the files a third party copies out of this directory: the
// plugin and its conformance test.
var copied = []string{"main.go", "main_test.go"}

// TestMinimalPluginBuiltAsASeparateModule builds this plugin the way the
// README tells a third party to: copied out of the repository into a module
// of its own (example.com/minimal, its own go.mod, no require of agenthost)
// beside a go.work that uses it and this checkout. It installs the binary
// in a host's <state-dir>/plugins/, runs a turn through a real agenthost
// serve, and passes agenthost conformance with the default prompts.
//
// The build is offline: GOPROXY=off after one go mod download of this
// checkout, so every module comes from the module cache and the checkout, and GOFLAGS=-mod=readonly (the only -mod a
// workspace takes besides vendor), so nothing is written to go.mod, with
// -buildvcs=false (the copy is in no repository of its own). It shares the
// caller's GOCACHE, which keeps it a few seconds once warm.
func TestMinimalPluginBuiltAsASeparateModule(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	root, err := serveproc.ModuleRoot(ctx)
	if err != nil {
		t.Fatal(err)
	}

	work := t.TempDir()
	mod := filepath.Join(work, "minimal")
	if err := os.Mkdir(mod, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range copied {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(mod, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=readonly -buildvcs=false", "GOTOOLCHAIN=local", "GOWORK=")
	goCmd := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir, cmd.Env = dir, env
		start := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("in %s: go %s: %v\n%s", dir, strings.Join(args, " "), err, out)
		}
		t.Logf("go %s (%s)", strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
	}
	// The workspace loads the go.mod of every module in agenthost's graph,
	// including those only its tests need, which a fresh module cache may
	// not hold yet: fetch them first with the caller's own proxy settings.
	download := exec.CommandContext(ctx, "go", "mod", "download")
	download.Dir = root
	if out, err := download.CombinedOutput(); err != nil {
		t.Fatalf("go mod download in %s: %v\n%s", root, err, out)
	}
	// The README's commands, as a plugin author runs them.
	goCmd(mod, "mod", "init", "example.com/minimal")
	goCmd(work, "work", "init", "./minimal", root)

	dir := stateDir(t)
	plugin := filepath.Join(dir, "plugins", "minimal")
	goCmd(mod, "build", "-o", plugin, ".")
	if b, err := os.ReadFile(filepath.Join(mod, "go.mod")); err != nil || bytes.Contains(b, []byte("agenthost")) {
		t.Fatalf("the separate module's go.mod should name no agenthost module (the workspace provides it): %v\n%s", err, b)
	}

	s := serveproctest.Start(t, agenthostBin, dir)
	if !strings.Contains(s.Ready, `"minimal"`) {
		t.Errorf("serve's ready line does not list the plugin installed in %s: %s", filepath.Dir(plugin), s.Ready)
	}

	run := agenthost(ctx, "--state-dir", dir, "run", "--agent", "minimal", "hello from outside")
	out, err := run.Output()
	if err != nil {
		t.Fatalf("agenthost run --agent minimal: %v\nstdout: %s\nstderr: %s", err, out, stderr(err))
	}
	if got := strings.Join(strings.Fields(string(out)), " "); got != "hello from outside" {
		t.Errorf("the turn of the installed plugin printed %q, expected its echo %q", out, "hello from outside")
	}

	// Conformance with the default prompts: they suit this plugin.
	conf := agenthost(ctx, "conformance", plugin)
	out, err = conf.Output()
	if err != nil || !strings.Contains(string(out), " passed, 0 failed, 0 not run") {
		t.Fatalf("agenthost conformance %s (default prompts): %v\n%s%s", plugin, err, out, stderr(err))
	}
	t.Logf("%s", out)
}

func agenthost(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, agenthostBin, args...)
	cmd.Env = append(os.Environ(), "AGENTHOST_LOG_LEVEL=warn")
	return cmd
}

func stderr(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

// stateDir is a fresh state directory under /tmp, short enough for the
// host's unix socket path.
func stateDir(t *testing.T) string {
	dir, err := os.MkdirTemp("/tmp", "ahmin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
