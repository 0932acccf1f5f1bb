package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/agenthost/agenthost/internal/privdir"
	"github.com/agenthost/agenthost/leasestore"
	"github.com/agenthost/agenthost/probe"
)

// AgentPlugin says how to start an agent's plugin.
type AgentPlugin struct {
	// Path is the plugin executable; it must be absolute.
	Path string
	// Args are passed to the plugin.
	Args []string
	// Env is extra environment for this agent's plugins (KEY=VALUE), on
	// top of the host's allowlist. The credential policy does not apply to
	// it: it is configuration, not inherited.
	Env []string
	// SHA256, when set, is the hex SHA-256 digest the executable at Path
	// must have. StartSession verifies it right before every spawn; a
	// mismatch fails the start before any process exists, naming both
	// digests.
	SHA256 string
	// Revision, when set, names the version of the executable at Path
	// (the agenthost binary gives its size, mtime and inode): a plugin
	// upgraded by copying over the same path has a new Revision, so
	// SetAgents drops the capabilities its predecessor declared. The host
	// does not read it otherwise.
	Revision string
}

// CredentialPolicy says which environment variables carry an agent's
// credentials. They are removed from the environment a plugin inherits
// (through Config.ResolveEnvironment) unless the session allows them, so a
// key in a developer's shell never silently overrides the login a user
// chose for a session. The host knows no provider: whoever wires it (the
// agenthost binary, from its built-in plugins and its configuration) names
// the variables.
//
// Inherit is the operator's explicit opt-in, for API-key and gateway users
// whose credentials live in the host's own environment: the named
// variables the host has are copied from its environment to the plugin's
// (it otherwise passes only an allowlist), and every session of the agent
// allows credentials, as if each SessionRequest said AllowCredentials. An
// Inherit policy without Variables inherits nothing.
type CredentialPolicy struct {
	Variables []string
	Inherit   bool
}

