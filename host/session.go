package host

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/agenthost/agenthost/internal/pluginclient"
	"github.com/agenthost/agenthost/internal/wire"
	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/leasestore"
)

// ErrUnknownAgent: the host has no plugin configured for the agent.
var ErrUnknownAgent = errors.New("unknown agent")

// SessionRequest asks for a session to be started or resumed.
type SessionRequest struct {
	// ID names an existing session to resume, or the id for a new one;
	// empty generates one. Any valid UTF-8, NUL included.
	ID        string
	Agent     string
	Workspace string
	Options   map[string]string
	// AllowCredentials passes the agent's credential variables from the
	// resolved environment through to the plugin (see CredentialPolicy).
	AllowCredentials bool
}

// TurnResult is how a turn ended.
type TurnResult struct {
	TurnID     string
	StopReason string
	// Error is the agent's message when StopReason is "failed".
	Error string
}

// Session is one running agent session: its plugin process holds the
// session's lease, and every update it produces is journaled before it is
// acknowledged.
type Session struct {
	h       *Host
	id      string
	agent   string
	fence   uint64
	handle  string
	proc    *pluginProc
	journal leasestore.Journal

	mu      sync.Mutex
	waiters map[string]chan TurnResult
	// dispatching counts prompts on their way to the plugin; a cancel
	// that arrives meanwhile finds no turn there yet, so it is remembered
	// in cancelPending and sent again once the prompt was dispatched.
	dispatching   int
	cancelPending bool

	fromSeq uint64 // first plugin update to ask for
	// violation is the protocol breach the session was stopped for; it
	// becomes Err once the plugin is gone.
	violation error
	// baseUnknown: the journal names no update of this plugin, so the
	// first update received sets where its sequence starts (see readopt).
	baseUnknown bool
	pumpDone    chan struct{}
	done        chan struct{}
	err         error
}

// ErrDetached ends a session whose host let its plugin live on (Close):
// the plugin keeps the lease, and the next host readopts it.
var ErrDetached = errors.New("host detached from the session; its plugin keeps running")

func newSession(h *Host, id, agent string, fence uint64, handle string, proc *pluginProc, journal leasestore.Journal, fromSeq uint64) *Session {
	return &Session{
		h: h, id: id, agent: agent, fence: fence, handle: handle, proc: proc, journal: journal, fromSeq: max(fromSeq, 1),
		waiters: map[string]chan TurnResult{}, pumpDone: make(chan struct{}), done: make(chan struct{}),
	}
}

func (s *Session) run() {
	go s.pump()
	go s.watch()
}

// register starts the session's goroutines and makes it the host's, unless
// the host started closing meanwhile: then it reports false and the caller
// stops the session (its goroutines run, so Stop can end it).
func (h *Host) register(s *Session) bool {
	s.run()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	h.sessions[s.id] = s
	return true
}

