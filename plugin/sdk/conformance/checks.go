package conformance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/agenthost/agenthost/internal/pluginclient"
	"github.com/agenthost/agenthost/internal/wire"
)

const checkHandshake = "handshake"

// checks are the conformance checks, in the order they run.
var checks = []check{
	{checkHandshake, handshake},
	{"identify", identify},
	{"attach-binds-session", attachBindsSession},
	{"new-session", newSession},
	{"prompt-streams-updates", promptStreamsUpdates},
	{"cancel-yields-cancelled", cancelYieldsCancelled},
	{"stale-fence-refused", staleFenceRefused},
	{"outbox-replay-after-reattach", outboxReplayAfterReattach},
	{"open-refuses-another-process", openRefusesAnotherProcess},
	{"graceful-stop", gracefulStop},
	{"kill-on-ignored-shutdown", killOnIgnoredShutdown},
	{"set-mode", setMode},
	{"set-config-option", setConfigOption},
	{"unknown-option-refused", unknownOptionRefused},
	{"prompt-capabilities", promptCapabilities},
	{"export-state", exportState},
	{"self-fence", selfFence},
}

// Bounds of what the protocol expects to happen "promptly".
const (
	// cancelBound is how long a cancelled turn may take to stop.
	cancelBound = 5 * time.Second
	// staleStreamBound is how long the stream of an older fence may stay
	// open after a newer fence attaches.
	staleStreamBound = 2 * time.Second
	// exitBound is how long a plugin may take to exit on SIGTERM.
	exitBound = 5 * time.Second
	// holdSettle is how long a held turn runs before the kit cancels it.
	holdSettle = 200 * time.Millisecond
	// detachedPause is how long the kit stays away, as a dead host, in
	// the replay check.
	detachedPause = 500 * time.Millisecond
	// replayPrefix is how many updates the kit reads before it drops its
	// connection in the replay check.
	replayPrefix = 3
	// shortStop is the SIGTERM deadline of kill-on-ignored-shutdown.
	shortStop = 300 * time.Millisecond
)

// handshake: the process starts and completes the go-plugin handshake over
// gRPC at the agenthost protocol version.
func handshake(e *env) error {
	p, err := e.start()
	if err != nil {
		return fmt.Errorf("expected the plugin to complete go-plugin's handshake (magic cookie %s, protocol version %s, gRPC) within %s: %w",
			wire.Handshake().MagicCookieKey, e.versions(), e.cfg.startTimeout, err)
	}
	if v := p.client.NegotiatedVersion(); (e.cfg.version != 0 && v != e.cfg.version) || v < wire.ProtocolVersion1 || v > wire.ProtocolVersion {
		return fmt.Errorf("negotiated protocol version %d, expected %s", v, e.versions())
	}
	if proto := p.client.Protocol(); proto != "grpc" {
		return fmt.Errorf("negotiated protocol %q, expected grpc", proto)
	}
	if err := p.grpc.Ping(); err != nil {
		return fmt.Errorf("go-plugin health check after the handshake failed: %v%s", err, p.exitNote(err))
	}
	return nil
}

// identify: Identify reports the process the kit started, before any
// Attach.
func identify(e *env) error {
	p, err := e.setupStart()
	if err != nil {
		return err
	}
	id, err := p.agent.Identify(e.ctx)
	if err != nil {
		return p.rpcErr("Identify", err)
	}
	var bad []string
	if id.PID != p.pid() {
		bad = append(bad, fmt.Sprintf("pid = %d, expected %d (the pid of the process the kit started)", id.PID, p.pid()))
	}
	if id.SpawnToken != p.token {
		bad = append(bad, fmt.Sprintf("spawn_token = %q, expected %q (the value of %s, the variable %s names)",
			id.SpawnToken, p.token, SpawnTokenVar, wire.EnvSpawnTokenVar))
	}
	if id.InstanceID == "" {
		bad = append(bad, "instance_id is empty, expected a random id per process start")
	}
	if id.ProtocolVersion != p.version {
		bad = append(bad, fmt.Sprintf("protocol_version = %d, expected %d (the version go-plugin negotiated)", id.ProtocolVersion, p.version))
	}
	if id.AgentName == "" {
		bad = append(bad, "agent_name is empty, expected the plugin's name")
	}
	if id.SessionID != "" {
		bad = append(bad, fmt.Sprintf("session_id = %q before any Attach, expected empty", id.SessionID))
	}
	if id.Fence != 0 {
		bad = append(bad, fmt.Sprintf("fence = %d before any Attach, expected 0", id.Fence))
	}
	return badIdentity("Identify", bad)
}

