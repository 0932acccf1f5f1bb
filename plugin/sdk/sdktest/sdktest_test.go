package sdktest

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"go.uber.org/goleak"

	"github.com/agenthost/agenthost/plugin/sdk/conformance"
)

// markerVar is set in this test process, so every process the kit starts
// from it inherits it: a process carrying it after a test is a leak.
const markerVar = "SDKTEST_SELFTEST_MARKER"

var marker = rand.Text()

func TestMain(m *testing.M) {
	os.Setenv(markerVar, marker)
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) {
		if scriptedBin.dir != "" {
			os.RemoveAll(scriptedBin.dir)
		}
	}))
}

// leftovers lists live processes whose environment holds the marker.
func leftovers() []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !bytes.Contains(b, []byte(markerVar+"="+marker)) {
			continue
		}
		if st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil {
			if i := bytes.LastIndexByte(st, ')'); i > 0 && i+2 < len(st) && (st[i+2] == 'Z' || st[i+2] == 'X') {
				continue
			}
		}
		out = append(out, pid)
	}
	return out
}

// TestScripted runs the kit through Run, with its default prompts, against
// the scripted example plugin, which every check must pass.
func TestScripted(t *testing.T) {
	Run(t, scriptedBinary(t))
	if left := leftovers(); len(left) > 0 {
		for _, pid := range left {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		t.Errorf("processes started by the kit are still running: %v", left)
	}
}

// The re-exports are the conformance package's own values.
func TestReexports(t *testing.T) {
	var _ conformance.Option = WithEnv("A=B")
	var _ conformance.Result = Result{}
	if ErrNotRun != conformance.ErrNotRun || SessionID != conformance.SessionID || SpawnTokenVar != conformance.SpawnTokenVar {
		t.Error("sdktest's values differ from conformance's")
	}
	if DefaultPrompts() != conformance.DefaultPrompts() {
		t.Error("DefaultPrompts differs")
	}
	if got := fmt.Sprint(len(Check(t.Context(), "/nonexistent/plugin"))); got != fmt.Sprint(len(conformance.Names())) {
		t.Errorf("Check returned %s results", got)
	}
}
