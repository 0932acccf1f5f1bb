package sdk

import (
	"context"
	"fmt"
	"time"

	"github.com/agenthost/agenthost/internal/agentpb"
	"github.com/agenthost/agenthost/internal/bootclock"
	"github.com/agenthost/agenthost/internal/wire"
)

// EnvSelfFence is the environment variable through which a host in
// cluster mode gives a plugin its self-fence bound, a Go duration ("2.5s"),
// shorter than the host's liveness TTL. Serve reads it: unset, the plugin
// never fences itself (one machine; it logs that self-fencing is off); set
// to anything but a positive duration, Serve logs why and refuses to serve,
// since a plugin that cannot keep the bound must not run in a cluster.
const EnvSelfFence = wire.EnvSelfFence

// selfFenceBound parses EnvSelfFence's value: 0 for "" (no self-fencing).
func selfFenceBound(v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: not a Go duration: %w", EnvSelfFence, v, err)
	}
	if d <= 0 {
		return 0, fmt.Errorf("%s=%q: the self-fence bound must be positive", EnvSelfFence, v)
	}
	return d, nil
}

// fencePoll caps the self-fence timer's wait on a boot clock: Go's timers
// run on the monotonic clock, which stops while the machine sleeps, so a
// timer armed for the whole remaining bound would fire that long after a
// resume although the deadline passed during the sleep. Waking at least
// this often bounds how long a turn outlives its deadline across a
// suspend.
const fencePoll = 250 * time.Millisecond

// fenceNow reads the fence clock in nanoseconds: the machine's boot clock
// where there is one (Linux CLOCK_BOOTTIME; boot true), which counts time
// suspended and is the clock the host's valid_until_boot_ns is on. Other
// systems keep the monotonic clock from clockOrigin, which stops while the
// machine sleeps: there a plugin woken from a suspend holds a deadline
// pushed out by the sleep until its host's next heartbeat lowers it.
func (s *server) fenceNow() (ns int64, boot bool) {
	if ns, ok := bootclock.Now(); ok {
		return ns, true
	}
	return int64(time.Since(s.clockOrigin)), false
}

// armFenceTimer (re)arms the self-fence timer for the deadline. Callers
// hold s.mu.
func (s *server) armFenceTimer(now int64, boot bool) {
	wait := time.Duration(s.deadline - now)
	if boot {
		wait = min(wait, fencePoll)
	}
	if s.fenceTimer == nil {
		s.fenceTimer = time.AfterFunc(wait, s.deadlinePassed)
		return
	}
	s.fenceTimer.Reset(wait)
}

// startSelfFence arms self-fencing with bound, counting from start (when the
// process began serving): until a Heartbeat moves it, the deadline is
// start + bound. It runs once, before any call is served. The timer only
// cancels a running turn at the deadline; Prompt compares the clock with
// the deadline itself, so a late timer never admits a turn.
func (s *server) startSelfFence(bound time.Duration, start time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now, boot := s.fenceNow()
	s.fenceBound = bound
	s.deadline = now - int64(time.Since(start)) + int64(bound)
	s.armFenceTimer(now, boot)
}

// pastDeadline reports whether the plugin is self-fenced at now on the
// fence clock, which a step of the wall clock does not move. Callers hold
// s.mu.
func (s *server) pastDeadline(now int64) bool {
	return s.fenceBound > 0 && now >= s.deadline
}

// deadlinePassed is the self-fence timer's function.
func (s *server) deadlinePassed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if now, boot := s.fenceNow(); !s.pastDeadline(now) {
		// Not yet: a Heartbeat moved the deadline while this call waited
		// for s.mu, or this is a poll (fencePoll).
		s.armFenceTimer(now, boot)
		return
	}
	s.fenceSelf()
}

// fenceSelf takes the plugin out of service past its deadline: it logs
// once per lapse and cancels the running turn, which ends as cancelled and
// says why. Callers hold s.mu.
func (s *server) fenceSelf() {
	if !s.fenced {
		s.fenced = true
		s.log.Warn("fenced itself: no live host was heard from within the self-fence bound; no turn runs until a host's heartbeat",
			"bound", s.fenceBound, "fence", s.fence)
	}
	if rt := s.turn; rt != nil && !rt.selfFenced {
		rt.selfFenced = true
		s.log.Warn("cancelling the running turn: the plugin fenced itself", "turn", rt.id)
		rt.cancel()
	}
}

// selfFencedMessage says why the plugin refuses turns. Callers hold s.mu.
func (s *server) selfFencedMessage() string {
	return fmt.Sprintf("the plugin fenced itself: no live host was heard from within its self-fence bound (%s); "+
		"it takes no turn until a host holding a valid liveness lease sends a heartbeat", s.fenceBound)
}

// Heartbeat implements the AgentV2 call: see the protocol. A heartbeat at
// the plugin's fence sets the deadline to receipt + min(valid_for, bound),
// and no later than its valid_until_boot_ns on a boot clock, lowering it as
// well as raising it (the host knows how long its own lease is good for);
// one that grants nothing leaves it, and so does one whose
// valid_until_boot_ns has passed (read long after it was sent: the host's
// grant ended meanwhile). If the deadline has passed when a heartbeat
// arrives, the plugin fences itself first, cancelling the running turn,
// even if the timer has not fired yet (it fires late after a freeze or a
// suspend): a turn that outlived its deadline is not rescued by a lift.
func (s *server) Heartbeat(ctx context.Context, req *agentpb.HeartbeatRequest) (*agentpb.HeartbeatResponse, error) {
	now, boot := s.fenceNow()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkFence(req.Fence); err != nil {
		return nil, err
	}
	if s.fenceBound == 0 {
		return &agentpb.HeartbeatResponse{}, nil
	}
	was := s.pastDeadline(now)
	if s.closed {
		// A closed session runs no turn again, and its timer is stopped.
		return &agentpb.HeartbeatResponse{SelfFenced: was}, nil
	}
	if was {
		s.fenceSelf()
	}
	if req.ValidForMs <= 0 {
		return &agentpb.HeartbeatResponse{SelfFenced: was}, nil
	}
	grant := min(time.Duration(req.ValidForMs)*time.Millisecond, s.fenceBound)
	deadline := now + int64(grant)
	if until := req.ValidUntilBootNs; boot && until != 0 {
		if until <= now {
			s.log.Warn("a heartbeat arrived after its grant had ended (read late: host and plugin frozen or the machine suspended); it grants nothing",
				"fence", req.Fence, "ended_ago", time.Duration(now-until))
			return &agentpb.HeartbeatResponse{SelfFenced: was}, nil
		}
		deadline = min(deadline, until)
	}
	s.deadline = deadline
	s.armFenceTimer(now, boot)
	if s.fenced && !s.pastDeadline(now) {
		s.fenced = false
		s.log.Info("self-fence lifted: a host's heartbeat arrived", "fence", req.Fence, "valid_for", time.Duration(deadline-now))
	}
	return &agentpb.HeartbeatResponse{SelfFenced: was}, nil
}
