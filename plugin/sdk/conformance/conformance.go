package conformance

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"github.com/hashicorp/go-plugin/runner"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agenthost/agenthost/internal/pluginclient"
	"github.com/agenthost/agenthost/internal/wire"
)

// SpawnTokenVar is the environment variable that carries the spawn token of
// every plugin process the kit starts; AGENTHOST_SPAWN_TOKEN_VAR names it.
const SpawnTokenVar = "SDKTEST_SPAWN_TOKEN"

// SessionID is the session id the kit attaches with. It holds a NUL byte
// and a slash, as session ids may.
const SessionID = "conformance\x00/session"

// ErrNotRun is wrapped by the Err of a check that did not run, because the
// handshake check failed or the context ended first.
var ErrNotRun = errors.New("conformance: check not run")

// Result is the outcome of one check.
type Result struct {
	// Name is the check's name, as listed in the package documentation.
	Name string
	// Err is nil when the check passed. Otherwise it says what was
	// expected and what happened; it wraps ErrNotRun if the check did not
	// run.
	Err error
	// Duration is how long the check took, cleanup included.
	Duration time.Duration
	// Skipped, when set, says why the check did not apply: a capability
	// check of a capability the plugin does not declare. Err is nil then:
	// a plugin need not declare a capability.
	Skipped string
}

// Prompts are the prompts the checks send. An empty field keeps its
// default. The defaults are understood by both example plugins: an agent
// that echoes its prompt word by word (examples/minimal-plugin) streams
// "count 3" and "count 20 10ms" as their words, and holds on "wait" until
// cancelled; the scripted agent (examples/scripted) counts and waits. Any
// other agent gets prompts of its own language, so that its turns do what
// each check needs.
//
// The agenthost conformance command sets them with --prompt-stream,
// --prompt-hold and --prompt-replay, and a check that fails in a way a
// prompt the plugin does not understand would explain names the flag and
// the field of sdktest.Prompts a Go caller (sdktest.Run) sets instead
// (hintStream, hintSecondTurn, hintHold, hintReplay).
type Prompts struct {
	// Stream starts a turn that streams at least one agent message chunk
	// and ends by itself, promptly, with stop reason end_turn.
	// Default "count 3".
	Stream string
	// Hold starts a turn that runs until it is cancelled (at least for
	// the per-check timeout). Default "wait".
	Hold string
	// Replay starts a turn that streams at least three updates before its
	// turn_stopped, ideally over a few hundred milliseconds, and ends by
	// itself with end_turn; the kit drops its connection after three of
	// them. Default "count 20 10ms".
	Replay string
}

// DefaultPrompts returns the prompts used unless WithPrompts overrides them.
func DefaultPrompts() Prompts {
	return Prompts{Stream: "count 3", Hold: "wait", Replay: "count 20 10ms"}
}

// The hints a check adds to a failure a prompt may explain: they name the
// agenthost conformance flag, which is what a plugin author runs first,
// and the sdktest.Prompts field, which is what a test run through
// sdktest.Run sets.
const (
	hintStream     = "; if the plugin does not stream text for this prompt and end the turn by itself, pass a prompt it does with --prompt-stream (sdktest.Prompts.Stream)"
	hintSecondTurn = "; the kit sends this prompt twice in one session: pass one the plugin answers again, streaming text and ending the turn by itself, with --prompt-stream (sdktest.Prompts.Stream)"
	hintHold       = "; pass a prompt whose turn runs until it is cancelled with --prompt-hold (sdktest.Prompts.Hold; the default, \"wait\", holds the example plugins' turns)"
	hintReplay     = "; pass a prompt whose turn streams more updates, over a few hundred milliseconds, with --prompt-replay (sdktest.Prompts.Replay)"
)

// Option configures Run and Check.
type Option func(*config)

// WithLogger sets the logger of the go-plugin clients the kit creates
// (default: none). The plugin's own stderr goes to a file the kit quotes
// when a check fails.
func WithLogger(l hclog.Logger) Option {
	return func(c *config) {
		if l != nil {
			c.logger = l
		}
	}
}

// WithTimeout bounds each check, cleanup excluded (default 20s).
func WithTimeout(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.timeout = d
		}
	}
}

// WithStartTimeout bounds the go-plugin handshake of each plugin start
// (default 10s).
func WithStartTimeout(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.startTimeout = d
		}
	}
}

// WithEnv adds environment variables (KEY=VALUE) to every plugin the kit
// starts, for example the path of the CLI a plugin drives.
func WithEnv(env ...string) Option {
	return func(c *config) { c.env = append(c.env, env...) }
}

// WithArgs sets the command-line arguments every plugin process is started
// with (default none), for a binary that serves a plugin only when asked,
// as "agenthost __plugin NAME" does.
func WithArgs(args ...string) Option {
	return func(c *config) { c.args = append([]string(nil), args...) }
}

