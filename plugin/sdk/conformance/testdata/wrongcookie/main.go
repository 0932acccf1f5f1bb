// Command wrongcookie is a broken plugin for the conformance kit's tests: it serves
// the agent protocol with a magic cookie value the host does not send, so
// go-plugin refuses to serve and the handshake fails.
package main

import (
	"github.com/hashicorp/go-plugin"

	"github.com/agenthost/agenthost/internal/agentpb"
	"github.com/agenthost/agenthost/internal/wire"
)

type server struct {
	agentpb.UnimplementedAgentServer
}

func main() {
	hs := wire.Handshake()
	hs.MagicCookieValue = "not-the-agenthost-cookie"
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig:  hs,
		VersionedPlugins: wire.PluginSets(&server{}),
		GRPCServer:       plugin.DefaultGRPCServer,
	})
}
