package main

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/agenthost/agenthost/plugin/sdk/sdktest"
)

// The plugin passes the conformance kit, with prompts of its own language.
func TestConformance(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "agenthost-plugin-minimal")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	sdktest.Run(t, bin, sdktest.WithPrompts(sdktest.Prompts{
		Stream: "hello world",
		Hold:   "wait",
		Replay: "one two three four five six seven eight nine ten",
	}))
}