// StartSession starts (or resumes, when req.ID names an existing session)
// a session. In order, at one fence: the lease is reserved; the plugin is
// spawned carrying the reserved spawn token; its identity, read back from
// the process table, is committed as the owner; it answers readiness and
// opens the conversation; its provider handle is proved. Only then does the
// session accept prompts. A failure before the spawn records durable
// pre-spawn proof; any failure releases the lease.
func (h *Host) StartSession(ctx context.Context, req SessionRequest) (*Session, error) {
	agent, ok := h.cfg.Agents[req.Agent]
	if !ok {
		return nil, fmt.Errorf("%w %q: configured agents are %q", ErrUnknownAgent, req.Agent, h.agentNames())
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
		return running, nil
	}
	store := h.store
	rec, err := store.Get(ctx, req.ID)
	resume := err == nil
	switch {
	case resume && rec.Agent != req.Agent:
		return nil, fmt.Errorf("%w: session %q belongs to agent %q, not %q", leasestore.ErrInvalidArgument, req.ID, rec.Agent, req.Agent)
	case req.ID == "" || errors.Is(err, leasestore.ErrNotFound):
		resume = false
	case err != nil:
		return nil, err
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
	if req.AllowCredentials {
		// Plugins strip their provider's credentials too, unless told.
		opts := make(map[string]string, len(req.Options)+1)
		for k, v := range req.Options {
			opts[k] = v
		}
		opts["allow_credentials"] = "true"
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
	reserve := leasestore.Reserve{ClaimKeyID: h.cfg.ClaimKeyID}
	if !resume {
		// A new session is created and reserved in one commit.
		rec, err = store.CreateAndApply(ctx, leasestore.SessionSpec{ID: req.ID, Agent: req.Agent, Workspace: workspace, Options: req.Options}, reserve)
		if err != nil {
			return nil, err
		}
	} else {
		reserve.ExpectedFence = rec.Lease.Fence
		if rec, err = store.Apply(ctx, rec.ID, reserve); err != nil {
			return nil, fmt.Errorf("reserve session %q: %w", req.ID, err)
		}
	}
	id := rec.ID
	fence, token := rec.Lease.Fence, rec.Lease.ReservedSpawnToken

	// Before any spawn: a failure here is durable proof that no process
	// was started, so the reservation can be released outright.
	preSpawn := func(cause error) (*Session, error) {
		_, _ = store.Apply(ctx, id, leasestore.PreSpawnFailure{Fence: fence, Reason: cause.Error()})
		_, _ = store.Apply(ctx, id, leasestore.Release{Fence: fence, Detail: "plugin not started"})
		return nil, fmt.Errorf("start session %q: %w", id, cause)
	}
	if err := checkExecutable(agent.Path); err != nil {
		return preSpawn(err)
	}
	if err := checkDigest(agent.Path, agent.SHA256); err != nil {
		return preSpawn(err)
	}
	env, err := h.environment(ctx, req.Agent, agent, req.AllowCredentials)
	if err != nil {
		return preSpawn(err)
	}
	// No begin-spawn commit: it would only clear a pre-spawn proof, and
	// this reservation has none (a pre-spawn failure above releases it).
	// A reservation without proof already reads "a process may have been
	// started" to a restart, which then looks for one by its token.

	sessionDir := filepath.Join(h.cfg.StateDir, "sessions", dirName(id, fence))
	env = append(env, wire.EnvSpawnTokenVar+"="+h.tokenVar, h.tokenVar+"="+token, wire.EnvSessionDir+"="+sessionDir)
	committed := false
	handle := rec.Handle()
	spec := pluginSpec{
		Agent: req.Agent, Path: agent.Path, Args: agent.Args, SessionID: id, SessionDir: sessionDir,
		SocketDir: filepath.Join(h.socketRoot(), token), SocketRoot: h.socketRoot(), Env: env, Fence: fence, SpawnToken: token,
		StartupTimeout: h.cfg.StartupTimeout, StopTimeout: h.cfg.StopTimeout,
		Logger: h.log.Named("plugin").With("session", id, "agent", req.Agent),
		OnStart: func(pid int) error {
			ident, err := h.prober.IdentifyStarted(ctx, pid)
			if err != nil {
				return fmt.Errorf("read the identity of plugin pid %d: %w", pid, err)
			}
			if _, err := store.Apply(ctx, id, leasestore.CommitOwner{Fence: fence, Owner: ident}); err != nil {
				return fmt.Errorf("commit plugin pid %d as owner: %w", pid, err)
			}
			committed = true
			return nil
		},
		Open: func(ctx context.Context, a *pluginclient.Attachment) (string, error) {
			if handle != "" {
				r, err := a.ResumeSession(ctx, pluginclient.ResumeSessionRequest{Workspace: workspace, Options: req.Options, Handle: handle})
				return r.Handle, err
			}
			r, err := a.NewSession(ctx, pluginclient.NewSessionRequest{Workspace: workspace, Options: req.Options})
			return r.Handle, err
		},
	}
	proc, err := startPlugin(ctx, spec)
	if err != nil {
		// The process, if one was spawned, has been killed and reaped by
		// this host: that is an observed exit.
		if committed {
			_, _ = store.Apply(ctx, id, leasestore.Release{Fence: fence, Detail: err.Error()})
		} else {
			_, _ = store.Apply(ctx, id, leasestore.Evict{Fence: fence, Evidence: leasestore.DeathEvidence{
				Kind: leasestore.EvidenceExitObserved, Detail: "the plugin was stopped and reaped before its identity was committed: " + err.Error()}})
		}
		return nil, fmt.Errorf("start session %q: %w", id, err)
	}
	origin := leasestore.HandleCreated
	if handle != "" {
		origin = leasestore.HandleResumed
	}
	reattach := proc.reattach
	if _, err := store.Apply(ctx, id, leasestore.ProveOwner{Fence: fence, Handle: proc.handle, Origin: origin,
		InstanceID: proc.instance, Reattach: &reattach}); err != nil {
		_ = proc.Stop(context.WithoutCancel(ctx))
		_, _ = store.Apply(context.WithoutCancel(ctx), id, leasestore.Release{Fence: fence, Detail: "owner could not be proven"})
		return nil, fmt.Errorf("prove plugin of session %q: %w", id, err)
	}
	journal, err := store.OpenJournal(ctx, id, fence)
	if err != nil {
		_ = proc.Stop(context.WithoutCancel(ctx))
		_, _ = store.Apply(context.WithoutCancel(ctx), id, leasestore.Release{Fence: fence, Detail: "journal unavailable"})
		return nil, err
	}
	s := newSession(h, id, req.Agent, fence, proc.handle, proc, journal, 1)
	if !h.register(s) {
		_ = s.Stop(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("start session %q: the host is closing: %w", id, leasestore.ErrClosed)
	}
	return s, nil
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

// ID returns the session id.
func (s *Session) ID() string { return s.id }

// Handle returns the provider handle the plugin proved.
func (s *Session) Handle() string { return s.handle }

// Fence returns the fence this session's writer holds.
func (s *Session) Fence() uint64 { return s.fence }

// PID returns the plugin's process id.
func (s *Session) PID() int { return s.proc.PID() }

// Done is closed when the session has ended (stopped or its plugin died)
// and its lease has been released.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err is nil after a requested stop, and names the session and how its
// plugin died otherwise. Valid after Done.
func (s *Session) Err() error { return s.err }

// JournalScope is the scope of journaling failures sent to OnError.
const JournalScope = "journal"

// pump receives the plugin's updates, journals each batch durably and only
// then acknowledges it to the plugin, which may then forget it. A broken
// stream or a failed append is retried from the last journaled update (the
// outbox still holds the rest); if it keeps failing, or a newer host took
// the plugin over, the session is detached: the plugin keeps its updates
// and its lease for the next host.
func (s *Session) pump() {
	defer close(s.pumpDone)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-s.proc.Terminated():
		case <-s.proc.stopRequested:
		case <-ctx.Done():
		}
		cancel()
	}()
	backoff := 100 * time.Millisecond
	var lastFullReport time.Time
	for failures := 0; ; {
		err := s.stream(ctx)
		if ctx.Err() != nil {
			return
		}
		if v := asViolation(err); v != nil {
			// An update the host can never journal would be offered
			// again forever; the plugin is stopped instead, and
			// everything journaled before it stays.
			s.h.report(JournalScope, fmt.Errorf("session %q: stopping its plugin, whose updates cannot be journaled (a bug in the plugin: report it to its author; everything before is journaled and the session can be started again): %w", s.id, v))
			s.mu.Lock()
			s.violation = v
			s.mu.Unlock()
			// Stopped without a drain: the updates it would wait for
			// can no longer be journaled.
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 2*s.h.cfg.StopTimeout)
				defer cancel()
				_ = s.proc.Stop(ctx)
			}()
			return
		}
		if errors.Is(err, pluginclient.ErrStaleFence) {
			// A newer fence attached: this host no longer drives the
			// plugin.
			s.h.report(JournalScope, fmt.Errorf("session %q: the plugin refused this host's fence; detaching: %w", s.id, err))
			go s.proc.Detach()
			return
		}
		if errors.Is(err, pluginclient.ErrNotAttached) || errors.Is(err, pluginclient.ErrNeverAttached) || errors.Is(err, pluginclient.ErrOtherSession) {
			// The plugin no longer holds the attachment this host made
			// (it lost its state, or the address serves another
			// process). That proves no takeover, nor that the process is
			// this host's to stop, and a stop would lose the updates in
			// its outbox: detach, as for a stale fence, and leave the
			// process and its lease to the next host, which verifies its
			// identity before it drives it.
			s.h.report(JournalScope, fmt.Errorf("session %q: the plugin no longer knows this host's attachment; detaching: %w", s.id, err))
			go s.proc.Detach()
			return
		}
		if errors.Is(err, leasestore.ErrNoSpace) {
			// A full disk is not the plugin's fault and ends when space
			// is freed: keep retrying (the plugin's outbox holds every
			// unacknowledged update meanwhile) and say so once a minute.
			if time.Since(lastFullReport) > time.Minute {
				s.h.report(JournalScope, fmt.Errorf("session %q: journaling paused until disk space is freed: %w", s.id, err))
				lastFullReport = time.Now()
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		// Anything else is retried from the last journaled update: a
		// broken stream, and any other refusal (a closed session, a busy
		// plugin, the agent's error, one without a known reason), which
		// says nothing about who holds the plugin: the fence is still
		// this host's. Only a failure that persists detaches, which still
		// keeps every update for the next host.
		failures++
		if failures > 5 {
			s.h.report(JournalScope, fmt.Errorf("session %q: journaling keeps failing; detaching so the plugin keeps its updates for the next host: %w", s.id, err))
			go s.proc.Detach()
			return
		}
		s.h.log.Warn("update stream interrupted; resuming from the last journaled update", "session", s.id, "error", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// stream follows one Updates stream from the update after the last
// journaled one, until it ends.
func (s *Session) stream(ctx context.Context) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := s.proc.att.Updates(sctx, s.journaled()+1)
	if err != nil {
		return err
	}
	updates := make(chan *pluginclient.Update, 256)
	recvErr := make(chan error, 1)
	go func() {
		defer close(updates)
		for {
			u, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case updates <- u:
			case <-sctx.Done():
				recvErr <- sctx.Err()
				return
			}
		}
	}()
	for u := range updates {
		batch := []*pluginclient.Update{u}
	drain:
		for len(batch) < 256 {
			select {
			case more, ok := <-updates:
				if !ok {
					break drain
				}
				batch = append(batch, more)
			default:
				break drain
			}
		}
		if err := s.record(ctx, batch); err != nil {
			cancel()
			for range updates {
			}
			return err
		}
	}
	return <-recvErr
}

// journaled returns the newest plugin update in the journal.
func (s *Session) journaled() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fromSeq - 1
}

// record journals a batch, acknowledges it and wakes whoever waits for a
// turn that ended in it. Provider handle changes are recorded in the lease
// before the batch is journaled: if the append then fails, the replayed
// change is recorded again as a no-op, and no handle is ever lost.
func (s *Session) record(ctx context.Context, batch []*pluginclient.Update) error {
	wctx := context.WithoutCancel(ctx)
	s.mu.Lock()
	if s.baseUnknown && len(batch) > 0 {
		s.baseUnknown = false
		if batch[0].Seq > s.fromSeq {
			s.h.log.Warn("the journal holds no update of this plugin; its updates resume at its outbox's oldest",
				"session", s.id, "seq", batch[0].Seq)
			s.fromSeq = batch[0].Seq
		}
	}
	s.mu.Unlock()
	// The updates before a breach are journaled; the breach ends the
	// stream after them.
	good, violation := checkUpdates(s.journaled()+1, batch)
	if batch = batch[:good]; len(batch) == 0 {
		return violation
	}
	for _, u := range batch {
		if u.Seq < s.journaled()+1 {
			continue
		}
		if hc, ok := u.SessionUpdate().(*journal.HandleChanged); ok {
			origin := leasestore.HandleOrigin(hc.Origin)
			if origin == "" {
				origin = leasestore.HandleResumed
			}
			if _, err := s.h.store.Apply(wctx, s.id, leasestore.RecordHandle{Fence: s.fence, Handle: hc.Handle, Origin: origin}); err != nil {
				return fmt.Errorf("record provider handle change: %w", err)
			}
			s.mu.Lock()
			s.handle = hc.Handle
			s.mu.Unlock()
		}
	}
	// Updates already journaled (replayed after an interrupted stream)
	// are skipped: each is journaled exactly once.
	var entries []leasestore.EntryInput
	first := s.journaled() + 1
	for _, u := range batch {
		if u.Seq >= first {
			e, err := recordEntry(u.Record)
			if err != nil {
				return err
			}
			entries = append(entries, e)
		}
	}
	if len(entries) > 0 {
		if _, err := s.journal.Append(wctx, entries...); err != nil {
			return err
		}
	}
	last := batch[len(batch)-1].Seq
	s.mu.Lock()
	s.fromSeq = max(s.fromSeq, last+1)
	s.mu.Unlock()
	if err := s.proc.att.Acknowledge(ctx, last); err != nil && ctx.Err() == nil {
		s.h.log.Warn("acknowledging updates failed; the plugin will replay them", "session", s.id, "error", err)
	}
	for _, u := range batch {
		if ts := u.Stop(); ts != nil && u.Seq >= first {
			s.finishTurn(TurnResult{TurnID: ts.TurnID, StopReason: ts.StopReason, Error: ts.Error})
		}
	}
	return violation
}

// ErrProtocol matches the error of a session whose plugin broke the update
// protocol (an update too large to carry or journal, one without a kind, a
// gap in its sequence numbers); the host stopped that plugin.
var ErrProtocol = errors.New("plugin broke the update protocol")

// checkUpdates checks a batch against the stream's contract: every update
// has a kind, and sequence numbers run on without gaps from next (updates
// below next are replays of journaled ones and are skipped later). It
// returns how many leading updates keep the contract, and the breach that
// stopped it there, if any.
func checkUpdates(next uint64, batch []*pluginclient.Update) (int, error) {
	for i, u := range batch {
		if u.Record == nil {
			return i, fmt.Errorf("%w: update %d has no kind", ErrProtocol, u.Seq)
		}
		switch {
		case u.Seq < next:
		case u.Seq == next:
			next++
		default:
			return i, fmt.Errorf("%w: update %d arrived where %d was due; the plugin skipped updates", ErrProtocol, u.Seq, next)
		}
	}
	return len(batch), nil
}

// asViolation returns the protocol breach err describes, or nil: a gRPC
// message over the transport's limit, an entry the journal refuses as
// invalid (too large, malformed), or a failed checkUpdates.
func asViolation(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrProtocol):
		return err
	case errors.Is(err, pluginclient.ErrTooLarge):
		return fmt.Errorf("%w: an update larger than the transport carries: %w", ErrProtocol, err)
	case errors.Is(err, leasestore.ErrInvalidArgument):
		return fmt.Errorf("%w: the journal refuses an update: %w", ErrProtocol, err)
	}
	return nil
}

