package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agenthost/agenthost/leasestore"
)

// Idle sessions. A session is idle while it has no turn (nor a prompt on
// its way to the plugin), no pending permission request, no follower and
// no settings change in flight. With Config.IdleTimeout set, each Session
// owns one timer, armed whenever it becomes idle (and re-armed on every
// activity that leaves it idle) and stopped whenever it becomes busy; no
// loop polls. When the timer finds the session idle for the whole timeout,
// the session's plugin is stopped as Session.Stop stops it (its agent
// closes the session and releases its CLI, the process group is
// signalled, the lease released), except that the release detail is
// IdleStopDetail: the lease's death evidence, and the journal's
// "released" lifecycle entry, say why, and IdleStopped tells any host
// later that the session only sleeps.
//
// The hazard is a request arriving at the moment of the stop. The
// decision to stop is taken under the session's lock, and from then on
// every request that needs the plugin (a prompt, a mode or config change)
// is refused with ErrIdleStopped before it does anything (a prompt is not
// journaled): the caller waits for Session.Done and resumes the session
// (Host.ResumeIdle), so no prompt is lost. A request that got in first
// made the session busy, and the timer's decision, which checks again
// under the lock, keeps it alive. A follower arriving after the decision
// follows a session that is going: its connection resumes the session on
// its next request, as for a plugin that died.

// ErrIdleStopped: the session's plugin was stopped, or is being stopped,
// after Config.IdleTimeout; the request never reached it. Wait for
// Session.Done, then resume the session (Host.ResumeIdle) and ask again.
var ErrIdleStopped = errors.New("the session's plugin was stopped after the idle timeout")

// idleState is a Session's idle timer and what it decided, guarded by the
// session's mu.
type idleState struct {
	timer *time.Timer
	// since is when the session last became idle or had activity while
	// idle: a timer that fires early (it raced a reset) waits on.
	since time.Time
	// active counts settings changes in flight (awake).
	active int
	// stopping: the timer decided to stop the plugin; stopped is closed
	// once that stop has returned.
	stopping bool
	stopped  chan struct{}
	// asked: Session.Stop was called, so the stop is not an idle one
	// and no timer may start one.
	asked bool
	// over: the session is ending; nothing arms the timer again.
	over bool
}

// busyLocked reports whether the session is doing anything the idle
// timeout must wait for. The caller holds s.mu.
func (s *Session) busyLocked() bool {
	return s.turn != "" || s.dispatching > 0 || len(s.perms) > 0 || s.followers > 0 || s.idle.active > 0
}

// idleCheckLocked arms the idle timer when the session is idle and stops
// it when it is busy. Every change of what busyLocked reads calls it, with
// s.mu held.
func (s *Session) idleCheckLocked() {
	timeout := s.h.cfg.IdleTimeout
	st := &s.idle
	if timeout <= 0 || st.over || st.stopping || st.asked {
		return
	}
	if s.busyLocked() {
		if st.timer != nil {
			st.timer.Stop()
		}
		return
	}
	st.since = time.Now()
	if st.timer == nil {
		st.timer = time.AfterFunc(timeout, s.idleFired)
		return
	}
	st.timer.Reset(timeout)
}

// idleFired runs on the timer's goroutine: it stops the plugin of a
// session idle for the whole timeout, and re-arms the timer for the rest
// of it when activity moved the start meanwhile. A host that is closing
// stops nothing: its plugins live on for the next host, which arms its
// own timers.
func (s *Session) idleFired() {
	s.h.mu.Lock()
	closing := s.h.closed
	s.h.mu.Unlock()
	timeout := s.h.cfg.IdleTimeout
	s.mu.Lock()
	st := &s.idle
	if closing || st.over || st.stopping || st.asked || s.busyLocked() {
		s.mu.Unlock()
		return
	}
	if rest := timeout - time.Since(st.since); rest > 0 {
		st.timer.Reset(rest)
		s.mu.Unlock()
		return
	}
	st.stopping = true
	st.stopped = make(chan struct{})
	s.mu.Unlock()
	s.idleStop()
}

// idleStop stops the plugin of a session whose idle stop idleFired
// decided (stopping set), then closes stopped.
func (s *Session) idleStop() {
	defer close(s.idle.stopped)
	s.h.log.Info("stopping the plugin of an idle session", "session", s.id, "idle", s.h.cfg.IdleTimeout)
	// Bounded by StopTimeout: drain takes half of it, and the stop
	// kills the process group once it is over.
	ctx := context.Background()
	s.drain(ctx)
	if err := s.proc.Stop(ctx); err != nil {
		s.h.log.Warn("stop the plugin of an idle session", "session", s.id, "error", err)
	}
}

