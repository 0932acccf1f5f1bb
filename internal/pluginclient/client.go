package pluginclient

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agenthost/agenthost/internal/agentpb"
	"github.com/agenthost/agenthost/internal/wire"
	"github.com/agenthost/agenthost/journal"
)

// Client is the host side of one plugin process's Agent service, at the
// protocol version negotiated with it. It is safe for concurrent use.
type Client struct {
	rpc     agentpb.AgentClient
	v2      agentpb.AgentV2Client
	version int
}

// New returns a client over a gRPC connection to a plugin that speaks
// protocol version (wire.ProtocolVersion1, wire.ProtocolVersion2): what
// go-plugin negotiated at its start, or what the lease recorded of it.
func New(conn grpc.ClientConnInterface, version int) *Client {
	c := &Client{rpc: agentpb.NewAgentClient(conn), version: version}
	if version >= wire.ProtocolVersion2 {
		c.v2 = agentpb.NewAgentV2Client(conn)
	}
	return c
}

// Dispense returns a client for the agent plugin of a go-plugin connection
// (what plugin.Client.Client returns) at protocol version (what
// plugin.Client.NegotiatedVersion returns).
func Dispense(c plugin.ClientProtocol, version int) (*Client, error) {
	raw, err := c.Dispense(wire.PluginName)
	if err != nil {
		return nil, err
	}
	conn, ok := raw.(grpc.ClientConnInterface)
	if !ok {
		return nil, fmt.Errorf("the %q plugin is a %T, not a gRPC connection", wire.PluginName, raw)
	}
	return New(conn, version), nil
}

// Version returns the protocol version the client speaks.
func (c *Client) Version() int { return c.version }

// Identity is who a plugin process says it is (Identify).
type Identity struct {
	// SessionID is empty until the first Attach binds the process.
	SessionID  string
	SpawnToken string
	PID        int
	// InstanceID is random per process start.
	InstanceID      string
	ProtocolVersion int
	AgentName       string
	AgentVersion    string
	// Fence is the highest fence attached so far (0: never attached).
	Fence uint64
	// Handle is the provider handle of the open session, if any.
	Handle string
	// LastSeq is the newest update seq the plugin produced.
	LastSeq uint64
	// Capabilities are what the agent declares it supports.
	Capabilities Capabilities
	// PendingPermissions are the permission requests the agent waits on,
	// oldest first; none from a plugin built before it reported them.
	PendingPermissions []*journal.PermissionRequest
	// ExportsState: the agent exports its provider state (ExportState),
	// so the session can continue on another machine. Known once a
	// session is open; false from plugins built before it existed.
	ExportsState bool
}

// Identify asks the process who it is. It changes nothing and carries no
// fence.
func (c *Client) Identify(ctx context.Context) (Identity, error) {
	r, err := c.rpc.Identify(ctx, &agentpb.IdentifyRequest{})
	if err != nil {
		return Identity{}, classify(ctx, err)
	}
	return identityFromProto(r), nil
}

func identityFromProto(r *agentpb.IdentifyResponse) Identity {
	var pending []*journal.PermissionRequest
	for _, q := range r.PendingPermissions {
		pending = append(pending, permissionRequest(q))
	}
	return Identity{
		SessionID: r.SessionId, SpawnToken: r.SpawnToken, PID: int(r.Pid), InstanceID: r.InstanceId,
		ProtocolVersion: int(r.ProtocolVersion), AgentName: r.AgentName, AgentVersion: r.AgentVersion,
		Fence: r.Fence, Handle: r.Handle, LastSeq: r.LastSeq, Capabilities: capabilitiesFromProto(r.Capabilities),
		PendingPermissions: pending, ExportsState: r.ExportsState,
	}
}

// AttachResult is a plugin's answer to Attach.
type AttachResult struct {
	// Fence is the fence the plugin is attached at now, the one asked for.
	Fence uint64
	// LastSeq is the newest update seq the plugin produced.
	LastSeq uint64
}

