package sdk

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agenthost/agenthost/internal/agentpb"
	"github.com/agenthost/agenthost/internal/wire"
)

// ExportState implements the AgentV2 call: the open conversation's
// provider state, from the agent's StateExporter. It is served after Close
// too, like the calls that read the session: the stop of a turn that Close
// cancelled comes after it, and the host exports after every stop.
func (s *server) ExportState(ctx context.Context, req *agentpb.ExportStateRequest) (*agentpb.ExportStateResponse, error) {
	s.mu.Lock()
	if err := s.checkFence(req.Fence); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	if s.handle == "" {
		s.mu.Unlock()
		return nil, refuse(wire.ReasonNoSession, "no session is open: nothing to export")
	}
	a, handle := s.agent, s.handle
	s.mu.Unlock()
	e, ok := a.(StateExporter)
	if !ok {
		return nil, status.Errorf(codes.Unimplemented, "this agent (%T) cannot export its provider state: it is no sdk.StateExporter", a)
	}
	state, err := e.ExportState(ctx, handle)
	if err != nil {
		return nil, agentError(fmt.Errorf("export provider state of %s: %w", handle, err))
	}
	if len(state) > wire.MaxProviderStateSize {
		return nil, status.Errorf(codes.ResourceExhausted, "the provider state of %s is %d bytes, above the %d a host keeps: the session is not portable",
			handle, len(state), wire.MaxProviderStateSize)
	}
	return &agentpb.ExportStateResponse{Handle: handle, State: state}, nil
}

// importState puts a resume's provider state in place with the agent's
// StateImporter; nothing to do for an empty one.
func importState(ctx context.Context, a Agent, handle string, state []byte) error {
	if len(state) == 0 {
		return nil
	}
	im, ok := a.(StateImporter)
	if !ok {
		return &sdkRefusal{refuse(wire.ReasonStateNotImportable, "the resume carries provider state, and this agent (%T) cannot import one: it is no sdk.StateImporter", a)}
	}
	if err := im.ImportState(ctx, handle, state); err != nil {
		// open reports it as the agent's failure (agentError).
		return fmt.Errorf("import provider state of %s: %w", handle, err)
	}
	return nil
}

// sdkRefusal is the SDK's own refusal (a gRPC status error) returned from
// inside an open, which agentError passes on as it is instead of as the
// agent's failure.
type sdkRefusal struct{ status error }

func (r *sdkRefusal) Error() string { return r.status.Error() }
