// Command agenthost-plugin-scripted serves the scripted agent of package
// examples/scripted/scripted: a deterministic agent, driven by its prompts,
// for testing hosts without a provider. A host starts it; run by hand with
// AGENTHOST_PLUGIN_DEBUG=1 it prints a reattach config and serves until
// interrupted.
package main

import (
	"fmt"
	"os"

	"github.com/agenthost/agenthost/examples/scripted/scripted"
	"github.com/agenthost/agenthost/plugin/sdk"
)

func main() {
	if err := sdk.Serve("scripted", scripted.New, sdk.WithCapabilities(scripted.Capabilities())); err != nil {
		fmt.Fprintln(os.Stderr, "agenthost-plugin-scripted:", err)
		os.Exit(1)
	}
}
