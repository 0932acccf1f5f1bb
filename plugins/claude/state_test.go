package claude

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/internal/logtest"
	"github.com/agenthost/agenthost/plugin/sdk"
	"github.com/agenthost/agenthost/plugins/internal/plugintest"
	"github.com/agenthost/agenthost/plugins/internal/portable"
)

const stateID = "7ae65b20-5758-4ff8-86b5-04a056ec858f"

// stateAgentAt is an agent whose CLI environment names config dir dir,
// as an open session's does.
func stateAgentAt(t *testing.T, dir string) *agent {
	return &agent{log: logtest.New(t), env: []string{"CLAUDE_CONFIG_DIR=" + dir}, rejected: map[string]bool{}}
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

// machineA holds a transcript as claude 2.1.332 lays it out, with a
// large tool output whose path the conversation names, and a line the
// CLI is still writing.
func machineA(t *testing.T) (dir, transcript string) {
	dir = filepath.Join(t.TempDir(), "a", ".claude")
	proj := filepath.Join(dir, "projects", "-home-a-work")
	out := filepath.Join(proj, stateID, "tool-results", "b1.txt")
	transcript = `{"type":"queue-operation","sessionId":"` + stateID + `"}` + "\n" +
		`{"type":"user","cwd":"/home/a/work","sessionId":"` + stateID + `","message":{"role":"user","content":"QUESTION-ONE"}}` + "\n" +
		`{"type":"user","sessionId":"` + stateID + `","message":{"content":[{"type":"tool_result","content":"Full output saved to: ` + out + `"}]}}` + "\n"
	writeFile(t, filepath.Join(proj, stateID+".jsonl"), transcript+`{"type":"assistant","sessionId":"`)
	writeFile(t, out, "1\n2\n3\n")
	writeFile(t, filepath.Join(proj, stateID, "subagents", "agent-a1.jsonl"), `{"sessionId":"`+stateID+`","isSidechain":true}`+"\n")
	writeFile(t, filepath.Join(proj, "other-session.jsonl"), "{}\n")
	if err := os.Symlink("/etc/passwd", filepath.Join(proj, stateID, "link")); err != nil {
		t.Fatal(err)
	}
	return dir, transcript
}

func TestStateRoundTrip(t *testing.T) {
	ctx := context.Background()
	dirA, transcript := machineA(t)
	state, err := stateAgentAt(t, dirA).ExportState(ctx, stateID)
	if err != nil {
		t.Fatal(err)
	}
	s, err := portable.Decode(state, "claude", stateID)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range s.Files {
		names = append(names, f.Path)
	}
	want := []string{
		"projects/-home-a-work/" + stateID + "/subagents/agent-a1.jsonl",
		"projects/-home-a-work/" + stateID + "/tool-results/b1.txt",
		"projects/-home-a-work/" + stateID + ".jsonl",
	}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Fatalf("exported %v, want %v (no symbolic link, no other session)", names, want)
	}
	if string(s.Files[2].Data) != transcript {
		t.Errorf("the exported transcript kept the unfinished line: %q", s.Files[2].Data)
	}

	dirB := filepath.Join(t.TempDir(), "b", ".claude")
	b := stateAgentAt(t, dirB)
	if err := b.ImportState(ctx, stateID, state); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dirB, "projects", "-home-a-work", stateID+".jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	oldOut := filepath.Join(dirA, "projects", "-home-a-work", stateID, "tool-results", "b1.txt")
	newOut := filepath.Join(dirB, "projects", "-home-a-work", stateID, "tool-results", "b1.txt")
	if !bytes.Contains(got, []byte(newOut)) || bytes.Contains(got, []byte(oldOut)) || !bytes.Contains(got, []byte(`"cwd":"/home/a/work"`)) {
		t.Errorf("imported transcript, want the tool output's path rewritten and nothing else:\n%s", got)
	}
	if b, _ := os.ReadFile(newOut); string(b) != "1\n2\n3\n" {
		t.Errorf("tool output %q", b)
	}
	// Again: the same state is already in place.
	if err := b.ImportState(ctx, stateID, state); err != nil {
		t.Fatalf("a second import of the same state: %v", err)
	}
	// B's export is A's, with B's paths.
	again, err := b.ExportState(ctx, stateID)
	if err != nil {
		t.Fatal(err)
	}
	s2, _ := portable.Decode(again, "claude", stateID)
	if s2.Meta[metaConfigDir] != dirB || len(s2.Files) != 3 {
		t.Errorf("B's export: %v, %d files", s2.Meta, len(s2.Files))
	}
}

