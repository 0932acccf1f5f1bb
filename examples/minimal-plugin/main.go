// Command minimal-plugin is the skeleton of an agenthost plugin: an agent
// that embeds sdk.UnimplementedAgent and nothing else, served under the name
// "minimal". It builds, starts and answers the host, and every session it is
// asked to open fails with sdk.ErrNotImplemented. Copy it and implement
// NewSession, ResumeSession and Prompt one by one; README.md explains the
// rest.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/agenthost/agenthost/plugin/sdk"
)

// agent is the plugin's sdk.Agent. One plugin process serves one session,
// so this is where the conversation's state goes.
type agent struct {
	sdk.UnimplementedAgent
}

// newAgent is the sdk.Factory: it runs once, when the host first opens or
// resumes the session. Its error is the plugin's readiness failure.
func newAgent(ctx context.Context, env sdk.Environment) (sdk.Agent, error) {
	return &agent{}, nil
}

func main() {
	if err := sdk.Serve("minimal", newAgent); err != nil {
		fmt.Fprintln(os.Stderr, "minimal-plugin:", err)
		os.Exit(1)
	}
}