// Config configures a Host. StateDir and Store are required; every other
// field's zero value works.
type Config struct {
	// StateDir holds per-session plugin directories, sockets and logs (and,
	// by convention, the Badger store). Must be absolute.
	StateDir string
	// Store is the lease store the host keeps its sessions in, opened by
	// the caller (badgerstore.Open, typically on StateDir). Open takes
	// ownership: the host closes it on Close and Shutdown, and Open closes
	// it when it fails. Nothing else may write to it while the host runs:
	// Open marks every lease unreconciled and decides each.
	Store leasestore.Store
	// HostID names this execution host in leases. Default: "local".
	HostID string
	// ClaimKeyID names the key claims are granted under. Default: "default".
	ClaimKeyID string
	// Agents maps agent names to their plugins. Host.SetAgents replaces
	// them (and Credentials) while the host runs.
	Agents map[string]AgentPlugin
	// OnUnknownAgent is called when a start or a capabilities request
	// names an agent not configured, before it is refused; it may call
	// SetAgents, and the agent is looked up again after it returns. The
	// agenthost binary rescans its configuration there, so a plugin copied
	// in just before the request runs at once. Default: none.
	OnUnknownAgent func(ctx context.Context, agent string)
	// ResolveWorkspace turns the workspace a session asks for into the
	// absolute directory its agent runs in. Default: the request itself,
	// which must be absolute.
	ResolveWorkspace func(ctx context.Context, agent, workspace string) (string, error)
	// ResolveEnvironment returns extra environment (KEY=VALUE) for an
	// agent's plugin, for example a login shell's. It passes through the
	// agent's credential policy. Default: none beyond the allowlist.
	ResolveEnvironment func(ctx context.Context, agent string) ([]string, error)
	// Credentials maps agents to credential policies, applied to what
	// ResolveEnvironment returns (the host's own environment reaches a
	// plugin only through the allowlist, and the variables of a policy
	// that inherits them). Default: none, and an agent
	// without one has nothing stripped: the host knows no provider. Each
	// reference plugin exports its provider's variables (the
	// CredentialVariables function of its package under plugins/); the
	// agenthost binary fills this from them, and an embedder that resolves
	// a login shell's environment for those plugins should too.
	Credentials map[string]CredentialPolicy
	// OnError receives failures of background work (the orphan reaper,
	// re-probes, journaling) with a scope name. Default: logged at error
	// level.
	OnError func(scope string, err error)
	// ProcessTable reads the process table. Default: the platform's. Tests
	// inject one; it never makes SupportsCreate true where the platform
	// cannot verify identities.
	ProcessTable probe.Table
	// ReapOrphans replaces the orphan reaper run in the background at
	// open. Default: a probe.Reaper over this host's leases and sockets.
	ReapOrphans func(ctx context.Context) error
	// StartupTimeout bounds a plugin's start, handshake to open session.
	// Default: 30s.
	StartupTimeout time.Duration
	// StopTimeout is how long a plugin gets to stop gracefully before its
	// process group is killed. Default: 5s.
	StopTimeout time.Duration
	// ReattachTimeout bounds reconnecting to one surviving plugin at open.
	// Default: 10s.
	ReattachTimeout time.Duration
	// ReconcileInBackground makes Open return once every lease is marked
	// unreconciled, deciding the sessions in the background: each is
	// undecided until its decision (Undecided, Status), and a start of one
	// is refused meanwhile (ErrUndecided). Default: Open returns once
	// every session is decided.
	ReconcileInBackground bool
	// DecisionWait is how long a start or resume of a session still
	// undecided since open waits for its decision before it is refused
	// with ErrUndecided. A client that reconnects to a host just started
	// asks for its sessions at once, and most decisions take milliseconds;
	// a plugin that does not answer holds its own for up to
	// ReattachTimeout, and its client is told so after this rather than
	// kept waiting that long. Default: 5s.
	DecisionWait time.Duration
	// ReprobeInterval is how often latched sessions are probed again.
	// Default: 30s.
	ReprobeInterval time.Duration
	// PermissionTimeout is how long a plugin's permission request waits
	// for an answer, asked of every client that follows the session and of
	// the next one that does when none follows: then the host answers it
	// "cancelled" and logs it. Default: DefaultPermissionTimeout (10
	// minutes).
	PermissionTimeout time.Duration
	// IdleTimeout is how long a running session may be idle (no turn, no
	// pending permission request, no follower: see Session.Followed)
	// before the host stops its plugin, as Session.Stop does, with release
	// detail IdleStopDetail; the session stays resumable, and
	// Host.ResumeIdle starts it again on its next request. Default: 0,
	// never idle.
	IdleTimeout time.Duration
	// ProviderState says when the host exports and stores a turn's
	// provider state (providerstate.go). Default: ProviderStateInCluster.
	ProviderState ProviderStateMode
	// Cluster, when set, runs the host in cluster mode: Store is a store
	// shared by the hosts of several machines (leasestore/etcdstore, whose
	// Store is also the Cluster), the host joins the cluster as HostID,
	// decides at open only its own sessions, tells clients where another
	// host's session runs, takes over the sessions of hosts that lost
	// their liveness lease, and heartbeats its plugins, which fence
	// themselves without (see "Several machines" in the package doc).
	// HostID must then be unique in the cluster. Default: nil, a single
	// machine, and the fields below are unused.
	Cluster leasestore.Cluster
	// LivenessTTL is the TTL of the host's liveness lease in the cluster.
	// Every host of one cluster must use the same. Default:
	// DefaultLivenessTTL (5s).
	LivenessTTL time.Duration
	// DriftMargin is what a host waits, beyond LivenessTTL, after it
	// observed another host's loss before it takes that host's sessions
	// over: the bound on how much the machines' clocks may run apart in
	// that time. Default: DefaultDriftMargin (1s).
	DriftMargin time.Duration
	// SelfFence is the bound after which a plugin that has not heard a
	// heartbeat fences itself (EnvSelfFence). Default: LivenessTTL/2; it
	// must be shorter than LivenessTTL.
	SelfFence time.Duration
	// Address is where this host's clients reach it (its local API socket
	// path), for its cluster registration: a client of another host is
	// told it for this host's sessions (leasestore.JoinRequest.Address).
	// Default: none.
	Address string
	// Logger receives the host's logs. Default: no logging.
	Logger hclog.Logger
	// Now is the wall clock for the times in the death evidence the host
	// gathers. Default: time.Now. The store stamps journal entries and
	// records with a clock of its own (badgerstore.Options.Now): give both
	// the same. Nothing is decided by it (leases move on fences and process
	// identities, identities compare boot-relative start ticks), so a clock
	// stepped backwards between runs changes recorded times only; tests
	// inject one to step it.
	Now func() time.Time
}