func TestStateImportKeepsOneCopy(t *testing.T) {
	ctx := context.Background()
	dirA, _ := machineA(t)
	state, err := stateAgentAt(t, dirA).ExportState(ctx, stateID)
	if err != nil {
		t.Fatal(err)
	}
	dirB := filepath.Join(t.TempDir(), ".claude")
	// B ran the session before, in its own workspace, and then on turns
	// the export lacks.
	mine := filepath.Join(dirB, "projects", "-home-b-work", stateID+".jsonl")
	writeFile(t, mine, `{"type":"user","sessionId":"`+stateID+`","message":{"content":"ON B"}}`+"\n")
	if err := stateAgentAt(t, dirB).ImportState(ctx, stateID, state); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dirB, "projects", "-home-a-work")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a second copy was written beside B's: %v", err)
	}
	got, _ := os.ReadFile(mine)
	if !bytes.Contains(got, []byte("QUESTION-ONE")) {
		t.Errorf("B's transcript is not the import: %s", got)
	}
	aside, _ := filepath.Glob(mine + ".displaced-*")
	if len(aside) != 1 {
		t.Fatalf("B's diverging copy was not kept: %v", aside)
	}
	if b, _ := os.ReadFile(aside[0]); !bytes.Contains(b, []byte("ON B")) {
		t.Errorf("kept copy %q", b)
	}
	if tool, _ := os.ReadFile(filepath.Join(dirB, "projects", "-home-b-work", stateID, "tool-results", "b1.txt")); string(tool) != "1\n2\n3\n" {
		t.Errorf("the tool output did not follow the transcript: %q", tool)
	}
}

func TestStateImportRefuses(t *testing.T) {
	ctx := context.Background()
	dirA, _ := machineA(t)
	state, err := stateAgentAt(t, dirA).ExportState(ctx, stateID)
	if err != nil {
		t.Fatal(err)
	}
	dirB := filepath.Join(t.TempDir(), ".claude")
	b := stateAgentAt(t, dirB)

	// Another conversation's transcript at the target is never overwritten.
	theirs := filepath.Join(dirB, "projects", "-home-a-work", stateID+".jsonl")
	writeFile(t, theirs, `{"type":"user","sessionId":"11111111-2222-4333-8444-555555555555"}`+"\n")
	if err := b.ImportState(ctx, stateID, state); err == nil || !strings.Contains(err.Error(), "another conversation's transcript, not overwritten") {
		t.Errorf("import over another conversation: %v", err)
	}
	if got, _ := os.ReadFile(theirs); !bytes.Contains(got, []byte("11111111")) {
		t.Errorf("the other conversation's transcript was changed: %s", got)
	}
	if _, err := os.Stat(filepath.Join(dirB, "projects", "-home-a-work", stateID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused import wrote the session's directory: %v", err)
	}
	os.Remove(theirs)

	forged := func(files ...portable.File) []byte {
		b, err := portable.Encode(portable.State{Agent: "claude", Handle: stateID, Files: files})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	line := []byte(`{"sessionId":"` + stateID + `"}` + "\n")
	for _, tt := range []struct {
		name   string
		handle string
		state  []byte
		want   string
	}{
		{"not a uuid", "../../x", state, "not a Claude session id"},
		{"another session", "11111111-2222-4333-8444-555555555555", state, "not \"11111111"},
		{"garbage", stateID, []byte("garbage"), "not a provider state envelope"},
		{"codex's", stateID, func() []byte {
			b, _ := portable.Encode(portable.State{Agent: "codex", Handle: stateID, Files: []portable.File{{Path: "x", Data: line}}})
			return b
		}(), `"codex"'s, not "claude"'s`},
		{"outside projects", stateID, forged(portable.File{Path: "projects/p/" + stateID + ".jsonl", Data: line}, portable.File{Path: "settings.json", Data: line}), "not inside projects"},
		{"another session's file", stateID, forged(portable.File{Path: "projects/p/" + stateID + ".jsonl", Data: line}, portable.File{Path: "projects/p/other.jsonl", Data: line}), "neither the transcript"},
		{"two projects", stateID, forged(portable.File{Path: "projects/p/" + stateID + ".jsonl", Data: line}, portable.File{Path: "projects/q/" + stateID + "/x", Data: line}), "two project directories"},
		{"no transcript", stateID, forged(portable.File{Path: "projects/p/" + stateID + "/x", Data: line}), "no transcript"},
		{"foreign transcript", stateID, forged(portable.File{Path: "projects/p/" + stateID + ".jsonl", Data: []byte(`{"sessionId":"x"}` + "\n")}), "belongs to session x"},
		{"oversized", stateID, make([]byte, portable.MaxStateBytes+1), "too large"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := b.ImportState(ctx, tt.handle, tt.state)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ImportState: %v, want %q", err, tt.want)
			}
		})
	}
	if ents, _ := os.ReadDir(filepath.Join(dirB, "projects")); len(ents) > 1 {
		t.Errorf("refused imports wrote files: %v", ents)
	}

	open := stateAgentAt(t, dirB)
	open.opened = true
	if err := open.ImportState(ctx, stateID, state); err == nil || !strings.Contains(err.Error(), "before its session opens") {
		t.Errorf("import into an open session: %v", err)
	}
	if _, err := stateAgentAt(t, dirB).ExportState(ctx, "11111111-2222-4333-8444-555555555555"); err == nil || !strings.Contains(err.Error(), "no transcript") {
		t.Errorf("export of an unknown session: %v", err)
	}
}

