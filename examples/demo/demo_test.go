package main

import (
	"path/filepath"
	"testing"
)

// TestDemo runs the demo `make demo` runs, with its binary built into a
// temporary directory: a change that breaks what the demo checks (the
// session outliving its killed host, every plugin update journaled once)
// fails here, not first in a user's hands.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("the demo kills and restarts a real host: not in -short")
	}
	d := &demo{bin: filepath.Join(t.TempDir(), "agenthost")}
	err := d.run()
	d.cleanup()
	if err != nil {
		t.Fatalf("make demo fails: %v", err)
	}
}