func (c Config) withDefaults() Config {
	if c.HostID == "" {
		c.HostID = "local"
	}
	if c.ClaimKeyID == "" {
		c.ClaimKeyID = "default"
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.ReattachTimeout <= 0 {
		c.ReattachTimeout = 10 * time.Second
	}
	if c.DecisionWait <= 0 {
		c.DecisionWait = 5 * time.Second
	}
	if c.ReprobeInterval <= 0 {
		c.ReprobeInterval = 30 * time.Second
	}
	if c.PermissionTimeout <= 0 {
		c.PermissionTimeout = DefaultPermissionTimeout
	}
	// Set here, not only where a plugin is started: readopted plugins and
	// the reapers read it too, and zero there meant an immediate SIGKILL.
	if c.StopTimeout <= 0 {
		c.StopTimeout = 5 * time.Second
	}
	return c
}

// ReaperScope is the scope of orphan-reaper failures sent to OnError.
const ReaperScope = probe.ReaperScope

// Host supervises agent sessions: one plugin process per session, each
// admitted as the session's writer only through the lease store.
type Host struct {
	cfg Config
	// agentsMu guards cfg.Agents and cfg.Credentials (see SetAgents).
	agentsMu sync.RWMutex
	log      hclog.Logger
	store    leasestore.Store
	prober   *probe.Prober
	tokenVar string
	// sockRoot holds one socket directory per plugin (see socketRootFor).
	sockRoot string

	// Decisions made at open, by session id, and the sessions still
	// waiting for theirs (guarded by mu).
	decisions map[string]Decision
	undecided map[string]bool
	// decided is closed, and replaced, each time a session is decided
	// (AwaitDecision). Guarded by mu.
	decided chan struct{}
	// reconciled is closed once every session found at open is decided.
	reconciled chan struct{}

	bg     sync.WaitGroup // background work: reaper, re-prober
	stopBg context.CancelFunc
	reaped chan struct{} // closed when the reaper's first pass ended

	starting sync.WaitGroup // StartSession calls in flight
	// startingIDs holds, by session id, the StartSession of that session
	// running now; closed when it returns (see startTurn).
	startingIDs map[string]chan struct{}

	mu       sync.Mutex
	sessions map[string]*Session
	// follows counts, by session id, the clients following it (see
	// Session.Followed): a Session registered under the id starts with
	// the count, so a session started again keeps its followers.
	follows map[string]int
	caps    map[string]*capEntry // by agent; see Capabilities
	// identifying are the spawn tokens of plugins started only to identify
	// their agent: no lease holds them, and the reaper must not stop them.
	identifying map[string]bool
	closed      bool

	// cl is cluster mode's state; nil on a single machine.
	cl *cluster

	// moves batches the lease moves of the reconcile pass under way; nil
	// outside one (see reconcileAll). Guarded by mu.
	moves *leaseBatcher
}

// Open opens the host's state directory and reconciles every session the
// previous host left: each lease is marked unreconciled, all owners are
// probed in one batch, and each session is readopted (its plugin survived
// and proves it is the recorded owner), evicted (its owner is proven gone;
// the session stays resumable from its provider handle), or latched (the
// evidence is incomplete; re-probed periodically and on every start
// attempt). No prompt is accepted for a session before its decision. Then
// orphaned plugins are reaped in the background; their failures never fail
// Open. Sessions are decided independently, each readoption bounded by
// ReattachTimeout; with Config.ReconcileInBackground, Open returns before
// they are (Reconciled is closed once all are).
//
// Open takes ownership of cfg.Store, and a failed Open leaves nothing
// open: the store is closed again.
func Open(ctx context.Context, cfg Config) (*Host, error) {
	store := cfg.Store
	if store == nil {
		return nil, fmt.Errorf("%w: Config.Store is nil: open a lease store (badgerstore.Open) and pass it", leasestore.ErrInvalidArgument)
	}
	if !filepath.IsAbs(cfg.StateDir) {
		_ = store.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("%w: state directory must be absolute, got %q", leasestore.ErrInvalidArgument, cfg.StateDir)
	}
	cfg = cfg.withDefaults()
	cfg, err := clusterConfig(cfg)
	if err != nil {
		_ = store.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	sockRoot, err := socketRootFor(cfg.StateDir, os.TempDir(), os.Getenv("XDG_RUNTIME_DIR"))
	if err != nil {
		_ = store.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	sum := sha256.Sum256([]byte(cfg.StateDir))
	tokenVar := probe.TokenVariable(hex.EncodeToString(sum[:4]))
	// A host started from inside one of its own plugins' trees must not
	// pass that plugin's token on to the plugins it starts.
	_ = os.Unsetenv(tokenVar)
	h := &Host{
		cfg: cfg, log: cfg.Logger, store: store, tokenVar: tokenVar, sockRoot: sockRoot,
		prober:   &probe.Prober{HostID: cfg.HostID, TokenVar: tokenVar, Table: cfg.ProcessTable},
		sessions: map[string]*Session{},
		caps:     map[string]*capEntry{}, identifying: map[string]bool{},
		decisions: map[string]Decision{}, undecided: map[string]bool{}, decided: make(chan struct{}), startingIDs: map[string]chan struct{}{}, follows: map[string]int{},
		reaped: make(chan struct{}), reconciled: make(chan struct{}),
	}
	if cfg.Cluster != nil {
		// Joined before any lease is marked: a second process with this
		// host id must not flag the first one's leases.
		if err := h.join(ctx); err != nil {
			_ = store.Close(context.WithoutCancel(ctx))
			return nil, err
		}
	}
	sessions, err := h.beginReconcile(ctx)
	if err != nil {
		if h.cl != nil {
			_ = h.cl.m.Close(context.WithoutCancel(ctx))
		}
		_ = store.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("reconcile sessions: %w", err)
	}
	// Decisions, then the reaper (which must not take a plugin being
	// readopted for an orphan) and the re-probes of latched sessions.
	bgCtx, cancel := context.WithCancel(context.Background())
	h.stopBg = cancel
	if h.cl != nil {
		h.bg.Go(func() { h.takeoverLoop(bgCtx) })
	}
	h.bg.Add(1)
	go func() {
		defer h.bg.Done()
		h.reconcileAll(bgCtx, sessions)
		close(h.reconciled)
		if bgCtx.Err() != nil {
			close(h.reaped)
			return
		}
		h.bg.Go(func() { h.reprobeLoop(bgCtx) })
		defer close(h.reaped)
		h.reapOrphans(bgCtx)
	}()
	if cfg.ReconcileInBackground {
		return h, nil
	}
	select {
	case <-h.reconciled:
		return h, nil
	case <-ctx.Done():
		_ = h.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("reconcile sessions: %w", ctx.Err())
	}
}

// Reconciled is closed once every session Open found is decided.
func (h *Host) Reconciled() <-chan struct{} { return h.reconciled }

// Store returns the host's lease store.
func (h *Host) Store() leasestore.Store { return h.store }

// Decisions returns what Open decided for each session it found.
func (h *Host) Decisions() map[string]Decision {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]Decision, len(h.decisions))
	for k, v := range h.decisions {
		out[k] = v
	}
	return out
}

// report sends a background failure to OnError, or logs it.
func (h *Host) report(scope string, err error) {
	if h.cfg.OnError != nil {
		h.cfg.OnError(scope, err)
		return
	}
	h.log.Error(scope+" failed", "error", err)
}

// Close detaches from every session: plugins keep running (and keep their
// leases), and the next host readopts them. Then it closes the store. A
// Close whose journal teardown fails reports it and keeps the failed handles;
// the next Close retries them. An idle stop under way (see idle.go) is
// waited for first; a ctx that ends meanwhile fails the Close with the
// store open, and the next Close goes on.
func (h *Host) Close(ctx context.Context) error {
	return h.close(ctx, false)
}

// Shutdown stops every session gracefully (each releases its lease), then
// closes like Close.
func (h *Host) Shutdown(ctx context.Context) error {
	return h.close(ctx, true)
}

func (h *Host) close(ctx context.Context, stop bool) error {
	h.mu.Lock()
	first := !h.closed
	h.closed = true
	h.mu.Unlock()
	if first {
		// Nothing new starts once closed is set; wait for what already
		// started (session starts, background readoptions) so that every
		// session is in the snapshot below.
		h.stopBg()
		h.bg.Wait()
		h.starting.Wait()
	}
	h.mu.Lock()
	sessions := make([]*Session, 0, len(h.sessions))
	for _, s := range h.sessions {
		sessions = append(sessions, s)
	}
	h.mu.Unlock()
	// No idle stop starts from here on, and one already under way (its
	// decision taken before closed was set) runs to its end first: a
	// detach in its middle could leave a plugin whose agent session the
	// stop had closed holding the lease, and a Stop beside it would race
	// it for the plugin's end.
	for _, s := range sessions {
		if wait := s.closeIdle(); wait != nil {
			select {
			case <-wait:
			case <-ctx.Done():
				// The store stays open: the next Close goes on.
				return fmt.Errorf("close: wait for the idle stop of session %q: %w", s.id, ctx.Err())
			}
		}
	}
	var errs []error
	for _, s := range sessions {
		if stop {
			if err := s.Stop(ctx); err != nil {
				errs = append(errs, err)
			}
		} else {
			s.detach()
		}
	}
	if h.cl != nil {
		// Left after the plugins: a detached plugin hears no more
		// heartbeats and fences itself within SelfFence, well before
		// another host, seeing this one lost at once, takes its session
		// over (after LivenessTTL + DriftMargin).
		if err := h.cl.m.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("leave the cluster: %w", err))
		}
	}
	if err := h.store.Close(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// SupportsCreate reports whether this host can run agent at loc: the agent
// must be configured, loc must be this host, and this platform must be able
// to verify process identities (an injected process table does not count).
func (h *Host) SupportsCreate(loc probe.Location, agent string) bool {
	_, ok := h.agent(agent)
	return ok && probe.CanVerifyIdentity(h.cfg.HostID, loc)
}

// reapOrphans runs the orphan reaper once; failures go to OnError.
func (h *Host) reapOrphans(ctx context.Context) {
	if h.cfg.ReapOrphans != nil {
		if err := h.cfg.ReapOrphans(ctx); err != nil {
			h.report(ReaperScope, err)
		}
		return
	}
	r := &probe.Reaper{
		TokenVar: h.tokenVar, Table: h.cfg.ProcessTable, SocketRoot: h.socketRoot(),
		Owned: func(token string) (bool, error) {
			sessions, err := h.store.List(ctx)
			if err != nil {
				return false, err
			}
			h.mu.Lock()
			identifying := h.identifying[token]
			h.mu.Unlock()
			return identifying || probe.OwnsToken(sessions, token), nil
		},
		Grace:   h.cfg.StopTimeout,
		OnError: h.report,
		Logger:  h.log.Named("reaper"),
	}
	rep := r.Reap(ctx)
	if len(rep.Orphans) > 0 || len(rep.RemovedSockets) > 0 {
		h.log.Info("reaped orphans", "stopped", rep.Stopped, "sockets", len(rep.RemovedSockets))
	}
}

// socketRoot is where plugin socket directories live (see socketRootFor).
func (h *Host) socketRoot() string { return h.sockRoot }

// maxSocketRoot bounds the socket root's length so that a plugin's socket,
// <root>/<spawn token>/plugin<digits>, stays within the 107-byte limit of a
// Unix socket path.
const maxSocketRoot = 40

// socketRootFor chooses the socket root for stateDir: stateDir/s when that
// is short enough, else agenthost-<hash of stateDir> in the per-user runtime
// directory runtimeDir ($XDG_RUNTIME_DIR) when it is set, this user's and
// private, else in the temporary directory tmpDir. The last is a shared
// directory with a predictable name in it: another user who creates that
// name first could move this host's sockets (a session latched after a
// restart), so it is created or accepted only as a private directory of
// this user (privdir.Ensure), and refused otherwise. startPlugin checks the
// root again before each plugin start.
func socketRootFor(stateDir, tmpDir, runtimeDir string) (string, error) {
	if dir := filepath.Join(stateDir, "s"); len(dir) <= maxSocketRoot {
		return dir, nil
	}
	sum := sha256.Sum256([]byte(stateDir))
	name := "agenthost-" + hex.EncodeToString(sum[:6])
	if runtimeDir != "" && filepath.IsAbs(runtimeDir) {
		if dir := filepath.Join(runtimeDir, name); len(dir) <= maxSocketRoot && privdir.Check(runtimeDir) == nil {
			if err := privdir.Ensure(dir); err == nil {
				return dir, nil
			}
		}
	}
	dir := filepath.Join(tmpDir, name)
	if err := privdir.Ensure(dir); err != nil {
		return "", fmt.Errorf("plugin socket directory (the state directory %s is too long for sockets inside it): %w; "+
			"remove it if it is yours, or set XDG_RUNTIME_DIR to a private directory of yours, or use a state directory of at most %d bytes",
			stateDir, err, maxSocketRoot-2)
	}
	return dir, nil
}

// allowlist is the part of the host's own environment every plugin gets.
func allowlist() []string {
	return []string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR",
		"XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "XDG_RUNTIME_DIR"}
}

// environment builds a plugin's environment by policy: an allowlist of the
// host's variables, the agent's credential variables from the host's own
// environment when its policy inherits them, the resolved environment less
// the agent's credential variables (unless the session allows them), and
// the agent's configured extras. Nothing else is inherited; a later entry
// of the same key wins.
func (h *Host) environment(ctx context.Context, name string, set agentSettings, allowCredentials bool) ([]string, error) {
	policy := set.policy
	keys := allowlist()
	if policy.Inherit {
		keys = append(keys, policy.Variables...)
	}
	var env []string
	for _, k := range keys {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	if h.cfg.ResolveEnvironment != nil {
		resolved, err := h.cfg.ResolveEnvironment(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("resolve environment for agent %q: %w", name, err)
		}
		strip := policy.Variables
		for _, kv := range resolved {
			k, _, _ := strings.Cut(kv, "=")
			if !allowCredentials && slices.Contains(strip, k) {
				continue
			}
			env = append(env, kv)
		}
	}
	return append(env, set.plugin.Env...), nil
}

func (h *Host) agentNames() []string {
	h.agentsMu.RLock()
	defer h.agentsMu.RUnlock()
	names := make([]string, 0, len(h.cfg.Agents))
	for n := range h.cfg.Agents {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Session returns the session this host runs with that id, if any. A
// session whose plugin has exited is not running any more, though it stays
// listed until its journal is closed and its lease released: it can take
// no prompt, so it is not returned (StartSession waits for it to go).
func (h *Host) Session(id string) (*Session, bool) {
	h.mu.Lock()
	s, ok := h.sessions[id]
	h.mu.Unlock()
	if !ok {
		return nil, false
	}
	select {
	case <-s.proc.Terminated():
		return nil, false
	default:
		return s, true
	}
}

// Agents returns the names of the configured agents, sorted.
func (h *Host) Agents() []string { return h.agentNames() }

// Status summarises the host for status displays.
type Status struct {
	PID      int               `json:"pid"`
	StateDir string            `json:"stateDir"`
	HostID   string            `json:"hostId"`
	Agents   []string          `json:"agents"`
	Running  []string          `json:"running"`
	Sessions int               `json:"sessions"`
	Decided  map[Action]int    `json:"decided"`
	Recovery *string           `json:"recovery,omitempty"`
	Latched  map[string]string `json:"latched,omitempty"`
	// DiskBytes is what the state directory holds on disk: the store, the
	// session directories and the plugin sockets (not plugins/).
	DiskBytes int64 `json:"diskBytes"`
	// Reconciling: sessions found at open are still being decided.
	Reconciling bool `json:"reconciling,omitempty"`
	// Decisions is each session's restart decision as it is made, by id;
	// ActionUndecided for one not decided yet.
	Decisions map[string]Decision `json:"decisions,omitempty"`
	// IdleTimeout is Config.IdleTimeout: 0 when sessions are never idle.
	// Not in this JSON: the API carries it as text (api.Status).
	IdleTimeout time.Duration `json:"-"`
	// Owners names the owner host of each held session, by id (cluster
	// mode only).
	Owners map[string]string `json:"owners,omitempty"`
	// Cluster is the host's view of its cluster; nil on a single machine.
	Cluster *ClusterStatus `json:"-"`
}

// ActionUndecided is what Status shows for a session found at open whose
// decision is not made yet.
const ActionUndecided Action = "undecided"

// Status reports what the host runs and what it decided at open.
func (h *Host) Status(ctx context.Context) (Status, error) {
	st := Status{PID: os.Getpid(), StateDir: h.cfg.StateDir, HostID: h.cfg.HostID, Agents: h.agentNames(), Decided: map[Action]int{},
		IdleTimeout: h.cfg.IdleTimeout}
	h.mu.Lock()
	for id := range h.sessions {
		st.Running = append(st.Running, id)
	}
	st.Decisions = make(map[string]Decision, len(h.decisions)+len(h.undecided))
	for id, d := range h.decisions {
		st.Decided[d.Action]++
		st.Decisions[id] = d
	}
	for id := range h.undecided {
		st.Decisions[id] = Decision{Action: ActionUndecided, Reason: "not decided yet since the host started"}
	}
	st.Reconciling = len(h.undecided) > 0
	h.mu.Unlock()
	slices.Sort(st.Running)
	sessions, err := h.store.List(ctx)
	if err != nil && len(sessions) == 0 {
		return st, err
	}
	st.Sessions = len(sessions)
	if h.cl != nil {
		st.Cluster = h.clusterStatus(ctx)
		for _, s := range sessions {
			if o := s.Lease.OwnerHost(); s.Lease.Held() && o != "" {
				if st.Owners == nil {
					st.Owners = map[string]string{}
				}
				st.Owners[s.ID] = o
			}
		}
	}
	for _, s := range sessions {
		if s.Lease.Stage.Latched() {
			if st.Latched == nil {
				st.Latched = map[string]string{}
			}
			st.Latched[s.ID] = s.Lease.LatchReason
		}
	}
	if r := h.store.Recovery(); r != nil {
		msg := r.String()
		st.Recovery = &msg
	}
	st.DiskBytes = h.diskBytes()
	return st, nil
}
