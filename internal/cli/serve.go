package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/localapi"
)

// maxSocketPath is the longest unix socket path every platform accepts
// (sun_path is 104 bytes on macOS, 108 on Linux, both with the NUL).
const maxSocketPath = 103

// closeTimeout bounds closing the host at exit.
const closeTimeout = 30 * time.Second

const serveLong = `Open the state directory and serve the local API on the unix socket
<state-dir>/agenthost.sock (mode 0600; only processes of the same user are
served). The API is JSON-RPC 2.0, one JSON object per line, compatible with
the Agent Client Protocol; the other commands of this binary are its clients.

When it is listening, serve prints one line on stdout for the program that
launched it, and nothing else:

  {"ready":true,"socket":"/…/agenthost.sock","pid":1234,"stateDir":"/…","version":"…","agents":[…]}

The sessions a previous host left are decided in the background meanwhile:
_agenthost/status shows each decision as it is made, and a request on a
session not decided yet is answered CodeSessionHeld (-32007), "not decided yet".

The socket is checked each second: deleted, it is made again (mode 0600);
replaced by another file, serve exits saying so, for a supervisor to restart it.

The sessions live in the state directory's Badger store, this machine's.
With --store etcd they live in an etcd cluster that several machines' hosts
share (--etcd-endpoints, TLS with --etcd-ca/--etcd-cert/--etcd-key): each
host joins under --host-id (default: derived from /etc/machine-id) with a
liveness lease of --liveness-ttl; a session runs on one host at a time, a
client of another host is told which, and the sessions of a host that is
lost are taken over by another after the TTL plus a drift margin. The same
settings can go in <state-dir>/agenthost.json under "serve" ("store",
"etcdEndpoints", "etcdCA", "etcdCert", "etcdKey", "etcdPrefix",
"livenessTTL", "hostId"); a flag given wins.

SIGINT or SIGTERM detaches: the host closes, while every session's plugin keeps
running with its lease; the next serve readopts them and drains what they
produced meanwhile. With --shutdown-sessions every session is stopped instead.

Agents: the built-ins (claude, codex, scripted), every executable in
<state-dir>/plugins/ (named after its file), and those named in
<state-dir>/agenthost.json:

  {"agents": {"mine": {"path": "/abs/path/to/plugin", "args": [], "env": ["K=V"],
                       "sha256": "<hex digest, verified before every start>"}}}

No restart is needed to pick up a change: serve watches both, and a request
naming an agent it does not serve rescans them at once (so 'cp plugin
<state-dir>/plugins/mine && agenthost run --agent mine' works). A session
already running keeps its plugin; a removed agent takes no new session. A
malformed change is logged and refused, and the agents before it are kept:
'agenthost agents' shows what the host serves and the refusal.`

// DefaultIdleTimeout is serve --idle-timeout's default.
const DefaultIdleTimeout = 10 * time.Minute

func (a *App) serveCommand() *cobra.Command {
	var (
		shutdown bool
		idle     time.Duration
		stores   storeFlags
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the host and serve its API on <state-dir>/agenthost.sock",
		Long:  serveLong,
		Example: `  agenthost serve
  agenthost serve --state-dir /tmp/ah --log-level info
  agenthost serve --shutdown-sessions     # stop every session on exit
  agenthost serve --idle-timeout 0        # never stop an idle session's plugin
  agenthost serve --store etcd --etcd-endpoints https://10.0.0.1:2379,https://10.0.0.2:2379,https://10.0.0.3:2379 \
      --etcd-ca ca.pem --etcd-cert host.pem --etcd-key host-key.pem   # one of several machines' hosts`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if idle < 0 {
				return usageErrorf("--idle-timeout %s is negative: give a duration such as 10m, or 0 to never stop idle sessions", idle)
			}
			sc, err := a.resolveStore(cmd, &stores)
			if err != nil {
				return err
			}
			return a.serve(cmd.Context(), shutdown, idle, sc)
		},
	}
	stores.register(cmd.Flags())
	cmd.Flags().BoolVar(&shutdown, "shutdown-sessions", false, "on exit, stop every session instead of leaving its plugin running for the next host")
	cmd.Flags().DurationVar(&idle, "idle-timeout", DefaultIdleTimeout,
		"stop the plugin (and CLI) of a session with no turn, no pending permission and no client following it for this long; "+
			"its next prompt, load or resume starts it again, the conversation intact (0: never)")
	return cmd
}

// openedHost is a host opened on the state directory, with what it runs.
type openedHost struct {
	h        *host.Host
	stateDir string
	agents   []agentEntry // at open; reloader has those served now
	log      hclog.Logger
	// reloader finds agents installed while the host runs (see
	// agentsreload.go); stopWatch ends its watch.
	reloader  *agentsReloader
	stopWatch func()
}

