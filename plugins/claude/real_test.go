//go:build realclis

package claude

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agenthost/agenthost/internal/agentpb"
	"github.com/agenthost/agenthost/plugins/internal/plugintest"
)

// These tests drive the real claude CLI, offline: everything but a model
// call works without a network. `make test-real-clis` installs the pinned
// release and runs them; by hand:
//
//	AGENTHOST_REAL_CLAUDE=/path/to/claude go test -tags realclis -run Real ./plugins/claude/
//
// HOME and CLAUDE_CONFIG_DIR are temporary directories, so no login of the
// machine is used and nothing is written outside them.

// realFixture returns a fixture whose plugin runs the real CLI, with no
// login in its config dir.
func realFixture(t *testing.T) (*fixture, []string) {
	t.Helper()
	abs := plugintest.RealCLI(t, "AGENTHOST_REAL_CLAUDE")
	f := newFixture(t)
	os.Remove(filepath.Join(f.configDir, ".credentials.json"))
	return f, []string{
		EnvCLIPath + "=" + abs,
		"DISABLE_AUTOUPDATER=1",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"DISABLE_TELEMETRY=1",
	}
}

// noLogin opens sessions without credentials: the readiness check would
// refuse them, the CLI starts anyway.
var noLogin = map[string]string{OptSkipAuthCheck: "true"}

func TestRealVersion(t *testing.T) {
	f, env := realFixture(t)
	v, err := checkVersion(context.Background(), strings.TrimPrefix(env[0], EnvCLIPath+"="), os.Environ())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("claude %s", v)
	p := f.start(env...)
	p.open(noLogin)
	id, err := p.agent.Identify(p.ctx, &agentpb.IdentifyRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if id.AgentVersion != v.String() {
		t.Errorf("Identify reports version %q, want %q", id.AgentVersion, v)
	}
}

// TestRealNewSessionAndAuthError opens a session (the initialize
// handshake), runs a turn that cannot reach its model for want of
// credentials, and resumes the session in a new plugin.
func TestRealNewSessionAndAuthError(t *testing.T) {
	f, env := realFixture(t)
	p := f.start(env...)
	handle := p.open(noLogin)
	ups, stop := p.run("say hi")
	if stop.StopReason != "failed" || !strings.HasPrefix(stop.Error, "claude could not authenticate (Not logged in") {
		t.Fatalf("turn without credentials: %v %s", stop, describe(ups))
	}
	if strings.Contains(strings.Join(texts(ups), ""), "Not logged in") {
		t.Errorf("the synthetic auth message was reported as the agent's: %q", texts(ups))
	}
	// The turn reached the CLI, so the conversation has a transcript.
	matches, _ := filepath.Glob(filepath.Join(f.configDir, "projects", "*", handle+".jsonl"))
	if len(matches) != 1 {
		t.Errorf("no transcript for %s under %s", handle, f.configDir)
	}
	if err := p.close(15 * time.Second); err != nil {
		t.Fatal(err)
	}

	p = f.start(env...)
	resp, err := p.tryResume(handle, noLogin)
	if err != nil || resp.Handle != handle {
		t.Fatalf("ResumeSession(%s): %v %v", handle, resp, err)
	}
	ups, stop = p.run("say hi again")
	if stop.StopReason != "failed" || !strings.HasPrefix(stop.Error, "claude could not authenticate") {
		t.Fatalf("resumed turn: %v %s", stop, describe(ups))
	}
	for _, u := range ups {
		if c := u.GetHandleChanged(); c != nil {
			t.Errorf("claude %s changed the session id on resume: %v", TestedVersion, c)
		}
	}
	if err := p.close(15 * time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestRealResumeUnknown(t *testing.T) {
	f, env := realFixture(t)
	p := f.start(env...)
	const unknown = "11111111-2222-4333-8444-555555555555"
	_, err := p.tryResume(unknown, noLogin)
	if err == nil || !strings.Contains(err.Error(), "No conversation found with session ID: "+unknown) {
		t.Fatalf("ResumeSession(unknown): %v", err)
	}
}

func TestRealSessionIDInUse(t *testing.T) {
	f, env := realFixture(t)
	p := f.start(env...)
	handle := p.open(noLogin)
	p.run("say hi") // writes the transcript
	p.close(15 * time.Second)
	p = f.start(env...)
	_, err := p.tryOpen(map[string]string{OptSkipAuthCheck: "true", OptSessionID: handle})
	if err == nil || !strings.Contains(err.Error(), "Error: Session ID "+handle+" is already in use.") {
		t.Fatalf("NewSession with a used id: %v", err)
	}
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestRealInterrupt runs a turn whose model calls are refused (a fake key,
// an API address nothing listens on): the CLI retries until interrupted.
func TestRealInterrupt(t *testing.T) {
	f, env := realFixture(t)
	env = append(env, "ANTHROPIC_API_KEY=sk-ant-agenthost-test", "ANTHROPIC_BASE_URL=http://"+closedPort(t))
	p := f.start(env...)
	p.open(map[string]string{OptAllowCredentials: "true"})
	turn := p.prompt("write a poem")
	if ups, stop := p.turnWithin(turn, 1500*time.Millisecond); stop != nil {
		t.Fatalf("the turn ended by itself: %v %s", stop, describe(ups))
	}
	start := time.Now()
	p.cancel()
	_, stop := p.turn(turn, 10*time.Second)
	if stop.StopReason != "cancelled" {
		t.Fatalf("after Cancel: %v", stop)
	}
	t.Logf("the interrupted turn ended %s after Cancel", time.Since(start).Round(time.Millisecond))
	// One CLI did it all: the interrupt kept it.
	if n := len(children(p.pid)); n != 1 {
		t.Errorf("the plugin has %d children, want its one CLI", n)
	}
	if err := p.close(15 * time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestRealPluginKilled: the real CLI dies with its plugin.
func TestRealPluginKilled(t *testing.T) {
	f, env := realFixture(t)
	p := f.start(env...)
	p.open(noLogin)
	kids := children(p.pid)
	if len(kids) != 1 {
		t.Fatalf("the plugin has children %v, want its one CLI", kids)
	}
	if err := syscall.Kill(p.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !eventually(5*time.Second, func() bool { return !alive(kids[0]) }) {
		t.Fatalf("claude %d survived its plugin", kids[0])
	}
}
