package sdk

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agenthost/agenthost/internal/agentpb"
	"github.com/agenthost/agenthost/internal/wire"
)

// server implements the plugin protocol over one Agent. It owns the session
// binding, the fence, the running turn, pending permission requests and the
// outbox.
type server struct {
	agentpb.UnimplementedAgentServer
	agentpb.UnimplementedAgentV2Server

	name     string
	caps     Capabilities
	factory  Factory
	env      Environment
	log      hclog.Logger
	pid      int
	token    string
	instance string
	box      *outbox

	mu sync.Mutex
	// version is the plugin protocol version negotiated (ServeVersion),
	// which Identify reports; the newest until go-plugin says.
	version   int
	fence     uint64 // highest fence attached; 0 = never
	sessionID string
	bound     bool
	agent     Agent
	handle    string
	opening   bool // an open is in progress
	turn      *runningTurn
	// started are the turn ids this process has started, the newest
	// startedTurnsKept of them: a prompt naming one is refused
	// (ReasonTurnStarted), never run twice.
	started startedTurns
	// perms are the permission requests the agent waits on, by id, and
	// their ids in the order they were asked (Identify reports them, so a
	// host that readopts the plugin learns them whatever its journal
	// holds). A request leaves them only when it is answered or its turn
	// is cancelled: a host going away (its stream breaking, a detach) is
	// no answer, and the next host asks again.
	perms     map[string]*pendingPermission
	permOrder []string
	closed    bool
	// fenceRaised is closed and replaced whenever the fence rises, so
	// streams of an older host end.
	fenceRaised chan struct{}
	// Self-fencing (cluster mode, see selffence.go): fenceBound is the
	// bound (0: off), deadline the moment the plugin fences itself unless
	// a Heartbeat moves it, in nanoseconds on the fence clock (fenceNow),
	// fenceTimer cancels the turn then (stopped by shutdown), fenced says
	// the lapse was logged. clockOrigin is where the fence clock counts
	// from where the machine has no boot clock.
	fenceBound  time.Duration
	deadline    int64
	fenceTimer  *time.Timer
	fenced      bool
	clockOrigin time.Time
}

type pendingPermission struct {
	turnID string
	req    *agentpb.PermissionRequest
	answer chan PermissionOutcome // buffered; receives at most one answer
}

type runningTurn struct {
	id     string
	cancel context.CancelFunc
	done   chan struct{}
	// selfFenced: the plugin cancelled the turn fencing itself (s.mu).
	selfFenced bool
}

func newServer(name string, caps Capabilities, factory Factory, env Environment, pid int, token string, memLimit int) *server {
	s := &server{
		name: name, caps: caps, factory: factory, log: env.Logger, pid: pid, token: token,
		instance:    rand.Text(),
		version:     ProtocolVersion,
		box:         newOutbox(env.SessionDir, memLimit, env.Logger),
		perms:       map[string]*pendingPermission{},
		fenceRaised: make(chan struct{}),
		clockOrigin: time.Now(),
	}
	env.Reporter = &Reporter{srv: s}
	s.env = env
	return s
}

func staleFence(got, have uint64) error {
	return refuse(wire.ReasonStaleFence, "stale fence: the call carries fence %d, this plugin is attached at fence %d", got, have)
}

// refuse returns a FAILED_PRECONDITION refusal carrying reason, so the host
// can tell the refusals apart without reading their messages.
func refuse(reason wire.Reason, format string, args ...any) error {
	return wire.Refusal(codes.FailedPrecondition, reason, fmt.Sprintf(format, args...))
}

// check admits a call carrying fence: the plugin must be attached at exactly
// that fence, and its session not closed. Callers hold s.mu.
func (s *server) check(fence uint64) error {
	if err := s.checkFence(fence); err != nil {
		return err
	}
	if s.closed {
		return refuse(wire.ReasonClosed, "session closed")
	}
	return nil
}