// attachBindsSession: the first Attach binds the process to its session id,
// byte for byte; another session id is refused and changes nothing.
func attachBindsSession(e *env) error {
	p, err := e.setupStart()
	if err != nil {
		return err
	}
	_, resp, err := p.agent.Attach(e.ctx, SessionID, 1)
	if err != nil {
		return p.rpcErr(fmt.Sprintf("Attach(fence 1, session %q)", SessionID), err)
	}
	if resp.Fence != 1 {
		return fmt.Errorf("Attach(fence 1) answered fence %d, expected 1", resp.Fence)
	}
	if err := expectBound(e, p, p.agent, 1, "after Attach(fence 1)"); err != nil {
		return err
	}
	const other = "another-session"
	if _, _, err := p.agent.Attach(e.ctx, other, 2); err == nil {
		return fmt.Errorf("Attach(fence 2, session %q) to a process bound to session %q succeeded, expected it to be refused", other, SessionID)
	} else if errors.Is(err, pluginclient.ErrUnavailable) {
		return p.rpcErr(fmt.Sprintf("Attach(fence 2, session %q)", other), err)
	}
	return expectBound(e, p, p.agent, 1, fmt.Sprintf("after the refused Attach(fence 2, session %q)", other))
}

// expectBound checks that Identify reports the kit's session id and fence.
func expectBound(e *env, p *proc, c *pluginclient.Client, fence uint64, when string) error {
	id, err := c.Identify(e.ctx)
	if err != nil {
		return p.rpcErr("Identify "+when, err)
	}
	var bad []string
	if id.SessionID != SessionID {
		bad = append(bad, fmt.Sprintf("session_id = %q, expected %q", id.SessionID, SessionID))
	}
	if id.Fence != fence {
		bad = append(bad, fmt.Sprintf("fence = %d, expected %d", id.Fence, fence))
	}
	return badIdentity("Identify "+when, bad)
}

func badIdentity(what string, bad []string) error {
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("%s: %s", what, strings.Join(bad, "; "))
}

// newSession: NewSession at the attached fence returns a provider handle,
// which Identify then reports.
func newSession(e *env) error {
	p, err := e.setupStart()
	if err != nil {
		return err
	}
	att, _, err := p.agent.Attach(e.ctx, SessionID, 1)
	if err != nil {
		return p.setupErr("Attach(fence 1)", err)
	}
	resp, err := att.NewSession(e.ctx, pluginclient.NewSessionRequest{Workspace: e.workspace(), Options: e.cfg.options})
	if err != nil {
		return p.rpcErr("NewSession(fence 1)", err)
	}
	if resp.Handle == "" {
		return errors.New("NewSession(fence 1) returned an empty handle, expected the provider's handle of the new conversation")
	}
	id, err := p.agent.Identify(e.ctx)
	if err != nil {
		return p.rpcErr("Identify after NewSession", err)
	}
	if id.Handle != resp.Handle {
		return fmt.Errorf("after NewSession, Identify reports handle %q, expected %q (the handle NewSession returned)", id.Handle, resp.Handle)
	}
	return nil
}

// promptStreamsUpdates: a turn's updates arrive on Updates from seq 1, in
// order and without gaps, with at least one message chunk, ending with
// turn_stopped(end_turn); the next Prompt is accepted at once and
// continues the sequence.
func promptStreamsUpdates(e *env) error {
	p, err := e.setupOpen()
	if err != nil {
		return err
	}
	f, err := e.follow(p, p.att, 1)
	if err != nil {
		return err
	}
	f.want = 1
	turn, err := e.prompt(p, p.att, e.cfg.prompts.Stream, "")
	if err != nil {
		return err
	}
	ups, stop, err := f.readTurn(turn, e.remaining())
	if err != nil {
		return fmt.Errorf("turn of prompt %q: %w%s", e.cfg.prompts.Stream, err, hintStream)
	}
	if err := expectStop(stop, "end_turn", e.cfg.prompts.Stream); err != nil {
		return fmt.Errorf("%w%s", err, hintStream)
	}
	if countKind(ups, turn, "agent_message_chunk") == 0 {
		return fmt.Errorf("turn of prompt %q: expected at least one agent_message_chunk before turn_stopped, got %s%s",
			e.cfg.prompts.Stream, describe(ups), hintStream)
	}

	// A host that sees turn_stopped may start the next turn at once.
	const next = "conformance-turn-2"
	turn2, err := e.prompt(p, p.att, e.cfg.prompts.Stream, next)
	if err != nil {
		return fmt.Errorf("the next Prompt, sent right after turn_stopped: %w", err)
	}
	if turn2 != next {
		return fmt.Errorf("the next Prompt, with turn_id %q, answered turn_id %q, expected the caller's id", next, turn2)
	}
	_, stop, err = f.readTurn(turn2, e.remaining())
	if err != nil {
		return fmt.Errorf("second turn of prompt %q: %w%s", e.cfg.prompts.Stream, err, hintSecondTurn)
	}
	if err := expectStop(stop, "end_turn", e.cfg.prompts.Stream); err != nil {
		return fmt.Errorf("second turn: %w%s", err, hintSecondTurn)
	}
	return nil
}

