package faults

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/leasestore"
)

// The store is lost while the host is detached and its plugins live on:
// deleted, its MANIFEST or its key registry overwritten. The host restores
// the sessions from the backup and their journals from the journal mirror:
// a user's transcript (every prompt, update and stop journaled before the
// loss) is there, entry for entry, under the same sequence numbers; the
// plugins are readopted and their next turns are journaled once and in
// order after it. This is the bound the README states: a store lost after
// a process crash or a clean stop costs no journal entry.
func TestStoreLossKeepsTheTranscript(t *testing.T) {
	damages := map[string]func(t *testing.T, store string){
		"store-deleted": func(t *testing.T, store string) {
			if err := os.RemoveAll(store); err != nil {
				t.Fatal(err)
			}
		},
		"manifest-overwritten": func(t *testing.T, store string) {
			overwriteTail(t, filepath.Join(store, "MANIFEST"), 8)
		},
		"key-registry-overwritten": func(t *testing.T, store string) {
			overwriteTail(t, filepath.Join(store, "KEYREGISTRY"), 8)
		},
	}
	for name, damage := range damages {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "state")
			cfg := config(t, dir, nil)
			h, err := openOnBadger(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			const sessions = 2
			before := map[string][]leasestore.Entry{}
			for i := range sessions {
				id := fmt.Sprint("t", i)
				s, err := h.StartSession(ctxFor(t, time.Minute), host.SessionRequest{ID: id, Agent: "scripted", Workspace: t.TempDir()})
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range []string{"count 30", "echo what the user asked"} {
					if _, err := s.Prompt(ctxFor(t, time.Minute), p); err != nil {
						t.Fatal(err)
					}
				}
				before[id] = journal(t, h.Store(), id)
			}
			if err := h.Close(context.Background()); err != nil { // detach: the plugins live on
				t.Fatal(err)
			}
			damage(t, filepath.Join(dir, "store"))
			injected(t, "%s under %d detached sessions, each with a %d-entry journal", name, sessions, len(before["t0"]))

			r := &reports{}
			cfg.OnError = r.add
			h2 := openHost(t, cfg)
			st, err := h2.Status(context.Background())
			if err != nil || st.Recovery == nil {
				t.Fatalf("after the loss: %+v (%v), want a restore", st, err)
			}
			for id, old := range before {
				now := journal(t, h2.Store(), id)
				if len(now) < len(old) {
					t.Fatalf("session %s: %d journal entries after the restore, %d before", id, len(now), len(old))
				}
				for i, e := range old {
					got := now[i]
					if got.Seq != e.Seq || got.Kind != e.Kind || !bytes.Equal(got.Payload, e.Payload) {
						t.Fatalf("session %s, entry %d: %d %s %.60q after the restore, %d %s %.60q before", id, i, got.Seq, got.Kind, got.Payload, e.Seq, e.Kind, e.Payload)
					}
				}
				if next := now[len(old)]; next.Seq <= old[len(old)-1].Seq+1 || !strings.Contains(string(next.Payload), "restored-from-backup") {
					t.Fatalf("session %s: the entry after the kept ones is %d %.80q, want the restore's, past a gap", id, next.Seq, next.Payload)
				}
				s, ok := h2.Session(id)
				if !ok {
					t.Fatalf("session %s was not readopted", id)
				}
				if res, err := s.Prompt(ctxFor(t, time.Minute), "count 5"); err != nil || res.StopReason != "end_turn" {
					t.Fatalf("session %s after the restore: %+v, %v", id, res, err)
				}
				// The whole journal, the kept part and the new turn, holds
				// every plugin update once and in order: the readopted
				// plugin resumed after the last kept one.
				seqs := pluginSeqs(t, journal(t, h2.Store(), id))
				checkOnceInOrder(t, seqs, 1, uint64(len(seqs)))
			}
			if rep := r.find(host.ErrProtocol); rep != nil {
				t.Fatalf("a readopted plugin was stopped: %v", rep)
			}
			held(t, "%s; every journal entry from before the loss is back under its seq, and the readopted plugins' next turns follow once and in order", *st.Recovery)
		})
	}
}
