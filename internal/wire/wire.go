// Package wire holds what the host and the plugin SDK must agree on beyond
// the generated protocol: the go-plugin handshake, the plugin set, the
// environment variables a host passes to a plugin process, and the reasons
// a plugin gives for refusing a call.
package wire

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agenthost/agenthost/internal/agentpb"
)

// Plugin protocol versions. go-plugin negotiates one at start from the
// versioned plugin sets both sides offer (PluginSets): the newest both
// speak. Hosts record the version negotiated at start in the lease, because
// go-plugin's reattach path does not negotiate.
const (
	// ProtocolVersion1 is the Agent service alone: a host attaches,
	// identifies, opens and follows updates in separate calls.
	ProtocolVersion1 = 1
	// ProtocolVersion2 adds the AgentV2 service: Open attaches, identifies,
	// opens the conversation and starts the update stream in one round
	// trip.
	ProtocolVersion2 = 2
	// ProtocolVersion is the newest version this build speaks.
	ProtocolVersion = ProtocolVersion2
)

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
	// EnvProtocolVersions, when set, restricts the protocol versions a
	// plugin built on the SDK offers (comma-separated, e.g. "1"): how a
	// test makes it behave as a plugin built before a newer version.
	// Unset: every version the SDK speaks.
	EnvProtocolVersions = "AGENTHOST_PLUGIN_PROTOCOL_VERSIONS"
	// EnvSelfFence, set by a host in cluster mode to a Go duration (the
	// host's self-fence bound, below its liveness TTL), makes a plugin
	// built on the SDK fence itself when no Heartbeat from a live host
	// arrived for that long (see the Heartbeat RPC and package
	// plugin/sdk). Unset: one machine, no self-fencing.
	EnvSelfFence = "AGENTHOST_SELF_FENCE"
)

// MaxMessageSize bounds one message a host accepts from a plugin. go-plugin
// lets a plugin send up to 2 GiB at once, which would put a misbehaving
// plugin in charge of the host's memory; the largest update a journal
// accepts is 1 MiB, so 4 MiB leaves room for every legitimate message.
const MaxMessageSize = 4 << 20

// MaxProviderStateSize bounds one provider state a plugin exports (the
// ExportState answer) or a host passes back on resume (provider_state):
// leasestore.MaxProviderStateBytes, which the store enforces (a host test
// checks that they agree). The two calls that carry one raise the message
// limit to MaxStateMessageSize: ExportState on the host's side, and a
// plugin built on the SDK for every call it receives.
const MaxProviderStateSize = 64 << 20

// MaxStateMessageSize is the largest message carrying a provider state:
// the state and room for the rest of the message.
const MaxStateMessageSize = MaxProviderStateSize + MaxMessageSize

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
		// The version a plugin serves to a host that offers no versioned
		// sets; every agenthost host offers them (see PluginSets).
		ProtocolVersion:  ProtocolVersion1,
		MagicCookieKey:   "AGENTHOST_PLUGIN",
		MagicCookieValue: "d0c3f0b8-agenthost-agent-plugin",
	}
}

// AgentPlugin is the go-plugin glue for the agent plugin at one protocol
// version: the plugin side registers Impl (and, from version 2, the
// AgentV2 service Impl implements); the host side gets the connection
// (pluginclient.Dispense makes the typed client of it).
type AgentPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	Impl    agentpb.AgentServer
	Version int
}

// VersionServer is implemented by a plugin's server that reports the
// negotiated version (Identify's protocol_version): go-plugin registers
// only the negotiated version's set, so its GRPCServer tells the server
// which one that is before any call arrives.
type VersionServer interface {
	ServeVersion(version int)
}

// GRPCServer implements plugin.GRPCPlugin.
func (p *AgentPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	agentpb.RegisterAgentServer(s, p.Impl)
	if v2, ok := p.Impl.(agentpb.AgentV2Server); ok && p.Version >= ProtocolVersion2 {
		agentpb.RegisterAgentV2Server(s, v2)
	}
	if vs, ok := p.Impl.(VersionServer); ok {
		vs.ServeVersion(p.Version)
	}
	return nil
}

// GRPCClient implements plugin.GRPCPlugin: it returns the connection,
// which the host's typed client wraps with the negotiated version.
func (p *AgentPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, conn *grpc.ClientConn) (any, error) {
	return grpc.ClientConnInterface(conn), nil
}

// PluginSets returns the versioned plugin sets: on a host (server nil)
// every version this build speaks; on a plugin, version 1 always and
// version 2 when server implements agentpb.AgentV2Server too, so a plugin
// whose server predates version 2 (or a test's hand-written one) is still
// offered, and negotiated, at version 1 only. versions, when given,
// restricts the sets to those versions (a test forcing a plugin or host to
// version 1).
func PluginSets(server agentpb.AgentServer, versions ...int) map[int]plugin.PluginSet {
	sets := map[int]plugin.PluginSet{ProtocolVersion1: {PluginName: &AgentPlugin{Impl: server, Version: ProtocolVersion1}}}
	if _, v2 := server.(agentpb.AgentV2Server); server == nil || v2 {
		sets[ProtocolVersion2] = plugin.PluginSet{PluginName: &AgentPlugin{Impl: server, Version: ProtocolVersion2}}
	}
	if len(versions) > 0 {
		for v := range sets {
			if !slices.Contains(versions, v) {
				delete(sets, v)
			}
		}
	}
	return sets
}