// cancelYieldsCancelled: Cancel ends a running turn with stop reason
// cancelled, within cancelBound.
func cancelYieldsCancelled(e *env) error {
	p, err := e.setupOpen()
	if err != nil {
		return err
	}
	f, err := e.follow(p, p.att, 1)
	if err != nil {
		return err
	}
	f.want = 1
	turn, err := e.prompt(p, p.att, e.cfg.prompts.Hold, "")
	if err != nil {
		return err
	}
	// Let the turn get going; it must not end by itself.
	if ups, stop, err := f.readTurn(turn, holdSettle); err == nil {
		return fmt.Errorf("the turn of prompt %q ended by itself (%s) before Cancel, after %s; expected it to hold until cancelled%s",
			e.cfg.prompts.Hold, stopString(stop), describe(ups), hintHold)
	} else if !errors.Is(err, errNoStopYet) {
		return fmt.Errorf("turn of prompt %q: %w", e.cfg.prompts.Hold, err)
	}
	if err := p.att.Cancel(e.ctx); err != nil {
		return p.rpcErr("Cancel(fence 1) of a running turn", err)
	}
	start := time.Now()
	_, stop, err := f.readTurn(turn, min(cancelBound, e.remaining()))
	if err != nil {
		return fmt.Errorf("after Cancel: %w", err)
	}
	if err := expectStop(stop, "cancelled", e.cfg.prompts.Hold); err != nil {
		return fmt.Errorf("after Cancel: %w", err)
	}
	if d := time.Since(start); d > cancelBound {
		return fmt.Errorf("the cancelled turn took %s to stop, expected at most %s", d.Round(time.Millisecond), cancelBound)
	}
	return nil
}

// staleFenceRefused: once fence 2 attaches, every call carrying fence 1 is
// refused as a stale fence (FAILED_PRECONDITION with reason STALE_FENCE,
// which a host reads as "a newer host took over"), and the Updates stream
// of fence 1 ends.
func staleFenceRefused(e *env) error {
	p, err := e.setupOpen()
	if err != nil {
		return err
	}
	handle := p.handle
	old, err := e.follow(p, p.att, 1)
	if err != nil {
		return err
	}
	// Updates the plugin produced before fence 2 attaches (session-level
	// ones a session reports as it opens) may still reach fence 1: read
	// them first.
	id, err := p.agent.Identify(e.ctx)
	if err != nil {
		return p.rpcErr("Identify before Attach(fence 2)", err)
	}
	for seen := uint64(0); seen < id.LastSeq; {
		u, err := old.next(e.remaining())
		if err != nil {
			return fmt.Errorf("the Updates stream of fence 1, expected the %d updates produced so far (Identify's last_seq): %w", id.LastSeq, err)
		}
		seen = u.Seq
	}
	att2, resp, err := p.agent.Attach(e.ctx, SessionID, 2)
	if err != nil {
		return p.rpcErr("Attach(fence 2) over fence 1", err)
	}
	if resp.Fence != 2 {
		return fmt.Errorf("Attach(fence 2) answered fence %d, expected 2", resp.Fence)
	}

	var bad []string
	refused := func(what string, err error) {
		switch {
		case err == nil:
			bad = append(bad, what+" succeeded")
		case errors.Is(err, context.DeadlineExceeded):
			bad = append(bad, fmt.Sprintf("%s did not answer within %s", what, staleStreamBound))
		case !errors.Is(err, pluginclient.ErrStaleFence):
			bad = append(bad, fmt.Sprintf("%s failed with %v", what, err))
		}
	}
	// The stream fence 1 opened must end now. Updates the plugin produced
	// before fence 2 attached (up to its LastSeq: an agent reporting
	// commands as a session opens has some) may still be in flight.
	var u *pluginclient.Update
	for err = nil; err == nil; {
		if u, err = old.next(staleStreamBound); err == nil && u.Seq > resp.LastSeq {
			break
		}
	}
	if err == nil {
		bad = append(bad, fmt.Sprintf("the Updates stream opened at fence 1 delivered seq %d, produced after fence 2 attached (at seq %d)", u.Seq, resp.LastSeq))
	} else if errors.Is(err, errTimeout) {
		bad = append(bad, fmt.Sprintf("the Updates stream opened at fence 1 stayed open %s after fence 2 attached", staleStreamBound))
	} else {
		refused("the Updates stream opened at fence 1", old.err)
	}

	// A stale call must be refused at once, not hang.
	ctx, cancel := context.WithTimeout(e.ctx, staleStreamBound)
	defer cancel()
	_, err = p.att.Prompt(ctx, pluginclient.PromptRequest{Prompt: pluginclient.Text(e.cfg.prompts.Stream)})
	refused("Prompt(fence 1)", err)
	refused("Acknowledge(fence 1)", p.att.Acknowledge(ctx, 0))
	refused("Updates(fence 1)", firstRecvErr(ctx, p.att))
	refused("Cancel(fence 1)", p.att.Cancel(ctx))
	if p.caps.SetMode {
		refused("SetMode(fence 1)", p.att.SetMode(ctx, bogusMode))
	}
	if p.caps.SetConfigOption {
		_, err = p.att.SetConfigOption(ctx, bogusOption, bogusValue)
		refused("SetConfigOption(fence 1)", err)
	}
	refused("AnswerPermission(fence 1)", p.att.AnswerPermission(ctx, "conformance-no-such-request", pluginclient.Answer("")))
	_, err = p.att.ResumeSession(ctx, pluginclient.ResumeSessionRequest{Workspace: e.workspace(), Handle: handle})
	refused("ResumeSession(fence 1)", err)
	_, _, err = p.agent.Attach(ctx, SessionID, 1)
	refused("Attach(fence 1) after fence 2", err)
	refused("Close(fence 1)", p.att.Close(ctx))
	if len(bad) > 0 {
		return fmt.Errorf("after Attach(fence 2), expected every call carrying fence 1 to fail with FailedPrecondition, reason STALE_FENCE (stale fence), but: %s%s",
			strings.Join(bad, "; "), p.exitNote(nil))
	}

	// The refusals were about the fence: fence 2 still works.
	if err := att2.Acknowledge(e.ctx, 0); err != nil {
		return p.rpcErr("Acknowledge(fence 2) after the stale calls", err)
	}
	return expectBound(e, p, p.agent, 2, "after the stale calls")
}

