// Command conforming is a correct plugin for the conformance kit's tests, built on
// plugin/sdk, that speaks a prompt language of its own, so the tests
// exercise conformance.WithPrompts: "stream N" streams N chunks 10 ms apart,
// "hold" runs until cancelled. Its turns start a child process (sleep) in
// the plugin's process group, as an agent that drives a CLI does, and stop
// it when they end.
package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"

	"github.com/agenthost/agenthost/plugin/sdk"
	"github.com/agenthost/agenthost/plugin/sdk/conformance/testdata/streamlang"
)

type agent struct{}

func (agent) NewSession(context.Context, sdk.NewSessionRequest) (sdk.SessionInfo, error) {
	return sdk.SessionInfo{Handle: "conforming-handle"}, nil
}

func (agent) ResumeSession(_ context.Context, req sdk.ResumeSessionRequest) (sdk.SessionInfo, error) {
	return sdk.SessionInfo{Handle: req.Handle}, nil
}

func (agent) AgentVersion() string { return "0.0.1" }

func (agent) Prompt(ctx context.Context, req sdk.PromptRequest, turn *sdk.Turn) (sdk.StopReason, error) {
	// The child lives as long as the turn: exec.CommandContext kills it.
	if path, err := exec.LookPath("sleep"); err == nil {
		child := exec.CommandContext(ctx, path, "60")
		if err := child.Start(); err == nil {
			defer child.Wait()
			defer child.Process.Kill()
		}
	}
	return streamlang.Run(ctx, "conforming", req.Text(), turn)
}

func main() {
	err := sdk.Serve("conforming", func(context.Context, sdk.Environment) (sdk.Agent, error) { return agent{}, nil })
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