// ExportState waits for the transcript to hold the last line the CLI
// printed: the CLI writes it behind its output.
func TestStateExportAwaitsTheLastLine(t *testing.T) {
	dirA, _ := machineA(t)
	a := stateAgentAt(t, dirA)
	a.handle = stateID
	a.noteLine(&message{Type: "assistant", UUID: "not-written-yet"})
	a.noteLine(&message{Type: "assistant", UUID: "a-sub-agent's", ParentToolUseID: "toolu_1"})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := a.ExportState(ctx, stateID); !errors.Is(err, context.Canceled) {
		t.Errorf("export before the CLI wrote the line it printed: %v", err)
	}
	writeFile(t, filepath.Join(dirA, "projects", "-home-a-work", stateID+".jsonl"),
		`{"type":"assistant","uuid":"not-written-yet","sessionId":"`+stateID+`"}`+"\n")
	if _, err := a.ExportState(context.Background(), stateID); err != nil {
		t.Errorf("export once the transcript holds the line: %v", err)
	}
}

// FuzzImportState: whatever files a state names, an import writes only
// under projects/ of the config dir, and refuses what it does not write.
func FuzzImportState(f *testing.F) {
	f.Add("projects/p/"+stateID+".jsonl", "projects/p/"+stateID+"/tool-results/x.txt", []byte(`{"sessionId":"`+stateID+`"}`+"\n"))
	f.Add("projects/p/"+stateID+".jsonl", "settings.json", []byte(`{"sessionId":"`+stateID+`"}`+"\n"))
	f.Add("projects/../"+stateID+".jsonl", "projects/p/x", []byte("{}"))
	f.Fuzz(func(t *testing.T, p1, p2 string, data []byte) {
		state, err := portable.Encode(portable.State{Agent: "claude", Handle: stateID, Meta: map[string]string{metaConfigDir: "/elsewhere"},
			Files: []portable.File{{Path: p1, Data: data}, {Path: p2, Data: data}}})
		if err != nil {
			return
		}
		dir := t.TempDir()
		a := &agent{log: logtest.New(t), env: []string{"CLAUDE_CONFIG_DIR=" + dir}}
		err = a.ImportState(context.Background(), stateID, state)
		var written []string
		filepath.WalkDir(dir, func(p string, d os.DirEntry, _ error) error {
			if d != nil && !d.IsDir() {
				rel, _ := filepath.Rel(dir, p)
				written = append(written, filepath.ToSlash(rel))
			}
			return nil
		})
		if err != nil && len(written) > 0 {
			t.Fatalf("a refused import (%v) wrote %v", err, written)
		}
		for _, w := range written {
			if !strings.HasPrefix(w, "projects/") || strings.Contains(w, "..") {
				t.Fatalf("the import of %q, %q wrote %s", p1, p2, w)
			}
		}
	})
}

// With the fake CLI: a session's state moves to another config dir and
// workspace and resumes there; the export waits for the transcript to
// hold the last line printed, which the fake writes first as the CLI
// does.
func TestStateMovesWithTheFake(t *testing.T) {
	a := newFixture(t)
	ha := a.start(t)
	handle := a.open(t, ha, nil)
	if _, stop := ha.Run("hello", wait); stop.StopReason != "end_turn" {
		t.Fatalf("turn on A: %v", stop)
	}
	exported, state, err := ha.ExportState(t.Context())
	if err != nil || exported != handle {
		t.Fatalf("ExportState: %q %v", exported, err)
	}
	plugintest.CloseWithin(ha, wait)

	b := newFixture(t)
	hb := b.start(t)
	if info, err := hb.ResumeSessionWithState(t.Context(), sdk.ResumeSessionRequest{Workspace: b.workspace, Handle: handle}, state); err != nil || info.Handle != handle {
		t.Fatalf("resume on B: %+v %v", info, err)
	}
	if _, stop := hb.Run("hello", wait); stop.StopReason != "end_turn" {
		t.Fatalf("turn on B: %v", stop)
	}
	if got := findTranscript(b.configDir, handle); len(got) != 1 {
		t.Errorf("B's transcripts: %v", got)
	}
}