// firstRecvErr opens Updates from seq 1 at a's fence and returns the error
// of its first message.
func firstRecvErr(ctx context.Context, a *pluginclient.Attachment) error {
	ctx, cancel := context.WithTimeout(ctx, staleStreamBound)
	defer cancel()
	s, err := a.Updates(ctx, 1)
	if err != nil {
		return err
	}
	if _, err := s.Recv(); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("the stream stayed open for %s: %w", staleStreamBound, err)
		}
		return err
	}
	return nil
}

// outboxReplayAfterReattach: updates produced while no host is connected
// wait in the plugin; a host that reattaches and asks from its last seq + 1
// gets exactly the rest; acknowledged updates are not replayed.
func outboxReplayAfterReattach(e *env) error {
	p, err := e.setupOpen()
	if err != nil {
		return err
	}
	f, err := e.follow(p, p.att, 1)
	if err != nil {
		return err
	}
	f.want = 1
	prompt := e.cfg.prompts.Replay
	turn, err := e.prompt(p, p.att, prompt, "")
	if err != nil {
		return err
	}
	var got []*pluginclient.Update
	for len(got) < replayPrefix {
		u, err := f.next(e.remaining())
		if err != nil {
			return fmt.Errorf("turn of prompt %q, before the connection drop: %w", prompt, err)
		}
		got = append(got, u)
		if isStop(u, turn) {
			return fmt.Errorf("the turn of prompt %q ended after %s; expected more than %d updates so that some arrive after the connection drops%s",
				prompt, describe(got), replayPrefix, hintReplay)
		}
	}
	last := got[len(got)-1].Seq

	// The host dies: its connection goes, the process stays. go-plugin
	// has no detach, so close the connection and never Kill this client.
	f.stop()
	_ = p.grpc.Conn.Close()
	sleep(e.ctx, detachedPause)
	if c := p.child(); c.gone() {
		return fmt.Errorf("the plugin process exited (%s) when its host's connection dropped; expected it to keep running and keep the updates%s",
			c.exitStatus(), p.exitNote(nil))
	}

	agent, err := p.reattach()
	if err != nil {
		return fmt.Errorf("%w%s", err, p.exitNote(err))
	}
	// At version 2 a host reattaches with one Open: identity, attach at
	// fence 2 and the rest of the updates in one round trip.
	var id pluginclient.Identity
	var att2 *pluginclient.Attachment
	if p.version >= wire.ProtocolVersion2 {
		opened, err := agent.Open(e.ctx, pluginclient.OpenRequest{SessionID: SessionID, Fence: 2, SpawnToken: p.token, InstanceID: p.instance, FromSeq: last + 1})
		if err != nil {
			return p.rpcErr("Open(fence 2, from "+fmt.Sprint(last+1)+") after reattach", err)
		}
		e.onCleanup(opened.Attachment.Discard)
		id, att2 = opened.Identity, opened.Attachment
	} else if id, err = agent.Identify(e.ctx); err != nil {
		return p.rpcErr("Identify after reattach", err)
	}
	var bad []string
	if id.PID != p.pid() {
		bad = append(bad, fmt.Sprintf("pid = %d, expected %d", id.PID, p.pid()))
	}
	if id.InstanceID != p.instance {
		bad = append(bad, fmt.Sprintf("instance_id = %q, expected %q (the same process start)", id.InstanceID, p.instance))
	}
	if id.SessionID != SessionID {
		bad = append(bad, fmt.Sprintf("session_id = %q, expected %q", id.SessionID, SessionID))
	}
	if id.LastSeq < last {
		bad = append(bad, fmt.Sprintf("last_seq = %d, expected at least %d (the kit received seq %d)", id.LastSeq, last, last))
	}
	if p.version >= wire.ProtocolVersion2 && id.Fence != 2 {
		bad = append(bad, fmt.Sprintf("fence = %d in Open's answer, expected 2 (the fence Open attached)", id.Fence))
	}
	if err := badIdentity("Identify after reattach", bad); err != nil {
		return err
	}
	if att2 == nil {
		if att2, _, err = agent.Attach(e.ctx, SessionID, 2); err != nil {
			return p.rpcErr("Attach(fence 2) after reattach", err)
		}
	}

	rest, err := e.follow(p, att2, last+1)
	if err != nil {
		return err
	}
	rest.want = last + 1
	ups, stop, err := rest.readTurn(turn, e.remaining())
	if err != nil {
		return fmt.Errorf("after reattach, Updates(from %d), expected the rest of the turn: %w", last+1, err)
	}
	if err := expectStop(stop, "end_turn", prompt); err != nil {
		return fmt.Errorf("after reattach: %w", err)
	}
	acked := ups[len(ups)-1].Seq
	rest.stop()

	if err := att2.Acknowledge(e.ctx, acked); err != nil {
		return p.rpcErr(fmt.Sprintf("Acknowledge(fence 2, seq %d)", acked), err)
	}
	fresh, err := e.follow(p, att2, 1)
	if err != nil {
		return err
	}
	// Something new to deliver: the next turn.
	if _, err := e.prompt(p, att2, e.cfg.prompts.Stream, ""); err != nil {
		return fmt.Errorf("after Acknowledge: %w", err)
	}
	u, err := fresh.next(e.remaining())
	if err != nil {
		return fmt.Errorf("Updates(fence 2, from 1) after Acknowledge(seq %d) and a new Prompt: %w", acked, err)
	}
	switch {
	case u.Seq <= acked:
		return fmt.Errorf("Updates(fence 2, from 1) after Acknowledge(seq %d) replayed seq %d; expected acknowledged updates to be forgotten, the first update delivered to be seq %d",
			acked, u.Seq, acked+1)
	case u.Seq != acked+1:
		return fmt.Errorf("Updates(fence 2, from 1) after Acknowledge(seq %d) began at seq %d, expected seq %d (seqs %d..%d are missing)",
			acked, u.Seq, acked+1, acked+1, u.Seq-1)
	}
	return nil
}

