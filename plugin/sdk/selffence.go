package sdk

import (
	"context"
	"fmt"
	"time"

	"github.com/agenthost/agenthost/internal/agentpb"
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

// startSelfFence arms self-fencing with bound, counting from start (when the
// process began serving): until a Heartbeat moves it, the deadline is
// start + bound. It runs once, before any call is served. The timer only
// cancels a running turn at the deadline; Prompt compares the clock with
// the deadline itself, so a late timer never admits a turn.
func (s *server) startSelfFence(bound time.Duration, start time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fenceBound = bound
	s.deadline = start.Add(bound)
	s.fenceTimer = time.AfterFunc(time.Until(s.deadline), s.deadlinePassed)
}

// pastDeadline reports whether the plugin is self-fenced at now. time.Now
// carries the monotonic clock, so a step of the wall clock moves nothing.
// Callers hold s.mu.
func (s *server) pastDeadline(now time.Time) bool {
	return s.fenceBound > 0 && !now.Before(s.deadline)
}

// deadlinePassed is the self-fence timer's function.
func (s *server) deadlinePassed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if left := time.Until(s.deadline); left > 0 {
		// A Heartbeat moved the deadline while this call waited for s.mu.
		s.fenceTimer.Reset(left)
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
// lowering it as well as raising it (the host knows how long its own lease
// is good for); one that grants nothing leaves it.
func (s *server) Heartbeat(ctx context.Context, req *agentpb.HeartbeatRequest) (*agentpb.HeartbeatResponse, error) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkFence(req.Fence); err != nil {
		return nil, err
	}
	if s.fenceBound == 0 {
		return &agentpb.HeartbeatResponse{}, nil
	}
	was := s.pastDeadline(now)
	if req.ValidForMs <= 0 || s.closed {
		// A closed session runs no turn again, and its timer is stopped.
		return &agentpb.HeartbeatResponse{SelfFenced: was}, nil
	}
	grant := min(time.Duration(req.ValidForMs)*time.Millisecond, s.fenceBound)
	s.deadline = now.Add(grant)
	s.fenceTimer.Reset(grant)
	if s.fenced && !s.pastDeadline(now) {
		s.fenced = false
		s.log.Info("self-fence lifted: a host's heartbeat arrived", "fence", req.Fence, "valid_for", grant)
	}
	return &agentpb.HeartbeatResponse{SelfFenced: was}, nil
}
