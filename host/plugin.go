package host

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"github.com/hashicorp/go-plugin/runner"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/agenthost/agenthost/internal/pluginclient"
	"github.com/agenthost/agenthost/internal/privdir"
	"github.com/agenthost/agenthost/internal/wire"
	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/leasestore"
)

// Errors a plugin start or stop reports. They wrap the detail; match them
// with errors.Is.
var (
	// ErrStartupTimeout: the plugin did not become ready in time; it was
	// killed and reaped.
	ErrStartupTimeout = errors.New("plugin startup timed out")
	// ErrExitedBeforeReady: the plugin process exited during startup.
	ErrExitedBeforeReady = errors.New("plugin exited before readiness")
	// ErrPluginFailed: the plugin reported a failure (its message follows).
	ErrPluginFailed = errors.New("plugin failed")
	// ErrInvalidIdentity: the plugin reported another session id, spawn
	// token or pid than the host started it with.
	ErrInvalidIdentity = errors.New("plugin reported an invalid identity")
	// ErrExitedUnexpectedly: the plugin exited after readiness without being
	// asked to stop.
	ErrExitedUnexpectedly = errors.New("plugin exited unexpectedly")
)

// pluginSpec describes one plugin process start.
type pluginSpec struct {
	Agent      string
	Path       string
	Args       []string
	SessionID  string
	SessionDir string // absolute; the plugin's state and log live here
	SocketDir  string // absolute, short; go-plugin makes the socket under it
	SocketRoot string // the directory SocketDir must be directly inside
	Env        []string
	Fence      uint64
	// NewSession or ResumeSession (at most one) is the conversation the
	// plugin opens once attached and identified; neither opens none.
	NewSession    *pluginclient.NewSessionRequest
	ResumeSession *pluginclient.ResumeSessionRequest
	// IdentifyOnly starts the plugin only to read its Identify (its
	// capabilities): nothing is attached and SessionID is empty.
	IdentifyOnly   bool
	SpawnToken     string
	StartupTimeout time.Duration
	StopTimeout    time.Duration
	Logger         hclog.Logger
	// OnStart runs as soon as the process exists, alongside the handshake;
	// none of agenthost's requests reaches the plugin before it returned
	// (go-plugin opens its own broker and stdio streams meanwhile; see
	// procRunner.onStart).
	OnStart func(pid int) error
}

// pluginProc is one running plugin process and its connection.
type pluginProc struct {
	spec   pluginSpec
	client *plugin.Client
	rpc    *pluginclient.Client
	att    *pluginclient.Attachment   // this host's attachment, once attached
	conn   interface{ Close() error } // the gRPC connection, once made
	// direct: conn was dialed here, not by go-plugin's Client.
	direct   bool
	runner   *procRunner
	handle   string
	info     pluginclient.SessionInfo // what Open answered
	caps     pluginclient.Capabilities
	exports  bool // the identity says exports_state (providerstate.go)
	instance string
	version  int
	// lastSeq is the newest update seq a reattached plugin reported.
	lastSeq  uint64
	reattach leasestore.Reattach
	// waiting are the permission requests a readopted plugin reported it
	// waits on when it was reattached (see readoptedPermissions).
	waiting []*journal.PermissionRequest

	stopOnce      sync.Once
	stopErr       error
	stopRequested chan struct{}
	terminated    chan struct{} // closed once the process exited
	termErr       error         // valid after terminated
	mu            sync.Mutex
}

