package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/agenthost/agenthost/internal/agentpb"
	"github.com/agenthost/agenthost/internal/wire"
)

// ProtocolVersion is the plugin protocol version this SDK speaks.
const ProtocolVersion = wire.ProtocolVersion

// Handshake returns the go-plugin handshake of agenthost plugins, for tools
// that start plugins without the host.
func Handshake() plugin.HandshakeConfig { return wire.Handshake() }

// ServeOption configures Serve.
type ServeOption interface{ apply(*serveConfig) }

type serveOptionFunc func(*serveConfig)

func (f serveOptionFunc) apply(c *serveConfig) { f(c) }

type serveConfig struct {
	logger       hclog.Logger
	outboxMemory int
	debug        bool
	debugOut     io.Writer
	stopTimeout  time.Duration
	capabilities Capabilities
}

// WithLogger replaces the default logger (hclog JSON on the plugin's
// stderr, which the host points at the session's log file).
func WithLogger(l hclog.Logger) ServeOption {
	return serveOptionFunc(func(c *serveConfig) { c.logger = l })
}

// WithOutboxMemory sets how many bytes of unacknowledged updates stay in
// memory before the oldest spill to a file (default DefaultOutboxMemory).
func WithOutboxMemory(bytes int) ServeOption {
	return serveOptionFunc(func(c *serveConfig) { c.outboxMemory = bytes })
}

// WithDebug serves in debug mode: the plugin is started by hand (under a
// debugger, say), prints a JSON reattach config to out, and serves until
// interrupted. Setting AGENTHOST_PLUGIN_DEBUG=1 does the same, printing to
// stdout.
func WithDebug(out io.Writer) ServeOption {
	return serveOptionFunc(func(c *serveConfig) { c.debug, c.debugOut = true, out })
}

// WithStopTimeout bounds how long a SIGTERM waits for the running turn to
// end and the agent to close before the plugin stops anyway (default 5s).
func WithStopTimeout(d time.Duration) ServeOption {
	return serveOptionFunc(func(c *serveConfig) { c.stopTimeout = d })
}

