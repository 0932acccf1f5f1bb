package nodeclient

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe to read while a process writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestNodeClient runs client.mjs against a real agenthost serve: it must
// create a session, stream a turn, cancel one, catch up after reconnecting
// without a gap, resume and prompt again.
func TestNodeClient(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed")
	}
	dir, err := os.MkdirTemp("", "ahnode-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "agenthost")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/agenthost").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	state := filepath.Join(dir, "s")

	serve := exec.Command(bin, "--state-dir", state, "--log-level", "debug", "serve", "--shutdown-sessions")
	var serveErr syncBuffer // read while the host still writes it
	serve.Stderr = &serveErr
	out, err := serve.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = serve.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- serve.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("agenthost serve: %v\n%s", err, serveErr.String())
			}
		case <-time.After(30 * time.Second):
			_ = serve.Process.Kill()
			t.Error("agenthost serve did not exit on SIGTERM")
		}
	}()
	line, err := bufio.NewReader(out).ReadString('\n')
	var ready struct {
		Ready  bool   `json:"ready"`
		Socket string `json:"socket"`
	}
	if err != nil || json.Unmarshal([]byte(line), &ready) != nil || !ready.Ready {
		t.Fatalf("agenthost serve printed %q (%v)\n%s", line, err, serveErr.String())
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "client.mjs", ready.Socket)
	output, err := cmd.CombinedOutput()
	text := string(output)
	if err != nil {
		t.Fatalf("node client.mjs: %v\n%s\nthe host's log:\n%s", err, text, serveErr.String())
	}
	t.Logf("node client.mjs:\n%s", text)
	for _, want := range []string{
		`^connected to .*: agenthost \S+, protocol 1$`,
		`^session \S+: created \(agent scripted\)$`,
		`(?s)prompt "count 3":\n  update seq=\d+ user_message_chunk "count 3"\n  update seq=\d+ agent_message_chunk "1"\n  update seq=\d+ agent_message_chunk "2"\n  update seq=\d+ agent_message_chunk "3"\n  stop end_turn\n`,
		`(?s)prompt "count 5 200ms", disconnecting after the first number:\n  update seq=\d+ user_message_chunk "count 5 200ms"\n  update seq=(\d+) agent_message_chunk "1"\ndisconnected; the last journal seq seen was \d+\n`,
		// The rest of the turn, though it ran on while the client was away.
		`(?s)  entry seq=\d+ agent_message_chunk "2"\n  entry seq=\d+ agent_message_chunk "3"\n  entry seq=\d+ agent_message_chunk "4"\n  entry seq=\d+ agent_message_chunk "5"\n  entry seq=\d+ stop end_turn\n`,
		`^reconnected; caught up from seq \d+: 5 entries \(seq \d+\.\.\d+\), no gap$`,
		`^session \S+: resumed$`,
		`(?s)prompt "sleep 30s", cancelled after 300 ms:\n  update seq=\d+ user_message_chunk "sleep 30s"\n`,
		`^  (stop cancelled|answered) after \d+ ms`,
		`^  journal: seq=\d+ stop cancelled$`,
		`(?s)prompt "count 2":\n  update seq=\d+ user_message_chunk "count 2"\n  update seq=\d+ agent_message_chunk "1"\n  update seq=\d+ agent_message_chunk "2"\n.*  stop end_turn\nupdates of no turn: .*\ndone\n$`,
	} {
		if !regexp.MustCompile(`(?m)` + want).MatchString(text) {
			t.Errorf("the output does not match %s", want)
		}
	}
	if strings.Contains(text, "GAP") {
		t.Error("the client saw a gap")
	}
}
