package pluginclient

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/agenthost/agenthost/internal/wire"
	"github.com/agenthost/agenthost/plugin/sdk"
)

// porter is a holder that exports a large state and records what it
// imports.
type porter struct {
	holder
	state []byte

	mu       sync.Mutex
	imported []byte
}

func (p *porter) ExportState(context.Context, string) ([]byte, error) { return p.state, nil }

func (p *porter) ImportState(_ context.Context, _ string, state []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.imported = state
	return nil
}

func (p *porter) ResumeSession(_ context.Context, req sdk.ResumeSessionRequest) (sdk.SessionInfo, error) {
	return sdk.SessionInfo{Handle: req.Handle}, nil
}

// A state larger than the 4 MiB a host accepts of other messages travels
// both ways: ExportState raises the receive limit for its answer, and the
// SDK accepts a resume carrying one.
func TestExportStateAndResumeWithProviderState(t *testing.T) {
	ctx := t.Context()
	big := bytes.Repeat([]byte("transcript "), (wire.MaxMessageSize+(1<<20))/len("transcript "))
	exporter := &porter{state: big}
	c, _ := serve(t, func(context.Context, sdk.Environment) (sdk.Agent, error) { return exporter, nil })
	a, _, err := c.Attach(ctx, "s", 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.ExportState(ctx); !errors.Is(err, ErrNoSession) {
		t.Errorf("ExportState before a session opened: %v, want ErrNoSession", err)
	}
	if _, err := a.NewSession(ctx, NewSessionRequest{Workspace: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	if id, err := c.Identify(ctx); err != nil || !id.ExportsState {
		t.Errorf("Identify of an exporter: exports_state %v, %v", id.ExportsState, err)
	}
	handle, state, err := a.ExportState(ctx)
	if err != nil || handle != "h1" || !bytes.Equal(state, big) {
		t.Fatalf("ExportState: %q, %d bytes, %v; want h1 and the %d bytes", handle, len(state), err, len(big))
	}
	if _, _, err := c.ExportState(ctx, 0); !errors.Is(err, ErrStaleFence) {
		t.Errorf("ExportState at a stale fence: %v", err)
	}

	importer := &porter{}
	c2, _ := serve(t, func(context.Context, sdk.Environment) (sdk.Agent, error) { return importer, nil })
	b, _, err := c2.Attach(ctx, "s", 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.ResumeSession(ctx, ResumeSessionRequest{Workspace: t.TempDir(), Handle: handle, ProviderState: state}); err != nil {
		t.Fatalf("resume with a %d-byte state: %v", len(state), err)
	}
	importer.mu.Lock()
	got := importer.imported
	importer.mu.Unlock()
	if !bytes.Equal(got, big) {
		t.Errorf("the agent imported %d bytes, want the %d exported", len(got), len(big))
	}

	plain, _ := serve(t, newHolder)
	p, _, err := plain.Attach(ctx, "s", 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.ResumeSession(ctx, ResumeSessionRequest{Handle: "h1", ProviderState: []byte("x")}); !errors.Is(err, ErrStateNotImportable) {
		t.Errorf("resume with state of an agent that cannot import: %v, want ErrStateNotImportable", err)
	}
	if _, err := p.NewSession(ctx, NewSessionRequest{Workspace: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.ExportState(ctx); !errors.Is(err, ErrNotImplemented) {
		t.Errorf("ExportState of an agent that cannot export: %v, want ErrNotImplemented", err)
	}
}

// Heartbeat is fenced like any call; a plugin served without a self-fence
// bound accepts it and was never fenced. A version 1 client has neither
// call.
func TestHeartbeat(t *testing.T) {
	ctx := t.Context()
	c, _ := serve(t, newHolder)
	a, _, err := c.Attach(ctx, "s", 3)
	if err != nil {
		t.Fatal(err)
	}
	if fenced, err := a.Heartbeat(ctx, time.Second); err != nil || fenced {
		t.Errorf("Heartbeat: %v, %v", fenced, err)
	}
	if _, err := c.Heartbeat(ctx, 2, time.Second); !errors.Is(err, ErrStaleFence) {
		t.Errorf("Heartbeat at a stale fence: %v", err)
	}
	if _, err := c.Heartbeat(ctx, 4, time.Second); !errors.Is(err, ErrNeverAttached) {
		t.Errorf("Heartbeat at a fence never attached: %v", err)
	}
	v1 := &Client{version: wire.ProtocolVersion1}
	if _, err := v1.Heartbeat(ctx, 1, time.Second); !errors.Is(err, ErrNotImplemented) {
		t.Errorf("Heartbeat at version 1: %v, want ErrNotImplemented", err)
	}
	if _, _, err := v1.ExportState(ctx, 1); !errors.Is(err, ErrNotImplemented) {
		t.Errorf("ExportState at version 1: %v, want ErrNotImplemented", err)
	}
}

func TestClassifyClusterReasons(t *testing.T) {
	for reason, want := range map[wire.Reason]error{wire.ReasonSelfFenced: ErrSelfFenced, wire.ReasonStateNotImportable: ErrStateNotImportable} {
		if got := classify(context.Background(), wire.Refusal(codes.FailedPrecondition, reason, "refused")); !errors.Is(got, want) || errors.Is(got, ErrRefused) {
			t.Errorf("classify(%s) = %v, want it to match %v", reason, got, want)
		}
	}
}
