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

// A prompt's blocks are checked against what the session's own plugin
// declared, not the host-wide cache: that is empty while an initialize
// probe runs and after one failed, and an image prompt must not be
// refused for it.
func TestPromptContentChecksTheSessionsOwnCapabilities(t *testing.T) {
	ctx := testCtx(t)
	h := openHost(t)
	s, err := h.StartSession(ctx, SessionRequest{ID: "img", Agent: "scripted", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	// What a failed probe leaves the cache with, for a moment.
	failed := &capEntry{done: make(chan struct{}), err: errors.New("probe failed")}
	close(failed.done)
	h.mu.Lock()
	h.caps["scripted"] = failed
	h.mu.Unlock()
	r, err := s.PromptContent(ctx, []pluginclient.ContentBlock{
		{Type: "text", Text: "look"},
		{Type: "image", JSON: `{"type":"image","mimeType":"image/png","data":"iVBORw0KGgo="}`},
	})
	if err != nil || r.StopReason != "end_turn" {
		t.Fatalf("an image prompt to an agent that declares images: %+v, %v", r, err)
	}
	if _, err := s.PromptContent(ctx, []pluginclient.ContentBlock{{Type: "audio", JSON: `{"type":"audio","mimeType":"audio/wav","data":"AA=="}`}}); !errors.Is(err, ErrUnsupportedContent) {
		t.Fatalf("an audio prompt to an agent that does not declare audio: %v, want ErrUnsupportedContent", err)
	}
}

// The requests a readopting host registers pending are the current plugin
// process's: one an earlier process asked before it died is gone with it,
// and asking a client about it again would leave it pending, unanswerable,
// for the whole PermissionTimeout.
func TestUnansweredPermissionsAreTheCurrentProcesssOnly(t *testing.T) {
	ctx := testCtx(t)
	h := openHost(t)
	s, err := h.StartSession(ctx, SessionRequest{ID: "asks", Agent: "scripted", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = s.Prompt(ctx, "ask") }()
	waitFor(t, "the permission request to be pending", func() bool { return len(s.PendingPermissions()) == 1 })
	waitFor(t, "the permission request to be journaled", func() bool { return len(h.unansweredPermissions(ctx, "asks")) == 1 })
	if err := syscall.Kill(s.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the plugin's death went unnoticed")
	}
	if got := h.unansweredPermissions(ctx, "asks"); len(got) != 0 {
		t.Errorf("after the plugin that asked died, unanswered requests %+v; want none", got)
	}
}

// A request the plugin does not know (an earlier process's, or one it
// answered otherwise) is forgotten when an answer to it is refused as
// unknown: no client is asked it again.
func TestAnAnswerRefusedAsUnknownForgetsTheRequest(t *testing.T) {
	ctx := testCtx(t)
	h := openHost(t)
	s, err := h.StartSession(ctx, SessionRequest{ID: "stale", Agent: "scripted", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	wake := s.PermissionsAdded()
	s.addPermission(&journal.PermissionRequest{RequestID: "perm-of-a-dead-process"}, true)
	select {
	case <-wake:
	default:
		t.Error("a request registered after its journal entry did not wake the followers")
	}
	err = s.AnswerPermission(ctx, "perm-of-a-dead-process", "allow")
	if !errors.Is(err, pluginclient.ErrUnknownRequest) {
		t.Fatalf("answering a request the plugin does not know: %v, want ErrUnknownRequest", err)
	}
	if s.PermissionPending("perm-of-a-dead-process") || len(s.PendingPermissions()) != 0 {
		t.Errorf("the request is still pending after the plugin refused it as unknown: %+v", s.PendingPermissions())
	}
}

// The title derived from a prompt is journaled in the prompt's commit, so
// it is stored even when the plugin then refuses the prompt: a journaled
// title is never left unstored, for the next prompt to derive a second.
func TestARefusedPromptsTitleIsStored(t *testing.T) {
	ctx := testCtx(t)
	h := openHost(t)
	s, err := h.StartSession(ctx, SessionRequest{ID: "titled", Agent: "scripted", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() {
		_, err := s.Prompt(ctx, "sleep 30s")
		first <- err
	}()
	waitFor(t, "the first turn to run", func() bool {
		rec, err := h.store.Get(ctx, "titled")
		return err == nil && rec.Title == "sleep 30s"
	})
	// As if the host knew of no turn and no title (a readopted plugin's
	// turn not yet seen): the plugin, still running its turn, refuses.
	s.mu.Lock()
	s.turn, s.state.title = "", ""
	s.mu.Unlock()
	if _, err := s.Prompt(ctx, "refused one"); err == nil {
		t.Fatal("a prompt while the plugin runs a turn was taken")
	}
	rec, err := h.store.Get(ctx, "titled")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Title != "refused one" || s.Title() != "refused one" {
		t.Errorf("after a refused prompt journaled the title %q, the store has %q and the session %q", "refused one", rec.Title, s.Title())
	}
	if err := s.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
}

// A readopting host learns the requests the plugin waits on from the
// plugin itself, not from its journal alone: the journal may not hold the
// request within what it reads back (a long journal since it was asked;
// a store restored from a backup older than the request), and a request
// nobody knows of is never asked, so its turn waits until cancelled.
func TestReadoptionLearnsPendingPermissionsFromThePlugin(t *testing.T) {
	ctx := testCtx(t)
	dir := stateDir(t)
	h1 := mustOpen(t, hostConfig(t, dir))
	s, err := h1.StartSession(ctx, SessionRequest{ID: "waits", Agent: "scripted", Workspace: dir})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = s.Prompt(ctx, "ask") }()
	waitFor(t, "the permission request to be journaled", func() bool { return len(h1.unansweredPermissions(ctx, "waits")) == 1 })
	id := s.PendingPermissions()[0].RequestID
	// More entries since the request than a readoption reads back.
	filler := make([]leasestore.EntryInput, permissionWindow+10)
	for i := range filler {
		filler[i] = titleEntry("filler")
	}
	if _, err := s.journal.Append(ctx, filler...); err != nil {
		t.Fatal(err)
	}
	if err := h1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	h2 := mustOpen(t, hostConfig(t, dir))
	t.Cleanup(func() { _ = h2.Shutdown(context.Background()) })
	s2, ok := h2.Session("waits")
	if !ok {
		t.Fatalf("the session was not readopted: %+v", h2.Decisions())
	}
	if got := s2.PendingPermissions(); len(got) != 1 || got[0].RequestID != id {
		t.Fatalf("the readopted session's pending requests are %+v; want the plugin's %q", got, id)
	}
	if err := s2.AnswerPermission(ctx, id, "allow"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the turn to end with the answer", func() bool {
		for _, e := range journalOf(t, h2, "waits") {
			if e.Kind == leasestore.KindUpdate && strings.Contains(string(e.Payload), "permission: selected allow") {
				return true
			}
		}
		return false
	})
}