// Attach binds the process to sessionID (on the first call) and raises its
// fence to fence. The returned Attachment carries fence on every call it
// makes. Attach fails with ErrStaleFence below the plugin's fence, with
// ErrOtherSession for another session id.
func (c *Client) Attach(ctx context.Context, sessionID string, fence uint64) (*Attachment, AttachResult, error) {
	r, err := c.rpc.Attach(ctx, &agentpb.AttachRequest{Fence: fence, SessionId: sessionID})
	if err != nil {
		return nil, AttachResult{}, classify(ctx, err)
	}
	return &Attachment{rpc: c.rpc, client: c, fence: fence}, AttachResult{Fence: r.Fence, LastSeq: r.LastSeq}, nil
}

// Attachment drives a plugin at the fence one Attach (or Open) bound. It
// is safe for concurrent use.
type Attachment struct {
	rpc    agentpb.AgentClient
	client *Client
	fence  uint64

	mu sync.Mutex
	// opened is the update stream Open started, until Updates takes it
	// or Discard ends it.
	opened *UpdateStream
	// openedFrom is the seq opened starts at; openedCancel ends it.
	openedFrom   uint64
	openedCancel context.CancelFunc
}

// Fence returns the fence every call of a carries.
func (a *Attachment) Fence() uint64 { return a.fence }

// ContentBlock is an ACP content block: Type "text" carries Text, any other
// type its ACP JSON in JSON.
type ContentBlock struct {
	Type string
	Text string
	JSON string
}

// Text returns a prompt of one text block.
func Text(s string) []ContentBlock { return []ContentBlock{{Type: "text", Text: s}} }

// NewSessionRequest asks for a new provider conversation.
type NewSessionRequest struct {
	Workspace  string
	Options    map[string]string
	MCPServers []MCPServer
}

// ResumeSessionRequest asks to reopen the conversation named by Handle.
type ResumeSessionRequest struct {
	Workspace  string
	Options    map[string]string
	MCPServers []MCPServer
	Handle     string
	// ProviderState, when not empty, is what an ExportState of the
	// conversation returned (on this machine or another): the plugin
	// imports it before it resumes Handle, and refuses the resume with
	// ErrStateNotImportable when its agent cannot.
	ProviderState []byte
}

// SessionInfo describes the conversation a plugin opened.
type SessionInfo struct {
	// Handle is the provider's handle; a resume may report a new one.
	Handle string
	// Options are the options the agent acknowledged.
	Options map[string]string
	// Modes are the session's modes; nil when the agent has none.
	Modes         *ModeState
	ConfigOptions []ConfigOption
}

// NewSession starts a new provider conversation. The agent's own failure
// matches ErrAgent, with its message.
func (a *Attachment) NewSession(ctx context.Context, req NewSessionRequest) (SessionInfo, error) {
	r, err := a.rpc.NewSession(ctx, &agentpb.NewSessionRequest{Fence: a.fence, Workspace: req.Workspace, Options: req.Options,
		McpServers: mcpServersToProto(req.MCPServers)})
	if err != nil {
		return SessionInfo{}, classify(ctx, err)
	}
	return sessionInfoFromProto(r), nil
}

// ResumeSession reopens a conversation from its provider handle.
func (a *Attachment) ResumeSession(ctx context.Context, req ResumeSessionRequest) (SessionInfo, error) {
	r, err := a.rpc.ResumeSession(ctx, &agentpb.ResumeSessionRequest{Fence: a.fence, Workspace: req.Workspace, Options: req.Options,
		Handle: req.Handle, McpServers: mcpServersToProto(req.MCPServers), ProviderState: req.ProviderState})
	if err != nil {
		return SessionInfo{}, classify(ctx, err)
	}
	return sessionInfoFromProto(r), nil
}

// PromptRequest is one user turn.
type PromptRequest struct {
	// TurnID is the caller's id for the turn; the plugin picks one when
	// empty.
	TurnID string
	Prompt []ContentBlock
}

// Prompt starts a turn and returns its id at once; the turn's updates
// arrive on Updates and end with a turn_stopped update. A turn still
// running matches ErrBusy.
func (a *Attachment) Prompt(ctx context.Context, req PromptRequest) (string, error) {
	blocks := make([]*agentpb.ContentBlock, len(req.Prompt))
	for i, b := range req.Prompt {
		blocks[i] = &agentpb.ContentBlock{Type: b.Type, Text: b.Text, Json: b.JSON}
	}
	r, err := a.rpc.Prompt(ctx, &agentpb.PromptRequest{Fence: a.fence, TurnId: req.TurnID, Prompt: blocks})
	if err != nil {
		return "", classify(ctx, err)
	}
	return r.TurnId, nil
}

