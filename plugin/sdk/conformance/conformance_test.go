package conformance

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agenthost/agenthost/internal/wire"
)

// markerVar is set in this test process, so every process the kit starts
// from it inherits it: a process carrying it after a test is a leak.
const markerVar = "CONFORMANCE_SELFTEST_MARKER"

var marker = rand.Text()

func TestMain(m *testing.M) {
	os.Setenv(markerVar, marker)
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		if left := envHolders(markerVar + "=" + marker); len(left) > 0 {
			fmt.Fprintf(os.Stderr, "conformance: processes started by the tests still running: %v\n", left)
			for _, pid := range left {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			code = 1
		}
		for _, b := range []*build{&fixtures} {
			if b.dir != "" {
				os.RemoveAll(b.dir)
			}
		}
		os.Exit(code)
	}))
}

// fixtureNames are the plugins under testdata.
var fixtureNames = []string{"wrongcookie", "garbage", "neverready", "wrongidentity", "ignoresshutdown", "crashmidstream", "escapes", "conforming", "capable"}

type build struct {
	once sync.Once
	dir  string
	err  error
}

var fixtures build

// goBuild builds the main packages pkgs into b.dir, once.
func (b *build) goBuild(pkgs ...string) (string, error) {
	b.once.Do(func() {
		gobin, err := exec.LookPath("go")
		if err != nil {
			b.err = fmt.Errorf("no go command to build the test plugins: %w", err)
			return
		}
		if b.dir, b.err = os.MkdirTemp("", "ahconf-bin-"); b.err != nil {
			return
		}
		cmd := exec.Command(gobin, append([]string{"build", "-o", b.dir + "/"}, pkgs...)...)
		// Without the marker: the go command is not a plugin.
		cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, markerVar+"=") })
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %v: %v\n%s", pkgs, err, out)
		}
	})
	return b.dir, b.err
}

// fixture returns the path of the built testdata plugin name.
func fixture(t *testing.T, name string) string {
	t.Helper()
	pkgs := make([]string, len(fixtureNames))
	for i, n := range fixtureNames {
		pkgs[i] = "./testdata/" + n
	}
	dir, err := fixtures.goBuild(pkgs...)
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, name)
}

