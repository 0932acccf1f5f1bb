package api

import (
	"encoding/json"
	"time"
)

// Params are the params of agenthost's own methods: subscribe reads
// SessionID and FromSeq, session and stop SessionID, status and agents
// none. The server decodes every call's params as Params before it looks
// at the method, so a member of the wrong type is an invalid-params error
// in any method, and an unknown member is ignored.
//
// Params is an alias of an unnamed struct type: a decoding error then
// names the member alone (".sessionId"), as the API always has.
type Params = struct {
	FromSeq   uint64 `json:"fromSeq,omitempty"`
	SessionID string `json:"sessionId"`
	// Force: remove stops a running session first.
	Force bool `json:"force,omitempty"`
	// OlderThan: prune's bound, a Go duration ("72h", "30m"); required.
	OlderThan string `json:"olderThan,omitempty"`
	// DryRun: prune lists and removes nothing.
	DryRun bool `json:"dryRun,omitempty"`
}

// SubscribeResult is the result of MethodSubscribe.
type SubscribeResult struct {
	// LastSeq is the session's newest entry when the subscription began.
	LastSeq uint64 `json:"lastSeq"`
}

// StopResult is the result of MethodStop.
type StopResult struct {
	// AlreadyStopped: the session did not run in this host; nothing was
	// done.
	AlreadyStopped bool `json:"alreadyStopped,omitempty"`
}

// StopAllResult is the result of MethodStopAll.
type StopAllResult struct {
	// Stopped are the sessions stopped, sorted.
	Stopped []string `json:"stopped"`
	// Failed are the sessions whose stop failed, by id, with why.
	Failed map[string]string `json:"failed,omitempty"`
}

// RemoveResult is the result of MethodRemove.
type RemoveResult struct {
	// Stopped: the session was running and Force stopped it first.
	Stopped bool `json:"stopped,omitempty"`
	// FreedBytes is what the session's directory held on disk (its
	// journal's share of the store is freed as the store compacts).
	FreedBytes int64 `json:"freedBytes"`
}

// PruneResult is the result of MethodPrune.
type PruneResult struct {
	// Removed are the sessions removed (with DryRun: that would be),
	// sorted.
	Removed []string `json:"removed"`
	// DryRun echoes the request: nothing was removed.
	DryRun bool `json:"dryRun,omitempty"`
	// Failed are the sessions whose removal failed, by id, with why.
	Failed map[string]string `json:"failed,omitempty"`
	// Unlisted says why some records of the store could not be listed
	// (a damaged record, named): those sessions were not pruned.
	Unlisted string `json:"unlisted,omitempty"`
}

// AgentsResult is the result of MethodAgents.
type AgentsResult struct {
	// Agents are the names of the agents the host serves now, sorted.
	Agents []string `json:"agents"`
	// Served says, for each of Agents, where it comes from.
	Served []AgentInfo `json:"served,omitempty"`
	// Reload is the host's last look at the plugins directory and
	// agenthost.json, when it serves a state directory.
	Reload *AgentsReload `json:"reload,omitempty"`
}

// AgentInfo is one agent a host serves.
type AgentInfo struct {
	Name string `json:"name"`
	// Source: "built-in", "built-in, agenthost.json", "plugins
	// directory", "agenthost.json".
	Source string `json:"source"`
	// Path is the plugin executable ("" for a built-in).
	Path string `json:"path,omitempty"`
	// Fingerprint changes whenever the entry's settings do (its path,
	// arguments, environment, sha256 pin, credential policy, and for a
	// file of the plugins directory its size, mtime and inode): hex of a
	// SHA-256 over them, so environment values (which may be secrets)
	// never appear in clear. Two entries that start their plugin the same
	// way have the same fingerprint.
	Fingerprint string `json:"fingerprint,omitempty"`
}

// AgentsReload is the outcome of the last rescan of the agents'
// configuration.
type AgentsReload struct {
	At time.Time `json:"at"`
	// Error, when set, says why the configuration on disk was refused:
	// the host goes on serving Served, the configuration before it.
	Error string `json:"error,omitempty"`
}

// StatusResult is the result of MethodStatus.
type StatusResult struct {
	Host    Status `json:"host"`
	Version string `json:"version"`
}

// SessionResult is the result of MethodSession.
type SessionResult struct {
	// LastSeq is the session's newest journal entry.
	LastSeq uint64 `json:"lastSeq"`
	// Running is whether the session runs in this host.
	Running bool `json:"running"`
	// Followers is how many API connections follow the running session
	// (session/new, load or resume on them): each is asked its permission
	// requests. A connection that closed is counted until the host has
	// finished with it, its questions withdrawn. 0 when not running.
	Followers int     `json:"followers"`
	Session   Session `json:"session"`
}

