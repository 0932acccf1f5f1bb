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
	"strconv"
	"strings"
	"time"

	"github.com/agenthost/agenthost/plugin/sdk"
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
	words := strings.Fields(req.Text())
	switch {
	case len(words) == 2 && words[0] == "stream":
		n, err := strconv.Atoi(words[1])
		if err != nil {
			return "", fmt.Errorf("conforming: stream N: %v", err)
		}
		for i := 1; i <= n; i++ {
			select {
			case <-ctx.Done():
				return sdk.StopCancelled, nil
			case <-time.After(10 * time.Millisecond):
			}
			turn.Message(strconv.Itoa(i))
		}
		return sdk.StopEndTurn, nil
	case len(words) == 1 && words[0] == "hold":
		<-ctx.Done()
		return sdk.StopCancelled, nil
	}
	return "", fmt.Errorf("conforming: unknown prompt %q", req.Text())
}

func main() {
	err := sdk.Serve("conforming", func(context.Context, sdk.Environment) (sdk.Agent, error) { return agent{}, nil })
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
