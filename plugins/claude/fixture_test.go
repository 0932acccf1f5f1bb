package claude

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/plugin/sdk"
	"github.com/agenthost/agenthost/plugin/sdk/sdktest"
	"github.com/agenthost/agenthost/plugins/internal/plugintest"
)

// The tests drive the agent in the test process with sdktest.NewHarness,
// over gRPC through the host's own plugin client, against the fake CLI in
// testdata/fakeclaude, which is then a child of the test process. What
// needs a plugin process of its own (its SIGKILL, conformance) runs the
// plugin binary. Both binaries are built once per test run.

// markerVar is set in the test process, so every CLI and plugin the tests
// start inherits it: one still running after the tests is a leak.
const markerVar = "CLAUDE_PLUGIN_TEST_MARKER"

var marker = rand.Text()

func TestMain(m *testing.M) {
	os.Setenv(markerVar, marker)
	code := m.Run()
	// CLIs of the last plugins killed may take a moment to die.
	var left []int
	plugintest.Eventually(3*time.Second, func() bool {
		left = plugintest.EnvHolders(markerVar + "=" + marker)
		return len(left) == 0
	})
	if len(left) > 0 {
		fmt.Fprintf(os.Stderr, "claude tests: processes started by the tests are still running: %v\n", left)
		for _, pid := range left {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		code = 1
	}
	if bins.dir != "" {
		os.RemoveAll(bins.dir)
	}
	os.Exit(code)
}

var bins struct {
	once         sync.Once
	dir          string
	plugin, fake string
	err          error
}

// binaries builds the plugin and the fake CLI, once.
func binaries(t testing.TB) (pluginBin, fakeBin string) {
	t.Helper()
	bins.once.Do(func() {
		if bins.dir, bins.err = os.MkdirTemp("", "claude-plugin-test-"); bins.err != nil {
			return
		}
		if bins.plugin, bins.err = plugintest.BuildPlugin(bins.dir, "./cmd/agenthost-plugin-claude"); bins.err != nil {
			return
		}
		bins.fake, bins.err = plugintest.Build(bins.dir, "./testdata/fakeclaude")
	})
	if bins.err != nil {
		t.Fatal(bins.err)
	}
	return bins.plugin, bins.fake
}

// wait bounds a turn of the fake CLI.
const wait = 20 * time.Second

// fixture is the environment of one test: a home with a Claude config dir
// holding a (fake) login, a workspace, and a directory where the fake CLI
// records its invocations.
type fixture struct {
	t         *testing.T
	dir       string
	home      string
	configDir string
	workspace string
	record    string
	fake      string
	plugin    string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	pluginBin, fakeBin := binaries(t)
	dir := t.TempDir()
	f := &fixture{t: t, dir: dir, home: filepath.Join(dir, "home"), workspace: filepath.Join(dir, "work"),
		record: filepath.Join(dir, "record"), fake: fakeBin, plugin: pluginBin}
	f.configDir = filepath.Join(f.home, ".claude")
	for _, d := range []string{f.configDir, f.workspace, f.record} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(f.configDir, ".credentials.json"), []byte(`{"claudeAiOauth":{"accessToken":"fake"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// setenv makes the fixture the agent's environment for the rest of test t
// (the agent reads it when a session opens): its home, config dir and fake
// CLI, then extra (KEY=VALUE), which wins; none of the provider
// credentials the test process inherited.
func (f *fixture) setenv(t *testing.T, extra ...string) {
	t.Helper()
	plugintest.Unsetenv(t, credentialVars...)
	plugintest.Setenv(t, "HOME="+f.home, "CLAUDE_CONFIG_DIR="+f.configDir, EnvCLIPath+"="+f.fake, "FAKECLAUDE_RECORD="+f.record)
	plugintest.Setenv(t, extra...)
}

// start sets the fixture's environment plus extra for test t and serves the
// agent in-process.
func (f *fixture) start(t *testing.T, extra ...string) *sdktest.Harness {
	t.Helper()
	f.setenv(t, extra...)
	return sdktest.NewHarness(t, New)
}

// open opens a new session in the workspace; it fails the test on error.
func (f *fixture) open(t *testing.T, h *sdktest.Harness, opts map[string]string) string {
	t.Helper()
	info, err := f.tryOpen(t, h, opts)
	if err != nil {
		t.Fatalf("NewSession: %v", err)
	}
	return info.Handle
}

func (f *fixture) tryOpen(t *testing.T, h *sdktest.Harness, opts map[string]string) (sdk.SessionInfo, error) {
	return h.NewSession(t.Context(), sdk.NewSessionRequest{Workspace: f.workspace, Options: opts})
}

func (f *fixture) tryResume(t *testing.T, h *sdktest.Harness, handle string, opts map[string]string) (sdk.SessionInfo, error) {
	return h.ResumeSession(t.Context(), sdk.ResumeSessionRequest{Workspace: f.workspace, Options: opts, Handle: handle})
}

// texts returns the message chunks of ups.
func texts(ups []sdktest.Update) []string {
	var out []string
	for _, u := range ups {
		if c, ok := u.SessionUpdate().(*journal.Chunk); ok && c.Kind == journal.KindAgentMessageChunk {
			out = append(out, c.Content.Text())
		}
	}
	return out
}

// invocation is what the fake CLI recorded about one start.
type invocation struct {
	Args []string `json:"args"`
	Env  []string `json:"env"`
	Cwd  string   `json:"cwd"`
	Pid  int      `json:"pid"`
	Ppid int      `json:"ppid"`
}

// sessions returns the fake's recorded invocations that ran a session (not
// --version), oldest first.
func (f *fixture) sessions() []invocation {
	f.t.Helper()
	paths, _ := filepath.Glob(filepath.Join(f.record, "*.json"))
	var out []invocation
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.t.Fatal(err)
		}
		var inv invocation
		if err := json.Unmarshal(b, &inv); err != nil {
			f.t.Fatal(err)
		}
		if !slices.Contains(inv.Args, "--version") {
			out = append(out, inv)
		}
	}
	slices.SortFunc(out, func(a, b invocation) int {
		sa, _ := os.Stat(filepath.Join(f.record, strconv.Itoa(a.Pid)+".json"))
		sb, _ := os.Stat(filepath.Join(f.record, strconv.Itoa(b.Pid)+".json"))
		return sa.ModTime().Compare(sb.ModTime())
	})
	return out
}

// stdinLines returns what the plugin wrote to the CLI with pid.
func (f *fixture) stdinLines(pid int) []map[string]any {
	f.t.Helper()
	b, err := os.ReadFile(filepath.Join(f.record, strconv.Itoa(pid)+".stdin.jsonl"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		f.t.Fatal(err)
	}
	var out []map[string]any
	for line := range bytes.Lines(b) {
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			f.t.Fatalf("the plugin wrote a line that is not JSON: %q", line)
		}
		out = append(out, m)
	}
	return out
}
