package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"

	"github.com/agenthost/agenthost/internal/pluginclient"
	"github.com/agenthost/agenthost/internal/wire"
	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/leasestore"
)

// ErrUnknownAgent: the host has no plugin configured for the agent.
var ErrUnknownAgent = errors.New("unknown agent")

// ErrStartFailed is matched by every failure of StartSession to start the
// agent's plugin or to open the conversation in it (a missing or
// mismatched executable, a plugin that exits, times out or refuses). The
// plugin's own refusal matches what it refused with too: an
// *pluginclient.InvalidOptionError, pluginclient.ErrAuthRequired.
var ErrStartFailed = errors.New("the agent could not be started")

// startError is a start failure that reads as its cause and matches
// ErrStartFailed.
type startError struct{ err error }

func (e startError) Error() string   { return e.err.Error() }
func (e startError) Unwrap() []error { return []error{e.err, ErrStartFailed} }

// optAllowCredentials is the session option that tells a plugin to pass
// its provider's credentials on to its CLI.
const optAllowCredentials = "allow_credentials"

// SessionRequest asks for a session to be started or resumed.
type SessionRequest struct {
	// ID names an existing session to resume, or the id for a new one;
	// empty generates one. Any valid UTF-8, NUL included.
	ID        string
	Agent     string
	Workspace string
	// Options are the agent's session options. A resume starts from the
	// options stored with the session (what its agent acknowledged, as
	// changed since by modes and config options); these replace the stored
	// value of each option they name.
	Options map[string]string
	// MCPServers are the MCP servers the agent connects to. A resume that
	// names none gets the ones stored with the session.
	MCPServers []pluginclient.MCPServer
	// AllowCredentials passes the agent's credential variables from the
	// resolved environment through to the plugin (see CredentialPolicy).
	// An agent whose policy inherits credentials allows them in every
	// session, whatever this says.
	AllowCredentials bool
	// MustExist makes the request a resume only: when, under the
	// session's start turn, its record is gone (a removal or prune won the
	// turn after the caller read it) or is being deleted, StartSession
	// fails with leasestore.ErrNotFound instead of creating a new, empty
	// session under the same id. Every resume of a record the caller read
	// sets it.
	MustExist bool
	// Incarnation, with MustExist, is the incarnation of the record the
	// caller read (leasestore.Session.Incarnation): a record of another
	// incarnation (removed and created again meanwhile) is gone too.
	// Empty checks only that the record exists.
	Incarnation string
}

