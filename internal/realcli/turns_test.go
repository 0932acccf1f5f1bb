package realcli_test

import (
	"strings"
	"testing"

	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/plugin/sdk/modelserver"
)

// A text turn streams as many message chunks as the model sent deltas,
// ends end_turn, and its usage reaches the client with the model's
// numbers.
func testTextTurn(t *testing.T, c cli) {
	r := newRig(t, c)
	s := r.start()
	cl := r.dial(s)
	id := cl.newSession(r, nil)
	const answer = "The quick brown fox jumps over the lazy dog, twice over."
	reply := modelserver.Text(answer)
	reply.Usage = modelserver.Usage{InputTokens: 1200, OutputTokens: 34}
	r.script(reply)
	cl.mustPrompt(id, "say the pangram", "end_turn")

	var text strings.Builder
	chunks := 0
	var usage *journal.Usage
	for _, u := range cl.received() {
		switch u := u.Update.(type) {
		case *journal.Chunk:
			if u.Kind == journal.KindAgentMessageChunk {
				chunks++
				text.WriteString(u.Content.Text())
			}
		case *journal.Usage:
			usage = u
		}
	}
	if text.String() != answer || chunks < 5 {
		t.Errorf("the client saw %d chunks of %q; want the answer in many chunks", chunks, text.String())
	}
	if usage == nil || usage.Used < 1200 {
		t.Errorf("usage reaching the client: %+v; want the model's 1200 input tokens counted", usage)
	}
	reqs := r.srv.ModelRequests()
	if len(reqs) != 1 {
		t.Fatalf("the model was asked %d times; want once", len(reqs))
	}
	if got := reqs[0].LastUserText(); !strings.Contains(got, "say the pangram") {
		t.Errorf("the model was asked with the user text %q; want the prompt", got)
	}
}

func TestClaudeTextTurn(t *testing.T) { t.Parallel(); testTextTurn(t, claudeCLI) }
func TestCodexTextTurn(t *testing.T)  { t.Parallel(); testTextTurn(t, codexCLI) }
