package faults

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/leasestore"
)

// A plugin that sends an update the host can never carry or journal is
// stopped: what came before stays journaled once, nothing of the bad update
// lands, the lease is released with the reason, the plugin process is gone
// and the host goes on serving.
func TestPluginBreakingTheUpdateProtocolIsStopped(t *testing.T) {
	cases := map[string]string{
		"oversized":  "an update with a 5 MiB chunk, over the host's 4 MiB message limit",
		"bigpayload": "an update with a 2 MiB chunk, over the journal's 1 MiB entry limit",
		"nokind":     "an update without a kind",
		"gap":        "update 5 right after update 1",
	}
	r := &reports{}
	h := openHost(t, config(t, t.TempDir(), r))
	for mode, what := range cases {
		t.Run(mode, func(t *testing.T) {
			injected(t, "the plugin streams update 1, then %s", what)
			s, err := h.StartSession(ctxFor(t, time.Minute), host.SessionRequest{ID: mode, Agent: "fixture", Workspace: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			pid := s.PID()
			select {
			case <-s.Done():
			case <-time.After(30 * time.Second):
				t.Fatal("the session still runs 30s after its plugin broke the protocol")
			}
			if !errors.Is(s.Err(), host.ErrProtocol) {
				t.Fatalf("session error %v, want one matching host.ErrProtocol", s.Err())
			}
			gone(t, pid, 5*time.Second)
			es := journal(t, h.Store(), mode)
			checkOnceInOrder(t, pluginSeqs(t, es), 1, 1)
			for _, e := range es {
				if len(e.Payload) > 64<<10 || bytes.Contains(e.Payload, []byte("after a gap")) {
					t.Fatalf("journal entry %d (%s, %d bytes) comes from the bad update", e.Seq, e.Kind, len(e.Payload))
				}
			}
			sess, err := h.Store().Get(context.Background(), mode)
			if err != nil || sess.Lease.Claim != leasestore.ClaimReleased {
				t.Fatalf("lease after the stop: %+v (%v), want released", sess.Lease, err)
			}
			held(t, "session stopped with %q; plugin %d gone; journal holds update 1 once and nothing of the bad one; lease released at fence %d",
				s.Err(), pid, sess.Lease.Fence)
		})
	}
	if rep := r.find(host.ErrProtocol); rep == nil || !strings.Contains(rep.Error(), "stopping its plugin") {
		t.Errorf("OnError got %v, want a report that the plugin was stopped for breaking the protocol", rep)
	}
	// The host still serves.
	s, err := h.StartSession(ctxFor(t, time.Minute), host.SessionRequest{ID: "after", Agent: "scripted", Workspace: t.TempDir()})
	if err != nil {
		t.Fatalf("a new session after the faults: %v", err)
	}
	if res, err := s.Prompt(ctxFor(t, time.Minute), "count 3"); err != nil || res.StopReason != "end_turn" {
		t.Fatalf("prompt after the faults: %+v, %v", res, err)
	}
}

// A plugin that hangs inside a call (Prompt, then Close, ignoring SIGTERM)
// costs the caller its own deadline, and a stop still ends it and its
// child within the stop budget.
func TestPluginHangingInACallIsKilledOnStop(t *testing.T) {
	h := openHost(t, config(t, t.TempDir(), nil))
	s, err := h.StartSession(ctxFor(t, time.Minute), host.SessionRequest{ID: "hang", Agent: "fixture", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	pid := s.PID()
	child, err := strconv.Atoi(s.Handle()[strings.LastIndexByte(s.Handle(), '-')+1:])
	if err != nil || child <= 0 {
		t.Fatalf("the fixture's handle %q does not name its child: %v", s.Handle(), err)
	}
	injected(t, "plugin %d (with child %d) never returns from Prompt or Close and ignores SIGTERM", pid, child)

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_, err = s.Prompt(ctx, "hello")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("prompt to a hung plugin: %v, want the caller's deadline", err)
	}
	start := time.Now()
	if err := s.Stop(ctxFor(t, 30*time.Second)); err != nil {
		t.Logf("stop: %v", err)
	}
	select {
	case <-s.Done():
	default:
		t.Fatal("Stop returned before the session ended")
	}
	gone(t, pid, 5*time.Second)
	gone(t, child, 5*time.Second)
	held(t, "the prompt failed at the caller's 1s deadline; Stop ended plugin %d and child %d after %v (StopTimeout 2s, after a drain of half of it)", pid, child, time.Since(start).Round(time.Millisecond))
}
