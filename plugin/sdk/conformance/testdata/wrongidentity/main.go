// Command wrongidentity is a broken plugin for the conformance kit's tests: it
// completes the handshake, but its Identify reports another pid and a spawn
// token that is not the one its host gave it.
package main

import (
	"context"
	"os"

	"github.com/hashicorp/go-plugin"

	"github.com/agenthost/agenthost/internal/agentpb"
	"github.com/agenthost/agenthost/internal/wire"
)

type server struct {
	agentpb.UnimplementedAgentServer
}

func (server) Identify(context.Context, *agentpb.IdentifyRequest) (*agentpb.IdentifyResponse, error) {
	return &agentpb.IdentifyResponse{
		Pid:             int64(os.Getpid() + 1),
		SpawnToken:      "not-the-spawn-token",
		InstanceId:      "wrongidentity-1",
		ProtocolVersion: wire.ProtocolVersion1,
		AgentName:       "wrongidentity",
	}, nil
}

func main() {
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig:  wire.Handshake(),
		VersionedPlugins: wire.PluginSets(server{}),
		GRPCServer:       plugin.DefaultGRPCServer,
	})
}