// StartSession starts (or resumes, when req.ID names an existing session)
// a session. In order, at one fence: the lease is reserved; the plugin is
// spawned carrying the reserved spawn token; its identity, read back from
// the process table, is committed as the owner; it answers readiness and
// opens the conversation; its provider handle is proved. Only then does the
// session accept prompts. A failure before the spawn records durable
// pre-spawn proof; any failure releases the lease.
func (h *Host) StartSession(ctx context.Context, req SessionRequest) (*Session, error) {
	set, ok := h.lookupAgent(ctx, req.Agent)
	if !ok {
		return nil, fmt.Errorf("%w %q: configured agents are %q", ErrUnknownAgent, req.Agent, h.agentNames())
	}
	// A host whose liveness is not proven starts nothing: its plugin
	// would fence itself, and its session may be another host's by now.
	if err := h.checkLive(); err != nil {
		return nil, fmt.Errorf("start session %q: %w", req.ID, err)
	}
	epoch := h.epoch()
	// Starts of one session take turns: the second of two concurrent
	// resumes finds the session the first started and joins it, rather
	// than losing the race for its lease.
	if req.ID != "" {
		if err := h.AwaitDecision(ctx, req.ID); err != nil {
			return nil, err
		}
		release, err := h.startTurn(ctx, req.ID)
		if err != nil {
			return nil, err
		}
		defer release()
	}
	h.mu.Lock()
	closed := h.closed
	running := h.sessions[req.ID]
	if !closed {
		h.starting.Add(1)
	}
	h.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("start session: %w", leasestore.ErrClosed)
	}
	defer h.starting.Done()
	if running != nil && req.ID != "" {
		if running.agent != req.Agent {
			return nil, fmt.Errorf("%w: session %q runs agent %q, not %q", leasestore.ErrInvalidArgument, req.ID, running.agent, req.Agent)
		}
		select {
		case <-running.proc.Terminated():
			// Its plugin has exited and the session is winding down (its
			// journal closing, its lease being released) but is still
			// listed: handing it out would fail the caller's next prompt
			// on a closed journal. Wait until it is gone, then resume it.
			select {
			case <-running.Done():
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		default:
			return running, nil
		}
	}
	store := h.store
	rec, err := store.Get(ctx, req.ID)
	if req.MustExist {
		if err := stillThere(req, rec, err); err != nil {
			return nil, err
		}
	}
	resume := err == nil
	switch {
	case resume && rec.Agent != req.Agent:
		return nil, fmt.Errorf("%w: session %q belongs to agent %q, not %q", leasestore.ErrInvalidArgument, req.ID, rec.Agent, req.Agent)
	case req.ID == "" || errors.Is(err, leasestore.ErrNotFound):
		resume = false
	case err != nil:
		return nil, err
	}
	if resume {
		// Another host's session runs there, or is that host's until
		// this one took it over: never started here meanwhile.
		if err := h.checkOwnerHost(ctx, rec); err != nil {
			return nil, err
		}
	}
	if resume && rec.Lease.Stage.Latched() {
		// Every attach attempt re-probes a latched session: it leaves the
		// latch only on evidence.
		if err := h.reprobeLatched(ctx, rec.ID); err != nil {
			return nil, err
		}
		h.mu.Lock()
		running = h.sessions[rec.ID]
		h.mu.Unlock()
		if running != nil {
			return running, nil
		}
		if rec, err = store.Get(ctx, rec.ID); err != nil {
			return nil, err
		}
	}
	if resume {
		// In a cluster, a conversation whose state is on another host's
		// machine, and not in the store, is resumed only there.
		if err := h.checkPortable(ctx, rec); err != nil {
			return nil, err
		}
	}
	if resume {
		// A resume keeps the options the session was started with, as its
		// agent acknowledged them and as modes and config options changed
		// them since (its approval policy, its model): a plugin resumed
		// without them would fall back to its CLI's defaults, which may
		// ask less. Whether credentials pass is the current policy's to
		// say.
		opts := maps.Clone(rec.Options)
		if opts == nil {
			opts = map[string]string{}
		}
		delete(opts, optAllowCredentials)
		maps.Copy(opts, req.Options)
		req.Options = opts
		if req.MCPServers == nil {
			req.MCPServers = mcpFromStore(rec.MCPServers)
		}
	}
	if set.policy.Inherit {
		req.AllowCredentials = true
	}
	if req.AllowCredentials {
		// Plugins strip their provider's credentials too, unless told.
		opts := make(map[string]string, len(req.Options)+1)
		for k, v := range req.Options {
			opts[k] = v
		}
		opts[optAllowCredentials] = "true"
		req.Options = opts
	}
	workspace := req.Workspace
	if workspace == "" && resume {
		workspace = rec.Workspace
	}
	if h.cfg.ResolveWorkspace != nil {
		if workspace, err = h.cfg.ResolveWorkspace(ctx, req.Agent, workspace); err != nil {
			return nil, fmt.Errorf("resolve workspace: %w", err)
		}
	}
	if workspace != "" && !filepath.IsAbs(workspace) {
		return nil, fmt.Errorf("%w: workspace must be an absolute path, got %q", leasestore.ErrInvalidArgument, workspace)
	}

	// Admitted. Each step below undoes what it did before it fails.
	a, err := h.reserve(ctx, req, rec, resume, workspace)
	if err != nil {
		return nil, err
	}
	env, err := a.preflight(ctx, set, req.AllowCredentials)
	if err != nil {
		return nil, startError{err}
	}
	if err := a.spawn(ctx, set.plugin, env, workspace, req.Options, req.MCPServers); err != nil {
		return nil, startError{err}
	}
	a.epoch = epoch
	h.learnCapabilities(req.Agent, set.plugin, a.proc.caps)
	if err := a.checkHeartbeat(ctx); err != nil {
		a.abandon(ctx, err.Error())
		return nil, startError{err}
	}
	if rec, err = a.prove(ctx, req.Options, req.MCPServers); err != nil {
		return nil, err
	}
	journal, err := a.openJournal(ctx)
	if err != nil {
		return nil, err
	}
	st := stateOf(rec)
	st.modes, st.configOptions = a.proc.info.Modes, a.proc.info.ConfigOptions
	s, ok := a.launch(ctx, a.proc.handle, journal, 1, false, st)
	if !ok {
		return nil, fmt.Errorf("start session %q: the host is closing: %w", a.id, leasestore.ErrClosed)
	}
	return s, nil
}