// openRefusesAnotherProcess (protocol version 2): Open naming another
// spawn token or instance id than the process's is refused with reason
// NOT_THIS_PROCESS, and changes nothing: the fence stays where it was and
// the process stays unbound. Skipped at version 1, which has no Open.
func openRefusesAnotherProcess(e *env) error {
	p, err := e.setupStart()
	if err != nil {
		return err
	}
	if p.version < wire.ProtocolVersion2 {
		return skipped(fmt.Sprintf("protocol version %d has no Open", p.version))
	}
	for _, req := range []pluginclient.OpenRequest{
		{SessionID: SessionID, Fence: 1, SpawnToken: p.token + "-other"},
		{SessionID: SessionID, Fence: 1, SpawnToken: p.token, InstanceID: p.instance + "-other"},
	} {
		_, err := p.agent.Open(e.ctx, req)
		if !errors.Is(err, pluginclient.ErrNotThisProcess) {
			return fmt.Errorf("Open(spawn token %q, instance id %q) of another process answered %v, expected FailedPrecondition, reason NOT_THIS_PROCESS%s",
				req.SpawnToken, req.InstanceID, err, p.exitNote(err))
		}
	}
	id, err := p.agent.Identify(e.ctx)
	if err != nil {
		return p.rpcErr("Identify after the refused Opens", err)
	}
	if id.Fence != 0 || id.SessionID != "" {
		return fmt.Errorf("after Opens refused as another process's, Identify reports fence %d and session %q, expected fence 0 and no session (nothing changed)", id.Fence, id.SessionID)
	}
	return nil
}

