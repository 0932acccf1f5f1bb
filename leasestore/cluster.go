package leasestore

import (
	"context"
	"errors"
	"time"
)

// Cluster is what a store shared by several hosts adds to Store (package
// leasestore/etcdstore implements it; the Badger backend, one machine's
// store, does not). On one machine a pid and its start time are the
// evidence about an owner; across machines a pid means nothing, and the
// evidence is each host's liveness lease in the cluster.
//
// A host that runs on a Cluster joins it (Join) and holds a liveness lease
// of a documented TTL that the store keeps alive. Another host judges a
// session owned by that host from it: while the lease is alive the session
// is remote-live (it runs there); once the lease expired the owner host is
// lost, and only then may another host take the session over, with
// ApplyIfHostLost, whose transaction refuses the move if the lost host has
// registered again meanwhile. See package host for the wait between the
// loss and the takeover, and package plugin/sdk for why a plugin that
// outlives its host cannot write after it.
type Cluster interface {
	// Join registers req.HostID as live under a liveness lease of req.TTL and
	// keeps it alive until the Membership is closed or ctx ends. A lease
	// that expires anyway (the host was paused or cut off longer than
	// ttl) is not silently renewed under the same registration: the
	// Membership reports the loss and registers again under a new
	// incarnation (see Membership). ErrHostRegistered when hostID is
	// already registered by another live Membership (another process
	// with the same host id).
	Join(ctx context.Context, req JoinRequest) (Membership, error)
	// Hosts returns the hosts registered now, keyed by host id.
	Hosts(ctx context.Context) (map[string]HostRecord, error)
	// WatchHosts calls fn with the hosts registered when it starts (one
	// HostJoined each) and then with every join and loss, in order, until
	// ctx ends (ctx.Err()), fn fails (its error) or the store closes
	// (ErrClosed).
	WatchHosts(ctx context.Context, fn func(HostEvent) error) error
	// ApplyIfHostLost runs t on session id, like Apply, in one transaction
	// that also requires hostID to have no registration: ErrHostAlive,
	// and nothing written, when it has one. It is how a host takes over a
	// lost host's session (Evict with EvidenceHostLost), so a host that
	// came back in time keeps its sessions.
	ApplyIfHostLost(ctx context.Context, id, hostID string, t Transition) (Session, error)
}

// JoinRequest is what a host registers with (Cluster.Join).
type JoinRequest struct {
	// HostID names the host; required.
	HostID string
	// TTL is the liveness lease's TTL; the cluster may round it up.
	TTL time.Duration
	// Address is where clients of the host reach it (its local API
	// socket path), published as HostRecord.Address so that a client of
	// another host is told where this host's sessions run. Optional.
	Address string
}

// Membership is one host's registration in a Cluster.
type Membership interface {
	// Valid reports until when this host may act as a live member: the
	// time, on this host's clock, at which it sent the last keepalive
	// the cluster answered, plus the TTL the cluster granted. The
	// cluster expires the lease no earlier than that (the TTL counts
	// from the keepalive's arrival, which is later), so a host that
	// stops acting by then never acts after its loss. A zero time means
	// not live now (not yet registered again after a loss). Epoch counts
	// registrations: it grows each time the host registers again after
	// its lease expired, and a host must not trust anything it decided
	// under an older epoch (its fences may have been taken over).
	Valid() (until time.Time, epoch uint64)
	// Changed receives a value (it never blocks the sender: one is
	// buffered) whenever Valid's epoch changes or the host stops being
	// live.
	Changed() <-chan struct{}
	// TTL is the liveness lease's TTL as the cluster granted it.
	TTL() time.Duration
	// Record is this host's registration as other hosts see it.
	Record() HostRecord
	// Close stops keeping the lease alive and revokes it, so other hosts
	// see this host lost at once. It is safe to call more than once.
	Close(ctx context.Context) error
}

// HostRecord is a host's registration in a Cluster.
type HostRecord struct {
	HostID string `json:"hostId"`
	// Incarnation is random per registration: a host that registered
	// again after a loss has a new one.
	Incarnation string `json:"incarnation"`
	// PID is the host process's pid on its machine (for people reading
	// status; nothing is decided by it).
	PID int `json:"pid,omitempty"`
	// Address is where clients of the host reach it, when it says
	// (its local API socket path on its machine): a client of another
	// host is told where a session runs.
	Address    string    `json:"address,omitempty"`
	Registered time.Time `json:"registered"`
}