// stillThere checks, for a StartSession with MustExist, that the record
// read under the start turn is the one the caller read: the session was
// not removed since.
func stillThere(req SessionRequest, rec leasestore.Session, err error) error {
	gone := func() error {
		return fmt.Errorf("session %q was removed (sessions rm or prune) since it was looked up; nothing was started: %w", req.ID, leasestore.ErrNotFound)
	}
	switch {
	case errors.Is(err, leasestore.ErrNotFound):
		return gone()
	case err != nil:
		return err
	case rec.Deleting, req.Incarnation != "" && rec.Incarnation != req.Incarnation:
		return gone()
	}
	return nil
}

// startTurn waits until no other StartSession of session id runs, and
// makes this call the one that does until release is called.
func (h *Host) startTurn(ctx context.Context, id string) (release func(), err error) {
	for {
		h.mu.Lock()
		busy, ok := h.startingIDs[id]
		if !ok {
			done := make(chan struct{})
			h.startingIDs[id] = done
			h.mu.Unlock()
			return func() {
				h.mu.Lock()
				delete(h.startingIDs, id)
				h.mu.Unlock()
				close(done)
			}, nil
		}
		h.mu.Unlock()
		select {
		case <-busy:
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for another start of session %q: %w", id, ctx.Err())
		}
	}
}

// startAttempt is one attempt to make a plugin the writer of a session:
// the steps of StartSession (reserve, preflight, spawn, prove) and of
// readoption (reattachPlugin, own with Readopt), then openJournal and
// launch for both. A step that fails has undone its part before it
// returns, so the caller only returns its error. A rollback that fails
// too is reported, never dropped (see undo).
type startAttempt struct {
	h     *Host
	id    string
	agent string
	// fence is the fence the attempt holds: the reservation's, or the one
	// a readoption moved the lease to.
	fence uint64
	token string // the reserved spawn token; empty for an adopted plugin
	// handle is the provider handle recorded at the reservation: the
	// conversation the plugin resumes, empty for a new one.
	handle string
	proc   *pluginProc
	// committed: the spawned process is recorded as the lease's owner.
	committed bool
	// adopted: the plugin outlived the host that started it (readopt).
	// It proved it is the recorded owner and may still hold the session,
	// so a failed step never stops it and never releases its lease: it
	// only detaches, and the caller latches the lease at the attempt's
	// fence. A plugin this host spawned is stopped and its lease released.
	adopted bool
	// openTurn is the turn a readopted session's journal shows open (see
	// resumeOpenTurn); "" when none, or for a spawned plugin.
	openTurn string
	// epoch is the cluster membership's epoch when the attempt began: the
	// lease it holds is known to be this host's under it.
	epoch uint64
	// pending are the permission requests a readopted plugin asked
	// before this host (see unansweredPermissions): registered before the
	// session's pump starts, so a permission_resolved the pump journals
	// for one of them forgets it rather than racing its registration.
	pending []*journal.PermissionRequest
}

// reserve reserves the session's lease for a new plugin, creating the
// session in the same commit when it is new. Nothing is held when it
// fails.
func (h *Host) reserve(ctx context.Context, req SessionRequest, rec leasestore.Session, resume bool, workspace string) (*startAttempt, error) {
	reserve := leasestore.Reserve{ClaimKeyID: h.cfg.ClaimKeyID, HostID: h.cfg.HostID}
	var err error
	if !resume {
		rec, err = h.store.CreateAndApply(ctx, leasestore.SessionSpec{ID: req.ID, Agent: req.Agent, Workspace: workspace, Options: req.Options,
			MCPServers: mcpToStore(req.MCPServers)}, reserve)
		if err != nil {
			return nil, err
		}
	} else {
		reserve.ExpectedFence = rec.Lease.Fence
		if rec, err = h.store.Apply(ctx, rec.ID, reserve); err != nil {
			return nil, fmt.Errorf("reserve session %q: %w", req.ID, err)
		}
	}
	return &startAttempt{
		h: h, id: rec.ID, agent: req.Agent, fence: rec.Lease.Fence,
		token: rec.Lease.ReservedSpawnToken, handle: rec.Handle(),
	}, nil
}

