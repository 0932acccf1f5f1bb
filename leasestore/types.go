package leasestore

import (
	"time"
)

// Claim says who, if anyone, holds a session's lease.
type Claim string

const (
	// ClaimReleased: nobody holds the lease. The session record outlives its
	// owners and can be reserved again at the next fence.
	ClaimReleased Claim = "released"
	// ClaimReserved: a reservation exists at the current fence; its owner is
	// being started or proven and may not write yet.
	ClaimReserved Claim = "reserved"
	// ClaimLive: the owner proved its provider handle; it is the session's
	// only writer.
	ClaimLive Claim = "live"
	// ClaimConflicted: two claims on one conversation were seen. It stays
	// conflicted across restarts until evidence or a person settles it
	// (Evict). No transition of this build enters it; the rules that refuse
	// a conflicted lease stay, so a record that carries it fails closed.
	ClaimConflicted Claim = "conflicted"
)

// Stage refines a claim while ownership is moving or unknown.
type Stage string

const (
	// StageNone is the settled stage: released or live with a proven owner.
	StageNone Stage = ""
	// StageProving: reserved, the owner has not proven itself yet.
	StageProving Stage = "proving"
	// StageRecovering: an exact owner is recorded but could not be verified;
	// the host keeps re-asking and leaves the latch only on new evidence.
	StageRecovering Stage = "recovering"
	// StageManualRecovery: nobody can be named as the owner (an ownerless
	// reservation nobody can attribute, or a conflict); a person decides.
	StageManualRecovery Stage = "manual-recovery"
)

// Latched reports whether the stage blocks acquisition until new evidence.
func (s Stage) Latched() bool { return s == StageRecovering || s == StageManualRecovery }

// ProcessIdentity is the PID-reuse-safe identity of a lease's owner process.
// Two identities name the same process only when every recorded field agrees
// (see SameProcess).
type ProcessIdentity struct {
	// HostID is the execution host that started the process. A pid means
	// nothing on another host, so probes never judge a foreign owner.
	HostID string `json:"hostId"`
	// PID is the operating system process id.
	PID int `json:"pid"`
	// StartTicks is the exact start time in clock ticks since boot
	// (/proc/<pid>/stat field 22 on Linux); zero when the platform has none.
	StartTicks uint64 `json:"startTicks,omitempty"`
	// BootID identifies the boot StartTicks counts from
	// (/proc/sys/kernel/random/boot_id on Linux).
	BootID string `json:"bootId,omitempty"`
	// StartTime is the process creation time where exact ticks are not
	// available (non-Linux platforms); compared with a documented tolerance
	// by package probe.
	StartTime time.Time `json:"startTime,omitzero"`
	// SpawnToken is the token minted at reservation that the process carries
	// in its environment.
	SpawnToken string `json:"spawnToken"`
	// InstanceID is the plugin instance id the process reports over its
	// identity RPC.
	InstanceID string `json:"instanceId,omitempty"`
}

// SameProcess reports whether id and other describe one process: the same
// host, pid, start evidence, spawn token and plugin instance.
func (id ProcessIdentity) SameProcess(other ProcessIdentity) bool {
	return id.HostID == other.HostID &&
		id.PID == other.PID &&
		id.StartTicks == other.StartTicks &&
		id.BootID == other.BootID &&
		id.StartTime.Equal(other.StartTime) &&
		id.SpawnToken == other.SpawnToken &&
		id.InstanceID == other.InstanceID
}

// Reattach is what a new host needs to reconnect to a running plugin.
type Reattach struct {
	// Network and Address locate the plugin's gRPC listener
	// (for example "unix" and a socket path).
	Network string `json:"network"`
	Address string `json:"address"`
	// ProtocolVersion is the plugin protocol version negotiated at start;
	// go-plugin does not record it in its own reattach config.
	ProtocolVersion int `json:"protocolVersion"`
	// PluginPath is the executable that was started.
	PluginPath string `json:"pluginPath,omitempty"`
	// LogPath is the file the plugin's stderr goes to.
	LogPath string `json:"logPath,omitempty"`
}

// EvidenceKind names what proved an owner gone.
type EvidenceKind string

