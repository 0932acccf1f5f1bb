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