// preflight checks the plugin executable and builds its environment. It
// runs before any spawn, so a failure is durable proof that no process was
// started: the reservation records it and is released outright.
//
// No begin-spawn commit follows: it would only clear a pre-spawn proof,
// and a reservation that gets past here has none. A reservation without
// proof already reads "a process may have been started" to a restart,
// which then looks for one by its token.
func (a *startAttempt) preflight(ctx context.Context, set agentSettings, allowCredentials bool) ([]string, error) {
	agent := set.plugin
	env, err := func() ([]string, error) {
		if err := checkExecutable(agent.Path); err != nil {
			return nil, err
		}
		if err := checkDigest(agent.Path, agent.SHA256); err != nil {
			return nil, err
		}
		return a.h.environment(ctx, a.agent, set, allowCredentials)
	}()
	if err != nil {
		a.undo(ctx, leasestore.PreSpawnFailure{Fence: a.fence, Reason: err.Error()})
		a.undo(ctx, leasestore.Release{Fence: a.fence, Detail: "plugin not started"})
		return nil, fmt.Errorf("start session %q: %w", a.id, err)
	}
	return env, nil
}

// spawn starts the plugin carrying the reserved spawn token, commits the
// identity the process table gives it as the owner (commitOwner), and
// waits until the plugin is attached, identified and has opened the
// conversation (startPlugin). On a failure the process, if one was
// spawned, has been killed and reaped by this host: an observed exit. So
// the lease is released when the owner was committed, and evicted with
// that evidence when it was not.
func (a *startAttempt) spawn(ctx context.Context, agent AgentPlugin, env []string, workspace string, options map[string]string, servers []pluginclient.MCPServer) error {
	h := a.h
	sessionDir := filepath.Join(h.cfg.StateDir, "sessions", dirName(a.id, a.fence))
	env = append(env, wire.EnvSpawnTokenVar+"="+h.tokenVar, h.tokenVar+"="+a.token, wire.EnvSessionDir+"="+sessionDir)
	// Last, so no configured or resolved variable overrides it.
	env = append(env, h.clusterEnv()...)
	spec := pluginSpec{
		Agent: a.agent, Path: agent.Path, Args: agent.Args, SessionID: a.id, SessionDir: sessionDir,
		SocketDir: filepath.Join(h.socketRoot(), a.token), SocketRoot: h.socketRoot(), Env: env, Fence: a.fence, SpawnToken: a.token,
		StartupTimeout: h.cfg.StartupTimeout, StopTimeout: h.cfg.StopTimeout,
		Logger:  h.log.Named("plugin").With("session", a.id, "agent", a.agent),
		OnStart: func(pid int) error { return a.commitOwner(ctx, pid) },
	}
	if a.handle != "" {
		spec.ResumeSession = &pluginclient.ResumeSessionRequest{Workspace: workspace, Options: options, MCPServers: servers, Handle: a.handle}
		h.withProviderState(ctx, a.id, spec.ResumeSession)
	} else {
		spec.NewSession = &pluginclient.NewSessionRequest{Workspace: workspace, Options: options, MCPServers: servers}
	}
	proc, err := startPlugin(ctx, spec)
	if err != nil {
		if a.committed {
			a.undo(ctx, leasestore.Release{Fence: a.fence, Detail: err.Error()})
		} else {
			a.undo(ctx, leasestore.Evict{Fence: a.fence, Evidence: leasestore.DeathEvidence{
				Kind: leasestore.EvidenceExitObserved, Detail: "the plugin was stopped and reaped before its identity was committed: " + err.Error()}})
		}
		return fmt.Errorf("start session %q: %w", a.id, err)
	}
	a.proc = proc
	return nil
}

// commitOwner records the process just spawned as the lease's owner, by
// the identity the process table reads for its pid. It is the plugin's
// OnStart: no request reaches the plugin before it returned.
func (a *startAttempt) commitOwner(ctx context.Context, pid int) error {
	ident, err := a.h.prober.IdentifyStarted(ctx, pid)
	if err != nil {
		return fmt.Errorf("read the identity of plugin pid %d: %w", pid, err)
	}
	if _, err := a.h.store.Apply(ctx, a.id, leasestore.CommitOwner{Fence: a.fence, Owner: ident}); err != nil {
		return fmt.Errorf("commit plugin pid %d as owner: %w", pid, err)
	}
	a.committed = true
	return nil
}