// gracefulStop: Close succeeds, then SIGTERM makes the plugin exit within
// exitBound, leaving no process of its group or with its spawn token. A
// host sends SIGTERM whatever Close did, so the kit does too, and reports
// both.
func gracefulStop(e *env) error {
	p, err := e.setupOpen()
	if err != nil {
		return err
	}
	var errs []error
	// Half the time left for Close, the rest for the exit.
	closeBound := min(exitBound, e.remaining()/2)
	ctx, cancel := context.WithTimeout(e.ctx, closeBound)
	err = p.att.Close(ctx)
	cancel()
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		errs = append(errs, fmt.Errorf("Close(fence 1) did not return within %s; expected the plugin to close its session promptly",
			closeBound.Round(time.Millisecond)))
	case err != nil:
		errs = append(errs, p.rpcErr("Close(fence 1)", err))
	}
	c := p.child()
	start := time.Now()
	if err := syscall.Kill(c.pid, syscall.SIGTERM); err != nil && !c.gone() {
		return errors.Join(append(errs, fmt.Errorf("SIGTERM to pid %d: %v", c.pid, err))...)
	}
	exitWait := min(exitBound, max(e.remaining(), 500*time.Millisecond))
	if !c.waitExit(exitWait) {
		errs = append(errs, fmt.Errorf("after Close and SIGTERM, the plugin process %d was still running %s later; expected it to exit on SIGTERM",
			c.pid, exitWait.Round(time.Millisecond)))
		return errors.Join(errs...)
	}
	took := time.Since(start)
	// The group must empty by itself: no sweep here.
	var left []int
	poll(time.Second, func() bool {
		left = groupMembers(c.pid)
		return len(left) == 0
	})
	if len(left) > 0 {
		errs = append(errs, fmt.Errorf("the plugin exited %s after SIGTERM (%s), but its process group %d still has live members %v; expected a plugin to stop the processes it started",
			took.Round(time.Millisecond), c.exitStatus(), c.pid, left))
	} else if left := envHolders(SpawnTokenVar + "=" + p.token); len(left) > 0 {
		errs = append(errs, fmt.Errorf("the plugin exited after SIGTERM, but processes %v carrying its spawn token are still running", left))
	}
	return errors.Join(errs...)
}

// killOnIgnoredShutdown: a stop with a short deadline (SIGTERM, shortStop,
// then SIGKILL to the process group) leaves no process behind, whether the
// plugin honours SIGTERM or ignores it, even with a turn running.
func killOnIgnoredShutdown(e *env) error {
	p, err := e.setupStart()
	if err != nil {
		return err
	}
	// Make the plugin busy, as best it can be; the calls are checked
	// elsewhere.
	if att, _, err := p.agent.Attach(e.ctx, SessionID, 1); err == nil {
		if _, err := att.NewSession(e.ctx, pluginclient.NewSessionRequest{Workspace: e.workspace(), Options: e.cfg.options}); err == nil {
			_, _ = att.Prompt(e.ctx, pluginclient.PromptRequest{Prompt: pluginclient.Text(e.cfg.prompts.Hold)})
			sleep(e.ctx, holdSettle)
		}
	}
	c := p.child()
	start := time.Now()
	if err := stopWithDeadline(c.pid, shortStop); err != nil {
		return fmt.Errorf("stop with a %s deadline: %w", shortStop, err)
	}
	if took := time.Since(start); took > shortStop+2*time.Second {
		return fmt.Errorf("stop with a %s deadline took %s", shortStop, took.Round(time.Millisecond))
	}
	if left := envHolders(SpawnTokenVar + "=" + p.token); len(left) > 0 {
		return fmt.Errorf("after a stop with a %s deadline (SIGTERM, then SIGKILL to process group %d), processes %v carrying the plugin's spawn token are still running: they left the plugin's process group",
			shortStop, c.pid, left)
	}
	return nil
}

// setupStart starts the plugin for a check other than handshake.
func (e *env) setupStart() (*proc, error) {
	p, err := e.start()
	if err != nil {
		return nil, fmt.Errorf("setup: start the plugin: %w", err)
	}
	id, err := p.agent.Identify(e.ctx)
	if err != nil {
		return nil, p.setupErr("Identify", err)
	}
	p.instance, p.caps = id.InstanceID, id.Capabilities
	return p, nil
}