// checkFence admits a call carrying fence regardless of whether the session
// was closed: a host still reads and acknowledges the updates of a closed
// session. Callers hold s.mu.
func (s *server) checkFence(fence uint64) error {
	switch {
	case !s.bound:
		return refuse(wire.ReasonNotAttached, "not attached: call Attach first")
	case fence < s.fence:
		return staleFence(fence, s.fence)
	case fence > s.fence:
		return refuse(wire.ReasonFenceNotAttached, "fence %d was never attached (attached at %d): call Attach first", fence, s.fence)
	}
	return nil
}

// ServeVersion implements wire.VersionServer.
func (s *server) ServeVersion(version int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.version = version
}

func (s *server) servedVersion() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version
}

func (s *server) Identify(ctx context.Context, _ *agentpb.IdentifyRequest) (*agentpb.IdentifyResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.identity(), nil
}

// identity is Identify's answer. Callers hold s.mu.
func (s *server) identity() *agentpb.IdentifyResponse {
	version := ""
	if d, ok := s.agent.(Describer); ok {
		version = d.AgentVersion()
	}
	// The agent exists only once a session opens, so what it implements
	// is known only then; before, the declared capabilities answer.
	_, setMode := s.agent.(ModeSetter)
	_, setConfig := s.agent.(ConfigOptionSetter)
	_, exports := s.agent.(StateExporter)
	return &agentpb.IdentifyResponse{
		SessionId: s.sessionID, SpawnToken: s.token, Pid: int64(s.pid), InstanceId: s.instance,
		ProtocolVersion: int32(s.version), AgentName: s.name, AgentVersion: version,
		Fence: s.fence, Handle: s.handle, LastSeq: s.box.lastSeq(),
		Capabilities:       capabilitiesToProto(s.caps, s.caps.Modes || setMode, s.caps.ConfigOptions || setConfig),
		PendingPermissions: s.pendingPermissions(), ExportsState: exports,
	}
}

// pendingPermissions returns the requests the agent waits on, oldest
// first. Callers hold s.mu.
func (s *server) pendingPermissions() []*agentpb.PermissionRequest {
	out := make([]*agentpb.PermissionRequest, 0, len(s.permOrder))
	for _, id := range s.permOrder {
		if pp, ok := s.perms[id]; ok {
			out = append(out, pp.req)
		}
	}
	return out
}

// takePermission removes request id from the pending ones and returns it;
// whoever takes it resolves it, exactly once. Callers hold s.mu.
func (s *server) takePermission(id string) (*pendingPermission, bool) {
	pp, ok := s.perms[id]
	if ok {
		delete(s.perms, id)
		s.permOrder = slices.DeleteFunc(s.permOrder, func(x string) bool { return x == id })
	}
	return pp, ok
}

func (s *server) Attach(ctx context.Context, req *agentpb.AttachRequest) (*agentpb.AttachResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.attach(req.Fence, req.SessionId); err != nil {
		return nil, err
	}
	return &agentpb.AttachResponse{Fence: s.fence, LastSeq: s.box.lastSeq()}, nil
}

// attach binds the process to sessionID (first call) and raises the fence
// to fence, ending the streams of lower fences. Callers hold s.mu.
func (s *server) attach(fence uint64, sessionID string) error {
	if fence == 0 {
		return status.Error(codes.InvalidArgument, "attach needs a fence above 0")
	}
	if fence < s.fence {
		return staleFence(fence, s.fence)
	}
	if s.bound && sessionID != s.sessionID {
		return refuse(wire.ReasonOtherSession, "this plugin process serves session %q, not %q", s.sessionID, sessionID)
	}
	s.sessionID, s.bound = sessionID, true
	if fence > s.fence {
		s.fence = fence
		close(s.fenceRaised)
		s.fenceRaised = make(chan struct{})
		s.log.Info("attached", "fence", fence)
	}
	return nil
}