func (s *Session) finishTurn(r TurnResult) {
	s.mu.Lock()
	ch, ok := s.waiters[r.TurnID]
	delete(s.waiters, r.TurnID)
	s.mu.Unlock()
	if ok {
		ch <- r
	}
}

// watch ends the session when its plugin exits: the exit is observed by
// this host, so the lease is released at the next fence with that evidence.
// When the host detaches instead, the lease stays with the plugin.
func (s *Session) watch() {
	detached := false
	select {
	case <-s.proc.Terminated():
	case <-s.proc.Detached():
		detached = true
	}
	<-s.pumpDone
	ctx := context.Background()
	if err := s.journal.Close(ctx); err != nil {
		s.h.report("journal", fmt.Errorf("close the journal of session %q: %w", s.id, err))
	}
	detail := "host detached"
	if detached {
		s.err = ErrDetached
	} else {
		s.proc.release()
		s.err = s.proc.TermErr()
		s.mu.Lock()
		if s.violation != nil {
			s.err = s.violation
		}
		s.mu.Unlock()
		detail = "plugin stopped"
		if s.err != nil {
			detail = s.err.Error()
		}
		if _, err := s.h.store.Apply(ctx, s.id, leasestore.Release{Fence: s.fence, Detail: detail}); err != nil && !errors.Is(err, leasestore.ErrClosed) {
			s.h.report("release", fmt.Errorf("release the lease of session %q: %w", s.id, err))
		}
	}
	s.mu.Lock()
	for id, ch := range s.waiters {
		ch <- TurnResult{TurnID: id, StopReason: "failed", Error: detail}
		delete(s.waiters, id)
	}
	s.mu.Unlock()
	s.h.mu.Lock()
	if s.h.sessions[s.id] == s {
		delete(s.h.sessions, s.id)
	}
	s.h.mu.Unlock()
	close(s.done)
}

