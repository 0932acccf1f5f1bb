package conformance

import (
	"errors"
	"fmt"
	"time"

	"github.com/agenthost/agenthost/internal/pluginclient"
	"github.com/agenthost/agenthost/internal/wire"
)

// The checks of what running across machines needs (protocol version 2):
// provider state that moves with the session, and self-fencing.

// selfFenceBound is the AGENTHOST_SELF_FENCE the self-fence check spawns
// the plugin with.
const selfFenceBound = time.Second

// exportState: a plugin whose identity, once a session is open, says
// exports_state answers ExportState after a turn with the open session's
// handle and a non-empty state, and a new plugin process (another session
// directory, as on another machine) resumes that handle with the state as
// provider_state and takes a turn. Skipped when the plugin does not export
// (or speaks protocol version 1, which has no ExportState).
func exportState(e *env) error {
	p, err := e.setupOpen()
	if err != nil {
		return err
	}
	if p.version < wire.ProtocolVersion2 {
		return skipped("the plugin speaks protocol version 1, which has no ExportState")
	}
	f, err := e.follow(p, p.att, 1)
	if err != nil {
		return err
	}
	turn, err := e.prompt(p, p.att, e.cfg.prompts.Stream, "")
	if err != nil {
		return err
	}
	if _, stop, err := f.readTurn(turn, e.remaining()); err != nil {
		return err
	} else if err := expectStop(stop, "end_turn", e.cfg.prompts.Stream); err != nil {
		return fmt.Errorf("%w%s", err, hintStream)
	}
	id, err := p.agent.Identify(e.ctx)
	if err != nil {
		return p.rpcErr("Identify", err)
	}
	if !id.ExportsState {
		return skipped("the plugin does not export its provider state (exports_state is false once a session is open)")
	}
	handle, state, err := p.att.ExportState(e.ctx)
	if err != nil {
		return p.rpcErr("ExportState(fence 1) after a turn, from a plugin whose identity says exports_state,", err)
	}
	switch {
	case handle != id.Handle:
		return fmt.Errorf("ExportState answered handle %q, expected the open session's, %q, as Identify reports it", handle, id.Handle)
	case len(state) == 0:
		return fmt.Errorf("ExportState after a turn answered an empty state for handle %q, expected the conversation's provider state", handle)
	}

	q, err := e.start()
	if err != nil {
		return fmt.Errorf("start a second plugin process: %w", err)
	}
	opened, err := q.agent.Open(e.ctx, pluginclient.OpenRequest{SessionID: SessionID, Fence: 2, SpawnToken: q.token, FromSeq: 1,
		Resume: &pluginclient.ResumeSessionRequest{Workspace: e.workspace(), Options: e.cfg.options, Handle: handle, ProviderState: state}})
	if err != nil {
		return q.rpcErr(fmt.Sprintf("Open(fence 2) of a second process, resuming %q with the %d bytes the first exported,", handle, len(state)), err)
	}
	e.onCleanup(opened.Attachment.Discard)
	g, err := e.follow(q, opened.Attachment, 1)
	if err != nil {
		return err
	}
	turn, err = e.prompt(q, opened.Attachment, e.cfg.prompts.Stream, "")
	if err != nil {
		return fmt.Errorf("after resuming with the exported state: %w", err)
	}
	_, stop, err := g.readTurn(turn, e.remaining())
	if err != nil {
		return fmt.Errorf("after resuming with the exported state: %w", err)
	}
	if err := expectStop(stop, "end_turn", e.cfg.prompts.Stream); err != nil {
		return fmt.Errorf("after resuming with the exported state: %w%s", err, hintSecondTurn)
	}
	return nil
}

