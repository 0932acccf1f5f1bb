// Package codextest drives an agenthost plugin binary from tests as a host
// does (go-plugin handshake, gRPC, fence 1) and builds the binaries the
// codex plugin's tests start. It is a test helper: only tests import it.
package codextest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agenthost/agenthost/internal/logtest"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	"github.com/agenthost/agenthost/internal/agentpb"
	"github.com/agenthost/agenthost/internal/wire"
)

// Build builds each main package (name → package path, relative to the
// current directory, or an import path) into out with the go build flags
// given, returning name → binary.
func Build(out string, pkgs map[string]string, flags ...string) (map[string]string, error) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		return nil, fmt.Errorf("no go command to build the test binaries: %w", err)
	}
	bins := map[string]string{}
	for name, pkg := range pkgs {
		bin := filepath.Join(out, name)
		if b, err := exec.Command(gobin, append(append([]string{"build"}, flags...), "-o", bin, pkg)...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
		}
		bins[name] = bin
	}
	return bins, nil
}

// SessionID is the session id the helper attaches with.
const SessionID = "codex-test-session"

// Plugin is one plugin process attached at fence 1, with its updates
// collected in the background.
type Plugin struct {
	tb     testing.TB
	client *plugin.Client
	Agent  agentpb.AgentClient
	Pid    int
	stderr *logtest.Buffer

	mu      sync.Mutex
	updates []*agentpb.Update
	read    int // updates handed out by Next
	wake    chan struct{}
	cancel  context.CancelFunc
	done    chan struct{}
}

// Start starts binary with env as its whole environment (in a process group
// of its own), completes the handshake and attaches at fence 1. The
// process is stopped when the test ends.
func Start(tb testing.TB, binary string, env []string) *Plugin {
	tb.Helper()
	cmd := exec.Command(binary)
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p := &Plugin{tb: tb, stderr: &logtest.Buffer{}, wake: make(chan struct{}, 1), done: make(chan struct{})}
	p.client = plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  wire.Handshake(),
		VersionedPlugins: wire.PluginSets(nil),
		Cmd:              cmd,
		SkipHostEnv:      true,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		StartTimeout:     30 * time.Second,
		Stderr:           p.stderr,
		Logger:           hclog.NewNullLogger(),
	})
	tb.Cleanup(p.stop)
	rpc, err := p.client.Client()
	if err != nil {
		tb.Fatalf("start plugin %s: %v\nstderr:\n%s", binary, err, p.stderr)
	}
	raw, err := rpc.Dispense(wire.PluginName)
	if err != nil {
		tb.Fatalf("dispense: %v", err)
	}
	p.Agent = raw.(agentpb.AgentClient)
	p.Pid = p.client.ReattachConfig().Pid
	ctx := context.Background()
	if _, err := p.Agent.Attach(ctx, &agentpb.AttachRequest{Fence: 1, SessionId: SessionID}); err != nil {
		tb.Fatalf("attach: %v", err)
	}
	sctx, cancel := context.WithCancel(ctx)
	p.cancel = cancel
	stream, err := p.Agent.Updates(sctx, &agentpb.UpdatesRequest{Fence: 1, FromSeq: 1})
	if err != nil {
		tb.Fatalf("updates: %v", err)
	}
	go func() {
		defer close(p.done)
		for {
			u, err := stream.Recv()
			if err != nil {
				return
			}
			p.mu.Lock()
			p.updates = append(p.updates, u)
			p.mu.Unlock()
			select {
			case p.wake <- struct{}{}:
			default:
			}
		}
	}()
	return p
}

// Stderr is what the plugin wrote to stderr so far (its logs).
func (p *Plugin) Stderr() string { return p.stderr.String() }

// NewSession opens a new session in workspace.
func (p *Plugin) NewSession(workspace string, opts map[string]string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := p.Agent.NewSession(ctx, &agentpb.NewSessionRequest{Fence: 1, Workspace: workspace, Options: opts})
	return r.GetHandle(), err
}

// Resume resumes handle in workspace.
func (p *Plugin) Resume(workspace, handle string, opts map[string]string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := p.Agent.ResumeSession(ctx, &agentpb.ResumeSessionRequest{Fence: 1, Workspace: workspace, Handle: handle, Options: opts})
	return r.GetHandle(), err
}

// Prompt starts a turn with a text prompt and returns its id.
func (p *Plugin) Prompt(text string) string {
	p.tb.Helper()
	r, err := p.Agent.Prompt(context.Background(), &agentpb.PromptRequest{Fence: 1, Prompt: []*agentpb.ContentBlock{{Type: "text", Text: text}}})
	if err != nil {
		p.tb.Fatalf("prompt %q: %v", text, err)
	}
	return r.TurnId
}

// Cancel cancels the running turn.
func (p *Plugin) Cancel() {
	p.tb.Helper()
	if _, err := p.Agent.Cancel(context.Background(), &agentpb.CancelRequest{Fence: 1}); err != nil {
		p.tb.Fatalf("cancel: %v", err)
	}
}