// openHost loads the agents and opens the host on the state directory,
// stopping the plugins of sessions idle for idle (0: never).
func (a *App) openHost(ctx context.Context, idle time.Duration, sc storeConfig) (*openedHost, error) {
	dir, err := a.resolveStateDir()
	if err != nil {
		return nil, err
	}
	log, err := a.logger("agenthost")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create the state directory: %w", err)
	}
	// The protocol library logs through slog; host/localapi sets its
	// logger only after the connection's reader started, which may have
	// used the default by then. Keep the default quiet so nothing of it
	// reaches stderr.
	slog.SetDefault(slog.New(slog.DiscardHandler))
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find this executable, which serves the built-in plugins: %w", err)
	}
	if resolved, err := filepath.EvalSymlinks(exe); err == nil {
		exe = resolved
	}
	agents, err := a.loadAgents(dir, exe)
	if err != nil {
		return nil, err
	}
	for _, e := range agents {
		log.Debug("agent", "name", e.Name, "source", e.Source, "path", e.Plugin.Path, "sha256", e.Plugin.SHA256 != "",
			"credentials", credentialsChoice(e.Credentials), "credentialVariables", len(e.Credentials.Variables))
	}
	hostLog := log.Named("host")
	reloader := newAgentsReloader(dir, agents, func() ([]agentEntry, error) { return a.loadAgents(dir, exe) }, log.Named("agents"))
	// The API is served while the sessions are decided: a plugin that
	// does not answer holds up its own session's decision only.
	hc := host.Config{StateDir: dir, HostID: sc.HostID, Agents: hostAgents(agents), Credentials: hostCredentials(agents), Logger: hostLog,
		ReconcileInBackground: true, OnUnknownAgent: reloader.onUnknownAgent, IdleTimeout: idle}
	if err := openStore(ctx, &hc, sc, hostLog.Named("store")); err != nil {
		return nil, err
	}
	h, err := host.Open(ctx, hc)
	if err != nil {
		return nil, hostOpenError(err, sc)
	}
	reloader.attach(h)
	return &openedHost{h: h, stateDir: dir, agents: agents, log: log, reloader: reloader, stopWatch: reloader.watch(context.WithoutCancel(ctx))}, nil
}

// close detaches from (or, with shutdown, stops) every session and closes
// the host.
func (o *openedHost) close(shutdown bool) error {
	o.stopWatch()
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	if shutdown {
		return o.h.Shutdown(ctx)
	}
	return o.h.Close(ctx)
}

// listen listens on the state directory's socket, mode 0600. A socket file
// left by a host that died is removed, but only after a dial to it failed:
// a socket that answers belongs to a live host.
func listen(stateDir string) (*apiSocket, error) {
	path := filepath.Join(stateDir, SocketName)
	if err := checkSocketPath(stateDir); err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket; move it away", path)
		}
		if conn, err := net.DialTimeout("unix", path, time.Second); err == nil {
			conn.Close()
			return nil, fmt.Errorf("another agenthost already serves %s", path)
		}
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			return nil, fmt.Errorf("remove the stale socket %s: %w", path, err)
		}
	}
	return listenSocket(path)
}

// checkSocketPath refuses a state directory whose socket path is too long
// for a unix socket.
func checkSocketPath(stateDir string) error {
	path := filepath.Join(stateDir, SocketName)
	// One byte is kept for the name a deleted socket is made again under.
	if limit := maxSocketPath - len(remakeSuffix); len(path) > limit {
		return fmt.Errorf("the socket path %s is %d bytes, longer than unix sockets allow (%d): use a shorter --state-dir", path, len(path), limit)
	}
	return nil
}

// signals returns a context cancelled by the first SIGINT or SIGTERM; a
// second one exits at once with status 130.
func (a *App) signals(ctx context.Context, onFirst func()) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case <-ch:
		case <-done:
			return
		}
		if onFirst != nil {
			onFirst()
		}
		cancel()
		select {
		case <-ch:
			fmt.Fprintln(a.Stderr, "agenthost: interrupted again; exiting now")
			os.Exit(130)
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		close(done)
		cancel()
	}
}

func (a *App) serve(ctx context.Context, shutdown bool, idle time.Duration, sc storeConfig) (err error) {
	ctx, stop := a.signals(ctx, nil)
	defer stop()
	if dir, err := a.resolveStateDir(); err != nil {
		return err
	} else if err := checkSocketPath(dir); err != nil {
		return err
	}
	o, err := a.openHost(ctx, idle, sc)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := o.close(shutdown); cerr != nil && err == nil {
			err = fmt.Errorf("close the host: %w", cerr)
		}
	}()
	socket, err := listen(o.stateDir)
	if err != nil {
		return err
	}
	sock := socket.path
	srv := &localapi.Server{Host: o.h, Version: a.version(), Logger: o.log.Named("api"), Agents: o.reloader.result}
	served := make(chan error, 1)
	go func() { served <- serveSocket(ctx, srv, socket, o.log) }()

	line, _ := json.Marshal(api.ServeReady{Ready: true, Socket: sock, PID: os.Getpid(), StateDir: o.stateDir, Version: a.version(), Agents: o.h.Agents()})
	fmt.Fprintf(a.Stdout, "%s\n", line)
	if isTerminal(a.Stderr) {
		what := "detaches (sessions keep running)"
		if shutdown {
			what = "stops every session"
		}
		fmt.Fprintf(a.Stderr, "agenthost %s serving %s on %s; Ctrl-C %s\n", a.version(), o.stateDir, sock, what)
	}
	select {
	case <-ctx.Done():
		err = <-served
	case err = <-served:
	}
	if err != nil {
		return fmt.Errorf("serve %s: %w", sock, err)
	}
	return nil
}

