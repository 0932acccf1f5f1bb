package host

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/leasestore"
)

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
	// turn is the turn the plugin runs, from its prompt (or, for a turn
	// a previous host started, its first new update) until its stop is
	// journaled; "" when none. A prompt meanwhile is refused.
	turn string
	// lastTurn is the turn whose stop was journaled last: an update of
	// it arriving late does not make it running again.
	lastTurn string
	// followers counts the API connections following the session id
	// (see Followed), guarded by h.mu as well as mu: it changes only with
	// both held.
	followers int
	// idle is the session's idle timer and what it decided (see idle.go).
	idle idleState
	// reported is the turn the plugin's newest journaled update named: a
	// readopted session's open turn is the session's from its launch, and
	// this tells resumeOpenTurn whether the plugin has it.
	reported string

	// state is the session's settings (see settings.go); settingsMu
	// serialises their changes, each stored before the next begins.
	state      sessionState
	settingsMu sync.Mutex

	// perms are the permission requests the plugin waits on, by id, and
	// their ids in arrival order (see permission.go).
	perms     map[string]*pendingPermission
	permOrder []string
	permWake  chan struct{} // closed and replaced by a late registration

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

	// Cluster mode (see cluster.go). epoch is the membership epoch under
	// which the session's lease was last known to be this host's; deposed
	// is set once it was found taken over (its plugin is being stopped,
	// and nothing more is written at its fence). Both guarded by mu.
	epoch   uint64
	deposed bool
	hbKick  chan struct{} // buffered 1: heartbeat (and check) now
	hbDone  chan struct{} // closed when the heartbeat loop ended
}

// ErrDetached ends a session whose host let its plugin live on (Close):
// the plugin keeps the lease, and the next host readopts it.
var ErrDetached = errors.New("host detached from the session; its plugin keeps running")

func newSession(h *Host, id, agent string, fence uint64, handle string, proc *pluginProc, journal leasestore.Journal, fromSeq uint64) *Session {
	return &Session{
		h: h, id: id, agent: agent, fence: fence, handle: handle, proc: proc, journal: journal, fromSeq: max(fromSeq, 1),
		waiters: map[string]chan TurnResult{}, perms: map[string]*pendingPermission{}, permWake: make(chan struct{}), pumpDone: make(chan struct{}), done: make(chan struct{}),
		hbKick: make(chan struct{}, 1), hbDone: make(chan struct{}),
	}
}

func (s *Session) run() {
	go s.pump()
	go s.watch()
	if s.h.cl != nil {
		go s.heartbeatLoop()
	} else {
		close(s.hbDone)
	}
}

