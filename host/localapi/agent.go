package localapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	acp "github.com/coder/acp-go-sdk"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/internal/pluginclient"
	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/leasestore"
)

// agent serves one connection. ACP methods map onto the host: session/new
// starts a session, session/load replays its journal and follows it,
// session/prompt runs a turn; every update of a session the connection
// follows is sent as session/update, and the plugin's permission requests
// are asked of the client with session/request_permission.
type agent struct {
	srv  *Server
	ctx  context.Context
	conn *acp.AgentSideConnection
	out  *lockedWriter
	// notes counts the session/cancel notifications admitted and not yet
	// handled (see filterRequests).
	notes *noteGate

	mu        sync.Mutex
	followers map[string]*follower
	subs      map[uint64]context.CancelFunc // the subscriptions running, by number
	nextSub   uint64
	subWG     sync.WaitGroup
}

var (
	_ acp.Agent                  = (*agent)(nil)
	_ acp.AgentLoader            = (*agent)(nil)
	_ acp.ExtensionMethodHandler = (*agent)(nil)
)

// Initialize declares what the connection's agents support: prompt
// blocks and MCP transports (the default agent's, or what every agent
// supports; each agent's under _meta.agenthost.agents, see
// api.InitializeMeta) and every agent's auth methods. Learning an agent's
// capabilities starts its plugin once per host (host.Capabilities).
func (a *agent) Initialize(ctx context.Context, p acp.InitializeRequest) (acp.InitializeResponse, error) {
	all, several := a.agentsCapabilities(ctx)
	caps := declared(all, a.srv.DefaultAgent)
	return acp.InitializeResponse{
		ProtocolVersion: acp.ProtocolVersionNumber,
		AgentCapabilities: acp.AgentCapabilities{
			LoadSession: true,
			SessionCapabilities: acp.SessionCapabilities{
				List: &acp.SessionListCapabilities{}, Resume: &acp.SessionResumeCapabilities{}, Close: &acp.SessionCloseCapabilities{},
			},
			PromptCapabilities: promptCapabilities(caps),
			McpCapabilities:    mcpCapabilities(caps),
		},
		AgentInfo:   &acp.Implementation{Name: "agenthost", Version: a.srv.Version},
		AuthMethods: authMethods(all, several),
		Meta:        agentsMeta(all, several),
	}, nil
}

// Authenticate accepts any auth method initialize offers and tells the
// plugin nothing: a terminal login happens in the user's terminal, with
// the CLI's own command, and an API key reaches a plugin only through the
// operator's opt-in (CredentialPolicy.Inherit), never through the API.
// Either way the next session start, or the retried one, finds the
// credentials where the CLI looks; a session that still lacks them fails
// with -32000 again.
func (a *agent) Authenticate(ctx context.Context, p acp.AuthenticateRequest) (acp.AuthenticateResponse, error) {
	if all, several := a.agentsCapabilities(ctx); !knownAuthMethod(all, several, p.MethodId) {
		return acp.AuthenticateResponse{}, errf("unknown auth method %q: initialize lists the methods", p.MethodId)
	}
	return acp.AuthenticateResponse{}, nil
}

