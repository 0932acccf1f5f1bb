package claude

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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

// The tests run the real plugin binary, over go-plugin and gRPC as the host
// does, against the fake CLI in testdata/fakeclaude; both are built once
// per test run.

// markerVar is set in the test process and passed to every plugin, so
// every CLI inherits it: one still running after the tests is a leak.
const markerVar = "CLAUDE_PLUGIN_TEST_MARKER"

var marker = rand.Text()

func TestMain(m *testing.M) {
	os.Setenv(markerVar, marker)
	code := m.Run()
	// CLIs of the last plugins killed may take a moment to die.
	var left []int
	eventually(3*time.Second, func() bool {
		left = envHolders(markerVar + "=" + marker)
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
		// The plugin is built with the race detector when the tests run
		// with it; the fake CLI is not code under test.
		env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, markerVar+"=") })
		for _, b := range [][]string{{"./cmd/agenthost-plugin-claude"}, {"./testdata/fakeclaude"}} {
			args := []string{"build", "-o", bins.dir + "/"}
			if raceEnabled && b[0] == "./cmd/agenthost-plugin-claude" {
				args = append(args, "-race")
			}
			cmd := exec.Command("go", append(args, b...)...)
			cmd.Env = env
			if out, err := cmd.CombinedOutput(); err != nil {
				bins.err = fmt.Errorf("go build %s: %v\n%s", b[0], err, out)
				return
			}
		}
		bins.plugin = filepath.Join(bins.dir, "agenthost-plugin-claude")
		bins.fake = filepath.Join(bins.dir, "fakeclaude")
	})
	if bins.err != nil {
		t.Fatal(bins.err)
	}
	return bins.plugin, bins.fake
}

// raceOptions stops a race-enabled plugin from sleeping a second at exit
// (the race runtime's default, which would cost every test a second).
const raceOptions = "GORACE=atexit_sleep_ms=0"

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

// env is the plugin's environment: nothing inherited but PATH, plus the
// fixture's home, config dir and fake CLI; extra entries win.
func (f *fixture) env(extra ...string) []string {
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + f.home,
		"CLAUDE_CONFIG_DIR=" + f.configDir,
		EnvCLIPath + "=" + f.fake,
		"FAKECLAUDE_RECORD=" + f.record,
		wire.EnvLogLevel + "=debug",
		markerVar + "=" + marker,
		raceOptions,
	}
	return append(env, extra...)
}

// plug is one running plugin process, attached at fence 1, with its
// Updates stream followed from seq 1.
type plug struct {
	t      *testing.T
	f      *fixture
	client *plugin.Client
	agent  agentpb.AgentClient
	pid    int
	stderr *logtest.Buffer
	ups    chan *agentpb.Update
	ctx    context.Context
}

// start starts the plugin with the fixture's environment plus extra.
func (f *fixture) start(extra ...string) *plug {
	t := f.t
	t.Helper()
	sessionDir := filepath.Join(f.dir, fmt.Sprintf("session-%s", rand.Text()[:8]))
	if err := os.Mkdir(sessionDir, 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(f.plugin)
	cmd.Env = append(f.env(extra...), wire.EnvSessionDir+"="+sessionDir)
	// Like the host: the plugin leads its own process group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr := &logtest.Buffer{}
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  wire.Handshake(),
		VersionedPlugins: wire.PluginSets(nil),
		Cmd:              cmd,
		SkipHostEnv:      true,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		Stderr:           stderr,
		Logger:           hclog.NewNullLogger(),
		StartTimeout:     20 * time.Second,
	})
	ctx, cancel := context.WithCancel(context.Background())
	p := &plug{t: t, f: f, client: client, stderr: stderr, ups: make(chan *agentpb.Update, 4096), ctx: ctx}
	t.Cleanup(func() {
		cancel()
		client.Kill()
		if p.pid > 0 {
			_ = syscall.Kill(-p.pid, syscall.SIGKILL)
		}
		if strings.Contains(stderr.String(), "WARNING: DATA RACE") {
			t.Errorf("the plugin process reported a data race")
		}
		if t.Failed() {
			t.Logf("plugin stderr:\n%s", clip(stderr.String(), 20000))
		}
	})
	rpc, err := client.Client()
	if err != nil {
		t.Fatalf("start the plugin: %v\n%s", err, stderr.String())
	}
	p.pid = cmd.Process.Pid
	raw, err := rpc.Dispense(wire.PluginName)
	if err != nil {
		t.Fatal(err)
	}
	p.agent = raw.(agentpb.AgentClient)
	if _, err := p.agent.Attach(ctx, &agentpb.AttachRequest{Fence: 1, SessionId: "test"}); err != nil {
		t.Fatal(err)
	}
	stream, err := p.agent.Updates(ctx, &agentpb.UpdatesRequest{Fence: 1, FromSeq: 1})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.ups)
		for {
			u, err := stream.Recv()
			if err != nil {
				return
			}
			p.ups <- u
		}
	}()
	return p
}

// open opens a new session; it fails the test on error.
func (p *plug) open(opts map[string]string) string {
	p.t.Helper()
	resp, err := p.tryOpen(opts)
	if err != nil {
		p.t.Fatalf("NewSession: %v", err)
	}
	return resp.Handle
}

