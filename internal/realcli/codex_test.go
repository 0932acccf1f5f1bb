package realcli_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coder/acp-go-sdk"

	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/plugin/sdk/modelserver"
)

// The real codex CLI (codex app-server, driven by the codex plugin) through
// agenthost serve's socket API. The text turn is TestCodexTextTurn in
// turns_test.go.
//
// Codex's default model has one tool, the code-mode "exec": JavaScript
// that calls tools.exec_command and tools.apply_patch. That is the path a
// user's turns take, so the tool scenarios script it (codexExec) rather
// than the exec_command function tool codex offers only to models it has
// no metadata for.

// A command that needs approval asks the API client, with the command as
// the title, kind execute and the command in rawInput. Allowed, it runs:
// its file appears in the workspace, its output is in the journal, and
// the model's next request carries it as the exec call's output.
func TestCodexPermissionAllow(t *testing.T) {
	t.Parallel()
	testCodexPermission(t, true)
}

// Rejected, nothing runs, the tool call fails, and the model's next
// request says the user rejected it.
func TestCodexPermissionReject(t *testing.T) {
	t.Parallel()
	testCodexPermission(t, false)
}

func testCodexPermission(t *testing.T, allow bool) {
	r := newRig(t, codexCLI)
	s := r.start()
	c := r.dial(s)
	answer := acp.PermissionOptionKindRejectOnce
	if allow {
		answer = acp.PermissionOptionKindAllowOnce
	}
	c.answer = func(acp.RequestPermissionRequest) acp.PermissionOptionKind { return answer }
	id := c.newSession(r, askingOptions)
	const cmd = "printf made-by-codex > made.txt && echo wrote-made"
	r.script(codexExec(cmd), modelserver.Text("All done."))
	c.mustPrompt(id, "make the file", "end_turn")

	asked := c.permissionRequests()
	if len(asked) != 1 {
		t.Fatalf("%d permission requests reached the client; want 1", len(asked))
	}
	tc := asked[0].ToolCall
	var input struct {
		Command string `json:"command"`
		Cwd     string `json:"cwd"`
	}
	raw, _ := json.Marshal(tc.RawInput)
	if err := json.Unmarshal(raw, &input); err != nil || !strings.Contains(input.Command, cmd) || input.Cwd != r.workspace {
		t.Errorf("the request's rawInput %s; want the command and the workspace", raw)
	}
	if tc.Title == nil || !strings.Contains(*tc.Title, "printf made-by-codex") || tc.Kind == nil || *tc.Kind != acp.ToolKindExecute {
		t.Errorf("the request's title %v, kind %v; want the command, execute", deref(tc.Title), deref(tc.Kind))
	}

	file, ferr := os.ReadFile(filepath.Join(r.workspace, "made.txt"))
	updates := c.toolUpdates()[string(tc.ToolCallId)]
	var final *journal.ToolCallUpdate
	if len(updates) > 0 {
		final = updates[len(updates)-1]
	}
	next := r.nextRequest(2)
	results := next.ToolResults()
	if len(results) != 1 {
		t.Fatalf("the model's next request carries %d tool results; want 1: %+v", len(results), next.Messages)
	}
	if allow {
		if ferr != nil || string(file) != "made-by-codex" {
			t.Errorf("made.txt: %q, %v; want the approved command to have written it", file, ferr)
		}
		if final == nil || final.Status != "completed" || len(final.Content) == 0 || !strings.Contains(final.Content[0].Text(), "wrote-made") {
			t.Errorf("the tool call's last update %+v; want completed with the command's output", final)
		}
		if !strings.Contains(results[0].Text, "wrote-made") {
			t.Errorf("the tool result the model got: %q; want the command's output", results[0].Text)
		}
		r.assertJournalHas(s, id, "wrote-made")
	} else {
		if !errors.Is(ferr, os.ErrNotExist) {
			t.Errorf("made.txt: %q, %v; want no file: the command was rejected", file, ferr)
		}
		if final == nil || final.Status != "failed" {
			t.Errorf("the tool call's last update %+v; want failed", final)
		}
		if !strings.Contains(results[0].Text, "rejected by user") {
			t.Errorf("the tool result the model got: %q; want it told the user rejected the command", results[0].Text)
		}
	}
	if got := c.messageText(); got != "All done." {
		t.Errorf("the turn's message %q", got)
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