// startPlugin starts a plugin process and waits for it to be ready: the
// go-plugin handshake, an Attach at spec.Fence binding it to the session, an
// Identify that must name the same session id, spawn token and pid, then
// spec.Open. One timeout covers all of it. On any failure the process is
// killed with its group and reaped before startPlugin returns.
func startPlugin(ctx context.Context, spec pluginSpec) (*pluginProc, error) {
	if !filepath.IsAbs(spec.SessionDir) {
		return nil, fmt.Errorf("%w: session directory must be absolute, got %q", leasestore.ErrInvalidArgument, spec.SessionDir)
	}
	if !filepath.IsAbs(spec.Path) {
		return nil, fmt.Errorf("%w: plugin path must be absolute, got %q", leasestore.ErrInvalidArgument, spec.Path)
	}
	if spec.StartupTimeout <= 0 {
		spec.StartupTimeout = 30 * time.Second
	}
	if spec.StopTimeout <= 0 {
		spec.StopTimeout = 5 * time.Second
	}
	if err := os.MkdirAll(spec.SessionDir, 0o700); err != nil {
		return nil, fmt.Errorf("create session directory: %w", err)
	}
	// The root may sit in a shared temporary directory: check it is still
	// this user's private directory before a socket goes in it.
	if spec.SocketRoot == "" {
		return nil, fmt.Errorf("%w: no socket root", leasestore.ErrInvalidArgument)
	}
	if err := privdir.Ensure(spec.SocketRoot); err != nil {
		return nil, fmt.Errorf("plugin socket root: %w", err)
	}
	if err := os.MkdirAll(spec.SocketDir, 0o700); err != nil {
		return nil, fmt.Errorf("create socket directory: %w", err)
	}
	deadline := time.Now().Add(spec.StartupTimeout)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()

	r := &procRunner{
		path: spec.Path, args: spec.Args, logPath: filepath.Join(spec.SessionDir, "plugin.log"),
		log: spec.Logger, onStart: spec.OnStart,
	}
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  wire.Handshake(),
		VersionedPlugins: wire.PluginSets(nil),
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		GRPCDialOptions:  wire.HostDialOptions(),
		SkipHostEnv:      true,
		UnixSocketConfig: &plugin.UnixSocketConfig{TempDir: spec.SocketDir},
		StartTimeout:     spec.StartupTimeout,
		Logger:           spec.Logger.Named("go-plugin"),
		RunnerFunc: func(_ hclog.Logger, cmd *exec.Cmd, _ string) (runner.Runner, error) {
			// go-plugin's entries (cookie, versions, socket dir) first, then
			// the policy's; for a duplicate key the last one wins.
			r.env = append(append([]string{}, cmd.Env...), withoutProtocolEnv(spec.Env)...)
			return r, nil
		},
	})
	p := &pluginProc{spec: spec, client: client, runner: r, stopRequested: make(chan struct{}), terminated: make(chan struct{})}
	fail := func(err error) (*pluginProc, error) {
		p.kill()
		return nil, err
	}

	addr, err := client.Start() // the handshake
	// No agenthost request reaches the plugin before its owner is recorded;
	// a failed record explains a failed handshake better than the handshake
	// does.
	if serr := r.waitStarted(); serr != nil {
		return fail(p.classifyStartError(ctx, serr))
	}
	if err != nil {
		return fail(p.classifyStartError(ctx, err))
	}
	p.version = client.NegotiatedVersion()
	if p.version >= wire.ProtocolVersion2 {
		// go-plugin's Client would open its broker and stdio streams,
		// which agenthost never uses; a version 2 plugin does not need
		// its stdio drained (see reattachPlugin), so dial it directly.
		conn, err := grpc.NewClient("passthrough:///"+addr.String(), append(wire.HostDialOptions(),
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, addr.Network(), addr.String())
			}))...)
		if err != nil {
			return fail(fmt.Errorf("connect to the plugin: %w", err))
		}
		p.conn, p.direct, p.rpc = conn, true, pluginclient.New(conn, p.version)
	} else {
		rpcClient, err := client.Client()
		if err != nil {
			return fail(p.classifyStartError(ctx, err))
		}
		if g, ok := rpcClient.(*plugin.GRPCClient); ok {
			p.conn = g.Conn
		}
		if p.rpc, err = pluginclient.Dispense(rpcClient, p.version); err != nil {
			return fail(fmt.Errorf("dispense plugin: %w", err))
		}
	}
	go p.watchExit()

	var id pluginclient.Identity
	if p.version >= wire.ProtocolVersion2 && !spec.IdentifyOnly {
		// One round trip: attach, identify, open, and the update stream
		// the session's pump takes over (see pluginclient.Open). The
		// plugin refuses another spawn token before it changes anything;
		// the session id and pid are checked below as for version 1.
		// Opening before the identity is checked here is harmless: a
		// process that answers wrongly is killed with whatever it opened.
		opened, err := p.rpc.Open(ctx, pluginclient.OpenRequest{SessionID: spec.SessionID, Fence: spec.Fence, SpawnToken: spec.SpawnToken,
			FromSeq: 1, New: spec.NewSession, Resume: spec.ResumeSession})
		if err != nil {
			return fail(p.classifyStartError(ctx, err))
		}
		p.att, id = opened.Attachment, opened.Identity
		p.handle, p.info = opened.Session.Handle, opened.Session
	} else {
		if !spec.IdentifyOnly {
			if p.att, _, err = p.rpc.Attach(ctx, spec.SessionID, spec.Fence); err != nil {
				return fail(p.classifyStartError(ctx, err))
			}
		}
		if id, err = p.rpc.Identify(ctx); err != nil {
			return fail(p.classifyStartError(ctx, err))
		}
	}
	p.caps, p.exports = id.Capabilities, id.ExportsState
	if id.SessionID != spec.SessionID || id.SpawnToken != spec.SpawnToken || id.PID != r.pid {
		return fail(fmt.Errorf("%w: expected session %q, token %q…, pid %d; it reported session %q, token %q…, pid %d",
			ErrInvalidIdentity, spec.SessionID, short(spec.SpawnToken), r.pid, id.SessionID, short(id.SpawnToken), id.PID))
	}
	p.instance = id.InstanceID
	if p.version < wire.ProtocolVersion2 && p.att != nil {
		var info pluginclient.SessionInfo
		switch {
		case spec.ResumeSession != nil:
			info, err = p.att.ResumeSession(ctx, *spec.ResumeSession)
		case spec.NewSession != nil:
			info, err = p.att.NewSession(ctx, *spec.NewSession)
		}
		if err != nil {
			return fail(p.classifyStartError(ctx, err))
		}
		p.handle, p.info = info.Handle, info
	}
	p.reattach = leasestore.Reattach{
		ProtocolVersion: p.version, PluginPath: spec.Path, LogPath: r.logPath,
		Network: addr.Network(), Address: addr.String(),
	}
	return p, nil
}