// ParseProtocolVersions reads EnvProtocolVersions: nil for "" (every
// version), else the versions named, each one this build speaks.
func ParseProtocolVersions(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < ProtocolVersion1 || v > ProtocolVersion {
			return nil, fmt.Errorf("%s=%q: expected comma-separated protocol versions between %d and %d", EnvProtocolVersions, s, ProtocolVersion1, ProtocolVersion)
		}
		out = append(out, v)
	}
	return out, nil
}

// Reason is the machine-readable cause of a refused call. The SDK answers
// many different refusals with the same gRPC code (FAILED_PRECONDITION
// covers a stale fence, a plugin never attached, a closed session, a
// running turn and the agent's own errors), and messages are for people, so
// a refusal also carries its Reason as a google.rpc.ErrorInfo status detail
// in ErrorDomain. The host's plugin client maps each Reason to a sentinel
// error; a refusal without one (a plugin not built on the SDK) is read by
// its code alone.
type Reason string

// ErrorDomain is the ErrorInfo domain of agenthost refusal reasons.
const ErrorDomain = "agenthost.agent.v1"

// Refusal reasons, all with code FAILED_PRECONDITION but
// ReasonInvalidSetting.
const (
	// ReasonStaleFence: the call carries a fence below the one the plugin
	// is attached at: a newer host took the session over.
	ReasonStaleFence Reason = "STALE_FENCE"
	// ReasonNotAttached: the plugin was never attached to a session.
	ReasonNotAttached Reason = "NOT_ATTACHED"
	// ReasonFenceNotAttached: the call carries a fence above the one the
	// plugin is attached at, a fence it was never attached at.
	ReasonFenceNotAttached Reason = "FENCE_NOT_ATTACHED"
	// ReasonOtherSession: Attach named another session than the one the
	// plugin process serves.
	ReasonOtherSession Reason = "OTHER_SESSION"
	// ReasonNotThisProcess: Open named a spawn token or instance id that
	// is not this process's (version 2).
	ReasonNotThisProcess Reason = "NOT_THIS_PROCESS"
	// ReasonClosed: the session was closed.
	ReasonClosed Reason = "SESSION_CLOSED"
	// ReasonAlreadyOpen: a session is already open, or opening, in the
	// plugin process.
	ReasonAlreadyOpen Reason = "SESSION_ALREADY_OPEN"
	// ReasonNoSession: no session is open yet.
	ReasonNoSession Reason = "NO_SESSION_OPEN"
	// ReasonBusy: a turn is still running; the prompt names another turn
	// (or none).
	ReasonBusy Reason = "TURN_RUNNING"
	// ReasonTurnStarted: the prompt names a turn id the plugin has already
	// started in this process, so it is not run again. The ErrorInfo
	// metadata says under MetaTurnState whether that turn is still running
	// (TurnStateRunning) or has ended (TurnStateEnded); either way its
	// updates and its turn_stopped are, or will be, in the outbox. A host
	// that re-sends a journaled prompt after a restart reads this as "the
	// plugin has or had the turn" and takes the turn's stop from the
	// outbox rather than writing one.
	ReasonTurnStarted Reason = "TURN_ALREADY_STARTED"
	// ReasonAgent: the agent itself refused or failed (its factory, or
	// opening the session); the message is the agent's.
	ReasonAgent Reason = "AGENT_ERROR"
	// ReasonAuthRequired: the agent's provider refused or lacks
	// credentials (the agent's error wraps sdk.ErrAuthRequired); the
	// message is the agent's.
	ReasonAuthRequired Reason = "AUTH_REQUIRED"
	// ReasonSelfFenced: the plugin fenced itself (cluster mode: no
	// Heartbeat from a live host within its bound) and takes no turn
	// until a Heartbeat at its fence lifts it.
	ReasonSelfFenced Reason = "SELF_FENCED"
	// ReasonStateNotImportable: a resume carried provider state and the
	// agent cannot import one (it is no sdk.StateImporter).
	ReasonStateNotImportable Reason = "STATE_NOT_IMPORTABLE"
	// ReasonInvalidSetting, with code INVALID_ARGUMENT: the agent refused
	// a session option, mode or config option (an sdk.InvalidOptionError).
	// The ErrorInfo metadata names it under MetaOption and says why under
	// MetaReason.
	ReasonInvalidSetting Reason = "INVALID_SETTING"
)

// ErrorInfo metadata keys of a ReasonInvalidSetting refusal, and of a
// ReasonTurnStarted one (MetaTurnState).
const (
	MetaOption    = "option"
	MetaReason    = "reason"
	MetaTurnState = "turn_state"
)

// Values of MetaTurnState.
const (
	TurnStateRunning = "running"
	TurnStateEnded   = "ended"
)

// Refusal returns the status error of a refused call: code and message as
// before, with reason attached as a detail.
func Refusal(code codes.Code, reason Reason, msg string) error {
	return RefusalWith(code, reason, msg, nil)
}

// RefusalWith is Refusal with ErrorInfo metadata.
func RefusalWith(code codes.Code, reason Reason, msg string, metadata map[string]string) error {
	st := status.New(code, msg)
	if with, err := st.WithDetails(&errdetails.ErrorInfo{Reason: string(reason), Domain: ErrorDomain, Metadata: metadata}); err == nil {
		st = with
	}
	return st.Err()
}

// ReasonOf returns the reason a refusal carries, or "" if it carries none.
func ReasonOf(st *status.Status) Reason {
	r, _ := InfoOf(st)
	return r
}

// InfoOf returns the reason a refusal carries and its metadata; "" and nil
// when it carries none.
func InfoOf(st *status.Status) (Reason, map[string]string) {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == ErrorDomain {
			return Reason(info.Reason), info.Metadata
		}
	}
	return "", nil
}