const (
	// EvidenceExitObserved: this host watched the exact process exit.
	EvidenceExitObserved EvidenceKind = "exit-observed"
	// EvidencePIDAbsent: no process with the recorded pid exists on the host
	// (or a reservation provably never spawned one).
	EvidencePIDAbsent EvidenceKind = "pid-absent"
	// EvidenceIdentityMismatch: a process has the pid, but it is another
	// process (start time or spawn token differ).
	EvidenceIdentityMismatch EvidenceKind = "identity-mismatch"
	// EvidenceOperator: a person confirmed, through an explicit command, that
	// no process is writing to the session. The only exit from a
	// manual-recovery latch that names nobody.
	EvidenceOperator EvidenceKind = "operator-confirmed"
)

// DeathEvidence records what proved the previous owner gone.
type DeathEvidence struct {
	Kind       EvidenceKind `json:"kind"`
	Detail     string       `json:"detail,omitempty"`
	ObservedAt time.Time    `json:"observedAt"`
}

// Lease says which process may write to a session right now (the package
// doc explains the lease model); only the transitions in this package
// change its fields.
type Lease struct {
	// Fence is the monotonic generation: 0 means never owned. It moves only
	// on acquisition, proven release, proven eviction and readoption, always
	// to NextFence().
	Fence uint64 `json:"fence"`
	Claim Claim  `json:"claim"`
	Stage Stage  `json:"stage,omitempty"`
	// Owner is the committed owner process, nil between reservation and
	// spawn and after release.
	Owner *ProcessIdentity `json:"owner,omitempty"`
	// ReservedSpawnToken is minted at reservation, before any process
	// exists; the child must echo it.
	ReservedSpawnToken string `json:"reservedSpawnToken,omitempty"`
	// ProcesslessAt is durable proof that the acquisition at this fence
	// failed before any spawn attempt. It is final for the fence: no owner
	// can be committed after it, and the reservation is released outright.
	ProcesslessAt time.Time `json:"processlessAt,omitzero"`
	// Reattach is how a new host reconnects to the owner.
	Reattach *Reattach `json:"reattach,omitempty"`
	// DeathEvidence is what proved the previous owner gone.
	DeathEvidence *DeathEvidence `json:"deathEvidence,omitempty"`
	// MinNextFence is a floor for the next fence, set after a restore from
	// backup because the backup may have missed the latest grants.
	MinNextFence uint64 `json:"minNextFence,omitempty"`
	// ClaimKeyID names the host key the current claim was granted under.
	ClaimKeyID string `json:"claimKeyId,omitempty"`
	// ReservedBy is the id of the host that reserved the lease (Reserve's
	// HostID), kept while the reservation and the ownership it led to last
	// and cleared with the rest on release. It names the owner's host
	// before any owner process is committed: across machines a host must
	// not scan its own process table for a spawn token another host minted
	// (it would find none and wrongly call the reservation unused). Empty
	// in records written before it existed and for reservations made
	// without a host id.
	ReservedBy string `json:"reservedBy,omitempty"`
	// Unreconciled is set on every lease when a host opens the store and
	// cleared by that host's restart decision; no writer is admitted while
	// it is set.
	Unreconciled bool `json:"unreconciled,omitempty"`
	// LatchReason says why the lease is latched or conflicted.
	LatchReason string `json:"latchReason,omitempty"`
}

// NextFence is the fence the next acquisition, release, eviction or
// readoption moves to: max(Fence+1, MinNextFence).
func (l Lease) NextFence() uint64 {
	return max(l.Fence+1, l.MinNextFence)
}

// Held reports whether the lease may have a holder: reserved, live or
// conflicted, or latched.
func (l Lease) Held() bool {
	return l.Claim != ClaimReleased || l.Stage.Latched()
}

// OwnerHost names the host the lease's holder runs on: the committed
// owner's host, or for an ownerless reservation the host that reserved it
// (ReservedBy). Empty when the lease records neither.
func (l Lease) OwnerHost() string {
	if l.Owner != nil {
		return l.Owner.HostID
	}
	return l.ReservedBy
}

// ReconciledBy reports whether a host that opens the store as hostID must
// decide the lease before a writer is admitted
// (SessionStore.MarkHostUnreconciled): the lease is held, and it belongs to
// hostID (OwnerHost) or names no host at all. A held lease that names no
// host (a record written before hosts were recorded) is every host's to
// decide: failing closed, each flags it and none admits a writer until one
// decided it. A released lease is nobody's to decide.
func (l Lease) ReconciledBy(hostID string) bool {
	if !l.Held() {
		return false
	}
	h := l.OwnerHost()
	return h == hostID || h == ""
}