// HostEvent is one change WatchHosts reports.
type HostEvent struct {
	Kind   HostEventKind
	Record HostRecord
	// ObservedAt is when this process learned of the change, on its own
	// clock: for a loss, no earlier than the lease's expiry.
	ObservedAt time.Time
}

// HostEventKind says what happened to a host's registration.
type HostEventKind string

const (
	// HostJoined: the host registered (or was registered when the watch
	// began).
	HostJoined HostEventKind = "joined"
	// HostLost: the host's liveness lease expired or was revoked.
	HostLost HostEventKind = "lost"
)

// EvidenceHostLost proves an owner gone across machines: the owner's host
// lost its liveness lease in the cluster, and the taking host waited the
// documented bound since it observed the loss (see package host), by which
// time every plugin of the lost host has fenced itself. Only
// ApplyIfHostLost may carry it.
const EvidenceHostLost EvidenceKind = "owner-host-lost"

var (
	// ErrHostAlive: the host a takeover named as lost is registered.
	ErrHostAlive = errors.New("the owner's host is registered in the cluster")
	// ErrHostRegistered: another live process registered the same host id.
	ErrHostRegistered = errors.New("host id already registered in the cluster")
)

// ProviderState is what a plugin exported of its provider conversation so
// that a host on another machine can continue it (claude's session
// transcript, codex's rollout): opaque to the store, kept with the session.
type ProviderState struct {
	// Handle is the provider handle the state continues.
	Handle string `json:"handle"`
	// Fence is the fence of the writer that stored it.
	Fence uint64 `json:"fence"`
	// Data is the plugin's export, as it gave it.
	Data       []byte    `json:"data"`
	ExportedAt time.Time `json:"exportedAt"`
}

// MaxProviderStateBytes bounds one ProviderState's Data. A conversation
// whose state is larger is not portable (the host logs it and the session
// stays resumable on its own machine).
const MaxProviderStateBytes = 64 << 20

// ProviderStates keeps each session's newest ProviderState.
type ProviderStates interface {
	// PutProviderState replaces the session's provider state, whole, for
	// the writer holding fence (CheckAppend's rules, judged on the record
	// in the transaction that makes the new state visible; a refused put
	// leaves the previous state as it was). The stored Fence is fence,
	// whatever st.Fence says; a zero ExportedAt becomes the store's now.
	// ErrInvalidArgument when st fails Validate (no Handle, or Data over
	// MaxProviderStateBytes). The state outlives a release; Delete removes
	// it with the session.
	PutProviderState(ctx context.Context, id string, fence uint64, st ProviderState) error
	// GetProviderState returns the newest one, or ErrNotFound (for an
	// unknown session or one being deleted, and for a session that has
	// none, a session created again under a deleted one's id included).
	GetProviderState(ctx context.Context, id string) (ProviderState, error)
}

// ProviderStateHandles is optionally implemented by a ProviderStates that
// can say which handle the stored state continues without reading its
// Data (up to MaxProviderStateBytes, in many chunks): a host asks it of
// every session it lists (is the session portable?). Use
// StoredStateHandle, which falls back to GetProviderState for a store
// that does not implement it.
type ProviderStateHandles interface {
	// ProviderStateHandle returns the Handle GetProviderState would
	// return, with its errors (ErrNotFound for none), reading only the
	// state's description.
	ProviderStateHandle(ctx context.Context, id string) (string, error)
}

// StoredStateHandle returns the handle of the provider state ps holds for
// session id, or ErrNotFound: through ProviderStateHandles when ps
// implements it, otherwise by reading the whole state.
func StoredStateHandle(ctx context.Context, ps ProviderStates, id string) (string, error) {
	if h, ok := ps.(ProviderStateHandles); ok {
		return h.ProviderStateHandle(ctx, id)
	}
	st, err := ps.GetProviderState(ctx, id)
	return st.Handle, err
}
