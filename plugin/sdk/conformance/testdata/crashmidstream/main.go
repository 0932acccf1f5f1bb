// Command crashmidstream is a broken plugin for the conformance kit's tests, built on
// plugin/sdk: every turn streams two messages, then the process exits with
// status 3.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/agenthost/agenthost/plugin/sdk"
)

type agent struct{ sdk.UnimplementedAgent }

func (agent) NewSession(context.Context, sdk.NewSessionRequest) (sdk.SessionInfo, error) {
	return sdk.SessionInfo{Handle: "crashmidstream-handle"}, nil
}

func (agent) Prompt(_ context.Context, _ sdk.PromptRequest, turn *sdk.Turn) (sdk.StopReason, error) {
	turn.Message("one")
	turn.Message("two")
	time.Sleep(100 * time.Millisecond) // let the host receive them
	os.Exit(3)
	return sdk.StopEndTurn, nil
}

func main() {
	err := sdk.Serve("crashmidstream", func(context.Context, sdk.Environment) (sdk.Agent, error) { return agent{}, nil })
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
