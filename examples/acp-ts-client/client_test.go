package acptsclient

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/internal/serveproc"
)

// sdkDir is where the ACP TypeScript SDK is installed: $AGENTHOST_ACP_SDK
// (make test sets it), else the cache make acp-sdk installs into.
func sdkDir(t *testing.T) string {
	dir := os.Getenv("AGENTHOST_ACP_SDK")
	if dir == "" {
		dir = filepath.Join("..", "..", ".cache", "acp-sdk")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@agentclientprotocol", "sdk", "package.json")); err != nil {
		t.Skipf("the ACP TypeScript SDK is not installed in %s: make acp-sdk installs it (it needs npm)", dir)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// TestACPTypeScriptSDKClient runs client.mjs, a client on the official ACP
// TypeScript SDK, against agenthost acp with the scripted agent: each
// step it prints is one the SDK's client checked, and the workspace and
// the host's state show the outcome.
func TestACPTypeScriptSDKClient(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed")
	}
	sdk := sdkDir(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "agenthost")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/agenthost").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
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
	cmd := exec.CommandContext(ctx, node, "client.mjs", ws,
		bin, "--state-dir", state, "--log-level", "debug", "acp", "--agent", "scripted", "--shutdown-sessions")
	cmd.Env = append(os.Environ(), "AGENTHOST_ACP_SDK="+sdk, "AGENT_STDERR="+agentLog)
	output, err := cmd.CombinedOutput()
	text := string(output)
	if err != nil {
		log, _ := os.ReadFile(agentLog)
		t.Fatalf("node client.mjs: %v\n%s\nagenthost acp's log:\n%s", err, text, log)
	}
	t.Logf("node client.mjs:\n%s", text)
	for _, step := range []string{"initialize", "session/new", "settings", "session/set_mode", "session/set_config_option",
		"image prompt", "permission with a diff", "allow always", "title", "cancel", "auth required"} {
		if !strings.Contains(text, "\nok "+step+": ") && !strings.HasPrefix(text, "ok "+step+": ") {
			t.Errorf("the client did not get through %q", step)
		}
	}
	if !strings.HasSuffix(text, "\ndone\n") {
		t.Error("the client did not finish")
	}
	// The SDK logs what it could not read (a message off the schema)
	// rather than failing the call that carried it.
	for _, bad := range []string{"Invalid message", "Error handling notification"} {
		if strings.Contains(text, bad) {
			t.Errorf("the SDK logged %q", bad)
		}
	}

	// The outcome, outside the client: the edits made, the plan-mode one
	// not.
	if b, err := os.ReadFile(filepath.Join(ws, "notes.txt")); err != nil || string(b) != "again\n" {
		t.Errorf("notes.txt: %q, %v; want the second edit's text", b, err)
	}
	if _, err := os.Stat(filepath.Join(ws, "plan.txt")); err == nil {
		t.Error("plan.txt was written in plan mode")
	}

	// The host stored the settings the session ended with.
	m := regexp.MustCompile(`(?m)^ok session/new: session (\S+):`).FindStringSubmatch(text)
	if m == nil {
		t.Fatal("no session id in the output")
	}
	out, err := exec.Command(bin, "--state-dir", state, "sessions", "show", "--json", m[1]).CombinedOutput()
	if err != nil {
		t.Fatalf("sessions show: %v\n%s", err, out)
	}
	var shown struct {
		Session struct {
			Options map[string]string `json:"options"`
		} `json:"session"`
	}
	if err := json.Unmarshal(out, &shown); err != nil {
		t.Fatalf("sessions show --json: %v\n%s", err, out)
	}
	if o := shown.Session.Options; o["model"] != "smart" || o["mode"] != "default" {
		t.Errorf("the stored options: %v, want model smart (set_config_option) and mode default (exitplan)", o)
	}
}
