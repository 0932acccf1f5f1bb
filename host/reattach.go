package host

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"github.com/hashicorp/go-plugin/runner"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/agenthost/agenthost/internal/pluginclient"
	"github.com/agenthost/agenthost/internal/wire"
	"github.com/agenthost/agenthost/leasestore"
	"github.com/agenthost/agenthost/probe"
)

// ErrNotAnswering: the recorded owner is alive but did not answer its
// identity as the lease expects; it keeps the session (latched), and no
// second writer is started.
var ErrNotAnswering = errors.New("plugin is alive but did not prove its identity")

// reattachSpec is what a new host knows about a plugin that outlived the
// previous one.
type reattachSpec struct {
	SessionID string
	Owner     leasestore.ProcessIdentity
	Reattach  leasestore.Reattach
	Fence     uint64 // the lease fence the new host will attach at
	// FromSeq is the first update a version 2 Open streams: the one after
	// the last journaled.
	FromSeq     uint64
	StopTimeout time.Duration
	Timeout     time.Duration
	Logger      hclog.Logger
	Prober      *probe.Prober
	// SocketRoot is the host's socket root; the plugin's socket directory
	// is SocketRoot/<spawn token>, the only directory a stop removes.
	SocketRoot string
}

// reattachPlugin reconnects to a running plugin: it pins the process with a
// pidfd and re-verifies its identity (so a recycled pid is never adopted),
// reconnects to the recorded address at the recorded protocol version
// (go-plugin's reattach does not negotiate), and checks the plugin's own
// identity: session id, spawn token, pid, instance id and version.
//
// At version 1 it only identifies: the caller moves the lease first, then
// attaches at the new fence. At version 2 it makes the combined Open at
// spec.Fence, the lease's next fence, from spec.FromSeq, before the lease
// moves: the returned plugin is attached, its update stream started (see
// readopt for why attaching before the move is safe).
//
// The connection is a plain gRPC one, not go-plugin's client: go-plugin's
// Client opens a broker stream and a stdio stream on every connection,
// which agenthost never uses, and its reattach path only wraps the dial.
// A plugin that speaks version 2 does not need its stdio stream drained
// (the SDK points os.Stdout and os.Stderr back at the process's stderr at
// the first call); one that speaks only version 1 may (go-plugin's pipes
// behind them block a plugin once 64 KiB wait), so go-plugin's client is
// kept for it.
func reattachPlugin(ctx context.Context, spec reattachSpec) (*pluginProc, error) {
	if spec.Timeout <= 0 {
		spec.Timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, spec.Timeout)
	defer cancel()
	pid := spec.Owner.PID
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("pin plugin pid %d: %w", pid, err)
	}
	// Read the identity after the pidfd exists: if it still matches, the
	// pidfd refers to the recorded process.
	res := spec.Prober.Probe(ctx, leasestore.Session{ID: spec.SessionID, Lease: leasestore.Lease{Claim: leasestore.ClaimLive, Owner: &spec.Owner}})
	if !res.ProvenAlive() {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("plugin pid %d is no longer the recorded owner: %v", pid, res)
	}
	version := spec.Reattach.ProtocolVersion
	pset, ok := wire.PluginSets(nil)[version]
	if !ok {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("%w: it negotiated protocol version %d, this host speaks %d to %d", ErrNotAnswering, version, wire.ProtocolVersion1, wire.ProtocolVersion)
	}
	r, err := attachRunner(pid, fd, spec.Reattach.LogPath, spec.Logger)
	if err != nil {
		return nil, err
	}
	dial, connected := dialWhile(ctx, spec.Reattach.Network, spec.Reattach.Address)
	// gRPC waits 20 s for a connection a stopped (SIGSTOP) or hung plugin
	// accepts but never answers: bound it by the reattach budget, so a
	// plugin that does not answer is latched within ReattachTimeout, and
	// dial through dialWhile, so a caller giving up (a host closing) cuts
	// the wait short.
	dialOpts := append(wire.HostDialOptions(), grpc.WithConnectParams(grpc.ConnectParams{
		Backoff: backoff.DefaultConfig, MinConnectTimeout: spec.Timeout}), grpc.WithContextDialer(dial))
	p := &pluginProc{
		spec: pluginSpec{SessionID: spec.SessionID, Fence: spec.Fence, StopTimeout: spec.StopTimeout, Logger: spec.Logger,
			SocketDir: filepath.Join(spec.SocketRoot, spec.Owner.SpawnToken), SocketRoot: spec.SocketRoot},
		runner: r, version: version, reattach: spec.Reattach,
		stopRequested: make(chan struct{}), terminated: make(chan struct{}),
	}
	fail := func(err error) (*pluginProc, error) {
		// The plugin is alive and may hold the session: never kill it
		// here; just let go of it.
		p.Detach()
		return nil, err
	}
	if version >= wire.ProtocolVersion2 {
		conn, err := grpc.NewClient("passthrough:///"+spec.Reattach.Address,
			append(dialOpts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
		if err != nil {
			return fail(fmt.Errorf("%w: reconnect: %v", ErrNotAnswering, err))
		}
		p.conn, p.rpc = conn, pluginclient.New(conn, version)
	} else {
		p.client = plugin.NewClient(&plugin.ClientConfig{
			HandshakeConfig:  wire.Handshake(),
			Plugins:          pset, // the reattach path does not negotiate: give the recorded version's set
			AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
			GRPCDialOptions:  dialOpts,
			Logger:           spec.Logger.Named("go-plugin"),
			Reattach: &plugin.ReattachConfig{
				Protocol: plugin.ProtocolGRPC, ProtocolVersion: version, Pid: pid,
				Addr:         &net.UnixAddr{Net: spec.Reattach.Network, Name: spec.Reattach.Address},
				ReattachFunc: func() (runner.AttachedRunner, error) { return r, nil },
			},
		})
		rpcClient, err := p.client.Client()
		if err != nil {
			connected()
			if cerr := ctx.Err(); cerr != nil {
				return fail(fmt.Errorf("%w: reconnect: %w: %v", ErrNotAnswering, cerr, err))
			}
			return fail(fmt.Errorf("%w: reconnect: %v", ErrNotAnswering, err))
		}
		if g, ok := rpcClient.(*plugin.GRPCClient); ok {
			p.conn = g.Conn
		}
		if p.rpc, err = pluginclient.Dispense(rpcClient, version); err != nil {
			connected()
			return fail(fmt.Errorf("%w: dispense: %v", ErrNotAnswering, err))
		}
	}
	var id pluginclient.Identity
	if version >= wire.ProtocolVersion2 {
		// The plugin refuses another spawn token or instance id before it
		// raises its fence: a process that is not the recorded owner is
		// never attached.
		var opened pluginclient.Opened
		opened, err = p.rpc.Open(ctx, pluginclient.OpenRequest{SessionID: spec.SessionID, Fence: spec.Fence,
			SpawnToken: spec.Owner.SpawnToken, InstanceID: spec.Owner.InstanceID, FromSeq: spec.FromSeq})
		p.att, id = opened.Attachment, opened.Identity
	} else {
		id, err = p.rpc.Identify(ctx)
	}
	connected()
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return fail(fmt.Errorf("%w: identify: %w: %v", ErrNotAnswering, cerr, err))
		}
		return fail(fmt.Errorf("%w: identify: %v", ErrNotAnswering, err))
	}
	if id.SessionID != spec.SessionID || id.SpawnToken != spec.Owner.SpawnToken || id.PID != pid ||
		(spec.Owner.InstanceID != "" && id.InstanceID != spec.Owner.InstanceID) || id.ProtocolVersion != version {
		return fail(fmt.Errorf("%w: it reports session %q, pid %d, instance %q, protocol %d", ErrInvalidIdentity,
			id.SessionID, id.PID, id.InstanceID, id.ProtocolVersion))
	}
	p.instance, p.handle, p.caps, p.waiting, p.lastSeq = id.InstanceID, id.Handle, id.Capabilities, id.PendingPermissions, id.LastSeq
	p.exports = id.ExportsState
	go p.watchExit()
	return p, nil
}