// Answer answers a permission request with optionID ("" cancels it).
func (p *Plugin) Answer(requestID, optionID string) {
	p.tb.Helper()
	out := &agentpb.PermissionOutcome{Outcome: "selected", OptionId: optionID}
	if optionID == "" {
		out = &agentpb.PermissionOutcome{Outcome: "cancelled"}
	}
	if _, err := p.Agent.AnswerPermission(context.Background(), &agentpb.AnswerPermissionRequest{Fence: 1, RequestId: requestID, Outcome: out}); err != nil {
		p.tb.Fatalf("answer %s: %v", requestID, err)
	}
}

// Close calls Close with a deadline.
func (p *Plugin) Close(d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_, err := p.Agent.Close(ctx, &agentpb.CloseRequest{Fence: 1})
	return err
}

// Next returns the next update within d, or nil.
func (p *Plugin) Next(d time.Duration) *agentpb.Update {
	deadline := time.Now().Add(d)
	for {
		p.mu.Lock()
		if p.read < len(p.updates) {
			u := p.updates[p.read]
			p.read++
			p.mu.Unlock()
			return u
		}
		p.mu.Unlock()
		left := time.Until(deadline)
		if left <= 0 {
			return nil
		}
		t := time.NewTimer(left)
		select {
		case <-p.wake:
		case <-t.C:
		case <-p.done:
			time.Sleep(10 * time.Millisecond) // last updates
		}
		t.Stop()
	}
}

// Until reads updates until one satisfies stop (returned last), failing
// the test after d.
func (p *Plugin) Until(d time.Duration, what string, stop func(*agentpb.Update) bool) []*agentpb.Update {
	p.tb.Helper()
	deadline := time.Now().Add(d)
	var got []*agentpb.Update
	for {
		u := p.Next(time.Until(deadline))
		if u == nil {
			p.tb.Fatalf("no %s within %s; got %s\nplugin stderr:\n%s", what, d, Describe(got), tailOf(p.Stderr(), 3000))
		}
		got = append(got, u)
		if stop(u) {
			return got
		}
	}
}

// Turn reads the updates of turnID up to its turn_stopped.
func (p *Plugin) Turn(turnID string, d time.Duration) ([]*agentpb.Update, *agentpb.TurnStopped) {
	p.tb.Helper()
	ups := p.Until(d, "turn_stopped of "+turnID, func(u *agentpb.Update) bool {
		return u.GetTurnStopped() != nil && u.TurnId == turnID
	})
	return ups, ups[len(ups)-1].GetTurnStopped()
}

// Kill sends SIGKILL to the plugin process alone.
func (p *Plugin) Kill() { _ = syscall.Kill(p.Pid, syscall.SIGKILL) }

// stop ends the process group and the client.
func (p *Plugin) stop() {
	p.cancel()
	if p.Pid > 0 {
		_ = syscall.Kill(p.Pid, syscall.SIGTERM)
		deadline := time.Now().Add(3 * time.Second)
		for !p.client.Exited() && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
	}
	p.client.Kill()
}

// Kind names an update's kind as the protocol does.
func Kind(u *agentpb.Update) string {
	m := u.ProtoReflect()
	if fd := m.WhichOneof(m.Descriptor().Oneofs().ByName("kind")); fd != nil {
		return string(fd.Name())
	}
	return "none"
}

// Messages concatenates the agent message chunks of ups.
func Messages(ups []*agentpb.Update) string {
	var b strings.Builder
	for _, u := range ups {
		if c := u.GetAgentMessageChunk(); c != nil {
			b.WriteString(c.GetContent().GetText())
		}
	}
	return b.String()
}

// Describe summarises updates for a failure message.
func Describe(ups []*agentpb.Update) string {
	var parts []string
	for _, u := range ups {
		s := Kind(u)
		switch {
		case u.GetAgentMessageChunk() != nil:
			s += fmt.Sprintf("(%q)", truncate(u.GetAgentMessageChunk().GetContent().GetText(), 40))
		case u.GetTurnStopped() != nil:
			s += fmt.Sprintf("(%s %q)", u.GetTurnStopped().StopReason, u.GetTurnStopped().Error)
		}
		parts = append(parts, s)
	}
	return fmt.Sprintf("%d updates [%s]", len(ups), strings.Join(parts, " "))
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func tailOf(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// Children lists the live child processes of pid (Linux /proc).
func Children(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ppid, ok := procStat(c); ok && ppid == pid && st != 'Z' && st != 'X' {
			out = append(out, c)
		}
	}
	return out
}

// Alive reports whether pid is a live (not zombie) process.
func Alive(pid int) bool {
	st, _, ok := procStat(pid)
	return ok && st != 'Z' && st != 'X'
}

func procStat(pid int) (state byte, ppid int, ok bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(f[1])
	return f[0][0], ppid, err == nil
}

// WaitGone polls until pid is no longer alive, up to d.
func WaitGone(pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for Alive(pid) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}