// NewSession starts a session with the settings ACP carries: mcpServers
// and the agent's options under _meta.agenthost.options. A setting the
// agent does not declare (a transport, an option) is refused before any
// plugin starts, and one the plugin refuses is refused too, both -32602
// naming it.
func (a *agent) NewSession(ctx context.Context, p acp.NewSessionRequest) (acp.NewSessionResponse, error) {
	meta, err := api.ReadNewSessionMeta(p.Meta)
	if err != nil {
		return acp.NewSessionResponse{}, errf("%v", err)
	}
	name := meta.Agent
	if name == "" {
		name = a.srv.DefaultAgent
	}
	if name == "" {
		return acp.NewSessionResponse{}, errf("name the agent in _meta.agenthost.agent; configured agents: %q", a.srv.Host.Agents())
	}
	servers, err := a.checkedServers(ctx, name, meta.Options, p.McpServers)
	if err != nil {
		return acp.NewSessionResponse{}, apiError(err)
	}
	if err := a.roomToFollow(""); err != nil {
		return acp.NewSessionResponse{}, err
	}
	s, err := a.srv.Host.StartSession(ctx, host.SessionRequest{ID: meta.SessionID, Agent: name, Workspace: p.Cwd, Options: meta.Options,
		MCPServers: servers})
	if err != nil {
		return acp.NewSessionResponse{}, apiError(err)
	}
	if err := a.follow(s.ID(), 0); err != nil {
		return acp.NewSessionResponse{}, apiError(err)
	}
	return acp.NewSessionResponse{SessionId: acp.SessionId(s.ID()), Modes: modesToACP(s.Modes()), ConfigOptions: configOptionsOrNil(s.ConfigOptions())}, nil
}

// checkedServers converts the request's MCP servers and refuses settings
// the agent does not declare.
func (a *agent) checkedServers(ctx context.Context, name string, options map[string]string, in []acp.McpServer) ([]pluginclient.MCPServer, error) {
	servers, err := mcpServers(in)
	if err != nil {
		return nil, err
	}
	caps, err := a.srv.Host.Capabilities(ctx, name)
	if err != nil {
		// The start fails the same way, and records that it did.
		return servers, nil
	}
	if err := host.CheckSettings(caps, options, servers); err != nil {
		return nil, err
	}
	return servers, nil
}