// AdmitsWriter reports whether the lease currently has a proven writer.
func (l Lease) AdmitsWriter() bool {
	return !l.Unreconciled && l.Stage == StageNone && l.Claim == ClaimLive && l.Owner != nil
}

// HandleOrigin says how a provider handle came to be.
type HandleOrigin string

const (
	HandleCreated HandleOrigin = "created"
	HandleResumed HandleOrigin = "resumed"
	HandleForked  HandleOrigin = "forked"
	HandleAdopted HandleOrigin = "adopted"
)

// HandleLink is one link of a session's provider handle chain.
type HandleLink struct {
	// Handle is the provider's own handle: a Claude session id, a Codex
	// thread id, or whatever a third-party agent resumes from.
	Handle string       `json:"handle"`
	Origin HandleOrigin `json:"origin"`
	// Fence is the fence the link was minted at.
	Fence      uint64    `json:"fence"`
	ObservedAt time.Time `json:"observedAt"`
	// HostID is the host whose plugin minted (or re-minted) the link: the
	// lease's OwnerHost when it was appended. The provider's own state of
	// the handle (a transcript file) lives on that host's machine, so a
	// host in a cluster resumes the handle elsewhere only from a stored
	// ProviderState. Empty in records written before hosts were named
	// here, and on a single machine that names none.
	HostID string `json:"hostId,omitempty"`
}

// MaxHandleLinks caps the provider handle chain. Overflow is refused rather
// than dropping fork provenance.
const MaxHandleLinks = 256

// Session is the durable identity of one agent conversation, independent of
// any process, together with its lease.
type Session struct {
	// ID is opaque: any valid UTF-8, NUL included, up to MaxSessionIDLen bytes.
	ID string `json:"id"`
	// Agent names the plugin that serves the session ("claude", "codex", …).
	Agent string `json:"agent"`
	// Workspace is the directory the agent works in.
	Workspace string `json:"workspace,omitempty"`
	// Options are the session options the plugin acknowledged, as later
	// changed by a mode or config option the client set or the agent
	// reported (RecordSettings). Every resume passes them again.
	Options map[string]string `json:"options,omitempty"`
	// MCPServers are the MCP servers the session was opened with; every
	// resume passes them again.
	MCPServers []MCPServer `json:"mcpServers,omitempty"`
	// Title is the session's title: the agent's, or one the host derived
	// from the first prompt.
	Title string `json:"title,omitempty"`
	// AllowedScopes are the permission scopes a client answered "allow
	// always" for: later requests of these scopes are allowed without
	// asking.
	AllowedScopes []string `json:"allowedScopes,omitempty"`
	// AgentState is the agent's session state as it last reported it (its
	// modes and config options), opaque to the store: a host that readopts
	// a running plugin answers with it without asking the plugin.
	AgentState []byte `json:"agentState,omitempty"`
	// Handles is the provider handle chain, oldest first.
	Handles []HandleLink `json:"handles,omitempty"`
	Lease   Lease        `json:"lease"`

	// Incarnation is minted at random by Create. A session deleted and
	// created again under the same id gets a new one, so a reader that
	// follows a journal across several reads (Tail, Replay) notices that
	// the journal it was reading is gone rather than carrying on in the new
	// one, whose seqs restart at 1. Records written before it existed have
	// none.
	Incarnation string `json:"incarnation,omitempty"`
	// Deleting is set by the first step of a Delete, which removes the
	// journal in several transactions: from then on every transition and
	// append is refused (ErrNotFound), journal reads report the session
	// gone, and only a Delete at the same fence, which finishes the job,
	// is accepted. Get and List still return such a session so that a host
	// can finish an interrupted Delete.
	Deleting bool `json:"deleting,omitempty"`

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

// SessionSpec describes a session to create.
type SessionSpec struct {
	// ID is the session id; empty means generate a UUIDv7.
	ID         string
	Agent      string
	Workspace  string
	Options    map[string]string
	MCPServers []MCPServer
}

// MCPServer is an MCP server a session passes to its agent (ACP
// McpServer). Transport is "stdio" (Command, Args, Env), "http" or "sse"
// (URL, Headers).
type MCPServer struct {
	Name      string      `json:"name"`
	Transport string      `json:"transport"`
	Command   string      `json:"command,omitempty"`
	Args      []string    `json:"args,omitempty"`
	Env       []NameValue `json:"env,omitempty"`
	URL       string      `json:"url,omitempty"`
	Headers   []NameValue `json:"headers,omitempty"`
}

// NameValue is an environment variable or an HTTP header.
type NameValue struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}