// JournalEntry is the params of a MethodJournal notification: one journal
// entry as stored. Payload is the entry's JSON payload (decode it with
// journal.DecodePayload), or a JSON string holding a payload that is not
// JSON.
type JournalEntry struct {
	SessionID string          `json:"sessionId"`
	Seq       uint64          `json:"seq"`
	Fence     uint64          `json:"fence"`
	Time      time.Time       `json:"time"`
	Kind      string          `json:"kind"`
	Payload   json.RawMessage `json:"payload"`
}

// Status is what a host runs and what it decided for the sessions it
// found when it opened.
type Status struct {
	PID      int      `json:"pid"`
	StateDir string   `json:"stateDir"`
	HostID   string   `json:"hostId"`
	Agents   []string `json:"agents"`
	// Running are the sessions that run in the host, sorted.
	Running []string `json:"running"`
	// Sessions is how many sessions the state directory records.
	Sessions int `json:"sessions"`
	// Decided counts the restart decisions by action: readopted, evicted,
	// latched, free.
	Decided map[string]int `json:"decided"`
	// Recovery says how the store recovered when it opened, if it had to.
	Recovery *string `json:"recovery,omitempty"`
	// Latched names the latched sessions and why they are.
	Latched map[string]string `json:"latched,omitempty"`
	// Reconciling: the host serves while it still decides the sessions it
	// found at start; Decisions says which are decided. A request on an
	// undecided session is answered CodeSessionHeld ("not decided yet").
	Reconciling bool `json:"reconciling,omitempty"`
	// Decisions is each session's restart decision, by id, as it is made:
	// ActionUndecided until then.
	Decisions map[string]Decision `json:"decisions,omitempty"`
	// DiskBytes is what the state directory holds on disk: the store and
	// every session's directory (sockets and logs).
	DiskBytes int64 `json:"diskBytes"`
	// IdleTimeout is how long a session without a turn, a pending
	// permission or a follower keeps its plugin; 0 for ever. Go duration
	// text ("10m0s").
	IdleTimeout string `json:"idleTimeout,omitempty"`
	// Owners names, by session id, the host holding each held session's
	// lease (cluster mode only: on one machine every session is this
	// host's).
	Owners map[string]string `json:"owners,omitempty"`
	// Cluster is this host's membership of a cluster; nil on a single
	// machine.
	Cluster *ClusterStatus `json:"cluster,omitempty"`
}

// ClusterStatus is a host's view of the cluster it runs in.
type ClusterStatus struct {
	// Live: this host's liveness lease is proven now (it takes turns);
	// false while it registers again after a loss.
	Live bool `json:"live"`
	// ValidUntil is until when, on this host's clock, it may act as a live
	// member; Epoch counts its registrations.
	ValidUntil time.Time `json:"validUntil,omitzero"`
	Epoch      uint64    `json:"epoch"`
	// LivenessTTL, SelfFence and DriftMargin are Go duration text.
	LivenessTTL string `json:"livenessTtl"`
	SelfFence   string `json:"selfFence"`
	DriftMargin string `json:"driftMargin"`
	// Hosts are the hosts registered now.
	Hosts []ClusterHost `json:"hosts"`
	// Takeovers are the lost hosts whose sessions this host takes over,
	// by host id, with the time it will.
	Takeovers map[string]time.Time `json:"takeovers,omitempty"`
}

// ClusterHost is one registered host.
type ClusterHost struct {
	HostID     string    `json:"hostId"`
	Address    string    `json:"address,omitempty"`
	PID        int       `json:"pid,omitempty"`
	Registered time.Time `json:"registered"`
}

// Decision is the restart decision of one session: one of the actions
// below, and what it rests on.
type Decision struct {
	Action string `json:"action"`
	Reason string `json:"reason,omitempty"`
}

// The restart decisions Status.Decided counts.
const (
	ActionReadopted = "readopted"
	ActionEvicted   = "evicted"
	ActionLatched   = "latched"
	ActionFree      = "free"
	// ActionUndecided: found at start, not decided yet (Status.Decisions).
	ActionUndecided = "undecided"
)

