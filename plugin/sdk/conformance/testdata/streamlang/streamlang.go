// Package streamlang is the prompt language of the kit's test plugins
// (conforming, capable): "stream N" streams N chunks 10 ms apart, "hold"
// runs until cancelled.
package streamlang

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/agenthost/agenthost/plugin/sdk"
)

// Run runs the turn of prompt text; name prefixes its errors.
func Run(ctx context.Context, name, text string, turn *sdk.Turn) (sdk.StopReason, error) {
	words := strings.Fields(text)
	switch {
	case len(words) == 2 && words[0] == "stream":
		n, err := strconv.Atoi(words[1])
		if err != nil {
			return "", fmt.Errorf("%s: stream N: %v", name, err)
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
	return "", fmt.Errorf("%s: unknown prompt %q", name, text)
}