// pluginFailure is the plugin's own report of a failed start: it reads as
// ErrPluginFailed with the plugin's message and matches the call's error
// too (an *pluginclient.InvalidOptionError, pluginclient.ErrAuthRequired).
type pluginFailure struct {
	msg string
	err error
}

func (e *pluginFailure) Error() string   { return ErrPluginFailed.Error() + ": " + e.msg }
func (e *pluginFailure) Unwrap() []error { return []error{ErrPluginFailed, e.err} }

func short(s string) string {
	if len(s) > 8 {
		return s[:8]
	}
	return s
}

// classifyStartError turns a startup failure into the error a user can act
// on. A failed RPC usually means the process died: wait briefly for its exit
// status so the error can say how it ended.
func (p *pluginProc) classifyStartError(ctx context.Context, err error) error {
	// A call the plugin answered is its own report, unless it is dying.
	var perr *pluginclient.Error
	if errors.As(err, &perr) && p.runner.exited != nil && perr.Answered() && !p.exitedWithin(50*time.Millisecond) {
		return &pluginFailure{msg: perr.Message, err: err}
	}
	var ierr *pluginclient.InvalidOptionError
	if errors.As(err, &ierr) || errors.Is(err, pluginclient.ErrAuthRequired) {
		// The plugin's refusal of a setting, or its provider's demand for
		// credentials: the caller answers each in its own way.
		return &pluginFailure{msg: err.Error(), err: err}
	}
	if p.runner.exited != nil && p.exitedWithin(500*time.Millisecond) {
		// Keep what the host saw first: a SIGKILL exit is often the host's
		// own reaction to a failed handshake, which only err explains.
		return fmt.Errorf("%w (%s; the host saw: %v); see its log %s", ErrExitedBeforeReady, p.runner.exitDescription(), err, p.runner.logPath)
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		return fmt.Errorf("plugin startup cancelled: %w", ctx.Err())
	}
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w after %s", ErrStartupTimeout, p.spec.StartupTimeout)
	}
	if p.runner.exited == nil {
		// The process never started.
		return fmt.Errorf("start plugin %s: %w", p.spec.Path, err)
	}
	return fmt.Errorf("plugin startup: %w", err)
}

func (p *pluginProc) exitedWithin(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.runner.exited:
		return true
	case <-t.C:
		return false
	}
}

// watchExit records how the process ended: nil after a requested stop, an
// error naming the session and the exit otherwise.
func (p *pluginProc) watchExit() {
	select {
	case <-p.runner.exited:
	case <-p.runner.detachedCh:
		return // the plugin lives on; nobody here will see it exit
	}
	p.mu.Lock()
	select {
	case <-p.stopRequested:
	default:
		p.termErr = fmt.Errorf("%w: session %q plugin (pid %d) %s", ErrExitedUnexpectedly,
			p.spec.SessionID, p.runner.pid, p.runner.exitDescription())
	}
	p.mu.Unlock()
	close(p.terminated)
}

// Terminated is closed when the plugin process has exited.
func (p *pluginProc) Terminated() <-chan struct{} { return p.terminated }

// TermErr is nil if the plugin exited because it was asked to stop, and an
// error naming the session and the exit otherwise. Valid after Terminated.
func (p *pluginProc) TermErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.termErr
}