// register starts the session's goroutines and makes it the host's, unless
// the host started closing meanwhile: then it reports false and the caller
// ends the session (its goroutines run, so Stop or detach can end it; see
// startAttempt.launch).
func (h *Host) register(s *Session) bool {
	s.run()
	h.mu.Lock()
	closed := h.closed
	if !closed {
		h.sessions[s.id] = s
		// The clients following the id follow this Session too (see
		// Followed).
		s.mu.Lock()
		s.followers = h.follows[s.id]
		s.mu.Unlock()
	}
	h.mu.Unlock()
	if closed {
		return false
	}
	// The writer's interval begins: the fault tests compare these lines
	// (and "plugin gone") across hosts to show no two hosts ever ran a
	// plugin of one session at once. Keep the message and keys.
	h.log.Info("plugin admitted", "session", s.id, "fence", s.fence, "pid", s.proc.PID())
	// Idle from here, unless a turn, a permission request or a follower
	// says otherwise (see idle.go).
	s.mu.Lock()
	s.idleCheckLocked()
	s.mu.Unlock()
	return true
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

// ReleaseScope is the scope sent to OnError of failures to let go of a
// lease: releasing it once the session's plugin exited, and rolling back a
// start that failed.
const ReleaseScope = "release"

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
	idleStop, idle := s.endIdle()
	<-s.pumpDone
	<-s.hbDone
	s.stopPermissions()
	s.mu.Lock()
	deposed := s.deposed
	s.mu.Unlock()
	ctx := context.Background()
	detail := "host detached"
	if detached {
		s.err = ErrDetached
	} else {
		s.err = s.proc.TermErr()
		s.mu.Lock()
		if s.violation != nil {
			s.err = s.violation
		}
		s.mu.Unlock()
		detail = "plugin stopped"
		if s.err != nil {
			detail = s.err.Error()
		} else if idle {
			// The durable marker of a session that only sleeps: its next
			// prompt resumes it (IdleStopped), in this host or the next.
			detail = IdleStopDetail
		}
		if deposed {
			// The lease is another host's now: nothing is written at this
			// fence (the store would refuse it); the turn's end is the
			// taking host's to journal.
			s.err = ErrDeposed
			s.mu.Lock()
			turn := s.turn
			s.turn, s.lastTurn = "", turn
			s.mu.Unlock()
			if turn != "" {
				s.finishTurn(TurnResult{TurnID: turn, StopReason: "failed", Error: ErrDeposed.Error()})
			}
		} else {
			// The lease is still this host's: the turn the plugin took
			// with it ends in the journal now, or never.
			s.failTurn(ctx, "the plugin is gone: "+detail)
		}
	}
	if err := s.journal.Close(ctx); err != nil {
		s.h.report(JournalScope, fmt.Errorf("close the journal of session %q: %w", s.id, err))
	}
	// The writer's interval ends (see register): the plugin exited, or the
	// host let go of it and it runs on, fenced by its lease alone.
	s.h.log.Info("plugin gone", "session", s.id, "fence", s.fence, "pid", s.proc.PID(), "detached", detached)
	if !detached {
		s.proc.release()
	}
	if !detached && !deposed {
		if _, err := s.h.store.Apply(ctx, s.id, leasestore.Release{Fence: s.fence, Detail: detail}); err != nil && !errors.Is(err, leasestore.ErrClosed) {
			s.h.report(ReleaseScope, fmt.Errorf("release the lease of session %q: %w", s.id, err))
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
	if idleStop != nil {
		// The idle stop that stopped the plugin has returned, or returns
		// now that the plugin is gone: it ends before the session does.
		<-idleStop
	}
	close(s.done)
}

// failTurn ends the session's running turn, if any, with stop reason
// "failed" and why, journaled, and wakes the Prompt waiting for it: its
// plugin is gone, and so is the turn_stopped it would have sent. The turn
// is claimed under the lock, so a Prompt whose dispatch failed at the same
// time journals no second stop (see PromptContent).
func (s *Session) failTurn(ctx context.Context, why string) {
	s.mu.Lock()
	turn := s.turn
	if turn != "" {
		s.turn, s.lastTurn = "", turn
	}
	s.mu.Unlock()
	if turn == "" {
		return
	}
	s.journalFailed(ctx, turn, why)
}

// journalFailed journals that turn ended as failed, saying why, and wakes
// the Prompt waiting for it, if any. The caller made sure no other stop
// of it is journaled.
func (s *Session) journalFailed(ctx context.Context, turn, why string) {
	stop := &journal.Stop{TurnID: turn, StopReason: "failed", Error: why}
	if _, err := s.journal.Append(ctx, hostEntry(stop)); err != nil {
		s.h.report(JournalScope, fmt.Errorf("session %q: journal the end of turn %s (%s); the journal shows it running until the session is resumed: %w", s.id, turn, why, err))
	}
	s.finishTurn(TurnResult{TurnID: turn, StopReason: stop.StopReason, Error: stop.Error})
}

// Followed counts one more client following the session, until the
// returned release is called (once): a client's API connection calls it
// when it starts following and releases once it has stopped, its
// permission questions withdrawn, so Followers dropping shows that the
// host has finished with a client that left. The count is the session
// id's, kept by the host (Host.followed): a session started again under
// the id (its plugin died or was idle-stopped, and a request on any
// connection resumed it) is a new Session that counts every client
// still following, so none of them lets it go idle.
func (s *Session) Followed() (release func()) {
	return s.h.followed(s.id)
}

// followed counts one more follower of session id, in the host's count
// and in the Session running it now, if any; register gives a Session
// the count of its id. Lock order: h.mu, then s.mu.
func (h *Host) followed(id string) (release func()) {
	h.mu.Lock()
	h.follows[id]++
	if s := h.sessions[id]; s != nil {
		s.addFollowers(1)
	}
	h.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			if h.follows[id]--; h.follows[id] <= 0 {
				delete(h.follows, id)
			}
			if s := h.sessions[id]; s != nil {
				s.addFollowers(-1)
			}
			h.mu.Unlock()
		})
	}
}

// addFollowers changes the session's follower count by n.
func (s *Session) addFollowers(n int) {
	s.mu.Lock()
	s.followers += n
	s.idleCheckLocked()
	s.mu.Unlock()
}

// Followers is how many clients follow the session (see Followed).
func (s *Session) Followers() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.followers
}

// detach lets the plugin live on with its lease and waits until this
// host's side of the session has wound down.
func (s *Session) detach() {
	s.proc.Detach()
	<-s.done
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
	s.stopAsked()
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