// Open implements protocol version 2's combined call (see the AgentV2
// service): the checks and effects of Attach, then of NewSession or
// ResumeSession, then the Opened answer and the Updates loop, on one
// stream. The stream's end is captured at the attach, so a newer fence
// attaching while the agent opens the session ends it as it would end an
// Updates stream.
func (s *server) Open(req *agentpb.OpenRequest, stream agentpb.AgentV2_OpenServer) error {
	ctx := stream.Context()
	s.mu.Lock()
	if (req.SpawnToken != "" && req.SpawnToken != s.token) || (req.InstanceId != "" && req.InstanceId != s.instance) {
		s.mu.Unlock()
		return refuse(wire.ReasonNotThisProcess, "this plugin process (pid %d) is not the one asked for: another spawn token or instance id", s.pid)
	}
	if err := s.attach(req.Fence, req.SessionId); err != nil {
		s.mu.Unlock()
		return err
	}
	raised := s.fenceRaised
	s.mu.Unlock()
	var session *agentpb.SessionResponse
	var err error
	switch o := req.Open.(type) {
	case *agentpb.OpenRequest_NewSession:
		n := o.NewSession
		session, err = s.open(ctx, req.Fence, func(a Agent) (SessionInfo, error) {
			return a.NewSession(ctx, NewSessionRequest{Workspace: n.Workspace, Options: n.Options, MCPServers: mcpServersFromProto(n.McpServers)})
		})
	case *agentpb.OpenRequest_ResumeSession:
		session, err = s.resume(ctx, req.Fence, o.ResumeSession)
	}
	if err != nil {
		return err
	}
	s.mu.Lock()
	opened := &agentpb.Opened{Identity: s.identity(), Session: session}
	s.mu.Unlock()
	if err := stream.Send(&agentpb.OpenEvent{Kind: &agentpb.OpenEvent_Opened{Opened: opened}}); err != nil {
		return err
	}
	return s.follow(ctx, req.Fence, req.FromSeq, raised, func(u *agentpb.Update) error {
		return stream.Send(&agentpb.OpenEvent{Kind: &agentpb.OpenEvent_Update{Update: u}})
	})
}

func (s *server) NewSession(ctx context.Context, req *agentpb.NewSessionRequest) (*agentpb.SessionResponse, error) {
	return s.open(ctx, req.Fence, func(a Agent) (SessionInfo, error) {
		return a.NewSession(ctx, NewSessionRequest{Workspace: req.Workspace, Options: req.Options, MCPServers: mcpServersFromProto(req.McpServers)})
	})
}

func (s *server) ResumeSession(ctx context.Context, req *agentpb.ResumeSessionRequest) (*agentpb.SessionResponse, error) {
	return s.resume(ctx, req.Fence, req)
}

// resume is ResumeSession at fence (Open passes its own).
func (s *server) resume(ctx context.Context, fence uint64, req *agentpb.ResumeSessionRequest) (*agentpb.SessionResponse, error) {
	if req.Handle == "" {
		return nil, status.Error(codes.InvalidArgument, "resume needs the provider handle")
	}
	return s.open(ctx, fence, func(a Agent) (SessionInfo, error) {
		if err := importState(ctx, a, req.Handle, req.ProviderState); err != nil {
			return SessionInfo{}, err
		}
		return a.ResumeSession(ctx, ResumeSessionRequest{Workspace: req.Workspace, Options: req.Options, Handle: req.Handle,
			MCPServers: mcpServersFromProto(req.McpServers)})
	})
}