// detach lets the plugin live on with its lease and waits until this
// host's side of the session has wound down.
func (s *Session) detach() {
	s.proc.Detach()
	<-s.done
}

// Prompt runs one turn: the prompt is journaled durably before it is
// dispatched, then Prompt waits for the turn to end and returns how.
func (s *Session) Prompt(ctx context.Context, text string) (TurnResult, error) {
	turnID := "turn-" + rand.Text()[:16]
	rec := promptEntry(turnID, text)
	ch := make(chan TurnResult, 1)
	s.mu.Lock()
	s.waiters[turnID] = ch
	s.mu.Unlock()
	forget := func() {
		s.mu.Lock()
		delete(s.waiters, turnID)
		s.mu.Unlock()
	}
	if _, err := s.journal.Append(ctx, rec); err != nil {
		forget()
		return TurnResult{}, fmt.Errorf("journal prompt of session %q: %w", s.id, err)
	}
	s.mu.Lock()
	s.dispatching++
	s.mu.Unlock()
	_, err := s.proc.att.Prompt(ctx, pluginclient.PromptRequest{TurnID: turnID, Prompt: pluginclient.Text(text)})
	s.mu.Lock()
	s.dispatching--
	recancel := s.cancelPending && err == nil
	if s.dispatching == 0 {
		s.cancelPending = false
	}
	s.mu.Unlock()
	if recancel {
		// The turn now exists in the plugin: deliver the cancel it missed.
		if cerr := s.Cancel(context.WithoutCancel(ctx)); cerr != nil {
			s.h.log.Warn("deliver a cancel that arrived while the prompt was dispatched", "session", s.id, "error", cerr)
		}
	}
	if err != nil {
		forget()
		// The journal already holds the prompt: record that it never ran.
		_, _ = s.journal.Append(context.WithoutCancel(ctx), notDispatchedEntry(turnID, err))
		if cerr := ctx.Err(); cerr != nil {
			// gRPC reports the caller's own deadline as a status; let
			// callers match it as the context error it is.
			err = fmt.Errorf("%w: %w", cerr, err)
		}
		return TurnResult{}, fmt.Errorf("prompt session %q: %w", s.id, err)
	}
	select {
	case r := <-ch:
		return r, nil
	case <-ctx.Done():
		forget()
		return TurnResult{TurnID: turnID}, ctx.Err()
	}
}