// resume makes sure the session runs in this host (starting or resuming it)
// and returns it. A resume passes the session's stored options, and its
// stored MCP servers unless the request names some.
func (a *agent) resume(ctx context.Context, id, cwd string, in []acp.McpServer) (*host.Session, error) {
	if err := a.roomToFollow(id); err != nil {
		return nil, err
	}
	if s, ok := a.srv.Host.Session(id); ok {
		if !s.IdleStopping() {
			a.rebind(s)
			return s, nil
		}
		// Its plugin is being stopped after the idle timeout: start it
		// again once that stop is over.
		select {
		case <-s.Done():
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	// A host just started may be deciding the session still (readopting
	// its plugin, say): its record is read once that is done.
	if err := a.srv.Host.AwaitDecision(ctx, id); err != nil {
		return nil, err
	}
	if s, ok := a.srv.Host.Session(id); ok && !s.IdleStopping() {
		a.rebind(s)
		return s, nil
	}
	rec, err := a.srv.Host.Store().Get(ctx, id)
	if err != nil {
		return nil, err
	}
	var servers []pluginclient.MCPServer
	if len(in) > 0 {
		if servers, err = a.checkedServers(ctx, rec.Agent, nil, in); err != nil {
			return nil, err
		}
	}
	// The record was read before the start turn: a removal that wins it
	// meanwhile makes this start fail as not found rather than create an
	// empty session under the id.
	s, err := a.srv.Host.StartSession(ctx, host.SessionRequest{ID: id, Agent: rec.Agent, Workspace: cwd, MCPServers: servers, MustExist: true, Incarnation: rec.Incarnation})
	if err != nil {
		return nil, err
	}
	a.rebind(s)
	return s, nil
}

// resumeHeld is resume for a session/load or session/resume: the session
// counts as followed from here until release, which the caller calls once
// the connection's follower is bound (follow), so a load that replays a
// long journal to a slow client is activity, and no idle stop falls
// between the resume and the follow.
func (a *agent) resumeHeld(ctx context.Context, id, cwd string, in []acp.McpServer) (s *host.Session, release func(), err error) {
	for {
		if s, err = a.resume(ctx, id, cwd, in); err != nil {
			return nil, nil, err
		}
		release = s.Followed()
		if !s.IdleStopping() {
			return s, release, nil
		}
		// The idle stop was decided before the hold: resume it again
		// once it is over.
		release()
		select {
		case <-s.Done():
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
}

// rebind makes the connection's follower of s, if it has one, count as
// following s: a session started again (resumed after its plugin died or
// was stopped) is a new host.Session, and one with a follower must never
// be idle.
func (a *agent) rebind(s *host.Session) {
	if f := a.followerOf(s.ID()); f != nil {
		f.bind(s)
	}
}

// LoadSession replays the session's journal as session/update
// notifications, then follows it.
func (a *agent) LoadSession(ctx context.Context, p acp.LoadSessionRequest) (acp.LoadSessionResponse, error) {
	id := string(p.SessionId)
	s, release, err := a.resumeHeld(ctx, id, p.Cwd, p.McpServers)
	if err != nil {
		return acp.LoadSessionResponse{}, apiError(err)
	}
	defer release()
	last, err := a.srv.Host.Store().LastSeq(ctx, id)
	if err != nil {
		return acp.LoadSessionResponse{}, apiError(err)
	}
	err = a.srv.Host.Store().Replay(ctx, id, 0, func(e leasestore.Entry) error {
		if e.Seq > last {
			return errReplayed
		}
		rec, err := journal.Decode(e)
		if err != nil {
			return nil
		}
		for _, n := range notifications(id, e.Seq, rec) {
			if err := a.conn.SessionUpdate(ctx, n); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, errReplayed) {
		return acp.LoadSessionResponse{}, apiError(err)
	}
	if err := a.follow(s.ID(), last); err != nil {
		return acp.LoadSessionResponse{}, apiError(err)
	}
	return acp.LoadSessionResponse{Modes: modesToACP(s.Modes()), ConfigOptions: configOptionsOrNil(s.ConfigOptions())}, nil
}

var errReplayed = errors.New("replayed")

func (a *agent) ResumeSession(ctx context.Context, p acp.ResumeSessionRequest) (acp.ResumeSessionResponse, error) {
	id := string(p.SessionId)
	s, release, err := a.resumeHeld(ctx, id, p.Cwd, p.McpServers)
	if err != nil {
		return acp.ResumeSessionResponse{}, apiError(err)
	}
	defer release()
	last, err := a.srv.Host.Store().LastSeq(ctx, id)
	if err != nil {
		return acp.ResumeSessionResponse{}, apiError(err)
	}
	if err := a.follow(s.ID(), last); err != nil {
		return acp.ResumeSessionResponse{}, apiError(err)
	}
	return acp.ResumeSessionResponse{Modes: modesToACP(s.Modes()), ConfigOptions: configOptionsOrNil(s.ConfigOptions())}, nil
}

// Prompt runs a turn and answers with its stop reason once every update
// of the turn has been sent.
func (a *agent) Prompt(ctx context.Context, p acp.PromptRequest) (acp.PromptResponse, error) {
	id := string(p.SessionId)
	blocks, err := promptBlocks(p.Prompt)
	if err != nil {
		return acp.PromptResponse{}, apiError(err)
	}
	f := a.followerOf(id)
	// The ACP library cancels a prompt's request context on session/cancel;
	// the turn itself is cancelled through Cancel and ends with stop reason
	// "cancelled", which is the answer the client expects. So wait on the
	// connection's lifetime instead.
	pctx := a.ctx
	var res host.TurnResult
	err = a.withRunning(ctx, id, func(s *host.Session) (err error) {
		res, err = s.PromptContent(pctx, blocks)
		return err
	})
	if err != nil {
		return acp.PromptResponse{}, apiError(err)
	}
	if f != nil {
		f.waitTurn(pctx, res.TurnID)
	}
	if res.StopReason == "failed" {
		return acp.PromptResponse{}, &acp.RequestError{Code: turnFailureCode(res), Message: "the turn failed: " + res.Error}
	}
	return acp.PromptResponse{StopReason: acp.StopReason(res.StopReason)}, nil
}

func (a *agent) Cancel(ctx context.Context, p acp.CancelNotification) error {
	defer a.notes.release()
	if s, ok := a.srv.Host.Session(string(p.SessionId)); ok {
		return s.Cancel(ctx)
	}
	return nil
}

func (a *agent) CloseSession(ctx context.Context, p acp.CloseSessionRequest) (acp.CloseSessionResponse, error) {
	if s, ok := a.srv.Host.Session(string(p.SessionId)); ok {
		if err := s.Stop(ctx); err != nil {
			return acp.CloseSessionResponse{}, apiError(err)
		}
	}
	// The client is done with the session: no more updates, and no
	// prompt resumes it until it is loaded or resumed again.
	a.unfollow(string(p.SessionId))
	return acp.CloseSessionResponse{}, nil
}

// ListSessions lists the sessions newest first, api.ListPageSize at a
// time, with each one's title (the agent's, or the one the host derived
// from its first prompt).
func (a *agent) ListSessions(ctx context.Context, p acp.ListSessionsRequest) (acp.ListSessionsResponse, error) {
	sessions, err := a.srv.Host.Store().List(ctx)
	if err != nil && len(sessions) == 0 {
		return acp.ListSessionsResponse{}, apiError(err)
	}
	var after *listCursor
	if p.Cursor != nil {
		c, err := decodeCursor(*p.Cursor)
		if err != nil {
			return acp.ListSessionsResponse{}, errf("%v", err)
		}
		after = &c
	}
	size := a.srv.ListPageSize
	if size <= 0 {
		size = api.ListPageSize
	}
	page, next := pageSessions(sessions, p.Cwd, after, size)
	out := acp.ListSessionsResponse{Sessions: []acp.SessionInfo{}, NextCursor: next}
	// In a cluster, one read of the registered hosts says which sessions
	// run on another host; unreadable, none is said to.
	hosts, _ := a.srv.Host.ClusterHosts(ctx)
	for _, s := range page {
		updated := s.UpdatedAt.Format(time.RFC3339Nano)
		w := where{running: a.runs(s.ID), elsewhere: a.srv.Host.Elsewhere(s, hosts), portable: a.srv.Host.Portable(ctx, s)}
		out.Sessions = append(out.Sessions, acp.SessionInfo{
			SessionId: acp.SessionId(s.ID), Cwd: s.Workspace, Title: optString(s.Title), UpdatedAt: &updated, Meta: listedMeta(s, w),
		})
	}
	return out, nil
}

// running returns the session id runs in this host. On a connection that
// has the session open but whose plugin is gone (it died, or was stopped),
// the client expects its next request to go on with the conversation, as
// it would have had the plugin lived, so the session is resumed (with its
// stored settings) rather than the request refused. Otherwise a session
// not running is a not-found error telling the client to load or resume
// it.
//
// A session whose plugin the host stopped after its idle timeout
// (host.IdleStopped, durable in its lease, so across a restart too) only
// sleeps: it is resumed with its stored settings on any connection, and
// the request simply takes a resume longer.
func (a *agent) running(ctx context.Context, id string) (*host.Session, error) {
	if s, ok := a.srv.Host.Session(id); ok && !s.IdleStopping() {
		return s, nil
	}
	if a.followerOf(id) != nil {
		s, err := a.resume(ctx, id, "", nil)
		if err != nil {
			return nil, apiError(fmt.Errorf("session %q's plugin is gone and resuming it failed: %w", id, err))
		}
		return s, nil
	}
	switch s, ok, err := a.srv.Host.ResumeIdle(ctx, id); {
	case ok && err != nil:
		return nil, apiError(fmt.Errorf("session %q's plugin was stopped after the idle timeout and resuming it failed: %w", id, err))
	case ok:
		return s, nil
	case err != nil:
		return nil, apiError(err)
	}
	if a.srv.Host.Undecided(id) {
		return nil, apiError(fmt.Errorf("session %q: %w", id, host.ErrUndecided))
	}
	// In a cluster, a session another host runs is named with its host.
	if err := a.srv.Host.CheckOwner(ctx, id); err != nil {
		return nil, apiError(err)
	}
	return nil, &acp.RequestError{Code: api.CodeNotFound, Message: fmt.Sprintf("session %q is not running: load or resume it first", id)}
}

// withRunning calls fn with session id running (see running). A request
// that met the session's idle stop as it was decided (fn returned
// host.ErrIdleStopped, and never reached the plugin) waits for that stop
// and goes to the session resumed: the stop raced the request, so a
// second attempt finds a fresh timer, and a third is given up on.
func (a *agent) withRunning(ctx context.Context, id string, fn func(*host.Session) error) error {
	for attempt := 1; ; attempt++ {
		s, err := a.running(ctx, id)
		if err != nil {
			return err
		}
		err = fn(s)
		if !errors.Is(err, host.ErrIdleStopped) {
			return err
		}
		if attempt == 3 {
			return giveUpIdle(id, err)
		}
		select {
		case <-s.Done():
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// giveUpIdle is the error of a request that met the session's idle stop
// on every attempt: a matter of timing only, so retryable
// (CodeSessionHeld, see errorCode).
func giveUpIdle(id string, err error) error {
	return fmt.Errorf("session %q: the request met its idle stop three times; retry it, which resumes the session: %w", id, err)
}

// SetSessionMode switches the session's mode, between turns or during
// one; the mode is stored as the session's "mode" option, so every resume
// keeps it, and the agent's current_mode_update reaches every follower.
func (a *agent) SetSessionMode(ctx context.Context, p acp.SetSessionModeRequest) (acp.SetSessionModeResponse, error) {
	err := a.withRunning(ctx, string(p.SessionId), func(s *host.Session) error { return s.SetMode(ctx, string(p.ModeId)) })
	if err != nil {
		// The errors of running are API errors already, which settingError
		// passes on.
		return acp.SetSessionModeResponse{}, settingError(err, "mode")
	}
	return acp.SetSessionModeResponse{}, nil
}

// SetSessionConfigOption sets one config option (its value becomes the
// session option of the same name) and answers with all of them.
func (a *agent) SetSessionConfigOption(ctx context.Context, p acp.SetSessionConfigOptionRequest) (acp.SetSessionConfigOptionResponse, error) {
	if p.ValueId == nil {
		return acp.SetSessionConfigOptionResponse{}, errf("only config options of type select are supported")
	}
	v := p.ValueId
	var opts []pluginclient.ConfigOption
	err := a.withRunning(ctx, string(v.SessionId), func(s *host.Session) (err error) {
		opts, err = s.SetConfigOption(ctx, string(v.ConfigId), string(v.Value))
		return err
	})
	if err != nil {
		return acp.SetSessionConfigOptionResponse{}, settingError(err, string(v.ConfigId))
	}
	return acp.SetSessionConfigOptionResponse{ConfigOptions: configOptionsToACP(opts)}, nil
}

// settingError is apiError for a refused mode or config option: the
// plugin's invalid-argument refusal names the setting too.
func settingError(err error, setting string) error {
	var inv *pluginclient.InvalidOptionError
	if !errors.As(err, &inv) && errors.Is(err, pluginclient.ErrInvalidArgument) {
		return &acp.RequestError{Code: api.CodeInvalidParams, Message: err.Error(), Data: api.ErrorData{Error: err.Error(), Setting: setting}}
	}
	return apiError(err)
}

// HandleExtensionMethod serves the _agenthost/ methods.
func (a *agent) HandleExtensionMethod(ctx context.Context, method string, params json.RawMessage) (any, error) {
	var p api.Params
	if len(params) > 0 && string(params) != "null" {
		if err := json.Unmarshal(params, &p); err != nil {
			return nil, acp.NewInvalidParams(api.ErrorData{Error: err.Error()})
		}
	}
	h := a.srv.Host
	switch method {
	case api.MethodStatus:
		st, err := h.Status(ctx)
		if err != nil {
			return nil, apiError(err)
		}
		return api.StatusResult{Host: apiStatus(st), Version: a.srv.Version}, nil
	case api.MethodAgents:
		if a.srv.Agents != nil {
			return a.srv.Agents(), nil
		}
		return api.AgentsResult{Agents: h.Agents()}, nil
	case api.MethodSession:
		rec, err := h.Store().Get(ctx, p.SessionID)
		if err != nil {
			return nil, apiError(err)
		}
		last, _ := h.Store().LastSeq(ctx, p.SessionID)
		s, running := h.Session(p.SessionID)
		hosts, _ := h.ClusterHosts(ctx)
		r := api.SessionResult{LastSeq: last, Session: apiSession(rec, where{running: running, elsewhere: h.Elsewhere(rec, hosts), portable: h.Portable(ctx, rec)}),
			Running: running}
		if running {
			r.Followers = s.Followers()
		}
		return r, nil
	case api.MethodStop:
		return a.stop(ctx, p.SessionID)
	case api.MethodStopAll:
		return a.stopAll(ctx), nil
	case api.MethodRemove:
		return a.remove(ctx, p)
	case api.MethodPrune:
		return a.prune(ctx, p)
	case api.MethodSubscribe:
		last, err := h.Store().LastSeq(ctx, p.SessionID)
		if err != nil {
			return nil, apiError(err)
		}
		if err := a.subscribe(p.SessionID, p.FromSeq); err != nil {
			return nil, err
		}
		return api.SubscribeResult{LastSeq: last}, nil
	}
	return nil, acp.NewMethodNotFound(method)
}

// subscribe sends every journal entry from fromSeq on, then follows the
// journal, as _agenthost/journal notifications, until the connection ends.
// A client that reconnects with the last seq it saw misses nothing. A
// connection holding Server.MaxSubscriptions, or with more than
// Server.MaxQueuedBytes waiting to be written to it, is refused with
// api.CodeOverLimit; the subscriptions it holds go on.
func (a *agent) subscribe(id string, from uint64) error {
	if q, max := a.out.queued.Load(), a.srv.maxQueuedBytes(); q > max {
		return overLimit("%d bytes wait to be sent to this connection, over its limit of %d: read them, then subscribe again", q, max)
	}
	ctx, cancel := context.WithCancel(a.ctx)
	a.mu.Lock()
	if err := a.roomLocked(); err != nil {
		a.mu.Unlock()
		cancel()
		return err
	}
	a.nextSub++
	n := a.nextSub
	a.subs[n] = cancel
	a.mu.Unlock()
	a.subWG.Go(func() {
		defer func() {
			a.mu.Lock()
			delete(a.subs, n)
			a.mu.Unlock()
			cancel()
		}()
		err := a.srv.Host.Store().Tail(ctx, id, from, func(e leasestore.Entry) error {
			return a.conn.NotifyExtension(ctx, api.MethodJournal, journalEntry(id, e))
		})
		if err != nil && ctx.Err() == nil {
			a.srv.log().Debug("subscription ended", "session", id, "error", err)
		}
	})
	return nil
}

// journalEntry is the params of the _agenthost/journal notification of e:
// the payload as stored, or a JSON string holding a payload that is not
// JSON.
func journalEntry(id string, e leasestore.Entry) api.JournalEntry {
	payload := json.RawMessage(e.Payload)
	if !json.Valid(payload) {
		b, _ := json.Marshal(string(e.Payload))
		payload = b
	}
	return api.JournalEntry{SessionID: id, Seq: e.Seq, Fence: e.Fence, Time: e.Time, Kind: string(e.Kind), Payload: payload}
}

func (a *agent) stopFollowers() {
	a.mu.Lock()
	fs := make([]*follower, 0, len(a.followers))
	for _, f := range a.followers {
		fs = append(fs, f)
	}
	subs := make([]context.CancelFunc, 0, len(a.subs))
	for _, c := range a.subs {
		subs = append(subs, c)
	}
	a.mu.Unlock()
	for _, f := range fs {
		f.stop()
	}
	for _, c := range subs {
		c()
	}
	a.subWG.Wait()
}