// kill kills the process group, waits until it is reaped, and releases the
// go-plugin client and the socket directory. Used for failed starts.
func (p *pluginProc) kill() {
	p.stopOnce.Do(func() {
		close(p.stopRequested)
		p.discard()
		_ = p.runner.Kill(context.Background()) // a no-op when nothing was started
		p.closeClient()                         // ends go-plugin's goroutines; the process is gone
		if p.runner.exited != nil {
			<-p.runner.exited
		}
		p.removeSocketDir()
	})
}

// removeSocketDir removes the plugin's private socket directory, and only
// ever a directory directly inside the host's socket root.
func (p *pluginProc) removeSocketDir() {
	dir, root := p.spec.SocketDir, p.spec.SocketRoot
	if dir == "" || root == "" || filepath.Dir(dir) != filepath.Clean(root) {
		return
	}
	_ = os.RemoveAll(dir)
}

// Stop stops the plugin: Close (the agent releases its CLI), SIGTERM to the
// group, and SIGKILL to the group if it has not exited after StopTimeout —
// never go-plugin's fixed 2 s. It returns once the process is reaped. It is
// idempotent and safe to call concurrently: every caller waits for the same
// stop.
func (p *pluginProc) Stop(ctx context.Context) error {
	p.stopOnce.Do(func() {
		close(p.stopRequested)
		timeout := p.spec.StopTimeout
		deadline := time.Now().Add(timeout)
		// Ask the agent to close its session first, bounded by half the
		// stop budget so a hung plugin still gets SIGTERM in time.
		if p.att != nil {
			cctx, cancel := context.WithTimeout(ctx, timeout/2)
			_ = p.att.Close(cctx)
			cancel()
		}
		p.discard()
		_ = p.runner.signal(unix.SIGTERM)
		if !p.exitedWithin(time.Until(deadline)) {
			p.spec.Logger.Warn("plugin ignored graceful shutdown; killing its process group", "pid", p.runner.pid, "timeout", timeout)
			_ = p.runner.signal(unix.SIGKILL)
			<-p.runner.exited
		}
		p.closeClient()
		p.removeSocketDir()
	})
	select {
	case <-p.terminated:
	case <-p.runner.detachedCh: // detached before: the plugin lives on
	}
	return p.stopErr
}

// release frees the connection and the socket directory of a plugin that
// has already exited. It is a no-op after Stop, kill or Detach.
func (p *pluginProc) release() {
	p.stopOnce.Do(func() {
		close(p.stopRequested)
		p.discard()
		p.closeClient()
		p.removeSocketDir()
	})
}

// Detach lets the plugin outlive this host: the connection is dropped and
// the process is neither signalled nor watched any more.
func (p *pluginProc) Detach() {
	p.stopOnce.Do(func() {
		close(p.stopRequested)
		p.discard()
		p.runner.detach()
		if p.conn != nil {
			_ = p.conn.Close()
		}
		// The client's goroutines end now that the runner reports the
		// plugin detached; Kill is not called, so the process lives on.
	})
}

// discard ends the update stream a version 2 start or reattach opened and
// no pump took (pluginclient.Attachment.Discard).
func (p *pluginProc) discard() {
	if p.att != nil {
		p.att.Discard()
	}
}

// closeClient ends the go-plugin client of a plugin this host started
// (its goroutines, the connection), or the connection of one dialed
// directly (version 2, see startPlugin and reattachPlugin). go-plugin's
// Kill would make the protocol client it never made, streams included,
// only to close it: of a directly dialed plugin, go-plugin's goroutines
// end with the process, which has exited (or was never started) here.
func (p *pluginProc) closeClient() {
	if p.client != nil && !p.direct {
		p.client.Kill()
	}
	if p.conn != nil {
		_ = p.conn.Close()
	}
}

// Detached is closed once Detach was called.
func (p *pluginProc) Detached() <-chan struct{} { return p.runner.detachedCh }

// PID returns the plugin's process id.
func (p *pluginProc) PID() int { return p.runner.pid }

// withoutProtocolEnv drops the variables go-plugin uses to talk to the
// plugin (its PLUGIN_* settings and the magic cookie) from a policy-built
// environment: a login shell or a configuration must not redirect the
// plugin's socket or break its handshake.
func withoutProtocolEnv(env []string) []string {
	cookie := wire.Handshake().MagicCookieKey + "="
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if strings.HasPrefix(kv, "PLUGIN_") || strings.HasPrefix(kv, cookie) {
			continue
		}
		out = append(out, kv)
	}
	return out
}
