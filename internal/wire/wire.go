// Package wire holds what the host and the plugin SDK must agree on beyond
// the generated protocol: the go-plugin handshake, the plugin set, and the
// environment variables a host passes to a plugin process.
package wire

import (
	"context"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/agenthost/agenthost/internal/agentpb"
)

// ProtocolVersion is the plugin protocol version this build speaks; hosts
// record the version negotiated at start, because go-plugin's reattach path
// does not.
const ProtocolVersion = 1

// PluginName is the key of the agent plugin in the go-plugin plugin set.
const PluginName = "agent"

// Environment variables a host sets for a plugin process. Session ids never
// travel here: they may hold NUL bytes, which an environment cannot carry,
// so they travel inside RPC payloads.
const (
	// EnvSpawnTokenVar names the variable that holds the spawn token (each
	// host has its own, so hosts never mistake each other's plugins for
	// orphans).
	EnvSpawnTokenVar = "AGENTHOST_SPAWN_TOKEN_VAR"
	// EnvSessionDir is the absolute private directory of the session's
	// plugin state (the outbox spills there).
	EnvSessionDir = "AGENTHOST_SESSION_DIR"
	// EnvDebug, when set to 1, makes the plugin serve in debug mode: it
	// prints a reattach config instead of expecting a host to start it.
	EnvDebug = "AGENTHOST_PLUGIN_DEBUG"
	// EnvLogLevel sets the plugin's log level (trace … error); default info.
	EnvLogLevel = "AGENTHOST_PLUGIN_LOG_LEVEL"
)

// MaxMessageSize bounds one message a host accepts from a plugin. go-plugin
// lets a plugin send up to 2 GiB at once, which would put a misbehaving
// plugin in charge of the host's memory; the largest update a journal
// accepts is 1 MiB, so 4 MiB leaves room for every legitimate message.
const MaxMessageSize = 4 << 20

// HostDialOptions are the gRPC options a host adds to go-plugin's when it
// dials a plugin (they override go-plugin's 2 GiB receive limit).
func HostDialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageSize))}
}

// Handshake is the go-plugin handshake of agenthost plugins. The cookie is
// not security: it stops a user from running a plugin binary by hand and
// wondering why it prints a cryptic line.
func Handshake() plugin.HandshakeConfig {
	return plugin.HandshakeConfig{
		ProtocolVersion:  ProtocolVersion,
		MagicCookieKey:   "AGENTHOST_PLUGIN",
		MagicCookieValue: "d0c3f0b8-agenthost-agent-plugin",
	}
}

// AgentPlugin is the go-plugin glue for the Agent service: the plugin side
// registers Impl, the host side gets an agentpb.AgentClient.
type AgentPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	Impl agentpb.AgentServer
}

// GRPCServer implements plugin.GRPCPlugin.
func (p *AgentPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	agentpb.RegisterAgentServer(s, p.Impl)
	return nil
}

// GRPCClient implements plugin.GRPCPlugin.
func (p *AgentPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, conn *grpc.ClientConn) (any, error) {
	return agentpb.NewAgentClient(conn), nil
}

// PluginSets returns the versioned plugin set, for hosts and plugins alike.
func PluginSets(server agentpb.AgentServer) map[int]plugin.PluginSet {
	return map[int]plugin.PluginSet{ProtocolVersion: {PluginName: &AgentPlugin{Impl: server}}}
}