// open creates the agent if needed and opens the session with it. Agent
// errors travel as FAILED_PRECONDITION with the agent's own message, which
// the host reports as the readiness failure.
func (s *server) open(ctx context.Context, fence uint64, do func(Agent) (SessionInfo, error)) (*agentpb.SessionResponse, error) {
	s.mu.Lock()
	if err := s.check(fence); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	if s.handle != "" || s.opening {
		s.mu.Unlock()
		return nil, refuse(wire.ReasonAlreadyOpen, "a session is already open (or opening) in this plugin process")
	}
	s.opening = true
	a := s.agent
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.opening = false
		s.mu.Unlock()
	}()
	if a == nil {
		var err error
		if a, err = s.factory(ctx, s.env); err != nil {
			return nil, agentError(err)
		}
		if a == nil {
			return nil, status.Error(codes.Internal, "the plugin's factory returned no agent")
		}
		if err := s.implementsDeclared(a); err != nil {
			return nil, err
		}
	}
	info, err := do(a)
	if err != nil {
		s.mu.Lock()
		s.agent = a
		s.mu.Unlock()
		return nil, agentError(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.agent = a
	if info.Handle == "" {
		return nil, status.Error(codes.Internal, "the agent opened a session without a provider handle")
	}
	// A newer host may have attached while the agent was opening.
	if err := s.check(fence); err != nil {
		return nil, err
	}
	s.handle = info.Handle
	return &agentpb.SessionResponse{Handle: info.Handle, Options: info.Options, Modes: modesToProto(info.Modes),
		ConfigOptions: configOptionsToProto(info.ConfigOptions)}, nil
}

// implementsDeclared refuses an agent that lacks an interface its plugin
// declared: the host offers a client what Identify reported, so a
// declared call the agent cannot serve is a bug to surface at once.
func (s *server) implementsDeclared(a Agent) error {
	if _, ok := a.(ModeSetter); s.caps.Modes && !ok {
		return status.Errorf(codes.Internal, "the plugin declares modes, but its agent (%T) implements no sdk.ModeSetter", a)
	}
	if _, ok := a.(ConfigOptionSetter); s.caps.ConfigOptions && !ok {
		return status.Errorf(codes.Internal, "the plugin declares config options, but its agent (%T) implements no sdk.ConfigOptionSetter", a)
	}
	return nil
}

// openAgent returns the agent of the open session, for a call that
// needs one (SetMode, SetConfigOption).
func (s *server) openAgent(fence uint64) (Agent, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(fence); err != nil {
		return nil, err
	}
	if s.handle == "" {
		return nil, refuse(wire.ReasonNoSession, "no session is open: call NewSession or ResumeSession first")
	}
	return s.agent, nil
}

func (s *server) SetMode(ctx context.Context, req *agentpb.SetModeRequest) (*agentpb.SetModeResponse, error) {
	a, err := s.openAgent(req.Fence)
	if err != nil {
		return nil, err
	}
	m, ok := a.(ModeSetter)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "this agent has no modes")
	}
	if err := m.SetMode(ctx, req.ModeId); err != nil {
		return nil, agentError(err)
	}
	mode := req.ModeId
	s.emitSession(Update{CurrentMode: &mode})
	return &agentpb.SetModeResponse{}, nil
}

func (s *server) SetConfigOption(ctx context.Context, req *agentpb.SetConfigOptionRequest) (*agentpb.SetConfigOptionResponse, error) {
	a, err := s.openAgent(req.Fence)
	if err != nil {
		return nil, err
	}
	c, ok := a.(ConfigOptionSetter)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "this agent has no config options")
	}
	opts, err := c.SetConfigOption(ctx, req.ConfigId, req.Value)
	if err != nil {
		return nil, agentError(err)
	}
	if opts == nil {
		opts = []ConfigOption{}
	}
	s.emitSession(Update{ConfigOptions: opts})
	return &agentpb.SetConfigOptionResponse{ConfigOptions: configOptionsToProto(opts)}, nil
}