// prove records the provider handle the spawned plugin opened as the proof
// that it owns the session (from here on it is the session's writer) and,
// in the same synced commit, the settings it opened the session with (see
// settings). Two moves of one batch: the settings are judged on the proven
// lease, and a refused proof refuses them too, so a start costs one commit
// fewer and ends where the two commits one after the other would.
func (a *startAttempt) prove(ctx context.Context, asked map[string]string, servers []pluginclient.MCPServer) (leasestore.Session, error) {
	origin := leasestore.HandleCreated
	if a.handle != "" {
		origin = leasestore.HandleResumed
	}
	reattach := a.proc.reattach
	prove := leasestore.ProveOwner{Fence: a.fence, Handle: a.proc.handle, Origin: origin, InstanceID: a.proc.instance, Reattach: &reattach}
	res := a.h.store.ApplyBatch(ctx, []leasestore.Move{{ID: a.id, Transition: prove}, {ID: a.id, Transition: a.settings(asked, servers)}})
	if err := res[0].Err; err != nil {
		a.abandon(ctx, "owner could not be proven")
		return res[0].Session, fmt.Errorf("prove plugin of session %q: %w", a.id, err)
	}
	a.fence = res[0].Session.Lease.Fence
	if err := res[1].Err; err != nil {
		a.abandon(ctx, "settings could not be stored")
		return res[1].Session, fmt.Errorf("store the settings of session %q: %w", a.id, err)
	}
	a.fence = res[1].Session.Lease.Fence
	return res[1].Session, nil
}

// settings is the move that stores the settings the plugin opened the
// session with: the options it acknowledged (those asked for, when it
// acknowledged none), the MCP servers it was given and the modes and
// config options it reported, so that every resume, readoption and
// restart passes them again (see SessionRequest.Options).
func (a *startAttempt) settings(asked map[string]string, servers []pluginclient.MCPServer) leasestore.RecordSettings {
	info := a.proc.info
	opts := maps.Clone(info.Options)
	if opts == nil {
		opts = maps.Clone(asked)
	}
	if opts == nil {
		opts = map[string]string{}
	}
	// Whether credentials pass is stored as asked, for the record: every
	// start decides it again from the policy (see StartSession).
	delete(opts, optAllowCredentials)
	if v, ok := asked[optAllowCredentials]; ok {
		opts[optAllowCredentials] = v
	}
	return leasestore.RecordSettings{Fence: a.fence, Options: opts, SetMCPServers: true, MCPServers: mcpToStore(servers),
		AgentState: encodeAgentState(info.Modes, info.ConfigOptions)}
}

// own applies t, the transition that makes the attempt's plugin the
// session's writer: ProveOwner for a plugin this host spawned, Readopt for
// one that outlived its host (which also moves the lease to the fence the
// plugin was reattached for). The attempt holds the fence t leaves. A
// refused t lets go of the plugin (abandon, with detail) and returns the
// store's error as it is.
func (a *startAttempt) own(ctx context.Context, t leasestore.Transition, detail string) (leasestore.Session, error) {
	apply := a.h.store.Apply
	if a.adopted {
		// A readoption of a reconcile pass shares its synced commit with
		// the pass's other moves (see leaseBatcher).
		if b := a.h.reconcileMoves(); b != nil {
			apply = b.apply
		}
	}
	rec, err := apply(ctx, a.id, t)
	if err != nil {
		a.abandon(ctx, detail)
		return rec, err
	}
	a.fence = rec.Lease.Fence
	return rec, nil
}

// openJournal opens the session's journal at the attempt's fence. It
// returns the store's error as it is, after abandon.
func (a *startAttempt) openJournal(ctx context.Context) (leasestore.Journal, error) {
	j, err := a.h.store.OpenJournal(ctx, a.id, a.fence)
	if err != nil {
		a.abandon(ctx, "journal unavailable")
		return nil, err
	}
	return j, nil
}