// awake marks a request that needs the plugin (a settings change) as
// activity until release is called; refused with ErrIdleStopped once an
// idle stop was decided.
func (s *Session) awake() (release func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.idle.stopping {
		return nil, fmt.Errorf("session %q: %w", s.id, ErrIdleStopped)
	}
	s.idle.active++
	s.idleCheckLocked()
	return func() {
		s.mu.Lock()
		s.idle.active--
		s.idleCheckLocked()
		s.mu.Unlock()
	}, nil
}

// stopAsked marks the session as stopped on request: no idle stop starts
// any more, and one under way no longer counts as idle.
func (s *Session) stopAsked() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.idle.asked = true
	if s.idle.timer != nil {
		s.idle.timer.Stop()
	}
}

// stopping reports whether the session's plugin is being stopped: Stop was
// called, or the idle timeout decided to.
func (s *Session) stopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.idle.asked || s.idle.stopping
}

// endIdle ends the idle timer of a session whose plugin is gone. wait is
// the idle stop under way, if any, which the session waits for before it
// ends; idle reports whether the plugin's end is that idle stop's.
func (s *Session) endIdle() (wait <-chan struct{}, idle bool) {
	if wait = s.closeIdle(); wait == nil {
		return nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return wait, !s.idle.asked
}

// closeIdle ends the idle timer of a session whose host is closing: no
// idle stop starts any more. wait is the idle stop already under way, if
// any, which the close waits for before it detaches or stops the session.
func (s *Session) closeIdle() (wait <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := &s.idle
	st.over = true
	if st.timer != nil {
		st.timer.Stop()
	}
	if !st.stopping {
		return nil
	}
	return st.stopped
}

// IdleStopping reports whether the host decided to stop the session's
// plugin after the idle timeout: the session takes no more requests
// (ErrIdleStopped). Wait for Done, then start it again.
func (s *Session) IdleStopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.idle.stopping
}

// ResumeIdle returns session id running in this host, starting it again
// with its stored settings (and its provider handle: the conversation goes
// on) when its plugin was stopped after the idle timeout, by this host or
// an earlier one (IdleStopped). A session whose idle stop is under way is
// waited for first. ok is false, with no error, for a session that is
// neither running nor idle-stopped: stopped on request, or gone; the
// caller decides what such a session needs.
func (h *Host) ResumeIdle(ctx context.Context, id string) (s *Session, ok bool, err error) {
	h.mu.Lock()
	s = h.sessions[id]
	h.mu.Unlock()
	if s != nil {
		select {
		case <-s.proc.Terminated():
		default:
			if !s.IdleStopping() {
				return s, true, nil
			}
		}
		// Going: wait until its lease is released, which says how.
		select {
		case <-s.Done():
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
	rec, err := h.store.Get(ctx, id)
	if errors.Is(err, leasestore.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if !IdleStopped(rec) {
		// Another start (a concurrent ResumeIdle) may have taken it.
		h.mu.Lock()
		starting := h.startingIDs[id]
		h.mu.Unlock()
		if starting != nil {
			select {
			case <-starting:
			case <-ctx.Done():
				return nil, false, ctx.Err()
			}
		}
		if s, ok := h.Session(id); ok {
			return s, true, nil
		}
		return nil, false, nil
	}
	s, err = h.resumeIdleRecord(ctx, rec)
	if err != nil {
		return nil, true, err
	}
	return s, true, nil
}

// resumeIdleRecord starts again the idle-stopped session whose record
// ResumeIdle read. The record was read before the session's start turn
// was taken, so a removal (sessions rm, prune) may have won the turn and
// deleted it meanwhile: the start insists on that same record
// (MustExist), and such a session is leasestore.ErrNotFound, never
// created again empty under the same id.
func (h *Host) resumeIdleRecord(ctx context.Context, rec leasestore.Session) (*Session, error) {
	h.log.Debug("resuming an idle session", "session", rec.ID)
	s, err := h.StartSession(ctx, SessionRequest{ID: rec.ID, Agent: rec.Agent, MustExist: true, Incarnation: rec.Incarnation})
	if err != nil {
		return nil, fmt.Errorf("resume idle session %q: %w", rec.ID, err)
	}
	return s, nil
}
