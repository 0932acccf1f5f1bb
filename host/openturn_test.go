package host

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agenthost/agenthost/internal/pluginclient"
	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/leasestore"
)

// stopsOf returns the journaled stops of one turn (of every turn when turn
// is "").
func stopsOf(t *testing.T, h *Host, id, turn string) []*journal.Stop {
	t.Helper()
	var out []*journal.Stop
	for _, e := range journalOf(t, h, id) {
		if e.Kind != leasestore.KindStop {
			continue
		}
		r, err := journal.Decode(e)
		if err != nil {
			t.Fatal(err)
		}
		if st := r.(*journal.Stop); turn == "" || st.TurnID == turn {
			out = append(out, st)
		}
	}
	return out
}

// journalPromptAndLeave leaves the state a host SIGKILLed right after
// journaling a prompt leaves: the prompt durable, never dispatched, the
// plugin alive with its lease. The host detaches (its in-memory state
// goes, as a kill's would), and only the prompt's entry was written.
func journalPromptAndLeave(t *testing.T, h *Host, s *Session, text string) string {
	t.Helper()
	turn := "turn-journaled-not-dispatched"
	if _, err := s.journal.Append(testCtx(t), promptEntry(turn, pluginclient.Text(text))); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	return turn
}

// A prompt journaled by a host that died before dispatching it, whose
// plugin survived and never had the turn: the readopting host dispatches
// it, and the turn ends with the plugin's own stop, once.
func TestJournaledPromptNeverDispatchedIsRunAfterRestart(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dir := stateDir(t)
	h1 := mustOpen(t, hostConfig(t, dir))
	s, err := h1.StartSession(ctx, SessionRequest{ID: "undispatched", Agent: "scripted", Workspace: dir})
	if err != nil {
		t.Fatal(err)
	}
	turn := journalPromptAndLeave(t, h1, s, "count 3")
	h2 := mustOpen(t, hostConfig(t, dir))
	t.Cleanup(func() { _ = h2.Shutdown(context.Background()) })
	waitFor(t, "the decision", func() bool { _, ok := h2.Decisions()[s.ID()]; return ok })
	if d := h2.Decisions()[s.ID()]; d.Action != ActionReadopted {
		t.Fatalf("decision %+v, want readopted", d)
	}
	waitFor(t, "the journaled turn's stop", func() bool { return len(stopsOf(t, h2, s.ID(), turn)) > 0 })
	if st := stopsOf(t, h2, s.ID(), turn); len(st) != 1 || st[0].StopReason != "end_turn" {
		t.Fatalf("stops of the journaled turn %+v, want the plugin's end_turn, once", st)
	}
	s2, ok := h2.Session(s.ID())
	if !ok {
		t.Fatal("the readopted session does not run")
	}
	// The stop is journaled before the session learns of it.
	waitFor(t, "the session to see the turn's end", func() bool {
		s2.mu.Lock()
		defer s2.mu.Unlock()
		return s2.turn == ""
	})
	if r, err := s2.Prompt(ctx, "count 1"); err != nil || r.StopReason != "end_turn" {
		t.Fatalf("a prompt after the settled turn: %+v, %v", r, err)
	}
}

// A turn the readopted plugin runs silently (no update yet) stays the
// plugin's: dispatching its prompt again is refused as busy with it, and
// the turn ends once, with the plugin's stop.
func TestSilentTurnOfAReadoptedPluginEndsOnce(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dir := stateDir(t)
	h1 := mustOpen(t, hostConfig(t, dir))
	s, err := h1.StartSession(ctx, SessionRequest{ID: "silent", Agent: "scripted", Workspace: dir})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = s.Prompt(ctx, "sleep 3s")
	}()
	waitFor(t, "the turn to be dispatched", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.turn != "" && s.dispatching == 0
	})
	turn := s.turn
	if err := h1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	<-done
	h2 := mustOpen(t, hostConfig(t, dir))
	t.Cleanup(func() { _ = h2.Shutdown(context.Background()) })
	waitFor(t, "the turn's stop", func() bool { return len(stopsOf(t, h2, s.ID(), turn)) > 0 })
	if st := stopsOf(t, h2, s.ID(), turn); len(st) != 1 || st[0].StopReason != "end_turn" {
		t.Fatalf("stops of the silent turn %+v, want the plugin's end_turn, once", st)
	}
}

// detachMidTurn starts session id in a host on dir, prompts text, and
// once the turn has streamed two updates closes the host, which detaches:
// the plugin runs on with the turn, as after the host's SIGKILL.
func detachMidTurn(t *testing.T, dir, id, text string) (*Session, string) {
	t.Helper()
	ctx := testCtx(t)
	h := mustOpen(t, hostConfig(t, dir))
	s, err := h.StartSession(ctx, SessionRequest{ID: id, Agent: "scripted", Workspace: dir})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = s.Prompt(ctx, text)
	}()
	waitFor(t, "the turn to stream", func() bool { return len(pluginSeqs(t, h, s.ID())) >= 2 })
	s.mu.Lock()
	turn := s.turn
	s.mu.Unlock()
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	<-done
	return s, turn
}

