package codex

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/internal/logtest"
	"github.com/agenthost/agenthost/plugins/internal/portable"
)

const threadID = "01a236cb-c296-7ab2-b7d6-691c7ec786f2"

func stateAgentAt(t *testing.T, home string) *agent {
	return &agent{log: logtest.New(t), env: []string{"CODEX_HOME=" + home}, ownNames: map[string]bool{}}
}

func writeFile(t *testing.T, name, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func rollout(id, rest string) string {
	return `{"timestamp":"2026-12-02T12:47:33.237Z","ordinal":0,"type":"session_meta","payload":{"session_id":"` + id + `","id":"` + id + `","cwd":"/home/a/work"}}` + "\n" + rest
}

const rolloutRel = "sessions/2026/12/02/rollout-2026-12-02T12-47-33-" + threadID + ".jsonl"

func TestStateRoundTrip(t *testing.T) {
	ctx := context.Background()
	homeA := filepath.Join(t.TempDir(), ".codex")
	body := rollout(threadID, `{"type":"response_item","payload":{"role":"user","content":"QUESTION-ONE"}}`+"\n")
	writeFile(t, filepath.Join(homeA, rolloutRel), body+`{"type":"event_msg","pay`)
	writeFile(t, filepath.Join(homeA, "sessions/2026/12/02/rollout-2026-12-02T12-00-00-11111111-2222-4333-8444-555555555555.jsonl"), rollout("11111111-2222-4333-8444-555555555555", ""))
	state, err := stateAgentAt(t, homeA).ExportState(ctx, threadID)
	if err != nil {
		t.Fatal(err)
	}
	s, err := portable.Decode(state, "codex", threadID)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Files) != 1 || s.Files[0].Path != rolloutRel || string(s.Files[0].Data) != body || s.Meta[metaCodexHome] != homeA {
		t.Fatalf("exported %+v", s)
	}
	homeB := filepath.Join(t.TempDir(), ".codex")
	b := stateAgentAt(t, homeB)
	if err := b.ImportState(ctx, threadID, state); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(homeB, rolloutRel)); string(got) != body {
		t.Errorf("imported rollout %q", got)
	}
	if err := b.ImportState(ctx, threadID, state); err != nil {
		t.Errorf("a second import of the same state: %v", err)
	}

	// B held the thread under another date, with a turn the export lacks.
	homeC := filepath.Join(t.TempDir(), ".codex")
	mine := filepath.Join(homeC, "sessions/2026/12/03/rollout-2026-12-03T09-00-00-"+threadID+".jsonl")
	writeFile(t, mine, rollout(threadID, `{"type":"response_item","payload":{"content":"ON C"}}`+"\n"))
	if err := stateAgentAt(t, homeC).ImportState(ctx, threadID, state); err != nil {
		t.Fatal(err)
	}
	if got := findRollouts(homeC, threadID); len(got) != 1 || filepath.Join(homeC, got[0]) != mine {
		t.Errorf("C holds rollouts %v, want the one at %s", got, mine)
	}
	if got, _ := os.ReadFile(mine); string(got) != body {
		t.Errorf("C's rollout is not the import: %q", got)
	}
	if aside, _ := filepath.Glob(mine + ".displaced-*"); len(aside) != 1 {
		t.Errorf("C's diverging copy was not kept: %v", aside)
	}
}