// noLeftovers fails t if a process the tests started is still running or
// the kit still tracks a child.
func noLeftovers(t *testing.T) {
	t.Helper()
	if left := envHolders(markerVar + "=" + marker); len(left) > 0 {
		t.Errorf("processes started by the kit are still running: %v", left)
		for _, pid := range left {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	children.Range(func(pid, _ any) bool {
		t.Errorf("the kit still tracks plugin process %d", pid)
		return true
	})
}

func checkNames() []string {
	var names []string
	for _, c := range checks {
		names = append(names, c.name)
	}
	return names
}

// TestConforming runs Check, with prompts of another language, against a
// correct plugin whose turns start a child process, at each protocol
// version: offered every version (the plugin negotiates 2 and the kit
// drives it with Open), offered only version 1 (as a host built before
// version 2), and with the plugin offering only version 1 (as one built
// on an SDK before version 2, which the kit then checks at version 1).
func TestConforming(t *testing.T) {
	bin := fixture(t, "conforming")
	for _, tc := range []struct {
		name string
		opts []Option
		skip []string // the checks a version-1 run skips
	}{
		{name: "v2"},
		{name: "kit-v1", opts: []Option{WithProtocolVersion(wire.ProtocolVersion1)}, skip: []string{"open-refuses-another-process", "self-fence"}},
		{name: "plugin-v1", opts: []Option{WithEnv(wire.EnvProtocolVersions + "=1")}, skip: []string{"open-refuses-another-process", "self-fence"}},
	} {
		t.Run(tc.name, func(t *testing.T) { checkConforming(t, bin, tc.opts, tc.skip) })
	}
}

func checkConforming(t *testing.T, bin string, opts []Option, skip []string) {
	var progressed []string
	results := Check(t.Context(), bin, append(opts, WithPrompts(Prompts{Stream: "stream 3", Hold: "hold", Replay: "stream 20"}),
		WithProgress(func(r Result) { progressed = append(progressed, r.Name) }))...)
	var names []string
	for _, r := range results {
		names = append(names, r.Name)
		if r.Err != nil {
			t.Errorf("%s: %v", r.Name, r.Err)
		} else {
			t.Logf("%s: ok (%s)", r.Name, r.Duration.Round(time.Millisecond))
		}
	}
	if !slices.Equal(names, checkNames()) {
		t.Errorf("Check reported %v, expected one result per check in order: %v", names, checkNames())
	}
	if !slices.Equal(progressed, checkNames()) {
		t.Errorf("WithProgress saw %v, expected every check in order: %v", progressed, checkNames())
	}
	// A plugin built before capabilities existed declares none: every
	// capability check is skipped, none fails.
	for _, r := range results {
		if (capabilityCheck(r.Name) || slices.Contains(skip, r.Name)) != (r.Skipped != "") {
			t.Errorf("%s: skipped %q", r.Name, r.Skipped)
		}
	}
	noLeftovers(t)
}

func capabilityCheck(name string) bool {
	return slices.Contains([]string{"set-mode", "set-config-option", "unknown-option-refused", "prompt-capabilities", "export-state"}, name)
}

// TestCapable runs every check against a plugin that declares every
// optional capability and keeps it, and reports session-level updates:
// every check passes, none is skipped. With CAPABLE_BROKEN=1 the same
// plugin keeps none of what it declares, and each capability check fails
// saying what did not work.
func TestCapable(t *testing.T) {
	bin := fixture(t, "capable")
	prompts := WithPrompts(Prompts{Stream: "stream 3", Hold: "hold", Replay: "stream 20"})
	t.Run("kept", func(t *testing.T) {
		for _, r := range Check(t.Context(), bin, prompts, WithSessionOptions(map[string]string{"model": "small"})) {
			if r.Err != nil || r.Skipped != "" {
				t.Errorf("%s: %v (skipped %q)", r.Name, r.Err, r.Skipped)
			}
		}
		noLeftovers(t)
	})
	t.Run("broken", func(t *testing.T) {
		want := map[string]string{
			"set-mode":               `SetMode("conformance-no-such-mode"), a mode NewSession did not offer, succeeded`,
			"set-config-option":      `answered option "model" with current value "small", expected "large"`,
			"unknown-option-refused": `NewSession with option "conformance_no_such_option", which the plugin does not declare, succeeded`,
			"prompt-capabilities":    `the turn of a prompt of "stream 3" and an image block (declared) stopped with stop reason "failed"`,
			"export-state":           `ExportState after a turn answered an empty state for handle "capable-handle"`,
		}
		for _, r := range Check(t.Context(), bin, prompts, WithEnv("CAPABLE_BROKEN=1")) {
			switch sub, ok := want[r.Name]; {
			case !ok && r.Err != nil:
				t.Errorf("%s: %v, expected it to pass", r.Name, r.Err)
			case ok && (r.Err == nil || !strings.Contains(r.Err.Error(), sub)):
				t.Errorf("%s: %v, expected it to fail with %q", r.Name, r.Err, sub)
			}
		}
		noLeftovers(t)
	})
}

// TestRunCheck runs one check alone, passes arguments to the plugin, and
// refuses an unknown check by listing the known ones.
func TestRunCheck(t *testing.T) {
	if !slices.Equal(Names(), checkNames()) {
		t.Fatalf("Names() = %v, want %v", Names(), checkNames())
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	bin := fixture(t, "conforming")
	if r := RunCheck(t.Context(), bin, "identify"); r.Err != nil || r.Name != "identify" {
		t.Errorf("RunCheck(identify) = %+v", r)
	}
	// WithArgs: sh runs the plugin only when given "-c 'exec PLUGIN'".
	if r := RunCheck(t.Context(), sh, "handshake", WithArgs("-c", "exec "+bin)); r.Err != nil {
		t.Errorf("RunCheck(handshake) through sh -c: %v", r.Err)
	}
	r := RunCheck(t.Context(), bin, "no-such-check")
	if r.Err == nil || !strings.Contains(r.Err.Error(), "graceful-stop") {
		t.Errorf("RunCheck(no-such-check) = %v, expected an error listing the checks", r.Err)
	}
	if !IsHandshake("handshake") || IsHandshake("identify") {
		t.Error("IsHandshake")
	}
	noLeftovers(t)
}

// TestBrokenPlugins runs Check against plugins that break the protocol in
// one way each, and expects the check that covers it to fail with an
// informative error, and the kit to leave nothing behind.
func TestBrokenPlugins(t *testing.T) {
	for _, tc := range []struct {
		fixture string
		opts    []Option
		// fail maps a check expected to fail to substrings of its error.
		fail map[string][]string
		// pass are checks expected to pass.
		pass []string
		// notRun: every other check is expected not to run.
		notRun bool
	}{{
		fixture: "wrongcookie",
		fail:    map[string][]string{"handshake": {"handshake", "This binary is a plugin"}},
		notRun:  true,
	}, {
		fixture: "garbage",
		fail:    map[string][]string{"handshake": {"Unrecognized remote plugin message: hello from a plugin that talks on stdout"}},
		notRun:  true,
	}, {
		fixture: "neverready",
		opts:    []Option{WithStartTimeout(time.Second)},
		fail:    map[string][]string{"handshake": {"timeout while waiting for plugin to start", "within 1s", "neverready: sleeping instead of serving"}},
		notRun:  true,
	}, {
		fixture: "wrongidentity",
		fail: map[string][]string{"identify": {
			"pid = ", ", expected ", "the pid of the process the kit started",
			`spawn_token = "not-the-spawn-token", expected`,
		}},
		pass: []string{"handshake"},
	}, {
		fixture: "ignoresshutdown",
		opts:    []Option{WithTimeout(2 * time.Second)},
		fail: map[string][]string{"graceful-stop": {
			"Close(fence 1) did not return within",
			"after Close and SIGTERM, the plugin process", "was still running",
		}},
		pass: []string{"handshake", "identify", "attach-binds-session", "new-session", "kill-on-ignored-shutdown"},
	}, {
		fixture: "crashmidstream",
		fail: map[string][]string{
			"prompt-streams-updates":       {"the Updates stream ended after 2 updates", "before the turn_stopped", "exit status 3"},
			"cancel-yields-cancelled":      {"exit status 3"},
			"outbox-replay-after-reattach": {"exit status 3"},
		},
		pass: []string{"handshake", "identify", "attach-binds-session", "new-session", "graceful-stop", "kill-on-ignored-shutdown"},
	}, {
		fixture: "escapes",
		fail: map[string][]string{
			"kill-on-ignored-shutdown": {"carrying the plugin's spawn token are still running: they left the plugin's process group"},
			"prompt-streams-updates":   {"survived outside its process group"},
		},
		pass: []string{"handshake", "identify", "attach-binds-session", "new-session", "graceful-stop"},
	}} {
		t.Run(tc.fixture, func(t *testing.T) {
			bin := fixture(t, tc.fixture)
			start := time.Now()
			results := Check(t.Context(), bin, tc.opts...)
			t.Logf("Check took %s", time.Since(start).Round(time.Millisecond))
			byName := map[string]Result{}
			for _, r := range results {
				byName[r.Name] = r
				t.Logf("%s (%s): %v", r.Name, r.Duration.Round(time.Millisecond), r.Err)
			}
			for name, subs := range tc.fail {
				r, ok := byName[name]
				switch {
				case !ok:
					t.Errorf("no result for check %s", name)
				case r.Err == nil:
					t.Errorf("check %s passed, expected it to fail", name)
				case errors.Is(r.Err, ErrNotRun):
					t.Errorf("check %s did not run, expected it to fail: %v", name, r.Err)
				default:
					for _, s := range subs {
						if !strings.Contains(r.Err.Error(), s) {
							t.Errorf("check %s failed with %q, expected the error to mention %q", name, r.Err, s)
						}
					}
				}
			}
			for _, name := range tc.pass {
				if r := byName[name]; r.Err != nil {
					t.Errorf("check %s failed, expected it to pass: %v", name, r.Err)
				}
			}
			if tc.notRun {
				for _, r := range results {
					if _, failing := tc.fail[r.Name]; !failing && !errors.Is(r.Err, ErrNotRun) {
						t.Errorf("check %s: got %v, expected it not to run", r.Name, r.Err)
					}
				}
			}
			noLeftovers(t)
		})
	}
}

// TestCheckHonoursContext: a cancelled context runs no check.
func TestCheckHonoursContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	results := Check(ctx, "/nonexistent/plugin")
	if len(results) != len(checks) {
		t.Fatalf("got %d results, expected %d", len(results), len(checks))
	}
	for _, r := range results {
		if !errors.Is(r.Err, ErrNotRun) {
			t.Errorf("%s: got %v, expected ErrNotRun", r.Name, r.Err)
		}
	}
}

// TestMissingBinary: a binary that is not there fails the handshake with
// its path in the error.
func TestMissingBinary(t *testing.T) {
	results := Check(t.Context(), "/nonexistent/plugin")
	if err := results[0].Err; err == nil || !strings.Contains(err.Error(), "/nonexistent/plugin") {
		t.Errorf("handshake: got %v, expected an error naming the binary", err)
	}
	noLeftovers(t)
}

// TestStopWithDeadline stops a process group whose members ignore SIGTERM
// (it must take the deadline, then kill them all) and one that honours it
// (it must not wait for the deadline).
func TestStopWithDeadline(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	for _, tc := range []struct {
		name     string
		script   string
		deadline time.Duration
		minTook  time.Duration
		maxTook  time.Duration
	}{
		{"ignores SIGTERM", `trap "" TERM; sleep 60 & sleep 60 & echo ready; wait; wait`, 300 * time.Millisecond, 300 * time.Millisecond, 2 * time.Second},
		// A long deadline, so that "did not wait for it" holds with room
		// to spare on a busy machine.
		{"honours SIGTERM", `sleep 60 & echo ready; exec sleep 60`, 5 * time.Second, 0, 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := spawn(sh, []string{"-c", tc.script}, os.Environ(), filepath.Join(t.TempDir(), "log"))
			if err != nil {
				t.Fatal(err)
			}
			defer children.Delete(c.pid)
			defer c.stdout.Close()
			buf := make([]byte, 6)
			if _, err := c.stdout.Read(buf); err != nil {
				t.Fatal(err)
			}
			if n := len(groupMembers(c.pid)); n < 2 {
				t.Fatalf("group %d has %d live members, expected the shell and its children", c.pid, n)
			}
			start := time.Now()
			if err := stopWithDeadline(c.pid, tc.deadline); err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			if took < tc.minTook || took > tc.maxTook {
				t.Errorf("stop took %s, expected between %s and %s", took, tc.minTook, tc.maxTook)
			}
			if !c.gone() {
				t.Error("the leader was not reaped")
			}
			if left := groupMembers(c.pid); len(left) > 0 {
				t.Errorf("group %d still has live members %v", c.pid, left)
			}
		})
	}
}

// TestFailuresNameTheFlagToPass gives a plugin prompts it does not
// understand for each prompt a check sends: each failure says which flag
// of agenthost conformance sets a prompt that works, and which field of
// sdktest.Prompts does when run through sdktest.Run.
func TestFailuresNameTheFlagToPass(t *testing.T) {
	bin := fixture(t, "conforming")
	prompts := WithPrompts(Prompts{Stream: "say hello", Hold: "stream 3", Replay: "stream 1"})
	for check, flag := range map[string]string{
		"prompt-streams-updates":       "with --prompt-stream (sdktest.Prompts.Stream)",
		"cancel-yields-cancelled":      "with --prompt-hold (sdktest.Prompts.Hold;",
		"outbox-replay-after-reattach": "with --prompt-replay (sdktest.Prompts.Replay)",
	} {
		r := RunCheck(t.Context(), bin, check, prompts)
		switch {
		case r.Err == nil:
			t.Errorf("%s passed with a prompt the plugin does not understand", check)
		case !strings.Contains(r.Err.Error(), flag):
			t.Errorf("%s: %v\nexpected the error to name the flag and the field to set (%q)", check, r.Err, flag)
		default:
			t.Logf("%s: %v", check, r.Err)
		}
	}
	noLeftovers(t)
}

// A plugin that answers the stream prompt once but not a second time in
// the same session fails prompt-streams-updates with a hint naming the
// flag and the field, as the first turn's failures do.
func TestASecondTurnFailureNamesTheFlagToPass(t *testing.T) {
	bin := fixture(t, "conforming")
	once := filepath.Join(t.TempDir(), "answered")
	r := RunCheck(t.Context(), bin, "prompt-streams-updates",
		WithPrompts(Prompts{Stream: "streamonce 3 " + once, Hold: "hold", Replay: "stream 20"}), WithTimeout(3*time.Second))
	switch {
	case r.Err == nil:
		t.Errorf("passed with a prompt the plugin answers once only")
	case !strings.Contains(r.Err.Error(), "second turn") || !strings.Contains(r.Err.Error(), "with --prompt-stream (sdktest.Prompts.Stream)"):
		t.Errorf("%v\nexpected the second turn's failure to name the flag and the field to set", r.Err)
	default:
		t.Logf("%v", r.Err)
	}
	noLeftovers(t)
}
