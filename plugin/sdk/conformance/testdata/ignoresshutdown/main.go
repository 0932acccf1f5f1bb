// Command ignoresshutdown is a broken plugin for the conformance kit's tests: it
// identifies and attaches correctly, but its Close hangs, its process
// ignores SIGTERM, and it keeps running after go-plugin's Shutdown, so only
// SIGKILL stops it.
package main

import (
	"context"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agenthost/agenthost/internal/agentpb"
	"github.com/agenthost/agenthost/internal/wire"
)

type server struct {
	agentpb.UnimplementedAgentServer
	mu      sync.Mutex
	fence   uint64
	session string
	bound   bool
	handle  string
}

func (s *server) Identify(context.Context, *agentpb.IdentifyRequest) (*agentpb.IdentifyResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	token := ""
	if v := os.Getenv(wire.EnvSpawnTokenVar); v != "" {
		token = os.Getenv(v)
	}
	return &agentpb.IdentifyResponse{
		SessionId: s.session, SpawnToken: token, Pid: int64(os.Getpid()), InstanceId: "ignoresshutdown-1",
		ProtocolVersion: wire.ProtocolVersion1, AgentName: "ignoresshutdown", Fence: s.fence, Handle: s.handle,
	}, nil
}

func (s *server) Attach(_ context.Context, req *agentpb.AttachRequest) (*agentpb.AttachResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if req.Fence < s.fence || req.Fence == 0 {
		return nil, status.Error(codes.FailedPrecondition, "stale fence")
	}
	if s.bound && req.SessionId != s.session {
		return nil, status.Error(codes.FailedPrecondition, "another session")
	}
	s.fence, s.session, s.bound = req.Fence, req.SessionId, true
	return &agentpb.AttachResponse{Fence: s.fence}, nil
}

func (s *server) NewSession(context.Context, *agentpb.NewSessionRequest) (*agentpb.SessionResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handle = "ignoresshutdown-handle"
	return &agentpb.SessionResponse{Handle: s.handle}, nil
}

// Close hangs until the caller gives up.
func (s *server) Close(ctx context.Context, _ *agentpb.CloseRequest) (*agentpb.CloseResponse, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func main() {
	signal.Ignore(syscall.SIGTERM)
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig:  wire.Handshake(),
		VersionedPlugins: wire.PluginSets(&server{}),
		GRPCServer:       plugin.DefaultGRPCServer,
	})
	for {
		time.Sleep(time.Hour)
	}
}
