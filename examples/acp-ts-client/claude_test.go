package acptsclient

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/internal/logtest"
	"github.com/agenthost/agenthost/internal/realcli"
	"github.com/agenthost/agenthost/internal/serveproc"
	"github.com/agenthost/agenthost/plugin/sdk/modelserver"
)

// TestACPTypeScriptSDKClientWithClaude runs claude.mjs, client.mjs's walk
// through a session, against the real claude CLI behind agenthost acp,
// its model a scripted model server on loopback: the official SDK's
// client reads what the claude plugin makes of the CLI (modes, config
// options, an Edit's diff in the permission request), and the model
// server sees the image and the model the client chose.
func TestACPTypeScriptSDKClientWithClaude(t *testing.T) {
	t.Parallel()
	node, sdk := need(t)
	claude, err := realcli.Claude()
	if err != nil {
		t.Skipf("skipping the real claude run: %v", err)
	}
	srv, err := modelserver.Start(modelserver.Config{Logger: logtest.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	guard, err := realcli.StartGuard()
	if err != nil {
		t.Fatal(err)
	}
	// The state directory holds a unix socket: keep its path short.
	dir, err := os.MkdirTemp("", "ahts-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	bin := agenthostBin
	state, home, ws, agentLog := filepath.Join(dir, "s"), filepath.Join(dir, "home"), filepath.Join(dir, "ws"), filepath.Join(dir, "agent.log")
	for _, d := range []string{state, home, ws} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	setup := realcli.ClaudeSetup(claude, home, srv.URL(), 1)
	setup.Env = append(setup.Env, guard.Env()...)
	config, err := realcli.Config(setup)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, "agenthost.json"), config, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		guard.Close()
		for _, h := range guard.Hosts() {
			t.Errorf("the claude CLI tried to reach %s; the guard refused, but the test must need nothing beyond loopback", h)
		}
		if pids := serveproc.SessionProcesses(state); len(pids) > 0 {
			t.Errorf("session processes left running: %v", pids)
		}
	})
	if err := os.WriteFile(filepath.Join(ws, "notes.txt"), []byte("old\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	notes := filepath.Join(ws, "notes.txt")
	edit := func(from, to string) string {
		return `{"file_path":"` + notes + `","old_string":"` + from + `","new_string":"` + to + `"}`
	}
	slow := modelserver.Text(strings.Repeat("slowly ", 60))
	slow.Delay = 50 * time.Millisecond // 7 s unless cancelled
	if err := srv.Script(modelserver.Text("A pixel."),
		modelserver.Tool("Edit", edit("old", "hello")), modelserver.Text("Edited."),
		modelserver.Tool("Edit", edit("hello", "again")), modelserver.Text("Edited again."),
		slow); err != nil {
		t.Fatal(err)
	}

	env := append(realcli.IsolatedEnv(os.Environ(), home), "AGENTHOST_ACP_SDK="+sdk, "AGENT_STDERR="+agentLog)
	env = append(env, setup.Credentials...)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "claude.mjs", ws, "claude-x-test", "sonnet",
		bin, "--state-dir", state, "--log-level", "debug", "acp", "--agent", "claude", "--shutdown-sessions")
	cmd.Env = env
	output, err := cmd.CombinedOutput()
	text := string(output)
	if err != nil {
		log, _ := os.ReadFile(agentLog)
		t.Fatalf("node claude.mjs: %v\n%s\nagenthost acp's log:\n%s", err, text, log)
	}
	t.Logf("node claude.mjs:\n%s", text)
	for _, step := range []string{"initialize", "session/new", "session/set_mode", "session/set_config_option",
		"image prompt", "permission with a diff", "allow always", "cancel"} {
		if !regexp.MustCompile(`(?m)^ok ` + regexp.QuoteMeta(step) + `: `).MatchString(text) {
			t.Errorf("the client did not get through %q", step)
		}
	}
	for _, bad := range []string{"Invalid message", "Error handling notification"} {
		if strings.Contains(text, bad) {
			t.Errorf("the SDK logged %q", bad)
		}
	}
	if !strings.HasSuffix(text, "\ndone\n") {
		t.Error("the client did not finish")
	}

	// What the model saw: the image, asked of the model set_config_option
	// chose ("sonnet", which this CLI resolves to claude-sonnet-5-5).
	reqs := srv.ModelRequests()
	if len(reqs) == 0 {
		t.Fatal("the model was never asked")
	}
	if body := string(reqs[0].Body); !strings.Contains(body, `"type":"image"`) || !strings.Contains(body, "iVBORw0KGgo") {
		t.Error("the image turn's model request carries no image block")
	}
	if reqs[0].Model != "claude-sonnet-5-5" {
		t.Errorf("the image turn asked for model %q, want claude-sonnet-5-5 (sonnet, set by set_config_option)", reqs[0].Model)
	}
	if b, _ := os.ReadFile(notes); string(b) != "again\n" {
		t.Errorf("notes.txt after both edits: %q", b)
	}
}