// launch makes the attempt's plugin a running session of the host, with
// provider handle handle, whose pump asks the plugin for updates from
// fromSeq (baseUnknown: see Session.baseUnknown). If the host started
// closing meanwhile, it ends that session again, the way abandon lets go
// of the plugin (stopping a spawned one releases its lease), and reports
// false; each caller words that failure itself.
func (a *startAttempt) launch(ctx context.Context, handle string, journal leasestore.Journal, fromSeq uint64, baseUnknown bool, st sessionState) (*Session, bool) {
	s := newSession(a.h, a.id, a.agent, a.fence, handle, a.proc, journal, fromSeq)
	s.state = st
	s.epoch = a.epoch
	s.baseUnknown = baseUnknown
	// A readopted session runs its open turn from the moment it is
	// registered: a prompt before resumeOpenTurn settled it is refused.
	s.turn = a.openTurn
	for _, q := range a.pending {
		s.addPermission(q, true)
	}
	if a.h.register(s) {
		return s, true
	}
	if a.adopted {
		s.detach()
	} else if err := s.Stop(context.WithoutCancel(ctx)); err != nil {
		a.h.report(ReleaseScope, fmt.Errorf("stop session %q, started while the host closed: %w", a.id, err))
	}
	return nil, false
}

// abandon lets go of the attempt's plugin after a step failed: an adopted
// plugin is detached and keeps the lease (see startAttempt.adopted); a
// spawned one is stopped and the lease released with detail. Both happen
// even when the caller's context has ended.
func (a *startAttempt) abandon(ctx context.Context, detail string) {
	if a.adopted {
		a.proc.Detach()
		return
	}
	ctx = context.WithoutCancel(ctx)
	if err := a.proc.Stop(ctx); err != nil {
		a.h.report(ReleaseScope, fmt.Errorf("roll back the start of session %q: stop its plugin: %w", a.id, err))
	}
	a.undo(ctx, leasestore.Release{Fence: a.fence, Detail: detail})
}

// undo applies a rollback transition. The caller returns the failure that
// made it roll back, so nobody else hears of a rollback that fails too,
// and that leaves the lease held for a plugin that is gone or never ran
// until a restart's reconciliation proves it. So it is reported with
// ReleaseScope, like a failed release after a plugin's exit, rather than
// only logged: an embedder's OnError sees every stuck lease (without one,
// report logs at error level). It runs even when the caller's context has
// ended: a start given up on is exactly the one whose lease must not stay
// held.
func (a *startAttempt) undo(ctx context.Context, t leasestore.Transition) {
	if _, err := a.h.store.Apply(context.WithoutCancel(ctx), a.id, t); err != nil {
		a.h.report(ReleaseScope, fmt.Errorf("roll back the start of session %q: %s at fence %d: %w", a.id, t.Name(), a.fence, err))
	}
}

func checkExecutable(path string) error {
	if !filepath.IsAbs(path) {
		return fmt.Errorf("plugin path must be absolute, got %q", path)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("plugin not found at %s: install it or fix the agent's configuration: %w", path, err)
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return fmt.Errorf("plugin %s is not an executable file", path)
	}
	return nil
}

// ErrDigestMismatch: a plugin executable is not the one its configuration
// pins by SHA-256.
var ErrDigestMismatch = errors.New("plugin executable does not match its configured sha256")

// checkDigest verifies that the file at path has the hex SHA-256 digest
// want; an empty want pins nothing.
func checkDigest(path, want string) error {
	if want == "" {
		return nil
	}
	want = strings.ToLower(strings.TrimSpace(want))
	if len(want) != 2*sha256.Size || strings.Trim(want, "0123456789abcdef") != "" {
		return fmt.Errorf("%w: the configured sha256 of %s, %q, is not 64 hex digits", ErrDigestMismatch, path, want)
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("verify the sha256 of plugin %s: %w", path, err)
	}
	defer f.Close()
	sum := sha256.New()
	if _, err := io.Copy(sum, f); err != nil {
		return fmt.Errorf("verify the sha256 of plugin %s: %w", path, err)
	}
	if got := hex.EncodeToString(sum.Sum(nil)); got != want {
		return fmt.Errorf("%w: %s has sha256 %s, expected %s; reinstall the plugin or update its sha256", ErrDigestMismatch, path, got, want)
	}
	return nil
}

// dirName is a file-system-safe directory name for a session generation;
// session ids are opaque and may hold any byte.
func dirName(id string, fence uint64) string {
	return fmt.Sprintf("%s-%d", hex.EncodeToString([]byte(id))[:min(2*len(id), 32)]+"-"+shortHash(id), fence)
}

func shortHash(s string) string {
	sum := make([]byte, 0, 8)
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	for i := range 8 {
		sum = append(sum, byte(h>>(8*i)))
	}
	return hex.EncodeToString(sum)
}
