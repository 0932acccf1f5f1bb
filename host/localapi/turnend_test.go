package localapi_test

import (
	"context"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	acp "github.com/coder/acp-go-sdk"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/leasestore"
)

// A prompt whose plugin is SIGKILLed mid-turn is answered: CodeTurnFailed
// naming the plugin's death, and the turn's stop (reason failed, with the
// cause) is journaled, so a client that loads the session later sees the
// turn end too.
func TestPromptWhosePluginIsKilledMidTurnIsAnsweredFailed(t *testing.T) {
	t.Parallel()
	sock, h := serve(t)
	c := dial(t, sock)
	c.mustCall(api.MethodInitialize, acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber}, nil)
	var created acp.NewSessionResponse
	c.mustCall(api.MethodSessionNew, acp.NewSessionRequest{Cwd: t.TempDir(), McpServers: []acp.McpServer{}}, &created)
	id := string(created.SessionId)
	answer := make(chan message, 1)
	go func() {
		answer <- c.call(api.MethodSessionPrompt, acp.PromptRequest{SessionId: created.SessionId, Prompt: []acp.ContentBlock{acp.TextBlock("count 100000 10ms")}})
	}()
	// The plugin runs the turn once its first chunk arrives.
	for n := 1; ; n++ {
		if strings.Contains(string(c.waitNotes(api.MethodSessionUpdate, n)[n-1].Params), "agent_message_chunk") {
			break
		}
	}
	s, ok := h.Session(id)
	if !ok {
		t.Fatal("the session is not running")
	}
	if err := syscall.Kill(s.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var m message
	select {
	case m = <-answer:
	case <-s.Done():
		select {
		case m = <-answer:
		case <-time.After(10 * time.Second):
			t.Fatal("the session ended, but the prompt whose plugin was killed is still unanswered 10s later")
		}
	}
	if m.Error == nil || m.Error.Code != api.CodeTurnFailed || !strings.Contains(m.Error.Message, "SIGKILL") {
		t.Fatalf("the prompt whose plugin was killed: result %s error %+v, want CodeTurnFailed naming SIGKILL", m.Result, m.Error)
	}
	var stops []*journal.Stop
	err := h.Store().Replay(context.Background(), id, 0, func(e leasestore.Entry) error {
		if e.Kind == leasestore.KindStop {
			r, err := journal.Decode(e)
			if err != nil {
				return err
			}
			stops = append(stops, r.(*journal.Stop))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(stops) != 1 || stops[0].StopReason != "failed" || !strings.Contains(stops[0].Error, "SIGKILL") {
		t.Fatalf("journaled stops %+v, want one, failed, naming SIGKILL", stops)
	}
}

// Two clients resuming (and loading) one stopped session at once both get
// it: the one that loses the race for its lease joins the session the
// other started, with its modes and config options, never an error.
func TestConcurrentResumesJoinOneSession(t *testing.T) {
	t.Parallel()
	sock, h := serve(t)
	first := dial(t, sock)
	first.mustCall(api.MethodInitialize, acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber}, nil)
	var created acp.NewSessionResponse
	first.mustCall(api.MethodSessionNew, acp.NewSessionRequest{Cwd: t.TempDir(), McpServers: []acp.McpServer{}}, &created)
	id := string(created.SessionId)
	clients := make([]*rpcClient, 3)
	for i := range clients {
		clients[i] = dial(t, sock)
		clients[i].mustCall(api.MethodInitialize, acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber}, nil)
	}
	for round := range 3 {
		first.mustCall(api.MethodStop, api.Params{SessionID: id}, nil)
		if _, ok := h.Session(id); ok {
			t.Fatal("the session still runs after _agenthost/stop")
		}
		var wg sync.WaitGroup
		answers := make([]message, len(clients))
		for i, c := range clients {
			wg.Go(func() {
				if i == 0 {
					answers[i] = c.call(api.MethodSessionLoad, acp.LoadSessionRequest{SessionId: created.SessionId, Cwd: t.TempDir(), McpServers: []acp.McpServer{}})
					return
				}
				answers[i] = c.call(api.MethodSessionResume, acp.ResumeSessionRequest{SessionId: created.SessionId, Cwd: t.TempDir()})
			})
		}
		wg.Wait()
		for i, m := range answers {
			if m.Error != nil {
				t.Fatalf("round %d: client %d's concurrent resume: error %d %q", round, i, m.Error.Code, m.Error.Message)
			}
			if !strings.Contains(string(m.Result), `"modes"`) || !strings.Contains(string(m.Result), `"configOptions"`) {
				t.Errorf("round %d: client %d's resume answered without the session's modes and config options: %s", round, i, m.Result)
			}
		}
		if _, ok := h.Session(id); !ok {
			t.Fatalf("round %d: the session does not run after the resumes", round)
		}
	}
}