// Cancel cancels the running turn; it ends with stop reason "cancelled".
func (s *Session) Cancel(ctx context.Context) error {
	s.mu.Lock()
	if s.dispatching > 0 {
		s.cancelPending = true
	}
	s.mu.Unlock()
	return s.proc.att.Cancel(ctx)
}

// AnswerPermission answers a permission request: optionID selects an
// option; empty cancels the request.
func (s *Session) AnswerPermission(ctx context.Context, requestID, optionID string) error {
	return s.proc.att.AnswerPermission(ctx, requestID, pluginclient.Answer(optionID))
}

// Stop stops the session's plugin gracefully and waits until its lease is
// released. The plugin is first asked to close its session, which ends a
// running turn, and everything it produced up to then is journaled before
// the process is stopped. Stop is idempotent and safe to call concurrently;
// on a session whose host detached it returns ErrDetached.
func (s *Session) Stop(ctx context.Context) error {
	select {
	case <-s.done:
		if errors.Is(s.err, ErrDetached) {
			return ErrDetached
		}
		return nil
	default:
	}
	s.drain(ctx)
	err := s.proc.Stop(ctx)
	select {
	case <-s.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return err
}

// drain asks the plugin to close the session and waits, within half the
// stop budget, until the journal holds every update the plugin produced.
func (s *Session) drain(ctx context.Context) {
	budget := s.h.cfg.StopTimeout
	if budget <= 0 {
		budget = 5 * time.Second
	}
	dctx, cancel := context.WithTimeout(ctx, budget/2)
	defer cancel()
	if err := s.proc.att.Close(dctx); err != nil {
		return
	}
	for {
		id, err := s.proc.rpc.Identify(dctx)
		if err != nil || s.journaled() >= id.LastSeq {
			return
		}
		select {
		case <-dctx.Done():
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}
