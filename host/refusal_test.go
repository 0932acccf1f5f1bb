package host

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agenthost/agenthost/internal/pluginclient"
)

// The update pump reads only a stale fence as a takeover. A plugin that no
// longer knows this host's attachment is detached too, but reported as what
// it is; any other refusal leaves the session this host's and is retried.
func TestUpdatePumpReadsEachRefusalForWhatItSays(t *testing.T) {
	var mu sync.Mutex
	var reports []error
	cfg := hostConfig(t, stateDir(t))
	cfg.Agents["fixture"] = AgentPlugin{Path: bins.fixture}
	cfg.OnError = func(_ string, err error) {
		mu.Lock()
		reports = append(reports, err)
		mu.Unlock()
	}
	h := mustOpen(t, cfg)
	t.Cleanup(func() { _ = h.Shutdown(testCtx(t)) })
	reported := func(id string) []error {
		mu.Lock()
		defer mu.Unlock()
		var out []error
		for _, r := range reports {
			if strings.Contains(r.Error(), `"`+id+`"`) {
				out = append(out, r)
			}
		}
		return out
	}

	for _, tc := range []struct {
		mode   string
		reason error
		says   string
	}{
		{"refuse-stale", pluginclient.ErrStaleFence, "the plugin refused this host's fence; detaching"},
		{"refuse-unattached", pluginclient.ErrNotAttached, "the plugin no longer knows this host's attachment; detaching"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			s, err := h.StartSession(testCtx(t), SessionRequest{ID: tc.mode, Agent: "fixture", Workspace: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			pid := s.PID()
			t.Cleanup(func() { _ = unix.Kill(pid, unix.SIGKILL) })
			select {
			case <-s.Done():
			case <-time.After(20 * time.Second):
				t.Fatal("the session still runs 20s after its plugin refused its update stream")
			}
			if !errors.Is(s.Err(), ErrDetached) {
				t.Errorf("session error %v, want ErrDetached", s.Err())
			}
			if !alive(t, pid) {
				t.Error("the host stopped a plugin it detached from")
			}
			got := reported(tc.mode)
			if len(got) != 1 || !errors.Is(got[0], tc.reason) || !strings.Contains(got[0].Error(), tc.says) {
				t.Errorf("reports %v, want one saying %q and matching %v", got, tc.says, tc.reason)
			}
		})
	}

	t.Run("refuse-busy", func(t *testing.T) {
		s, err := h.StartSession(testCtx(t), SessionRequest{ID: "refuse-busy", Agent: "fixture", Workspace: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "update 1 after the refusals", func() bool { return slices.Equal(pluginSeqs(t, h, s.ID()), []uint64{1}) })
		select {
		case <-s.Done():
			t.Fatalf("a refusal that is not about the fence ended the session: %v", s.Err())
		default:
		}
		if got := reported("refuse-busy"); len(got) != 0 {
			t.Errorf("reports %v, want none: the stream was retried", got)
		}
		if err := s.Stop(testCtx(t)); err != nil {
			t.Fatal(err)
		}
	})
}

// A plugin the host stops for breaking the update protocol during a turn
// (a sequence gap; an update over the transport's limit) ends that turn:
// the prompt is answered with an error, and the turn's stop is journaled,
// failed, naming the protocol violation.
func TestProtocolViolationMidTurnEndsTheTurnFailed(t *testing.T) {
	t.Parallel()
	cfg := hostConfig(t, stateDir(t))
	cfg.Agents["fixture"] = AgentPlugin{Path: bins.fixture}
	h := mustOpen(t, cfg)
	t.Cleanup(func() { _ = h.Shutdown(testCtx(t)) })
	for _, mode := range []string{"turn-gap", "turn-oversized"} {
		t.Run(mode, func(t *testing.T) {
			ctx := testCtx(t)
			s, err := h.StartSession(ctx, SessionRequest{ID: mode, Agent: "fixture", Workspace: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			pid := s.PID()
			t.Cleanup(func() { _ = unix.Kill(pid, unix.SIGKILL) })
			r, err := s.Prompt(ctx, "break the protocol")
			if err != nil || r.StopReason != "failed" || !strings.Contains(r.Error, ErrProtocol.Error()) {
				t.Fatalf("the prompt was answered %+v, %v; want its turn failed, naming %q", r, err, ErrProtocol)
			}
			<-s.Done()
			if !errors.Is(s.Err(), ErrProtocol) {
				t.Errorf("session error %v, want ErrProtocol", s.Err())
			}
			st := stopsOf(t, h, s.ID(), r.TurnID)
			if len(st) != 1 || st[0].StopReason != "failed" || !strings.Contains(st[0].Error, ErrProtocol.Error()) {
				t.Fatalf("stops of the turn %s: %+v, want one, failed, naming %q", r.TurnID, st, ErrProtocol)
			}
		})
	}
}