func (s *server) Prompt(ctx context.Context, req *agentpb.PromptRequest) (*agentpb.PromptResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(req.Fence); err != nil {
		return nil, err
	}
	if s.handle == "" {
		return nil, refuse(wire.ReasonNoSession, "no session is open: call NewSession or ResumeSession first")
	}
	if id := req.TurnId; id != "" && s.started.has(id) {
		state := wire.TurnStateEnded
		if s.turn != nil && s.turn.id == id {
			state = wire.TurnStateRunning
		}
		return nil, wire.RefusalWith(codes.FailedPrecondition, wire.ReasonTurnStarted,
			fmt.Sprintf("turn %s was already started in this plugin (%s): it is not run again", id, state),
			map[string]string{wire.MetaTurnState: state})
	}
	// A prompt for a turn this process started is answered as such
	// above, fenced or not: it is no new turn.
	if now, _ := s.fenceNow(); s.pastDeadline(now) {
		s.fenceSelf()
		return nil, refuse(wire.ReasonSelfFenced, "%s", s.selfFencedMessage())
	}
	if s.turn != nil {
		return nil, refuse(wire.ReasonBusy, "turn %s is still running", s.turn.id)
	}
	id := req.TurnId
	if id == "" {
		id = newTurnID()
	}
	s.started.add(id)
	turnCtx, cancel := context.WithCancel(context.Background())
	rt := &runningTurn{id: id, cancel: cancel, done: make(chan struct{})}
	s.turn = rt
	prompt := PromptRequest{TurnID: id, Prompt: blocksFromProto(req.Prompt)}
	a := s.agent
	go s.runTurn(turnCtx, a, prompt, rt)
	return &agentpb.PromptResponse{TurnId: id}, nil
}

// startedTurnsKept bounds the turn ids a plugin remembers having started.
// A host re-sends only its session's last open prompt, and a session's
// turns in one plugin process are few, so the newest 1024 cover every
// re-send that can happen.
const startedTurnsKept = 1024

// startedTurns is a bounded set of turn ids, the oldest forgotten first.
type startedTurns struct {
	ids   map[string]struct{}
	order []string
}

func (t *startedTurns) has(id string) bool { _, ok := t.ids[id]; return ok }

func (t *startedTurns) add(id string) {
	if t.ids == nil {
		t.ids = map[string]struct{}{}
	}
	if t.has(id) {
		return
	}
	if len(t.order) == startedTurnsKept {
		delete(t.ids, t.order[0])
		t.order = append(t.order[:0], t.order[1:]...)
	}
	t.ids[id] = struct{}{}
	t.order = append(t.order, id)
}

// runTurn runs one turn and always ends it with a turn_stopped update. A
// panicking agent fails the turn instead of taking the plugin down.
func (s *server) runTurn(ctx context.Context, a Agent, req PromptRequest, rt *runningTurn) {
	defer close(rt.done)
	defer rt.cancel()
	reason, err := func() (reason StopReason, err error) {
		defer func() {
			if p := recover(); p != nil {
				s.log.Error("agent panicked during a turn", "panic", p)
				err = fmt.Errorf("the agent panicked: %v", p)
			}
		}()
		return a.Prompt(ctx, req, &Turn{id: req.TurnID, srv: s})
	}()
	stop := &turnStopped{StopReason: reason}
	switch {
	case err != nil && ctx.Err() != nil:
		// Cancelled: whatever the agent's error says (a CLI killed by the
		// cancellation reports "signal: killed"), the turn was cancelled.
		s.log.Debug("turn ended with an error after it was cancelled", "turn", req.TurnID, "error", err)
		stop.StopReason = StopCancelled
	case err != nil:
		stop.StopReason, stop.Error, stop.AuthRequired = StopFailed, err.Error(), errors.Is(err, ErrAuthRequired)
	case stop.StopReason == "":
		stop.StopReason = StopEndTurn
	}
	// Mark the turn over before publishing its end, so a host that sees
	// turn_stopped can start the next turn at once.
	s.mu.Lock()
	if s.turn == rt {
		s.turn = nil
	}
	if rt.selfFenced && stop.StopReason == StopCancelled {
		stop.Error = s.selfFencedMessage()
	}
	s.mu.Unlock()
	s.emit(Update{turnID: req.TurnID, turnStopped: stop})
}