// Host and plugin killed together mid-turn: the next host finds the
// plugin gone, evicts it and journals the turn's end, failed with why.
func TestOpenTurnOfAPluginKilledWithItsHostIsClosedAtRestart(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dir := stateDir(t)
	s, turn := detachMidTurn(t, dir, "both-killed", "count 100000 10ms")
	pid := s.PID()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the plugin to die", func() bool { return !alive(t, pid) })
	h2 := mustOpen(t, hostConfig(t, dir))
	t.Cleanup(func() { _ = h2.Shutdown(context.Background()) })
	waitFor(t, "the decision", func() bool { _, ok := h2.Decisions()[s.ID()]; return ok })
	if d := h2.Decisions()[s.ID()]; d.Action != ActionEvicted {
		t.Fatalf("decision %+v, want evicted", d)
	}
	waitFor(t, "the open turn's stop", func() bool { return len(stopsOf(t, h2, s.ID(), turn)) > 0 })
	if st := stopsOf(t, h2, s.ID(), turn); len(st) != 1 || st[0].StopReason != "failed" || !strings.Contains(st[0].Error, "gone") {
		t.Fatalf("stops of the open turn %+v, want one, failed, saying the plugin is gone", st)
	}
	// The session resumes and takes prompts.
	s2, err := h2.StartSession(ctx, SessionRequest{ID: s.ID(), Agent: "scripted"})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := s2.Prompt(ctx, "count 1"); err != nil || r.StopReason != "end_turn" {
		t.Fatalf("a prompt after the closed turn: %+v, %v", r, err)
	}
}

// A prompt re-sent for a turn the plugin already started is refused as
// such, running or ended, and never run twice: the turn keeps its one
// stop. (A restarted host re-sends a journaled prompt it saw no update of;
// the turn may have ended, silently, just before.)
func TestPromptResentForAStartedTurnIsNeverRunTwice(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	h := openHost(t)
	s, err := h.StartSession(ctx, SessionRequest{ID: "resent", Agent: "scripted", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ended, err := s.Prompt(ctx, "count 1")
	if err != nil || ended.StopReason != "end_turn" {
		t.Fatalf("the first turn: %+v, %v", ended, err)
	}
	var started *pluginclient.TurnStartedError
	_, err = s.proc.att.Prompt(ctx, pluginclient.PromptRequest{TurnID: ended.TurnID, Prompt: pluginclient.Text("count 1")})
	if !errors.As(err, &started) || started.Running {
		t.Fatalf("re-sending the ended turn %s: %v, want it refused as already started and ended", ended.TurnID, err)
	}
	running := make(chan TurnResult, 1)
	go func() {
		r, _ := s.Prompt(ctx, "sleep 10s")
		running <- r
	}()
	waitFor(t, "the second turn to be dispatched", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.turn != "" && s.dispatching == 0
	})
	s.mu.Lock()
	turn := s.turn
	s.mu.Unlock()
	_, err = s.proc.att.Prompt(ctx, pluginclient.PromptRequest{TurnID: turn, Prompt: pluginclient.Text("sleep 10s")})
	if !errors.As(err, &started) || !started.Running || !errors.Is(err, pluginclient.ErrTurnStarted) {
		t.Fatalf("re-sending the running turn %s: %v, want it refused as already started and running", turn, err)
	}
	if err := s.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	if r := <-running; r.StopReason != "cancelled" {
		t.Fatalf("the second turn ended %+v, want cancelled", r)
	}
	if st := stopsOf(t, h, s.ID(), ended.TurnID); len(st) != 1 {
		t.Fatalf("stops of the re-sent turn %+v, want its one", st)
	}
}

// gatedStore holds every journal append of the sessions it opens until
// open is closed: a readopted session's drain of the plugin's outbox then
// takes as long as the test needs.
type gatedStore struct {
	leasestore.Store
	open chan struct{}
}

func (g gatedStore) OpenJournal(ctx context.Context, id string, fence uint64) (leasestore.Journal, error) {
	j, err := g.Store.OpenJournal(ctx, id, fence)
	return gatedJournal{j, g.open}, err
}

type gatedJournal struct {
	leasestore.Journal
	open chan struct{}
}

func (g gatedJournal) Append(ctx context.Context, entries ...leasestore.EntryInput) ([]leasestore.Entry, error) {
	select {
	case <-g.open:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.Journal.Append(ctx, entries...)
}

// A readopted session whose open turn the host has not yet seen any new
// update of (its drain of the plugin's outbox is under way) is running
// that turn already: a prompt meanwhile is refused with ErrTurnRunning
// and not journaled, and the turn ends once, with the plugin's stop.
func TestPromptWhileAReadoptedTurnIsSettledIsRefusedUnjournaled(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dir := stateDir(t)
	s, turn := detachMidTurn(t, dir, "readopted-busy", "count 10 100ms")
	// The plugin streams on, unacknowledged, into its outbox.
	cfg := hostConfig(t, dir)
	store, err := openStore(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	cfg.Store = gatedStore{store, gate}
	cfg.ReconcileInBackground = true
	h2, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h2.Shutdown(context.Background()) })
	var s2 *Session
	waitFor(t, "the readopted session", func() (ok bool) { s2, ok = h2.Session(s.ID()); return ok })
	before := len(journalOf(t, h2, s.ID()))
	refused := make(chan error, 1)
	go func() {
		_, err := s2.Prompt(ctx, "echo too soon")
		refused <- err
	}()
	select {
	case err := <-refused:
		if !errors.Is(err, ErrTurnRunning) {
			t.Fatalf("a prompt while the readopted turn runs: %v, want ErrTurnRunning", err)
		}
	case <-time.After(5 * time.Second):
		close(gate)
		t.Fatalf("a prompt while the readopted turn runs was admitted (it waited to be journaled): %v", <-refused)
	}
	close(gate)
	waitFor(t, "the turn's stop", func() bool { return len(stopsOf(t, h2, s.ID(), turn)) > 0 })
	if st := stopsOf(t, h2, s.ID(), turn); len(st) != 1 || st[0].StopReason != "end_turn" {
		t.Fatalf("stops of the readopted turn %+v, want the plugin's end_turn, once", st)
	}
	for _, e := range journalOf(t, h2, s.ID())[before:] {
		if e.Kind == leasestore.KindPrompt {
			t.Fatalf("the refused prompt was journaled at seq %d", e.Seq)
		}
	}
}