// Session is one session's record: the conversation's identity, the
// provider handles it went by, and its lease.
type Session struct {
	ID        string            `json:"id"`
	Agent     string            `json:"agent"`
	Workspace string            `json:"workspace,omitempty"`
	Options   map[string]string `json:"options,omitempty"`
	// MCPServers are the MCP servers every start of the session passes
	// (their environment and headers are left out: they may hold keys).
	MCPServers []MCPServer `json:"mcpServers,omitempty"`
	// Title is the session's title, "" before it has one.
	Title string `json:"title,omitempty"`
	// AllowedScopes are the permission scopes answered "allow always".
	AllowedScopes []string `json:"allowedScopes,omitempty"`
	// Handles is the provider handle chain, oldest first.
	Handles     []HandleLink `json:"handles,omitempty"`
	Lease       Lease        `json:"lease"`
	Incarnation string       `json:"incarnation,omitempty"`
	// Deleting is set while the session is being deleted.
	Deleting bool `json:"deleting,omitempty"`
	// OwnerHost is the host holding the session's lease; "" when nobody
	// holds it (see ListedSessionMeta.OwnerHost).
	OwnerHost string `json:"ownerHost,omitempty"`
	// State is what the session is doing, as one word (State* below).
	State     string    `json:"state,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// Handle returns the newest provider handle, or "" when none was proven.
func (s Session) Handle() string {
	if len(s.Handles) == 0 {
		return ""
	}
	return s.Handles[len(s.Handles)-1].Handle
}

// The values of Session.State.
const (
	// StateRunning: its plugin runs in this host.
	StateRunning = "running"
	// StateIdle: its plugin was stopped after the host's idle timeout;
	// the next prompt, load or resume starts it again, the conversation
	// intact.
	StateIdle = "idle"
	// StateStopped: no plugin runs; load or resume it to go on.
	StateStopped = "stopped"
	// StateFailed: its first start failed, so it has no conversation
	// (its journal says why); remove or prune it.
	StateFailed = "failed"
	// StateLatched: nobody can say whether its previous plugin is gone
	// (Lease.LatchReason says why); it is not started until that is
	// settled.
	StateLatched = "latched"
	// StateHeld: another process holds its lease.
	StateHeld = "held"
	// StateElsewhere: it runs on another host of the cluster (OwnerHost),
	// which is live; connect to that host to use it.
	StateElsewhere = "elsewhere"
)

// MCPServer is one MCP server of a session: Transport stdio (Command,
// Args) or http or sse (URL).
type MCPServer struct {
	Name      string   `json:"name"`
	Transport string   `json:"transport"`
	Command   string   `json:"command,omitempty"`
	Args      []string `json:"args,omitempty"`
	URL       string   `json:"url,omitempty"`
}

// HandleLink is one provider handle of a session.
type HandleLink struct {
	Handle string `json:"handle"`
	// Origin: created, resumed, forked, adopted.
	Origin     string    `json:"origin"`
	Fence      uint64    `json:"fence"`
	ObservedAt time.Time `json:"observedAt"`
}

// Lease says which process may write to a session.
type Lease struct {
	Fence uint64 `json:"fence"`
	// Claim: released, reserved, live, conflicted.
	Claim string `json:"claim"`
	// Stage: "", proving, recovering, manual-recovery.
	Stage              string           `json:"stage,omitempty"`
	Owner              *ProcessIdentity `json:"owner,omitempty"`
	ReservedSpawnToken string           `json:"reservedSpawnToken,omitempty"`
	ProcesslessAt      time.Time        `json:"processlessAt,omitzero"`
	Reattach           *Reattach        `json:"reattach,omitempty"`
	DeathEvidence      *DeathEvidence   `json:"deathEvidence,omitempty"`
	MinNextFence       uint64           `json:"minNextFence,omitempty"`
	ClaimKeyID         string           `json:"claimKeyId,omitempty"`
	Unreconciled       bool             `json:"unreconciled,omitempty"`
	LatchReason        string           `json:"latchReason,omitempty"`
	// ReservedBy is the host that reserved the lease, while it holds it.
	ReservedBy string `json:"reservedBy,omitempty"`
}

// ProcessIdentity identifies a lease's owner process.
type ProcessIdentity struct {
	HostID     string    `json:"hostId"`
	PID        int       `json:"pid"`
	StartTicks uint64    `json:"startTicks,omitempty"`
	BootID     string    `json:"bootId,omitempty"`
	StartTime  time.Time `json:"startTime,omitzero"`
	SpawnToken string    `json:"spawnToken"`
	InstanceID string    `json:"instanceId,omitempty"`
}

// Reattach is where the owner's plugin listens, and its log.
type Reattach struct {
	Network         string `json:"network"`
	Address         string `json:"address"`
	ProtocolVersion int    `json:"protocolVersion"`
	PluginPath      string `json:"pluginPath,omitempty"`
	LogPath         string `json:"logPath,omitempty"`
}

// DeathEvidence is what proved the previous owner gone.
type DeathEvidence struct {
	// Kind: exit-observed, pid-absent, identity-mismatch,
	// operator-confirmed.
	Kind       string    `json:"kind"`
	Detail     string    `json:"detail,omitempty"`
	ObservedAt time.Time `json:"observedAt"`
}

// ServeReady is the line `agenthost serve` prints on its stdout once it
// listens, so that whoever launched it (a desktop app, a test) knows the
// socket to dial and the process that serves it.
type ServeReady struct {
	Ready    bool     `json:"ready"`
	Socket   string   `json:"socket"`
	PID      int      `json:"pid"`
	StateDir string   `json:"stateDir"`
	Version  string   `json:"version"`
	Agents   []string `json:"agents"`
}