// emitInTurn appends an agent's update unless its turn has ended.
func (s *server) emitInTurn(turnID string, u Update) error {
	s.mu.Lock()
	running := s.turn != nil && s.turn.id == turnID
	s.mu.Unlock()
	if !running {
		return fmt.Errorf("sdk: turn %s has ended; its updates are closed", turnID)
	}
	if u.sessionLevel() {
		s.emitSession(u)
		return nil
	}
	if u.HandleChanged != nil && u.HandleChanged.Handle != "" {
		// Identify reports the newest handle, so a host that readopts
		// this plugin resumes the right conversation.
		s.mu.Lock()
		s.handle = u.HandleChanged.Handle
		s.mu.Unlock()
	}
	s.emit(u)
	return nil
}

// emitSession appends a session-level update (no turn id). A handle
// change moves the handle Identify reports, as one inside a turn does, so
// a host that readopts the plugin after a /clear resumes the new
// conversation; before a session is open, the handle the open returns
// decides.
func (s *server) emitSession(u Update) {
	u.turnID = ""
	if u.HandleChanged != nil && u.HandleChanged.Handle != "" {
		s.mu.Lock()
		if s.handle != "" {
			s.handle = u.HandleChanged.Handle
		}
		s.mu.Unlock()
	}
	s.emit(u)
}

func (s *server) emit(u Update) {
	if u.Time.IsZero() {
		u.Time = time.Now()
	}
	s.box.append(updateToProto(u))
}

// maxBatch bounds how many updates one read of the outbox sends.
const maxBatch = 256

func (s *server) Updates(req *agentpb.UpdatesRequest, stream agentpb.Agent_UpdatesServer) error {
	s.mu.Lock()
	if err := s.checkFence(req.Fence); err != nil {
		s.mu.Unlock()
		return err
	}
	raised := s.fenceRaised
	s.mu.Unlock()
	return s.follow(stream.Context(), req.Fence, req.FromSeq, raised, stream.Send)
}

// follow sends the outbox's updates from seq from, then live ones, until
// ctx ends, send fails, or raised closes (a newer fence attached: the
// stream ends refusing fence as stale).
func (s *server) follow(ctx context.Context, fence, from uint64, raised <-chan struct{}, send func(*agentpb.Update) error) error {
	from = max(from, 1)
	for {
		batch, changed, err := s.box.read(from, maxBatch)
		if err != nil {
			return status.Error(codes.DataLoss, err.Error())
		}
		for _, u := range batch {
			if err := send(u); err != nil {
				// The host is gone. The updates stay in the outbox until a
				// host acknowledges them.
				return err
			}
			from = u.Seq + 1
		}
		if len(batch) == maxBatch {
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-raised:
			s.mu.Lock()
			f := s.fence
			s.mu.Unlock()
			return staleFence(fence, f)
		case <-changed:
		}
	}
}

func (s *server) Acknowledge(ctx context.Context, req *agentpb.AcknowledgeRequest) (*agentpb.AcknowledgeResponse, error) {
	s.mu.Lock()
	err := s.checkFence(req.Fence)
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	s.box.ack(req.Seq)
	return &agentpb.AcknowledgeResponse{}, nil
}

func (s *server) requestPermission(ctx context.Context, turnID string, req PermissionRequest) (PermissionOutcome, error) {
	pp := &pendingPermission{turnID: turnID, req: permissionRequestToProto(&req), answer: make(chan PermissionOutcome, 1)}
	s.mu.Lock()
	s.perms[req.RequestID] = pp
	s.permOrder = append(s.permOrder, req.RequestID)
	s.mu.Unlock()
	s.emit(Update{turnID: turnID, permissionRequest: &req})
	// Only an answer or the turn's end resolves the request: nothing here
	// watches the host, whose going away leaves it pending for the next.
	select {
	case out := <-pp.answer:
		return out, nil
	case <-ctx.Done():
	}
	// Cancelled. An answer may have won the race: whoever removes the
	// request from the table resolves it, exactly once.
	s.mu.Lock()
	_, stillPending := s.takePermission(req.RequestID)
	s.mu.Unlock()
	if !stillPending {
		return <-pp.answer, nil
	}
	out := PermissionOutcome{Outcome: "cancelled"}
	s.emit(Update{turnID: turnID, permissionResolved: &permissionResolved{RequestID: req.RequestID, Outcome: out}})
	return out, ctx.Err()
}