func TestStateImportRefuses(t *testing.T) {
	ctx := context.Background()
	homeA := filepath.Join(t.TempDir(), ".codex")
	writeFile(t, filepath.Join(homeA, rolloutRel), rollout(threadID, ""))
	state, err := stateAgentAt(t, homeA).ExportState(ctx, threadID)
	if err != nil {
		t.Fatal(err)
	}
	homeB := filepath.Join(t.TempDir(), ".codex")
	b := stateAgentAt(t, homeB)

	theirs := filepath.Join(homeB, rolloutRel)
	writeFile(t, theirs, rollout("11111111-2222-4333-8444-555555555555", ""))
	if err := b.ImportState(ctx, threadID, state); err == nil || !strings.Contains(err.Error(), "another conversation's rollout, not overwritten") {
		t.Errorf("import over another thread's file: %v", err)
	}
	if got, _ := os.ReadFile(theirs); !bytes.Contains(got, []byte("11111111")) {
		t.Errorf("the other thread's file was changed: %s", got)
	}
	os.Remove(theirs)

	forged := func(files ...portable.File) []byte {
		b, err := portable.Encode(portable.State{Agent: "codex", Handle: threadID, Files: files})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	meta := []byte(rollout(threadID, ""))
	for _, tt := range []struct {
		name, handle string
		state        []byte
		want         string
	}{
		{"not a uuid", "../x", state, "not a codex thread id"},
		{"another thread", "11111111-2222-4333-8444-555555555555", state, `not "11111111`},
		{"garbage", threadID, []byte("{"), "not a provider state envelope"},
		{"config", threadID, forged(portable.File{Path: "config.toml", Data: meta}), "is not a rollout of the thread"},
		{"another rollout", threadID, forged(portable.File{Path: "sessions/2026/12/02/rollout-x-11111111-2222-4333-8444-555555555555.jsonl", Data: meta}), "is not a rollout of the thread"},
		{"two files", threadID, forged(portable.File{Path: rolloutRel, Data: meta}, portable.File{Path: "auth.json", Data: meta}), "2 files"},
		{"foreign meta", threadID, forged(portable.File{Path: rolloutRel, Data: []byte(rollout("11111111-2222-4333-8444-555555555555", ""))}), "belongs to thread"},
		{"no meta", threadID, forged(portable.File{Path: rolloutRel, Data: []byte(`{"type":"event_msg"}` + "\n")}), "session_meta"},
		{"oversized", threadID, make([]byte, portable.MaxStateBytes+1), "too large"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := b.ImportState(ctx, tt.handle, tt.state); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ImportState: %v, want %q", err, tt.want)
			}
		})
	}
	if got := findRollouts(homeB, threadID); len(got) != 0 {
		t.Errorf("refused imports wrote %v", got)
	}
	if _, err := b.ExportState(ctx, "11111111-2222-4333-8444-555555555555"); err == nil || !strings.Contains(err.Error(), "no rollout") {
		t.Errorf("export of an unknown thread: %v", err)
	}
}

// ExportState waits for the rollout to record the end of the last turn
// codex reported: codex writes the rollout behind its notifications.
func TestStateExportAwaitsTheTurnEnd(t *testing.T) {
	home := filepath.Join(t.TempDir(), ".codex")
	started := rollout(threadID, `{"type":"event_msg","payload":{"type":"task_started","turn_id":"t1"}}`+"\n")
	writeFile(t, filepath.Join(home, rolloutRel), started)
	a := stateAgentAt(t, home)
	a.noteTurnEnded(threadID, "t1")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := a.ExportState(ctx, threadID); !errors.Is(err, context.Canceled) {
		t.Errorf("export before codex recorded the turn's end: %v", err)
	}
	for _, end := range []string{"task_complete", "turn_aborted"} {
		writeFile(t, filepath.Join(home, rolloutRel), started+`{"type":"event_msg","payload":{"type":"`+end+`","turn_id":"t1"}}`+"\n")
		if _, err := a.ExportState(ctx, threadID); err != nil {
			t.Errorf("export once the rollout records %s: %v", end, err)
		}
	}
	if recordsEnd([]byte(started+`{"type":"event_msg","payload":{"type":"task_complete","turn_id":"t2"}}`+"\n"), "t1") {
		t.Errorf("another turn's end counted")
	}
}

// FuzzImportState: whatever file a state names, an import writes only a
// rollout of the thread under sessions/, and refuses what it does not
// write.
func FuzzImportState(f *testing.F) {
	f.Add(rolloutRel, []byte(rollout(threadID, "")))
	f.Add("sessions/2026/12/02/../../../config.toml", []byte(rollout(threadID, "")))
	f.Add("config.toml", []byte("x"))
	f.Fuzz(func(t *testing.T, p string, data []byte) {
		state, err := portable.Encode(portable.State{Agent: "codex", Handle: threadID, Files: []portable.File{{Path: p, Data: data}}})
		if err != nil {
			return
		}
		home := t.TempDir()
		err = stateAgentAt(t, home).ImportState(context.Background(), threadID, state)
		var written []string
		filepath.WalkDir(home, func(path string, d os.DirEntry, _ error) error {
			if d != nil && !d.IsDir() {
				rel, _ := filepath.Rel(home, path)
				written = append(written, filepath.ToSlash(rel))
			}
			return nil
		})
		if err != nil && len(written) > 0 {
			t.Fatalf("a refused import (%v) wrote %v", err, written)
		}
		if err == nil && (len(written) != 1 || !rolloutName.MatchString(written[0]) || !strings.HasSuffix(written[0], threadID+".jsonl")) {
			t.Fatalf("the import of %q wrote %v", p, written)
		}
	})
}
