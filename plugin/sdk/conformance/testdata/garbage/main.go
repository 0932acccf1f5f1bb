// Command garbage is a broken plugin for the conformance kit's tests: it prints to
// stdout before serving, so the host reads that line instead of go-plugin's
// handshake line.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/agenthost/agenthost/plugin/sdk"
)

type agent struct{ sdk.UnimplementedAgent }

func main() {
	fmt.Println("hello from a plugin that talks on stdout")
	err := sdk.Serve("garbage", func(context.Context, sdk.Environment) (sdk.Agent, error) { return agent{}, nil })
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
