package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/leasestore"
)

// benchIdle: a prompt to a session whose plugin was stopped after the
// idle timeout, from the request (Host.ResumeIdle, as the API's prompt
// does) to the turn's first update durable in the journal, against a
// cold create of a new session and its first prompt to the same point,
// alternating in one host: the price of an idle session that costs
// nothing, over one that was never started.
func benchIdle(work, scripted string, rounds int) ([]row, error) {
	dir, err := os.MkdirTemp(work, "idle-")
	if err != nil {
		return nil, err
	}
	// Short, so the bench waits little for each stop; the resume does not
	// depend on it.
	const idle = 50 * time.Millisecond
	h, err := openOnBadger(host.Config{
		StateDir: dir, Agents: map[string]host.AgentPlugin{"scripted": {Path: scripted}},
		StartupTimeout: time.Minute, StopTimeout: 5 * time.Second, IdleTimeout: idle,
	})
	if err != nil {
		return nil, err
	}
	defer h.Shutdown(context.Background())
	ctx := context.Background()
	var cold, resumed []time.Duration
	for i := range rounds + 2 {
		id := fmt.Sprint("idle", i)
		d, s, err := firstUpdate(ctx, h, id, func() (*host.Session, error) {
			return h.StartSession(ctx, host.SessionRequest{ID: id, Agent: "scripted", Workspace: dir})
		})
		if err != nil {
			return nil, fmt.Errorf("cold create: %w", err)
		}
		if err := idleStopped(s); err != nil {
			return nil, err
		}
		r, s, err := firstUpdate(ctx, h, id, func() (*host.Session, error) {
			s, ok, err := h.ResumeIdle(ctx, id)
			if err == nil && !ok {
				err = fmt.Errorf("session %s is not idle after its idle stop", id)
			}
			return s, err
		})
		if err != nil {
			return nil, fmt.Errorf("resume: %w", err)
		}
		if err := idleStopped(s); err != nil {
			return nil, err
		}
		if i >= 2 {
			cold, resumed = append(cold, d), append(resumed, r)
		}
	}
	ratio := float64(median(resumed)) / float64(median(cold))
	return []row{{Name: "resume of an idle-stopped session → first update, median", Value: ms(median(resumed)),
		Baseline: ms(median(cold)) + " cold create → first update", Ratio: fmt.Sprintf("%.2f×", ratio), Target: "–", Verdict: "–"}}, nil
}

// firstUpdate times start (which returns the session running) and a
// prompt to it until the turn's first plugin update is in the journal,
// then waits for the turn's end.
func firstUpdate(ctx context.Context, h *host.Host, id string, start func() (*host.Session, error)) (time.Duration, *host.Session, error) {
	from, err := h.Store().LastSeq(ctx, id)
	if err != nil && !errors.Is(err, leasestore.ErrNotFound) {
		return 0, nil, err
	}
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	seen := make(chan time.Time, 1)
	tailed := make(chan error, 1)
	errSeen := errors.New("seen")
	begin := time.Now()
	s, err := start()
	if err != nil {
		return 0, nil, err
	}
	go func() {
		tailed <- h.Store().Tail(tctx, id, from+1, func(e leasestore.Entry) error {
			if e.Kind != leasestore.KindUpdate {
				return nil
			}
			if r, err := journal.Decode(e); err != nil || r.(*journal.Update).PluginSeq == 0 {
				return nil // the title the host derived
			}
			seen <- time.Now()
			return errSeen
		})
	}()
	res, err := s.Prompt(ctx, "count 1")
	if err != nil || res.StopReason != "end_turn" {
		return 0, nil, fmt.Errorf("prompt: %+v, %v", res, err)
	}
	select {
	case at := <-seen:
		return at.Sub(begin), s, nil
	case err := <-tailed:
		if errors.Is(err, errSeen) {
			return (<-seen).Sub(begin), s, nil
		}
		return 0, nil, fmt.Errorf("tail the journal: %w", err)
	case <-time.After(time.Minute):
		return 0, nil, errors.New("the turn's update never reached the journal")
	}
}

// idleStopped waits for the host to stop s after the idle timeout.
func idleStopped(s *host.Session) error {
	select {
	case <-s.Done():
		return s.Err()
	case <-time.After(time.Minute):
		return fmt.Errorf("session %s was not stopped as idle", s.ID())
	}
}