// Serve runs the plugin named name until its host stops it, creating the
// session's Agent with factory. Call it from main and return (or exit)
// when it returns.
//
// Serve never writes to stdout beyond go-plugin's handshake line, which the
// host reads; a plugin must not either (log through Environment.Logger). It
// catches SIGPIPE, so a plugin whose host died does not die on a write to a
// broken pipe (children it starts keep the default SIGPIPE behaviour), and
// on SIGTERM it cancels the running turn, closes the agent and stops. With
// EnvSelfFence set (a host in cluster mode) it fences itself when no
// heartbeat comes in time (see the package doc); set to anything but a
// positive duration, Serve logs why and returns an error without serving.
func Serve(name string, factory Factory, opts ...ServeOption) error {
	if factory == nil {
		return errors.New("sdk.Serve: factory is nil")
	}
	// The self-fence deadline counts from here, as near the process's
	// start as the SDK gets (see the package doc's bound).
	start := time.Now()
	cfg := serveConfig{stopTimeout: 5 * time.Second}
	for _, o := range opts {
		o.apply(&cfg)
	}
	if os.Getenv(wire.EnvDebug) == "1" && !cfg.debug {
		cfg.debug, cfg.debugOut = true, os.Stdout
	}
	// go-plugin replaces os.Stderr once it serves; keep the real fd 2.
	stderr := os.Stderr
	log := cfg.logger
	if log == nil {
		level := hclog.LevelFromString(os.Getenv(wire.EnvLogLevel))
		if level == hclog.NoLevel {
			level = hclog.Info
		}
		log = hclog.New(&hclog.LoggerOptions{Name: name, Output: stderr, JSONFormat: true, Level: level})
	}

	sessionDir := os.Getenv(wire.EnvSessionDir)
	if sessionDir != "" && !filepath.IsAbs(sessionDir) {
		return fmt.Errorf("sdk.Serve: %s must be absolute, got %q", wire.EnvSessionDir, sessionDir)
	}
	token := ""
	if v := os.Getenv(wire.EnvSpawnTokenVar); v != "" {
		token = os.Getenv(v)
	}
	versions, err := wire.ParseProtocolVersions(os.Getenv(wire.EnvProtocolVersions))
	if err != nil {
		return fmt.Errorf("sdk.Serve: %w", err)
	}
	bound, err := selfFenceBound(os.Getenv(wire.EnvSelfFence))
	if err != nil {
		log.Error("refusing to serve: the host's self-fence bound is invalid", "error", err)
		return fmt.Errorf("sdk.Serve: %w", err)
	}
	srv := newServer(name, cfg.capabilities, factory, Environment{SessionDir: sessionDir, Logger: log}, os.Getpid(), token, cfg.outboxMemory)
	defer srv.box.close()
	if bound > 0 {
		srv.startSelfFence(bound, start)
		log.Info("self-fencing on: without a heartbeat from a live host for the bound, no turn runs", "bound", bound)
	} else {
		log.Info("self-fencing off: " + wire.EnvSelfFence + " is not set (one machine: the plugin keeps its turn while no host is attached)")
	}

	// SIGPIPE: Notify (not Ignore, which exec'd children would inherit).
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGPIPE, syscall.SIGTERM)
	defer signal.Stop(sigs)

	var mu sync.Mutex
	var grpcServer *grpc.Server
	stopping := false // a SIGTERM arrived; a server built later stops at once
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-ctx.Done():
				return
			case sig := <-sigs:
				if sig == syscall.SIGPIPE {
					continue
				}
				log.Info("stopping on signal", "signal", sig)
				sctx, scancel := context.WithTimeout(context.Background(), cfg.stopTimeout)
				if err := srv.shutdown(sctx); err != nil {
					log.Error("graceful stop failed", "error", err)
				}
				scancel()
				mu.Lock()
				stopping = true
				if grpcServer != nil {
					// GracefulStop never returns while a host holds go-plugin's
					// stdio stream; Stop is what go-plugin's own shutdown uses.
					grpcServer.Stop()
				}
				mu.Unlock()
				cancel()
				return
			}
		}
	}()

	// go-plugin points os.Stdout and os.Stderr at pipes that only its stdio
	// stream drains, once a host opens it; a host speaking protocol
	// version 2 never does (see host/reattach.go), and nobody drains them
	// between hosts either, so a plugin writing 64 KiB there would block.
	// The first call (after go-plugin swapped them, before any agent
	// exists) points both at the process's own stderr, the plugin's log:
	// never at stdout, the handshake pipe, which no host reads once it is
	// gone (see docs/protocol.md, Handshake).
	origStderr := os.Stderr
	var restoreOnce sync.Once
	restoreStdio := func() { restoreOnce.Do(func() { os.Stdout, os.Stderr = origStderr, origStderr }) }
	sc := &plugin.ServeConfig{
		HandshakeConfig:  wire.Handshake(),
		VersionedPlugins: wire.PluginSets(srv, versions...),
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			mu.Lock()
			defer mu.Unlock()
			// A resume may carry a provider state larger than gRPC's
			// default 4 MiB.
			opts = append(opts, grpc.MaxRecvMsgSize(wire.MaxStateMessageSize), grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				restoreStdio()
				return h(ctx, req)
			}), grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
				restoreStdio()
				return h(srv, ss)
			}))
			grpcServer = plugin.DefaultGRPCServer(opts)
			if stopping {
				// SIGTERM came before go-plugin built the server: serve
				// nothing, so Serve returns.
				grpcServer.Stop()
			}
			return grpcServer
		},
		Logger: log,
	}
	if cfg.debug {
		reattach := make(chan *plugin.ReattachConfig, 1)
		sc.Test = &plugin.ServeTestConfig{Context: ctx, ReattachConfigCh: reattach}
		go func() {
			select {
			case rc := <-reattach:
				b, _ := json.Marshal(map[string]any{"agenthost_reattach": map[string]any{
					"network": rc.Addr.Network(), "address": rc.Addr.String(), "pid": rc.Pid,
					"protocol": string(rc.Protocol), "protocol_version": srv.servedVersion(),
				}})
				fmt.Fprintln(cfg.debugOut, string(b))
			case <-ctx.Done():
			}
		}()
		signal.Notify(sigs, os.Interrupt)
	}
	plugin.Serve(sc)
	cancel()
	<-stopped
	// However the server stopped (go-plugin's own shutdown RPC included),
	// the agent closes: its CLI must not outlive the plugin.
	sctx, scancel := context.WithTimeout(context.Background(), cfg.stopTimeout)
	defer scancel()
	if err := srv.shutdown(sctx); err != nil {
		log.Error("closing the agent failed", "error", err)
	}
	return nil
}

// ServeListener serves the plugin protocol for one session on lis, inside
// this process, until ctx ends: Serve without the process around it (no
// go-plugin handshake, no signals, nothing on stdout, and Identify reports
// this process and no spawn token). When ctx ends, it cancels the running
// turn and closes the agent, as a SIGTERM does under Serve (bounded by 5s),
// stops serving, and returns the agent's close error.
//
// Of opts, only WithCapabilities and WithOutboxMemory apply; the
// environment is env (its Reporter is the SDK's, whatever env holds).
//
// Package sdktest serves agents this way, over real gRPC, to test them
// without building a plugin binary; a plugin's main calls Serve.
func ServeListener(ctx context.Context, lis net.Listener, name string, factory Factory, env Environment, opts ...ServeOption) error {
	if factory == nil {
		return errors.New("sdk.ServeListener: factory is nil")
	}
	if env.Logger == nil {
		env.Logger = hclog.NewNullLogger()
	}
	var cfg serveConfig
	for _, o := range opts {
		o.apply(&cfg)
	}
	srv := newServer(name, cfg.capabilities, factory, env, os.Getpid(), "", cfg.outboxMemory)
	defer srv.box.close()
	g := grpc.NewServer(grpc.MaxRecvMsgSize(wire.MaxStateMessageSize))
	agentpb.RegisterAgentServer(g, srv)
	agentpb.RegisterAgentV2Server(g, srv)
	served := make(chan error, 1)
	go func() { served <- g.Serve(lis) }()
	var err error
	stopped := false
	select {
	case <-ctx.Done():
	case err = <-served:
		// The listener failed: close the agent all the same.
		stopped = true
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if serr := srv.shutdown(sctx); serr != nil {
		err = errors.Join(err, serr)
	}
	g.Stop()
	if !stopped {
		<-served // nil after Stop
	}
	return err
}