// WithProgress calls f with each Result as soon as its check has ended (or
// was found not to run), in order, from the goroutine running Check.
func WithProgress(f func(Result)) Option {
	return func(c *config) { c.progress = f }
}

// WithSessionOptions sets the options of every session the kit opens.
func WithSessionOptions(options map[string]string) Option {
	return func(c *config) { c.options = options }
}

// WithPrompts replaces the prompts the checks send; empty fields keep
// their defaults.
func WithPrompts(p Prompts) Option {
	return func(c *config) {
		if p.Stream != "" {
			c.prompts.Stream = p.Stream
		}
		if p.Hold != "" {
			c.prompts.Hold = p.Hold
		}
		if p.Replay != "" {
			c.prompts.Replay = p.Replay
		}
	}
}

type config struct {
	// version is the protocol version the kit offers; 0 offers every one
	// this build speaks, and the plugin's newest is negotiated.
	version      int
	args         []string
	progress     func(Result)
	logger       hclog.Logger
	timeout      time.Duration
	startTimeout time.Duration
	prompts      Prompts
	env          []string
	options      map[string]string
}

// WithProtocolVersion makes the kit offer only protocol version v
// (wire.ProtocolVersion1, wire.ProtocolVersion2), as a host that speaks
// only v would: the plugin must negotiate v, and the checks drive it the
// way such a host does (at version 2 with the combined Open). Without it
// the kit offers every version it speaks and checks the plugin at the one
// negotiated, as a host would: a plugin built before version 2 conforms
// at version 1.
func WithProtocolVersion(v int) Option {
	return func(c *config) { c.version = v }
}