// stdio is the ReadWriteCloser of agenthost acp: requests on stdin,
// answers on stdout.
type stdio struct {
	in    io.Reader
	out   io.Writer
	close func() error
}

func (s stdio) Read(p []byte) (int, error)  { return s.in.Read(p) }
func (s stdio) Write(p []byte) (int, error) { return s.out.Write(p) }
func (s stdio) Close() error {
	if s.close != nil {
		return s.close()
	}
	return nil
}

const acpLong = `Serve the local API on stdin and stdout for one client, as an Agent Client
Protocol agent: an editor that speaks ACP (Zed, for one) runs
'agenthost acp --agent NAME' as its agent command and gets durable sessions of
agent NAME. New sessions run NAME unless the request names another agent in
_meta.agenthost.agent.

stdout carries only the protocol; logs go to stderr. The host holds the state
directory while it runs, so no 'agenthost serve' may run on the same one; acp
serves the state directory's socket too, so 'agenthost sessions', 'journal' and
'status' work alongside it. When stdin ends, the host detaches (sessions keep
running for the next host) unless --shutdown-sessions is given.`

func (a *App) acpCommand() *cobra.Command {
	var agent string
	var shutdown bool
	var stores storeFlags
	cmd := &cobra.Command{
		Use:   "acp --agent NAME",
		Short: "Be an Agent Client Protocol agent on stdin/stdout (for editors)",
		Long:  acpLong,
		Example: `  agenthost acp --agent claude
  # in an editor's agent settings: command "agenthost", args ["acp", "--agent", "codex"]`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sc, err := a.resolveStore(cmd, &stores)
			if err != nil {
				return err
			}
			return a.acp(cmd.Context(), agent, shutdown, sc)
		},
	}
	stores.register(cmd.Flags())
	cmd.Flags().StringVar(&agent, "agent", "", "the agent new sessions run (required)")
	cmd.Flags().BoolVar(&shutdown, "shutdown-sessions", false, "when the client goes, stop every session instead of leaving its plugin running")
	_ = cmd.MarkFlagRequired("agent")
	_ = cmd.RegisterFlagCompletionFunc("agent", a.completeAgents)
	return cmd
}

func (a *App) acp(ctx context.Context, agent string, shutdown bool, sc storeConfig) (err error) {
	ctx, stop := a.signals(ctx, nil)
	defer stop()
	o, err := a.openHost(ctx, 0, sc) // its one client follows its sessions: never idle
	if err != nil {
		return err
	}
	defer func() {
		if cerr := o.close(shutdown); cerr != nil && err == nil {
			err = fmt.Errorf("close the host: %w", cerr)
		}
	}()
	known := false
	for _, e := range o.agents {
		known = known || e.Name == agent
	}
	if !known {
		return fmt.Errorf("%w %q: configured agents are %q", host.ErrUnknownAgent, agent, o.h.Agents())
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The socket too, best effort, so the client commands work alongside.
	var sockDone chan error
	if socket, lerr := listen(o.stateDir); lerr != nil {
		o.log.Warn("not serving the state directory's socket", "error", lerr)
	} else {
		sockDone = make(chan error, 1)
		o.log.Debug("serving the socket too", "socket", socket.path)
		srv := &localapi.Server{Host: o.h, Version: a.version(), Logger: o.log.Named("api"), Agents: o.reloader.result}
		go func() { sockDone <- serveSocket(ctx, srv, socket, o.log) }()
	}
	srv := &localapi.Server{Host: o.h, DefaultAgent: agent, Version: a.version(), Logger: o.log.Named("acp"), Agents: o.reloader.result}
	// Reading goes through a pipe: closing it ends the server's reader at
	// once, where closing a blocking stdin would not interrupt a read.
	pr, pw := io.Pipe()
	go func() {
		_, cerr := io.Copy(pw, a.Stdin)
		_ = pw.CloseWithError(cerr)
	}()
	// Writing goes through an abortableWriter: an editor that stopped
	// reading must not hold up the exit.
	out := newAbortableWriter(a.Stdout)
	err = srv.ServeConn(ctx, stdio{in: pr, out: out, close: func() error { _ = out.Close(); return pr.Close() }})
	cancel()
	if sockDone != nil {
		if serr := <-sockDone; serr != nil && !errors.Is(serr, net.ErrClosed) {
			o.log.Warn("socket server", "error", serr)
		}
	}
	return err
}
