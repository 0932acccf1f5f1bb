package sdktest

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/internal/bootclock"
	"github.com/agenthost/agenthost/internal/pluginclient"
	"github.com/agenthost/agenthost/plugin/sdk"
)

// promptAfterHeartbeat heartbeats and prompts until a prompt is admitted.
// A refusal is a failure only when the prompt was answered within bound of
// the heartbeat's return, when the plugin must be live: on a loaded machine
// the gap may exceed the bound, and the plugin is then right to refuse.
func promptAfterHeartbeat(t *testing.T, h *Harness, bound time.Duration, text string) string {
	t.Helper()
	ctx := t.Context()
	for attempt := 0; attempt < 20; attempt++ {
		if _, err := h.Heartbeat(ctx, time.Hour); err != nil {
			t.Fatalf("Heartbeat: %v", err)
		}
		sent := time.Now()
		id, err := h.Prompt(ctx, text)
		if err == nil {
			return id
		}
		if !errors.Is(err, ErrSelfFenced) {
			t.Fatalf("Prompt(%q) after a heartbeat: %v", text, err)
		}
		if gap := time.Since(sent); gap < bound {
			t.Fatalf("Prompt(%q) refused as self-fenced %s after a heartbeat, within the %s bound", text, gap, bound)
		}
	}
	t.Fatalf("Prompt(%q): every attempt came later than the %s bound after its heartbeat", text, bound)
	return ""
}