// Acknowledge tells the plugin every update up to seq is durable; it may
// forget them.
func (a *Attachment) Acknowledge(ctx context.Context, seq uint64) error {
	_, err := a.rpc.Acknowledge(ctx, &agentpb.AcknowledgeRequest{Fence: a.fence, Seq: seq})
	return classify(ctx, err)
}

// PermissionOutcome answers a permission request: Outcome "selected" with
// the chosen OptionID, or "cancelled".
type PermissionOutcome struct {
	Outcome  string
	OptionID string
}

// Answer returns the outcome that selects optionID; an empty optionID
// cancels the request.
func Answer(optionID string) PermissionOutcome {
	if optionID == "" {
		return PermissionOutcome{Outcome: "cancelled"}
	}
	return PermissionOutcome{Outcome: "selected", OptionID: optionID}
}

// AnswerPermission answers a permission_request update. A request that is
// not pending matches ErrUnknownRequest.
func (a *Attachment) AnswerPermission(ctx context.Context, requestID string, out PermissionOutcome) error {
	_, err := a.rpc.AnswerPermission(ctx, &agentpb.AnswerPermissionRequest{Fence: a.fence, RequestId: requestID,
		Outcome: &agentpb.PermissionOutcome{Outcome: out.Outcome, OptionId: out.OptionID}})
	return classify(ctx, err)
}

// Cancel stops the running turn, which ends with stop reason "cancelled".
func (a *Attachment) Cancel(ctx context.Context) error {
	_, err := a.rpc.Cancel(ctx, &agentpb.CancelRequest{Fence: a.fence})
	return classify(ctx, err)
}

// Close ends the session gracefully: the agent releases what it holds. The
// plugin process keeps running until it is stopped.
func (a *Attachment) Close(ctx context.Context) error {
	_, err := a.rpc.Close(ctx, &agentpb.CloseRequest{Fence: a.fence})
	return classify(ctx, err)
}

// UpdateStream is one Updates stream: it replays the unacknowledged updates
// from the seq asked for, then follows live ones.
type UpdateStream struct {
	ctx  context.Context
	recv func() (*agentpb.Update, error)
	// stop releases a stream Open started once it ended (nil otherwise).
	stop func()
}

// Updates opens the update stream from seq fromSeq. It ends when ctx does,
// with ErrStaleFence when a newer fence attaches, or with the connection.
// The first call after Open, from the seq Open was asked for, takes the
// stream Open already started (no round trip); from another seq, that
// stream is ended and a new one opened.
func (a *Attachment) Updates(ctx context.Context, fromSeq uint64) (*UpdateStream, error) {
	a.mu.Lock()
	opened, from, cancel := a.opened, a.openedFrom, a.openedCancel
	a.opened, a.openedCancel = nil, nil
	a.mu.Unlock()
	if opened != nil {
		if from == fromSeq && ctx.Err() == nil {
			// The stream ends when ctx does, as one opened here would.
			stop := context.AfterFunc(ctx, cancel)
			opened.ctx, opened.stop = ctx, func() { stop(); cancel() }
			return opened, nil
		}
		cancel()
	}
	s, err := a.rpc.Updates(ctx, &agentpb.UpdatesRequest{Fence: a.fence, FromSeq: fromSeq})
	if err != nil {
		return nil, classify(ctx, err)
	}
	return &UpdateStream{ctx: ctx, recv: s.Recv}, nil
}

