package main

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/agenthost/agenthost/plugin/sdk/sdktest"
)

// The plugin passes the conformance kit with its default prompts, which
// suit an agent that echoes and holds its turn on "wait". An agent of
// another language passes its own: sdktest.WithPrompts(sdktest.Prompts{
// Stream: "say hello", Hold: "think until I stop you", Replay: "count slowly to ten"}).
func TestConformance(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "agenthost-plugin-minimal")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	sdktest.Run(t, bin)
}
