package acptsclient

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/internal/buildtest"
	"github.com/agenthost/agenthost/internal/serveproc"
)

// agenthostBin is agenthost, built once for the package's tests.
var agenthostBin string

// TestMain builds agenthost where the tests can run: with node and the
// SDK; without, they skip.
func TestMain(m *testing.M) {
	_, noNode := exec.LookPath("node")
	if _, noSDK := findSDK(); noNode != nil || noSDK != nil {
		os.Exit(m.Run())
	}
	os.Exit(buildtest.Main(m, map[*string]string{&agenthostBin: "../../cmd/agenthost"}))
}

// findSDK returns where the ACP TypeScript SDK is installed:
// $AGENTHOST_ACP_SDK (make test sets it), else the cache make acp-sdk
// installs into.
func findSDK() (string, error) {
	dir := os.Getenv("AGENTHOST_ACP_SDK")
	if dir == "" {
		dir = filepath.Join("..", "..", ".cache", "acp-sdk")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@agentclientprotocol", "sdk", "package.json")); err != nil {
		return "", fmt.Errorf("the ACP TypeScript SDK is not installed in %s: make acp-sdk installs it (it needs npm)", dir)
	}
	return filepath.Abs(dir)
}

// need returns node and the SDK's directory, or skips the test saying
// what is missing.
func need(t *testing.T) (node, sdk string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed")
	}
	sdk, err = findSDK()
	if err != nil {
		t.Skip(err)
	}
	return node, sdk
}

// TestACPTypeScriptSDKClient runs client.mjs, a client on the official ACP
// TypeScript SDK, against agenthost acp with the scripted agent: each
// step it prints is one the SDK's client checked, and the workspace shows
// the outcome. A second run, against a new host on the same state
// directory, resumes the session and finds its settings and grants kept.
func TestACPTypeScriptSDKClient(t *testing.T) {
	t.Parallel()
	node, sdk := need(t)
	bin, dir := agenthostBin, t.TempDir()
	state, ws, agentLog := filepath.Join(dir, "state"), filepath.Join(dir, "ws"), filepath.Join(dir, "agent.log")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if pids := serveproc.SessionProcesses(state); len(pids) > 0 {
			t.Errorf("session processes left running: %v", pids)
		}
	})

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	// run runs client.mjs with args before the workspace, against a new
	// agenthost acp on the state directory.
	run := func(args ...string) string {
		t.Helper()
		args = append(append([]string{"client.mjs"}, args...), ws,
			bin, "--state-dir", state, "--log-level", "debug", "acp", "--agent", "scripted", "--shutdown-sessions")
		cmd := exec.CommandContext(ctx, node, args...)
		cmd.Env = append(os.Environ(), "AGENTHOST_ACP_SDK="+sdk, "AGENT_STDERR="+agentLog)
		output, err := cmd.CombinedOutput()
		text := string(output)
		if err != nil {
			log, _ := os.ReadFile(agentLog)
			t.Fatalf("node %s: %v\n%s\nagenthost acp's log:\n%s", strings.Join(args, " "), err, text, log)
		}
		t.Logf("node %s:\n%s", strings.Join(args, " "), text)
		// The SDK logs what it could not read (a message off the schema)
		// rather than failing the call that carried it.
		for _, bad := range []string{"Invalid message", "Error handling notification"} {
			if strings.Contains(text, bad) {
				t.Errorf("the SDK logged %q", bad)
			}
		}
		if !strings.HasSuffix(text, "\ndone\n") {
			t.Error("the client did not finish")
		}
		return text
	}
	passed := func(text string, steps ...string) {
		t.Helper()
		for _, step := range steps {
			if !regexp.MustCompile(`(?m)^ok ` + regexp.QuoteMeta(step) + `: `).MatchString(text) {
				t.Errorf("the client did not get through %q", step)
			}
		}
	}

	text := run()
	passed(text, "initialize", "session/new", "settings", "session/set_mode", "session/set_config_option",
		"image prompt", "permission with a diff", "allow always", "title", "cancel", "auth required")
	// The outcome, outside the client: the edits made, the plan-mode one
	// not.
	if b, err := os.ReadFile(filepath.Join(ws, "notes.txt")); err != nil || string(b) != "again\n" {
		t.Errorf("notes.txt: %q, %v; want the second edit's text", b, err)
	}
	if _, err := os.Stat(filepath.Join(ws, "plan.txt")); err == nil {
		t.Error("plan.txt was written in plan mode")
	}

	// A new host resumes the session with what the first one kept: the
	// mode and model set last, the MCP server, the "allow always" grant.
	m := regexp.MustCompile(`(?m)^ok session/new: session (\S+):`).FindStringSubmatch(text)
	if m == nil {
		t.Fatal("no session id in the output")
	}
	passed(run("--resume", m[1]), "initialize", "resume")
	if b, err := os.ReadFile(filepath.Join(ws, "notes.txt")); err != nil || string(b) != "third\n" {
		t.Errorf("notes.txt after the resumed edit: %q, %v", b, err)
	}
}