// A plugin spawned with a self-fence bound and never heartbeated refuses
// new turns once the bound has passed since it started, never before, and
// a heartbeat at its fence lifts that; one at another fence is refused.
func TestProcessSelfFencesWithoutHeartbeats(t *testing.T) {
	const bound = time.Second
	t.Setenv(sdk.EnvSelfFence, bound.String())
	spawned := time.Now()
	h := NewProcessHarness(t, scriptedBinary(t))
	ctx := t.Context()
	if _, err := h.NewSession(ctx, sdk.NewSessionRequest{Workspace: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	for {
		asked := time.Now()
		id, err := h.Prompt(ctx, "hello")
		if errors.Is(err, ErrSelfFenced) {
			if asked.Before(spawned.Add(bound)) {
				t.Fatalf("refused as self-fenced at %s after the spawn, before the %s bound", asked.Sub(spawned), bound)
			}
			if !strings.Contains(err.Error(), "no live host was heard from") {
				t.Errorf("the refusal does not say why: %v", err)
			}
			break
		}
		if err != nil {
			t.Fatalf("Prompt: %v", err)
		}
		if _, stop := h.Turn(id, wait); stop.StopReason != string(sdk.StopEndTurn) {
			t.Fatalf("a turn before the deadline stopped %q", stop.StopReason)
		}
		if time.Since(spawned) > time.Minute {
			t.Fatalf("still taking turns a minute after the spawn, with a %s bound", bound)
		}
		time.Sleep(bound / 10)
	}

	if _, err := h.HeartbeatAt(ctx, h.Fence()-1, time.Hour); !errors.Is(err, pluginclient.ErrStaleFence) {
		t.Errorf("Heartbeat at a stale fence: %v, want ErrStaleFence", err)
	}
	if _, err := h.HeartbeatAt(ctx, h.Fence()+1, time.Hour); !errors.Is(err, pluginclient.ErrNeverAttached) {
		t.Errorf("Heartbeat at a fence never attached: %v, want ErrNeverAttached", err)
	}
	if fenced, err := h.Heartbeat(ctx, time.Hour); err != nil || !fenced {
		t.Errorf("the first heartbeat after the lapse: self-fenced %v, %v; want true", fenced, err)
	}
	id := promptAfterHeartbeat(t, h, bound, "history")
	if ups, stop := h.Turn(id, wait); stop.StopReason != string(sdk.StopEndTurn) || !strings.HasPrefix(Messages(ups), "history:") {
		t.Errorf("the turn after the heartbeat: %s", Describe(ups))
	}
}

// The running turn of a plugin that hears from no host is cancelled at its
// deadline, its stop saying why.
func TestProcessSelfFenceCancelsTheRunningTurn(t *testing.T) {
	const bound = 2 * time.Second
	t.Setenv(sdk.EnvSelfFence, bound.String())
	h := NewProcessHarness(t, scriptedBinary(t))
	if _, err := h.NewSession(t.Context(), sdk.NewSessionRequest{Workspace: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	id := promptAfterHeartbeat(t, h, bound, "wait")
	// No heartbeat now: the turn must end by itself.
	ups, stop := h.Turn(id, time.Minute)
	if stop.StopReason != string(sdk.StopCancelled) || !strings.Contains(stop.Error, "fenced itself") {
		t.Errorf("the held turn ended %q (%q), want cancelled, the plugin saying it fenced itself: %s", stop.StopReason, stop.Error, Describe(ups))
	}
}

// A heartbeat read after its grant ended on the machine's boot clock (as
// one written before host and plugin froze, or the machine slept, and read
// on waking) grants nothing: a stream of them neither keeps the running
// turn alive past the deadline nor lifts the fence afterwards; one whose
// grant ends in the future lifts it.
func TestProcessStaleHeartbeatGrantsNothing(t *testing.T) {
	if _, ok := bootclock.Now(); !ok {
		t.Skip("no boot clock on this system: heartbeats carry no valid_until_boot_ns")
	}
	const bound = time.Second
	t.Setenv(sdk.EnvSelfFence, bound.String())
	h := NewProcessHarness(t, scriptedBinary(t))
	ctx := t.Context()
	if _, err := h.NewSession(ctx, sdk.NewSessionRequest{Workspace: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	stale := func() (bool, error) {
		now, _ := bootclock.Now()
		return h.HeartbeatUntil(ctx, time.Hour, now-int64(time.Minute))
	}
	id := promptAfterHeartbeat(t, h, bound, "wait")
	// Stale heartbeats every tenth of the bound: each would keep the turn
	// alive if it granted receipt + valid_for.
	var stop *Update
	for began := time.Now(); stop == nil; {
		if time.Since(began) > 30*bound {
			t.Fatalf("the held turn still runs %s after its last fresh heartbeat, with stale ones arriving and a %s bound", time.Since(began), bound)
		}
		if _, err := stale(); err != nil {
			t.Fatalf("stale Heartbeat: %v", err)
		}
		if u, ok := h.Next(bound / 10); ok && u.Stop() != nil && u.TurnID == id {
			stop = &u
		}
	}
	if s := stop.Stop(); s.StopReason != string(sdk.StopCancelled) || !strings.Contains(s.Error, "fenced itself") {
		t.Errorf("the held turn ended %q (%q), want cancelled, the plugin saying it fenced itself", s.StopReason, s.Error)
	}
	if fenced, err := stale(); err != nil || !fenced {
		t.Errorf("stale Heartbeat after the lapse: self-fenced %v, %v; want true", fenced, err)
	}
	if _, err := h.Prompt(ctx, "hello"); !errors.Is(err, ErrSelfFenced) {
		t.Fatalf("Prompt after a stale heartbeat: %v, want ErrSelfFenced", err)
	}

	// A grant ending an hour from now on the boot clock lifts the fence
	// (the plugin caps it at its bound).
	for attempt := 0; ; attempt++ {
		now, _ := bootclock.Now()
		if _, err := h.HeartbeatUntil(ctx, time.Hour, now+int64(time.Hour)); err != nil {
			t.Fatalf("Heartbeat: %v", err)
		}
		sent := time.Now()
		id, err := h.Prompt(ctx, "hello")
		if err == nil {
			if _, stop := h.Turn(id, wait); stop.StopReason != string(sdk.StopEndTurn) {
				t.Errorf("the turn after a fresh heartbeat stopped %q", stop.StopReason)
			}
			break
		}
		if !errors.Is(err, ErrSelfFenced) || time.Since(sent) < bound || attempt == 20 {
			t.Fatalf("Prompt %s after a heartbeat granting until an hour from now: %v", time.Since(sent), err)
		}
	}
}

// Without the variable (one machine) the plugin never fences itself and
// accepts heartbeats; with an invalid one it refuses to serve, saying why.
func TestProcessSelfFenceVariable(t *testing.T) {
	bin := scriptedBinary(t)
	t.Run("unset", func(t *testing.T) {
		t.Setenv(sdk.EnvSelfFence, "") // empty is unset
		h := NewProcessHarness(t, bin)
		if _, err := h.NewSession(t.Context(), sdk.NewSessionRequest{Workspace: t.TempDir()}); err != nil {
			t.Fatal(err)
		}
		if fenced, err := h.Heartbeat(t.Context(), time.Millisecond); err != nil || fenced {
			t.Errorf("Heartbeat without self-fencing: %v, %v", fenced, err)
		}
		if _, stop := h.Run("hello", wait); stop.StopReason != string(sdk.StopEndTurn) {
			t.Errorf("a turn without self-fencing stopped %q", stop.StopReason)
		}
	})
	t.Run("invalid", func(t *testing.T) {
		cmd := exec.CommandContext(t.Context(), bin)
		cmd.Env = append(os.Environ(), sdk.EnvSelfFence+"=soon")
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || !strings.Contains(string(out), sdk.EnvSelfFence+`=\"soon\"`) {
			t.Errorf("the plugin with %s=soon: %v, output:\n%s", sdk.EnvSelfFence, err, out)
		}
	})
}

// A conversation exported by a plugin on one machine (session directory)
// continues in a plugin on another that resumes it with that state; without
// the state the other machine has none of it.
func TestProcessProviderStateMovesToAnotherMachine(t *testing.T) {
	bin := scriptedBinary(t)
	ctx := t.Context()
	a := NewProcessHarness(t, bin)
	info, err := a.NewSession(ctx, sdk.NewSessionRequest{Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	a.Run("hello", wait)
	a.Run("count 2", wait)
	if id, err := a.Identify(ctx); err != nil || !id.ExportsState {
		t.Errorf("Identify of the scripted plugin: exports_state %v, %v", id.ExportsState, err)
	}
	handle, state, err := a.ExportState(ctx)
	if err != nil || handle != info.Handle || len(state) == 0 {
		t.Fatalf("ExportState: %q, %d bytes, %v; want the handle %q and a state", handle, len(state), err, info.Handle)
	}

	b := NewProcessHarness(t, bin)
	if _, err := b.ResumeSessionWithState(ctx, sdk.ResumeSessionRequest{Workspace: t.TempDir(), Handle: handle}, state); err != nil {
		t.Fatal(err)
	}
	if ups, _ := b.Run("history", wait); Messages(ups) != "history: 2 earlier prompts: hello | count 2" {
		t.Errorf("history on the other machine: %s", Describe(ups))
	}

	c := NewProcessHarness(t, bin)
	if _, err := c.ResumeSession(ctx, sdk.ResumeSessionRequest{Workspace: t.TempDir(), Handle: handle}); err != nil {
		t.Fatal(err)
	}
	if ups, _ := c.Run("history", wait); Messages(ups) != "history: no earlier prompts" {
		t.Errorf("history on a machine without the state: %s", Describe(ups))
	}
	// A state that is not the conversation's is refused as the agent's.
	d := NewProcessHarness(t, bin)
	if _, err := d.ResumeSessionWithState(ctx, sdk.ResumeSessionRequest{Workspace: t.TempDir(), Handle: "other"}, state); !errors.Is(err, ErrAgent) {
		t.Errorf("resume of another handle with the state: %v, want ErrAgent", err)
	}
}