// versions says which protocol versions the kit offers.
func (e *env) versions() string {
	if e.cfg.version != 0 {
		return fmt.Sprint(e.cfg.version)
	}
	return fmt.Sprintf("%d to %d", wire.ProtocolVersion1, wire.ProtocolVersion)
}

// setupOpen starts the plugin, attaches at fence 1 and opens a session:
// at protocol version 2 with one Open, whose update stream from seq 1 the
// check's first follow from seq 1 takes.
func (e *env) setupOpen() (*proc, error) {
	if e.cfg.version == 0 || e.cfg.version >= wire.ProtocolVersion2 {
		p, err := e.start()
		if err != nil {
			return nil, fmt.Errorf("setup: start the plugin: %w", err)
		}
		if p.version >= wire.ProtocolVersion2 {
			opened, err := p.agent.Open(e.ctx, pluginclient.OpenRequest{SessionID: SessionID, Fence: 1, SpawnToken: p.token, FromSeq: 1,
				New: &pluginclient.NewSessionRequest{Workspace: e.workspace(), Options: e.cfg.options}})
			if err != nil {
				return nil, p.setupErr("Open(fence 1, new session)", err)
			}
			e.onCleanup(opened.Attachment.Discard)
			p.att, p.handle = opened.Attachment, opened.Session.Handle
			p.instance, p.caps = opened.Identity.InstanceID, opened.Identity.Capabilities
			return p, nil
		}
		id, err := p.agent.Identify(e.ctx)
		if err != nil {
			return nil, p.setupErr("Identify", err)
		}
		p.instance, p.caps = id.InstanceID, id.Capabilities
		return e.attachOpen(p)
	}
	p, err := e.setupStart()
	if err != nil {
		return nil, err
	}
	return e.attachOpen(p)
}

// attachOpen attaches at fence 1 and opens a session with version 1's
// calls.
func (e *env) attachOpen(p *proc) (*proc, error) {
	var err error
	if p.att, _, err = p.agent.Attach(e.ctx, SessionID, 1); err != nil {
		return nil, p.setupErr("Attach(fence 1)", err)
	}
	resp, err := p.att.NewSession(e.ctx, pluginclient.NewSessionRequest{Workspace: e.workspace(), Options: e.cfg.options})
	if err != nil {
		return nil, p.setupErr("NewSession(fence 1)", err)
	}
	p.handle = resp.Handle
	return p, nil
}

// workspace returns a directory a session may work in.
func (e *env) workspace() string {
	dir := filepath.Join(e.dir, "workspace")
	_ = os.MkdirAll(dir, 0o700)
	return dir
}

// remaining is the time left in the check.
func (e *env) remaining() time.Duration { return time.Until(deadlineOr(e.ctx)) }

func deadlineOr(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(time.Hour)
}

// prompt sends a text prompt at a's fence and returns the turn id.
func (e *env) prompt(p *proc, a *pluginclient.Attachment, prompt, turnID string) (string, error) {
	id, err := a.Prompt(e.ctx, pluginclient.PromptRequest{Prompt: pluginclient.Text(prompt), TurnID: turnID})
	if err != nil {
		return "", p.rpcErr(fmt.Sprintf("Prompt(fence %d, %q)", a.Fence(), prompt), err)
	}
	if id == "" {
		return "", fmt.Errorf("Prompt(fence %d, %q) returned an empty turn_id", a.Fence(), prompt)
	}
	return id, nil
}

// rpcErr describes a failed call, noting whether the process died.
func (p *proc) rpcErr(what string, err error) error {
	return fmt.Errorf("%s failed: %v%s", what, err, p.exitNote(err))
}

func (p *proc) setupErr(what string, err error) error {
	return fmt.Errorf("setup: %s failed: %v%s", what, err, p.exitNote(err))
}

// sleep waits for d or the end of ctx.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// follower reads one Updates stream in the background.
type follower struct {
	p      *proc
	ch     chan *pluginclient.Update
	err    error // why the stream ended; read after ch is closed
	cancel context.CancelFunc
	done   chan struct{}
	// want is the seq the next update must carry, 0 for any; every
	// update read advances it.
	want uint64
}

// streamEnd is the error of reading past the end of an Updates stream.
type streamEnd struct {
	err  error  // the stream's error
	note string // exitNote
}

func (s *streamEnd) Error() string {
	return fmt.Sprintf("the Updates stream ended: %v%s", s.err, s.note)
}

var (
	errTimeout   = errors.New("timed out")
	errNoStopYet = errors.New("no turn_stopped yet")
)

