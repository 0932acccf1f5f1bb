package sdktest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/agenthost/agenthost/internal/logtest"
	"github.com/agenthost/agenthost/plugin/sdk"
)

var scriptedBin struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// scriptedBinary builds the scripted example plugin, once per test run.
func scriptedBinary(t *testing.T) string {
	t.Helper()
	b := &scriptedBin
	b.once.Do(func() {
		if b.dir, b.err = os.MkdirTemp("", "sdktest-"); b.err != nil {
			return
		}
		b.path = filepath.Join(b.dir, "agenthost-plugin-scripted")
		out, err := exec.Command("go", "build", "-o", b.path, "../../../examples/scripted/cmd/agenthost-plugin-scripted").CombinedOutput()
		if err != nil {
			b.err = err
			t.Logf("go build:\n%s", out)
		}
	})
	if b.err != nil {
		t.Fatalf("build the scripted plugin: %v", b.err)
	}
	return b.path
}

// The scripted plugin binary, driven in a process of its own: it gets the
// test's environment, its logs reach the harness's logger, and a test may
// kill it.
func TestProcessHarness(t *testing.T) {
	bin := scriptedBinary(t)
	t.Setenv("SDKTEST_PROCESS_HARNESS", "from the test")
	logs := &logtest.Buffer{}
	h := NewProcessHarness(t, bin, WithAgentLogger(hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Info})))
	ctx := t.Context()

	id, err := h.Identify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if id.PID == os.Getpid() || id.PID <= 0 || id.AgentName != "scripted" || id.Fence != 1 || id.SessionID != SessionID {
		t.Errorf("identity: %+v", id)
	}
	environ, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(id.PID), "environ"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(environ, []byte("\x00SDKTEST_PROCESS_HARNESS=from the test\x00")) {
		t.Errorf("the plugin's environment lacks the test's variable")
	}
	if _, err := h.NewSession(ctx, sdk.NewSessionRequest{Workspace: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	if ups, stop := h.Run("count 3", wait); stop.StopReason != string(sdk.StopEndTurn) || Messages(ups) != "123" {
		t.Errorf("count 3: %s", Describe(ups))
	}
	// go-plugin relays the plugin's log lines as they come.
	for deadline := time.Now().Add(wait); !strings.Contains(logs.String(), "new session"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the plugin's log did not reach the logger:\n%s", logs)
		}
	}

	// Killed, the plugin's stream ends and its calls fail; the cleanup
	// copes.
	if _, err := h.Prompt(ctx, "sleep 1m"); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(id.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for {
		if _, ok := h.Next(wait); !ok {
			break
		}
	}
	// Next also gives up when nothing arrives in time: the stream must
	// have ended, not gone quiet.
	h.mu.Lock()
	ended := h.ended
	h.mu.Unlock()
	if ended == nil {
		t.Error("the update stream did not end when its plugin was killed")
	}
	if _, err := h.Identify(ctx); err == nil {
		t.Error("Identify succeeded after the plugin was killed")
	}
}
