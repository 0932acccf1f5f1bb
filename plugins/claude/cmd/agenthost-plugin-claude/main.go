// Command agenthost-plugin-claude serves the Claude Code agent of package
// plugins/claude as the agenthost plugin "claude": agenthost starts one
// such process per session, and the plugin drives one long-lived `claude`
// CLI in stream-json mode for it. Run by hand with AGENTHOST_PLUGIN_DEBUG=1
// it prints a reattach config and serves until interrupted.
package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/agenthost/agenthost/plugin/sdk"
	"github.com/agenthost/agenthost/plugins/claude"
)

func main() {
	// Serve closes the agent on SIGTERM and on the Close call, but not
	// when a go-plugin client shuts the plugin down (its Kill): close it
	// here then, so the CLI gets its stdin EOF and flushes its transcript
	// instead of dying by its parent-death signal. Close is idempotent.
	var mu sync.Mutex
	var agent sdk.Agent
	factory := func(ctx context.Context, env sdk.Environment) (sdk.Agent, error) {
		a, err := claude.New(ctx, env)
		mu.Lock()
		agent = a
		mu.Unlock()
		return a, err
	}
	err := sdk.Serve("claude", factory, sdk.WithCapabilities(claude.Capabilities()))
	mu.Lock()
	a := agent
	mu.Unlock()
	if c, ok := a.(sdk.Closer); ok {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = c.Close(ctx)
		cancel()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "agenthost-plugin-claude:", err)
		os.Exit(1)
	}
}
