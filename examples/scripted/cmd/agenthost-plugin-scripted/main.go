// Command agenthost-plugin-scripted serves the scripted agent of package
// examples/scripted/scripted: a deterministic agent, driven by its prompts,
// for testing hosts without a provider. A host starts it; run by hand with
// AGENTHOST_PLUGIN_DEBUG=1 it prints a reattach config and serves until
// interrupted. With AGENTHOST_SCRIPTED_NO_EXPORT=1 it serves the agent
// without provider state export (scripted.NewLocal).
package main

import (
	"fmt"
	"os"

	"github.com/agenthost/agenthost/examples/scripted/scripted"
	"github.com/agenthost/agenthost/plugin/sdk"
)

func main() {
	factory := scripted.New
	if os.Getenv(scripted.EnvNoExport) == "1" {
		factory = scripted.NewLocal
	}
	if err := sdk.Serve("scripted", factory, sdk.WithCapabilities(scripted.Capabilities())); err != nil {
		fmt.Fprintln(os.Stderr, "agenthost-plugin-scripted:", err)
		os.Exit(1)
	}
}