func newConfig(opts []Option) *config {
	c := &config{
		logger:       hclog.NewNullLogger(),
		timeout:      20 * time.Second,
		startTimeout: 10 * time.Second,
		prompts:      DefaultPrompts(),
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Names returns the names of the checks, in the order they run.
func Names() []string {
	names := make([]string, len(checks))
	for i, c := range checks {
		names[i] = c.name
	}
	return names
}

// Check runs every check against the plugin binary at binaryPath, in
// order, and returns one Result per check. It needs no testing.T: the
// agenthost conformance command uses it, and sdktest.Run wraps it for
// tests. If the handshake check fails, the others are reported as not run.
func Check(ctx context.Context, binaryPath string, opts ...Option) []Result {
	cfg := newConfig(opts)
	results := make([]Result, 0, len(checks))
	var notRun error
	for _, c := range checks {
		if notRun == nil && ctx.Err() != nil {
			notRun = fmt.Errorf("%w: %v", ErrNotRun, context.Cause(ctx))
		}
		var r Result
		if notRun != nil {
			r = Result{Name: c.name, Err: notRun}
		} else {
			r = runCheck(ctx, cfg, binaryPath, c)
			if c.name == checkHandshake && r.Err != nil {
				notRun = fmt.Errorf("%w: the handshake check failed, so no check can start the plugin", ErrNotRun)
			}
		}
		if cfg.progress != nil {
			cfg.progress(r)
		}
		results = append(results, r)
	}
	return results
}

// RunCheck runs the one check called name (see Names) against the plugin
// binary at binaryPath, in processes of its own. An unknown name is a
// failed Result that lists the known ones.
func RunCheck(ctx context.Context, binaryPath, name string, opts ...Option) Result {
	cfg := newConfig(opts)
	for _, c := range checks {
		if c.name == name {
			r := runCheck(ctx, cfg, binaryPath, c)
			if cfg.progress != nil {
				cfg.progress(r)
			}
			return r
		}
	}
	return Result{Name: name, Err: fmt.Errorf("conformance: no check is called %q; the checks are %s", name, strings.Join(Names(), ", "))}
}

// IsHandshake reports whether name is the handshake check, the one every
// other check depends on.
func IsHandshake(name string) bool { return name == checkHandshake }

// check is one conformance check.
type check struct {
	name string
	run  func(e *env) error
}

// runCheck runs c in a fresh environment and cleans up after it: every
// process it started is stopped and reaped, every client killed, its
// directory removed. Leftover processes fail the check.
func runCheck(ctx context.Context, cfg *config, binaryPath string, c check) Result {
	start := time.Now()
	res := Result{Name: c.name}
	e, err := newEnv(ctx, cfg, binaryPath)
	if err != nil {
		res.Err, res.Duration = err, time.Since(start)
		return res
	}
	err = c.run(e)
	var skip skipped
	if errors.As(err, &skip) {
		res.Skipped, err = string(skip), nil
	}
	if cerr := e.close(); cerr != nil {
		err = errors.Join(err, cerr)
	}
	res.Err, res.Duration = err, time.Since(start)
	return res
}

// env is what one check runs in: a context bounded by the per-check
// timeout, a private directory, and the processes, clients and streams to
// clean up.
type env struct {
	ctx    context.Context
	cancel context.CancelFunc
	cfg    *config
	binary string
	dir    string

	// extraEnv is added to the environment of every plugin the check
	// starts (the self-fence check's bound).
	extraEnv []string

	mu       sync.Mutex
	procs    []*proc
	cleanups []func()
	n        int
}

func newEnv(ctx context.Context, cfg *config, binary string) (*env, error) {
	// go-plugin puts the Unix socket in a directory under dir: a socket
	// path must stay under 108 bytes.
	dir, err := os.MkdirTemp("", "ahconf-")
	if err == nil && len(dir) > 60 {
		os.Remove(dir)
		dir, err = os.MkdirTemp("/tmp", "ahconf-")
	}
	if err != nil {
		return nil, fmt.Errorf("conformance: create a directory for the check: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	return &env{ctx: ctx, cancel: cancel, cfg: cfg, binary: binary, dir: dir}, nil
}

// onCleanup registers f to run at cleanup, before the processes are stopped.
func (e *env) onCleanup(f func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.cleanups = append(e.cleanups, f)
}

// close stops everything the check started and reports any process left
// behind.
func (e *env) close() error {
	e.cancel()
	e.mu.Lock()
	cleanups, procs := e.cleanups, e.procs
	e.mu.Unlock()
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
	var errs []error
	for _, p := range procs {
		if err := p.close(); err != nil {
			errs = append(errs, err)
		}
	}
	os.RemoveAll(e.dir)
	return errors.Join(errs...)
}

// cleanupStop is the deadline of the SIGTERM a check's cleanup sends
// before it kills the process group.
const cleanupStop = 500 * time.Millisecond

// proc is one plugin process the kit started, and the go-plugin clients
// connected to it.
type proc struct {
	e       *env
	token   string
	runner  *kitRunner
	client  *plugin.Client // the launching client
	clients []*plugin.Client
	grpc    *plugin.GRPCClient
	agent   *pluginclient.Client
	addr    net.Addr
	version int // negotiated
	// Learnt by the setup of a check.
	instance string
	caps     pluginclient.Capabilities
	handle   string
	att      *pluginclient.Attachment // at fence 1, after setupOpen
}

// child returns the process, nil if it never started.
func (p *proc) child() *child { return p.runner.child() }

// pid returns the process id, 0 if it never started.
func (p *proc) pid() int {
	if c := p.child(); c != nil {
		return c.pid
	}
	return 0
}

// start starts the plugin and completes the handshake. The returned proc
// is cleaned up by e.close even when err is not nil.
func (e *env) start() (*proc, error) {
	e.mu.Lock()
	e.n++
	n := e.n
	e.mu.Unlock()
	sessionDir := filepath.Join(e.dir, fmt.Sprintf("session-%d", n))
	if err := os.Mkdir(sessionDir, 0o700); err != nil {
		return nil, err
	}
	token := rand.Text()
	r := &kitRunner{
		path:    e.binary,
		args:    e.cfg.args,
		logPath: filepath.Join(e.dir, fmt.Sprintf("plugin-%d.log", n)),
		extraEnv: []string{
			wire.EnvSpawnTokenVar + "=" + SpawnTokenVar,
			SpawnTokenVar + "=" + token,
			wire.EnvSessionDir + "=" + sessionDir,
			wire.EnvDebug + "=",
		},
	}
	r.extraEnv = append(r.extraEnv, e.cfg.env...)
	r.extraEnv = append(r.extraEnv, e.extraEnv...)
	var versions []int
	if e.cfg.version != 0 {
		versions = []int{e.cfg.version}
	}
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  wire.Handshake(),
		VersionedPlugins: wire.PluginSets(nil, versions...),
		RunnerFunc: func(_ hclog.Logger, spec *exec.Cmd, _ string) (runner.Runner, error) {
			r.spec = spec
			return r, nil
		},
		UnixSocketConfig: &plugin.UnixSocketConfig{TempDir: e.dir},
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		StartTimeout:     e.cfg.startTimeout,
		Logger:           e.cfg.logger,
	})
	p := &proc{e: e, token: token, runner: r, client: client, clients: []*plugin.Client{client}}
	e.mu.Lock()
	e.procs = append(e.procs, p)
	e.mu.Unlock()

	rpc, err := client.Client()
	if err != nil {
		return p, fmt.Errorf("go-plugin handshake with %s failed: %w%s", e.binary, err, p.exitNote(err))
	}
	if p.addr, err = client.Start(); err != nil {
		return p, err
	}
	gc, ok := rpc.(*plugin.GRPCClient)
	if !ok {
		return p, fmt.Errorf("expected a gRPC plugin, go-plugin negotiated %T", rpc)
	}
	p.version = client.NegotiatedVersion()
	agent, err := pluginclient.Dispense(rpc, p.version)
	if err != nil {
		return p, fmt.Errorf("dispense %q: %w", wire.PluginName, err)
	}
	p.grpc, p.agent = gc, agent
	return p, nil
}

// exitNoteWait is how long exitNote waits for the process to exit: a while
// when err suggests the connection broke, not at all for an answer.
func exitNoteWait(err error) time.Duration {
	switch status.Code(err) {
	case codes.Unavailable, codes.Canceled, codes.DeadlineExceeded, codes.Unknown, codes.Internal:
		return 500 * time.Millisecond
	}
	return 0
}

// exitNote says, for an error message, whether the process has exited
// (waiting briefly for it) and quotes the end of its stderr; go-plugin's
// Diagnose text already does when err holds it.
func (p *proc) exitNote(err error) string {
	c := p.child()
	if c == nil {
		return ""
	}
	if err != nil && strings.Contains(err.Error(), "last lines of its stderr") {
		return ""
	}
	if !c.waitExit(exitNoteWait(err)) {
		return ""
	}
	note := fmt.Sprintf("; the plugin process exited (%s)", c.exitStatus())
	if tail := c.logTail(6, 1500); tail != "" {
		note += ", last lines of its stderr:\n" + tail
	}
	return note
}

// reattach connects a new go-plugin client to the running process, as a
// host that restarted does.
func (p *proc) reattach() (*pluginclient.Client, error) {
	c := p.child()
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig: wire.Handshake(),
		// Reattach neither negotiates nor reads VersionedPlugins: it
		// is given the version the start negotiated.
		Plugins: wire.PluginSets(nil)[p.version],
		Reattach: &plugin.ReattachConfig{
			Protocol:        plugin.ProtocolGRPC,
			ProtocolVersion: p.version,
			Addr:            p.addr,
			Pid:             c.pid,
			ReattachFunc:    reattachFunc(c, p.addr),
		},
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		Logger:           p.e.cfg.logger,
	})
	p.e.mu.Lock()
	p.clients = append(p.clients, client)
	p.e.mu.Unlock()
	rpc, err := client.Client()
	if err != nil {
		return nil, fmt.Errorf("go-plugin reattach to pid %d at %s failed: %w", c.pid, p.addr, err)
	}
	agent, err := pluginclient.Dispense(rpc, p.version)
	if err != nil {
		return nil, fmt.Errorf("dispense %q after reattach: %w", wire.PluginName, err)
	}
	return agent, nil
}