func (p *plug) tryOpen(opts map[string]string) (*agentpb.SessionResponse, error) {
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	return p.agent.NewSession(ctx, &agentpb.NewSessionRequest{Fence: 1, Workspace: p.f.workspace, Options: opts})
}

func (p *plug) tryResume(handle string, opts map[string]string) (*agentpb.SessionResponse, error) {
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	return p.agent.ResumeSession(ctx, &agentpb.ResumeSessionRequest{Fence: 1, Workspace: p.f.workspace, Options: opts, Handle: handle})
}

// prompt starts a turn and returns its id.
func (p *plug) prompt(text string) string {
	p.t.Helper()
	resp, err := p.agent.Prompt(p.ctx, &agentpb.PromptRequest{Fence: 1, Prompt: []*agentpb.ContentBlock{{Type: "text", Text: text}}})
	if err != nil {
		p.t.Fatalf("Prompt(%q): %v", text, err)
	}
	return resp.TurnId
}

// next returns the next update within d.
func (p *plug) next(d time.Duration) (*agentpb.Update, bool) {
	select {
	case u, ok := <-p.ups:
		return u, ok
	case <-time.After(d):
		return nil, false
	}
}

// turn reads updates until the turn_stopped of turn.
func (p *plug) turn(turn string, d time.Duration) ([]*agentpb.Update, *agentpb.TurnStopped) {
	p.t.Helper()
	ups, stop := p.turnWithin(turn, d)
	if stop == nil {
		p.t.Fatalf("no turn_stopped for turn %s within %s; got %s", turn, d, describe(ups))
	}
	return ups, stop
}

// turnWithin reads updates until the turn_stopped of turn, or for d; stop
// is nil if the turn did not end.
func (p *plug) turnWithin(turn string, d time.Duration) (ups []*agentpb.Update, stop *agentpb.TurnStopped) {
	deadline := time.Now().Add(d)
	for {
		u, ok := p.next(time.Until(deadline))
		if !ok {
			return ups, nil
		}
		ups = append(ups, u)
		if s := u.GetTurnStopped(); s != nil && u.TurnId == turn {
			return ups, s
		}
	}
}

// run prompts and waits for the turn's end.
func (p *plug) run(text string) ([]*agentpb.Update, *agentpb.TurnStopped) {
	p.t.Helper()
	return p.turn(p.prompt(text), 20*time.Second)
}

// waitFor reads updates until one satisfies pred.
func (p *plug) waitFor(what string, d time.Duration, pred func(*agentpb.Update) bool) *agentpb.Update {
	p.t.Helper()
	deadline := time.Now().Add(d)
	var seen []*agentpb.Update
	for {
		u, ok := p.next(time.Until(deadline))
		if !ok {
			p.t.Fatalf("no %s within %s; got %s", what, d, describe(seen))
		}
		if pred(u) {
			return u
		}
		seen = append(seen, u)
	}
}

func (p *plug) answer(requestID, optionID string) {
	p.t.Helper()
	out := &agentpb.PermissionOutcome{Outcome: "selected", OptionId: optionID}
	if _, err := p.agent.AnswerPermission(p.ctx, &agentpb.AnswerPermissionRequest{Fence: 1, RequestId: requestID, Outcome: out}); err != nil {
		p.t.Fatalf("AnswerPermission: %v", err)
	}
}

func (p *plug) cancel() {
	p.t.Helper()
	if _, err := p.agent.Cancel(p.ctx, &agentpb.CancelRequest{Fence: 1}); err != nil {
		p.t.Fatalf("Cancel: %v", err)
	}
}

func (p *plug) close(d time.Duration) error {
	ctx, cancel := context.WithTimeout(p.ctx, d)
	defer cancel()
	_, err := p.agent.Close(ctx, &agentpb.CloseRequest{Fence: 1})
	return err
}

// texts returns the message chunks of ups.
func texts(ups []*agentpb.Update) []string {
	var out []string
	for _, u := range ups {
		if c := u.GetAgentMessageChunk(); c != nil {
			out = append(out, c.Content.GetText())
		}
	}
	return out
}

func kind(u *agentpb.Update) string {
	m := u.ProtoReflect()
	if fd := m.WhichOneof(m.Descriptor().Oneofs().ByName("kind")); fd != nil {
		return string(fd.Name())
	}
	return "none"
}

func describe(ups []*agentpb.Update) string {
	var parts []string
	for _, u := range ups {
		s := kind(u)
		if c := u.GetAgentMessageChunk(); c != nil {
			s += fmt.Sprintf("(%q)", clip(c.Content.GetText(), 40))
		}
		if st := u.GetTurnStopped(); st != nil {
			s += fmt.Sprintf("(%s %q)", st.StopReason, st.Error)
		}
		parts = append(parts, s)
	}
	return fmt.Sprintf("%d updates [%s]", len(ups), strings.Join(parts, " "))
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

// alive reports whether pid is a live process (not a zombie), from /proc.
func alive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	st := b[i+2]
	return st != 'Z' && st != 'X'
}

// children lists the live children of pid, from /proc.
func children(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 2 && f[1] == strconv.Itoa(pid) && f[0] != "Z" {
			out = append(out, c)
		}
	}
	return out
}

// envHolders lists the live processes whose environment holds kv.
func envHolders(kv string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue
		}
		if slices.ContainsFunc(bytes.Split(b, []byte{0}), func(e []byte) bool { return string(e) == kv }) && alive(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// eventually polls cond for up to d.
func eventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}