func (s *server) AnswerPermission(ctx context.Context, req *agentpb.AnswerPermissionRequest) (*agentpb.AnswerPermissionResponse, error) {
	s.mu.Lock()
	if err := s.check(req.Fence); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	pp, ok := s.takePermission(req.RequestId)
	s.mu.Unlock()
	if !ok {
		return nil, status.Errorf(codes.NotFound, "no pending permission request %q", req.RequestId)
	}
	out := PermissionOutcome{Outcome: "cancelled"}
	if req.Outcome != nil {
		out = PermissionOutcome{Outcome: req.Outcome.Outcome, OptionID: req.Outcome.OptionId}
	}
	// Record the answer before the agent can act on it, so the journal
	// never shows the agent's reaction ahead of the answer.
	s.emit(Update{turnID: pp.turnID, permissionResolved: &permissionResolved{RequestID: req.RequestId, Outcome: out}})
	pp.answer <- out
	return &agentpb.AnswerPermissionResponse{}, nil
}

func (s *server) Cancel(ctx context.Context, req *agentpb.CancelRequest) (*agentpb.CancelResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(req.Fence); err != nil {
		return nil, err
	}
	if s.turn != nil {
		s.turn.cancel()
	}
	return &agentpb.CancelResponse{}, nil
}

func (s *server) Close(ctx context.Context, req *agentpb.CloseRequest) (*agentpb.CloseResponse, error) {
	s.mu.Lock()
	if err := s.checkFence(req.Fence); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	s.mu.Unlock()
	if err := s.shutdown(ctx); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &agentpb.CloseResponse{}, nil
}

// shutdown cancels the running turn, waits for it to end (bounded by ctx)
// and closes the agent. It is idempotent.
func (s *server) shutdown(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	if s.fenceTimer != nil {
		s.fenceTimer.Stop()
	}
	rt, a := s.turn, s.agent
	s.mu.Unlock()
	if rt != nil {
		rt.cancel()
		select {
		case <-rt.done:
		case <-ctx.Done():
			s.log.Warn("turn did not end before shutdown", "turn", rt.id)
		}
	}
	if c, ok := a.(Closer); ok {
		if err := c.Close(ctx); err != nil {
			return fmt.Errorf("close agent: %w", err)
		}
	}
	return nil
}

// agentError carries an agent's error to the host with its own message:
// an *InvalidOptionError as INVALID_ARGUMENT with reason INVALID_SETTING
// (naming the setting in the ErrorInfo metadata), ErrAuthRequired as
// FAILED_PRECONDITION with reason AUTH_REQUIRED, ErrNotImplemented as
// UNIMPLEMENTED, anything else as FAILED_PRECONDITION with reason
// AGENT_ERROR, which the host reports as the plugin's failure.
func agentError(err error) error {
	var invalid *InvalidOptionError
	var own *sdkRefusal
	switch {
	case errors.As(err, &own):
		return own.status
	case errors.As(err, &invalid):
		return wire.RefusalWith(codes.InvalidArgument, wire.ReasonInvalidSetting, err.Error(),
			map[string]string{wire.MetaOption: invalid.Option, wire.MetaReason: invalid.Reason})
	case errors.Is(err, ErrAuthRequired):
		return wire.Refusal(codes.FailedPrecondition, wire.ReasonAuthRequired, err.Error())
	case errors.Is(err, ErrNotImplemented):
		return status.Error(codes.Unimplemented, err.Error())
	}
	return wire.Refusal(codes.FailedPrecondition, wire.ReasonAgent, err.Error())
}