// close stops the process group, kills every go-plugin client (which
// waits for their goroutines), and checks that no process carrying the
// spawn token survived.
func (p *proc) close() error {
	var errs []error
	c := p.child()
	if c != nil {
		if err := stopWithDeadline(c.pid, cleanupStop); err != nil {
			errs = append(errs, fmt.Errorf("cleanup: %w", err))
		}
	}
	for _, cl := range p.clients {
		if err := killClient(cl, c); err != nil {
			errs = append(errs, err)
		}
	}
	if c != nil {
		if !c.waitExit(2 * time.Second) {
			errs = append(errs, fmt.Errorf("cleanup: plugin process %d was not reaped", c.pid))
		}
		c.stdout.Close()
		children.Delete(c.pid)
		token := SpawnTokenVar + "=" + p.token
		if left := envHolders(token); len(left) > 0 {
			for _, pid := range left {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			errs = append(errs, fmt.Errorf("cleanup: processes %v carrying the plugin's spawn token survived outside its process group %d; a plugin's children must stay in its process group", left, c.pid))
			// SIGKILL is delivered asynchronously: a process on another
			// CPU runs on for a moment. Wait, so that the kit does not
			// return while processes it started are still running.
			if !poll(2*time.Second, func() bool { return len(envHolders(token)) == 0 }) {
				errs = append(errs, fmt.Errorf("cleanup: processes %v carrying the plugin's spawn token still running 2s after SIGKILL", envHolders(token)))
			}
		}
	}
	return errors.Join(errs...)
}

// killClient calls go-plugin's Kill, which waits for the client's
// goroutines. They wait for EOF on the plugin's stdout, which a process
// that escaped the group could hold open: then the kit closes its end.
func killClient(cl *plugin.Client, c *child) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		cl.Kill()
	}()
	select {
	case <-done:
		return nil
	case <-time.After(3 * time.Second):
	}
	if c != nil {
		c.stdout.Close()
	}
	select {
	case <-done:
		return errors.New("cleanup: go-plugin's Kill waited for the plugin's stdout to close: a process outside the plugin's group holds it")
	case <-time.After(3 * time.Second):
		return errors.New("cleanup: go-plugin's Kill did not return")
	}
}