// follow opens Updates(from) at a's fence.
func (e *env) follow(p *proc, a *pluginclient.Attachment, from uint64) (*follower, error) {
	ctx, cancel := context.WithCancel(e.ctx)
	s, err := a.Updates(ctx, from)
	if err != nil {
		cancel()
		return nil, p.rpcErr(fmt.Sprintf("Updates(fence %d, from %d)", a.Fence(), from), err)
	}
	f := &follower{p: p, ch: make(chan *pluginclient.Update, 256), cancel: cancel, done: make(chan struct{})}
	go f.recv(ctx, s)
	e.onCleanup(f.stop)
	return f, nil
}

func (f *follower) recv(ctx context.Context, s *pluginclient.UpdateStream) {
	defer close(f.done)
	defer close(f.ch)
	for {
		u, err := s.Recv()
		if err != nil {
			f.err = err
			return
		}
		select {
		case f.ch <- u:
		case <-ctx.Done():
			f.err = ctx.Err()
			return
		}
	}
}

// stop closes the stream and waits for its reader.
func (f *follower) stop() {
	f.cancel()
	<-f.done
}

// next returns the next update within d. It fails with errTimeout, with
// the stream's end, or when the update's seq is not the one expected.
func (f *follower) next(d time.Duration) (*pluginclient.Update, error) {
	t := time.NewTimer(max(d, 0))
	defer t.Stop()
	select {
	case u, ok := <-f.ch:
		if !ok {
			return nil, &streamEnd{err: f.err, note: f.p.exitNote(f.err)}
		}
		if f.want != 0 && u.Seq != f.want {
			var what string
			if u.Seq > f.want {
				what = fmt.Sprintf("a gap: seqs %d..%d are missing", f.want, u.Seq-1)
			} else {
				what = "a duplicate or out-of-order update"
			}
			return nil, fmt.Errorf("expected seq %d next, got seq %d (%s, kind %s)", f.want, u.Seq, what, u.Kind)
		}
		f.want = u.Seq + 1
		return u, nil
	case <-t.C:
		return nil, fmt.Errorf("%w after %s", errTimeout, d.Round(time.Millisecond))
	}
}

// readTurn reads updates until the turn_stopped of turn, within d. An
// expired d wraps errNoStopYet.
func (f *follower) readTurn(turn string, d time.Duration) ([]*pluginclient.Update, *turnStop, error) {
	deadline := time.Now().Add(d)
	var ups []*pluginclient.Update
	for {
		u, err := f.next(time.Until(deadline))
		if errors.Is(err, errTimeout) {
			return ups, nil, fmt.Errorf("%w: expected a turn_stopped update for turn %q within %s, got %s",
				errNoStopYet, turn, d.Round(time.Millisecond), describe(ups))
		}
		var end *streamEnd
		if errors.As(err, &end) {
			return ups, nil, fmt.Errorf("the Updates stream ended after %s, before the turn_stopped of turn %q: %v%s",
				describe(ups), turn, end.err, end.note)
		}
		if err != nil {
			return ups, nil, fmt.Errorf("%w, before the turn_stopped of turn %q (received %s)", err, turn, describe(ups))
		}
		ups = append(ups, u)
		if isStop(u, turn) {
			ts := u.Stop()
			return ups, &turnStop{reason: ts.StopReason, err: ts.Error}, nil
		}
	}
}

// turnStop is how a turn ended, as its turn_stopped update says.
type turnStop struct{ reason, err string }

func isStop(u *pluginclient.Update, turn string) bool {
	return u.Stop() != nil && u.TurnID == turn
}

func expectStop(stop *turnStop, want, prompt string) error {
	if stop.reason == want {
		return nil
	}
	return fmt.Errorf("the turn of prompt %q stopped with %s, expected stop reason %q", prompt, stopString(stop), want)
}

func stopString(stop *turnStop) string {
	if stop == nil {
		return "no turn_stopped"
	}
	s := fmt.Sprintf("stop reason %q", stop.reason)
	if stop.err != "" {
		s += fmt.Sprintf(" (error %q)", stop.err)
	}
	return s
}

func countKind(ups []*pluginclient.Update, turn, k string) int {
	n := 0
	for _, u := range ups {
		if u.TurnID == turn && u.Kind == k {
			n++
		}
	}
	return n
}

// describe summarises updates for an error message.
func describe(ups []*pluginclient.Update) string {
	if len(ups) == 0 {
		return "no updates"
	}
	const most = 8
	var parts []string
	for i, u := range ups {
		if i == most {
			parts = append(parts, fmt.Sprintf("… %d more", len(ups)-most))
			break
		}
		parts = append(parts, fmt.Sprintf("%d:%s", u.Seq, u.Kind))
	}
	return fmt.Sprintf("%d updates [%s]", len(ups), strings.Join(parts, " "))
}
