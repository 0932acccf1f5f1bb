// Command escapes is a broken plugin for the conformance kit's tests, built on
// plugin/sdk: every turn starts a child (sleep 60) in a new session, out of
// the plugin's process group, and never stops it, so stopping the plugin's
// group leaves the child behind. The child still carries the spawn token.
package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"github.com/agenthost/agenthost/plugin/sdk"
)

type agent struct{ sdk.UnimplementedAgent }

func (agent) NewSession(context.Context, sdk.NewSessionRequest) (sdk.SessionInfo, error) {
	return sdk.SessionInfo{Handle: "escapes-handle"}, nil
}

func (agent) Prompt(ctx context.Context, _ sdk.PromptRequest, turn *sdk.Turn) (sdk.StopReason, error) {
	child := exec.Command("sleep", "60")
	child.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := child.Start(); err != nil {
		return "", err
	}
	turn.Message("started a child that escapes")
	return sdk.StopEndTurn, nil
}

func main() {
	err := sdk.Serve("escapes", func(context.Context, sdk.Environment) (sdk.Agent, error) { return agent{}, nil })
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