// selfFence: a plugin spawned with AGENTHOST_SELF_FENCE=1s and sent no
// heartbeat refuses a prompt once the bound has passed since it answered
// the handshake (FAILED_PRECONDITION, reason SELF_FENCED); a heartbeat at
// its fence lifts that (and says it was self-fenced), a new turn starts,
// and, with no heartbeat after it, that turn is cancelled at the deadline
// (stop reason cancelled). Skipped when the plugin answers Heartbeat
// UNIMPLEMENTED (it then cannot run in cluster mode) or speaks protocol
// version 1.
func selfFence(e *env) error {
	e.extraEnv = []string{wire.EnvSelfFence + "=" + selfFenceBound.String()}
	p, err := e.setupOpen()
	// Serve began before the handshake was answered, so the plugin's
	// deadline is no later than the bound from now.
	ready := time.Now()
	if err != nil {
		return err
	}
	if p.version < wire.ProtocolVersion2 {
		return skipped("the plugin speaks protocol version 1, which has no Heartbeat")
	}
	// A heartbeat granting nothing moves nothing: it only probes the call.
	if _, err := p.att.Heartbeat(e.ctx, 0); errors.Is(err, pluginclient.ErrNotImplemented) {
		return skipped("the plugin does not implement Heartbeat, so it cannot run in cluster mode")
	} else if err != nil {
		return p.rpcErr("Heartbeat(fence 1, valid_for 0)", err)
	}
	f, err := e.follow(p, p.att, 1)
	if err != nil {
		return err
	}
	sleep(e.ctx, time.Until(ready.Add(selfFenceBound)))
	_, err = p.att.Prompt(e.ctx, pluginclient.PromptRequest{Prompt: pluginclient.Text(e.cfg.prompts.Hold)})
	if err == nil {
		return fmt.Errorf("a prompt %s after the handshake of a plugin spawned with %s=%s and sent no heartbeat was accepted, expected FAILED_PRECONDITION with reason %s",
			time.Since(ready).Round(time.Millisecond), wire.EnvSelfFence, selfFenceBound, wire.ReasonSelfFenced)
	}
	if !errors.Is(err, pluginclient.ErrSelfFenced) {
		return p.rpcErr(fmt.Sprintf("Prompt past the self-fence deadline, expected FAILED_PRECONDITION with reason %s:", wire.ReasonSelfFenced), err)
	}

	// A heartbeat lifts it: the next prompt is admitted unless the bound
	// passed again before it arrived (a loaded machine), which the kit
	// then retries.
	var turn string
	for attempt := 0; turn == "" && attempt < 10; attempt++ {
		fenced, err := p.att.Heartbeat(e.ctx, time.Minute)
		if err != nil {
			return p.rpcErr("Heartbeat(fence 1, valid_for 1m)", err)
		}
		if attempt == 0 && !fenced {
			return errors.New("the first Heartbeat after the self-fence deadline answered self_fenced false, expected true")
		}
		sent := time.Now()
		turn, err = p.att.Prompt(e.ctx, pluginclient.PromptRequest{Prompt: pluginclient.Text(e.cfg.prompts.Hold)})
		switch {
		case err == nil:
		case errors.Is(err, pluginclient.ErrSelfFenced) && time.Since(sent) >= selfFenceBound:
		case errors.Is(err, pluginclient.ErrSelfFenced):
			return fmt.Errorf("a prompt %s after a heartbeat granting 1m (capped at the %s bound) was refused as self-fenced",
				time.Since(sent).Round(time.Millisecond), selfFenceBound)
		default:
			return p.rpcErr("Prompt after a heartbeat", err)
		}
	}
	if turn == "" {
		return fmt.Errorf("every Prompt came later than the %s bound after its heartbeat", selfFenceBound)
	}
	// No heartbeat now: the held turn must be cancelled at the deadline.
	_, stop, err := f.readTurn(turn, selfFenceBound+cancelBound)
	if err != nil {
		return fmt.Errorf("a held turn with no heartbeat after it, on a plugin spawned with %s=%s: %w%s", wire.EnvSelfFence, selfFenceBound, err, hintHold)
	}
	if stop.reason != "cancelled" {
		return fmt.Errorf("the held turn of a plugin that fenced itself stopped with %s, expected stop reason \"cancelled\"", stopString(stop))
	}
	return nil
}
