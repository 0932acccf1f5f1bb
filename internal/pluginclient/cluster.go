package pluginclient

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"

	"github.com/agenthost/agenthost/internal/agentpb"
	"github.com/agenthost/agenthost/internal/bootclock"
	"github.com/agenthost/agenthost/internal/wire"
)

// Heartbeat tells the plugin at fence that a host holding a valid liveness
// lease drives it, and that it may keep taking turns for validFor from its
// receipt (the plugin caps it at its own self-fence bound). selfFenced
// reports that the plugin had fenced itself when the heartbeat arrived; it
// is live again now (unless validFor granted nothing). A plugin built
// before the call existed, or speaking protocol version 1, fails with
// ErrNotImplemented: it cannot fence itself, so it cannot run in cluster
// mode. Another fence than the plugin's is refused like any call
// (ErrStaleFence, ErrNeverAttached, ErrNotAttached).
//
// Where the machine has a boot clock the heartbeat also carries the
// grant's end on it (valid_until_boot_ns = boot clock at send + validFor),
// so that a plugin on this machine that reads the heartbeat late (both
// frozen, the machine suspended) is granted only what is left of it.
func (c *Client) Heartbeat(ctx context.Context, fence uint64, validFor time.Duration) (selfFenced bool, err error) {
	var until int64
	if now, ok := bootclock.Now(); ok && validFor > 0 {
		until = now + int64(validFor)
	}
	return c.HeartbeatUntil(ctx, fence, validFor, until)
}

// HeartbeatUntil is Heartbeat with the grant's end on the machine's boot
// clock given (untilBootNs, 0 for none) rather than computed at send: for
// tests of a heartbeat that arrives after its grant ended.
func (c *Client) HeartbeatUntil(ctx context.Context, fence uint64, validFor time.Duration, untilBootNs int64) (selfFenced bool, err error) {
	if c.v2 == nil {
		return false, version1(c.version, "Heartbeat")
	}
	r, err := c.v2.Heartbeat(ctx, &agentpb.HeartbeatRequest{Fence: fence, ValidForMs: validFor.Milliseconds(), ValidUntilBootNs: untilBootNs})
	if err != nil {
		return false, classify(ctx, err)
	}
	return r.SelfFenced, nil
}

// ExportState asks the plugin at fence for its open conversation's
// provider state: handle is the provider handle it continues, state the
// agent's opaque export, which a resume on any machine passes back as
// ResumeSessionRequest.ProviderState. ErrNotImplemented when the agent
// cannot export (Identity.ExportsState is false) or the plugin speaks
// protocol version 1; ErrNoSession before a session is open.
func (c *Client) ExportState(ctx context.Context, fence uint64) (handle string, state []byte, err error) {
	if c.v2 == nil {
		return "", nil, version1(c.version, "ExportState")
	}
	// A state may be larger than the host accepts of other messages.
	r, err := c.v2.ExportState(ctx, &agentpb.ExportStateRequest{Fence: fence}, grpc.MaxCallRecvMsgSize(wire.MaxStateMessageSize))
	if err != nil {
		return "", nil, classify(ctx, err)
	}
	return r.Handle, r.State, nil
}

// Heartbeat is Client.Heartbeat at the attachment's fence.
func (a *Attachment) Heartbeat(ctx context.Context, validFor time.Duration) (selfFenced bool, err error) {
	return a.client.Heartbeat(ctx, a.fence, validFor)
}

// ExportState is Client.ExportState at the attachment's fence.
func (a *Attachment) ExportState(ctx context.Context) (handle string, state []byte, err error) {
	return a.client.ExportState(ctx, a.fence)
}

func version1(version int, call string) error {
	return fmt.Errorf("%w: the plugin speaks protocol version %d, which has no %s", ErrNotImplemented, version, call)
}