// Discard ends the update stream Open started, if no Updates took it: a
// host that lets go of the plugin before it follows its updates calls it.
func (a *Attachment) Discard() {
	a.mu.Lock()
	cancel := a.openedCancel
	a.opened, a.openedCancel = nil, nil
	a.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// Recv returns the next update. A refusal of the stream (a stale fence, …)
// arrives here, as the error of the first Recv.
func (s *UpdateStream) Recv() (*Update, error) {
	u, err := s.recv()
	if err != nil {
		if s.stop != nil {
			s.stop()
		}
		return nil, classify(s.ctx, err)
	}
	return updateFromProto(u), nil
}

// OpenRequest is protocol version 2's Open: attach at Fence to SessionID,
// open the conversation New or Resume names (at most one; neither: attach
// only), and start the update stream from FromSeq, in one round trip.
type OpenRequest struct {
	SessionID string
	Fence     uint64
	// SpawnToken and InstanceID, when not empty, name the process meant:
	// another process refuses (ErrNotThisProcess) before anything
	// changes in it.
	SpawnToken, InstanceID string
	FromSeq                uint64
	New                    *NewSessionRequest
	Resume                 *ResumeSessionRequest
}

// Opened is a plugin's answer to Open.
type Opened struct {
	// Identity is who the process is once attached (and opened): Fence is
	// the request's, LastSeq the newest update produced so far.
	Identity Identity
	// Session is what the plugin opened; zero when the request asked for
	// nothing to open.
	Session SessionInfo
	// Attachment drives the plugin at the request's fence. Its first
	// Updates from the request's FromSeq takes the stream Open started;
	// Discard ends that stream when nothing will follow it.
	Attachment *Attachment
}

// ErrVersion1: the call needs protocol version 2 and the plugin speaks 1.
var ErrVersion1 = errors.New("the plugin speaks protocol version 1, which has no Open")

// Open makes protocol version 2's combined call. ctx bounds the wait for
// the plugin's answer; the update stream that follows it outlives ctx
// (it belongs to the Attachment until its Updates or Discard), so a
// caller may bound the answer by a start or reattach budget and follow the
// stream for the session's life. Refusals are Attach's, NewSession's and
// ResumeSession's, and ErrNotThisProcess.
func (c *Client) Open(ctx context.Context, req OpenRequest) (Opened, error) {
	if c.v2 == nil {
		return Opened{}, ErrVersion1
	}
	pr := &agentpb.OpenRequest{Fence: req.Fence, SessionId: req.SessionID, SpawnToken: req.SpawnToken, InstanceId: req.InstanceID,
		FromSeq: req.FromSeq}
	switch {
	case req.New != nil:
		pr.Open = &agentpb.OpenRequest_NewSession{NewSession: &agentpb.NewSessionRequest{Workspace: req.New.Workspace, Options: req.New.Options,
			McpServers: mcpServersToProto(req.New.MCPServers)}}
	case req.Resume != nil:
		pr.Open = &agentpb.OpenRequest_ResumeSession{ResumeSession: &agentpb.ResumeSessionRequest{Workspace: req.Resume.Workspace,
			Options: req.Resume.Options, Handle: req.Resume.Handle, McpServers: mcpServersToProto(req.Resume.MCPServers),
			ProviderState: req.Resume.ProviderState}}
	}
	// The stream's own context: ctx ending while the answer is awaited
	// ends it (the AfterFunc below), but once answered it lives on.
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	s, err := c.v2.Open(sctx, pr)
	var first *agentpb.OpenEvent
	if err == nil {
		first, err = s.Recv()
	}
	if !stop() || err != nil {
		cancel()
		if err == nil {
			err = ctx.Err()
		}
		return Opened{}, classify(ctx, err)
	}
	o := first.GetOpened()
	if o == nil || o.Identity == nil {
		cancel()
		return Opened{}, classify(ctx, status.Error(codes.Internal, "the plugin's Open answered with an update before its Opened"))
	}
	out := Opened{Identity: identityFromProto(o.Identity)}
	if o.Session != nil {
		out.Session = sessionInfoFromProto(o.Session)
	}
	recv := func() (*agentpb.Update, error) {
		ev, err := s.Recv()
		if err != nil {
			return nil, err
		}
		u := ev.GetUpdate()
		if u == nil {
			return nil, status.Error(codes.Internal, "the plugin's Open stream sent a second Opened")
		}
		return u, nil
	}
	out.Attachment = &Attachment{rpc: c.rpc, client: c, fence: req.Fence, opened: &UpdateStream{ctx: sctx, recv: recv},
		openedFrom: req.FromSeq, openedCancel: cancel}
	return out, nil
}
