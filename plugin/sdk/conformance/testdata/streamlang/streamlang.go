// Package streamlang is the prompt language of the kit's test plugins
// (conforming, capable): "stream N" streams N chunks 10 ms apart, "hold"
// runs until cancelled, and "streamonce N FILE" is "stream N" when FILE
// does not exist (creating it) and "hold" when it does: a prompt the
// plugin answers once per FILE.
package streamlang

import (
	"context"
	"fmt"
	"os"
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
	case len(words) == 3 && words[0] == "streamonce":
		f, err := os.OpenFile(words[2], os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			<-ctx.Done() // answered once already: hold
			return sdk.StopCancelled, nil
		}
		_ = f.Close()
		return Run(ctx, name, "stream "+words[1], turn)
	case len(words) == 1 && words[0] == "hold":
		<-ctx.Done()
		return sdk.StopCancelled, nil
	}
	return "", fmt.Errorf("%s: unknown prompt %q", name, text)
}