// dialWhile is the dialer of a reattach's gRPC connection to the plugin's
// socket: until connected is called, ctx ending closes the connections it
// made (a handshake a stopped plugin never answers fails at once, not at
// gRPC's connect timeout) and fails its later dials with a permanent
// error. Once connected, ctx no longer matters: the connection is the
// session's.
func dialWhile(ctx context.Context, network, addr string) (dial func(context.Context, string) (net.Conn, error), connected func()) {
	connecting, giveUp := context.WithCancel(context.Background())
	unlink := context.AfterFunc(ctx, giveUp)
	dial = func(dctx context.Context, _ string) (net.Conn, error) {
		if err := connecting.Err(); err != nil {
			return nil, permanentDialError{fmt.Errorf("reattach given up: %w", ctx.Err())}
		}
		c, err := (&net.Dialer{}).DialContext(dctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &watchedConn{Conn: c, unwatch: context.AfterFunc(connecting, func() { _ = c.Close() })}, nil
	}
	return dial, func() { unlink() }
}

// permanentDialError tells gRPC not to retry the dial.
type permanentDialError struct{ error }

func (permanentDialError) Temporary() bool { return false }

func (e permanentDialError) Unwrap() error { return e.error }

// watchedConn is a connection dialWhile closes if its reattach is given
// up before it connected.
type watchedConn struct {
	net.Conn
	unwatch func() bool
}

func (c *watchedConn) Close() error {
	c.unwatch()
	return c.Conn.Close()
}
