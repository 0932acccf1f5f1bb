// Command agenthost-plugin-codex serves the codex agent of package
// plugins/codex under the name "codex": one `codex app-server` per session,
// driven over JSON-RPC on stdio. A host starts it; run by hand with
// AGENTHOST_PLUGIN_DEBUG=1 it prints a reattach config and serves until
// interrupted.
package main

import (
	"fmt"
	"os"

	"github.com/agenthost/agenthost/plugin/sdk"
	"github.com/agenthost/agenthost/plugins/codex"
)

func main() {
	if err := sdk.Serve("codex", codex.New, sdk.WithCapabilities(codex.Capabilities())); err != nil {
		fmt.Fprintln(os.Stderr, "agenthost-plugin-codex:", err)
		os.Exit(1)
	}
}
