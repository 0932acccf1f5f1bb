package localapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	acp "github.com/coder/acp-go-sdk"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/host"
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

	mu        sync.Mutex
	followers map[string]*follower
	subs      []context.CancelFunc
	subWG     sync.WaitGroup
}

var (
	_ acp.Agent                  = (*agent)(nil)
	_ acp.AgentLoader            = (*agent)(nil)
	_ acp.ExtensionMethodHandler = (*agent)(nil)
)

// apiError carries a host error to the client with its message.
func apiError(err error) error {
	if err == nil {
		return nil
	}
	var re *acp.RequestError
	if errors.As(err, &re) {
		return err
	}
	code := api.CodeServerError
	switch {
	case errors.Is(err, leasestore.ErrNotFound):
		code = api.CodeNotFound
	case errors.Is(err, host.ErrTurnRunning):
		code = api.CodeTurnRunning
	}
	return &acp.RequestError{Code: code, Message: err.Error()}
}

func (a *agent) Initialize(ctx context.Context, p acp.InitializeRequest) (acp.InitializeResponse, error) {
	return acp.InitializeResponse{
		ProtocolVersion: acp.ProtocolVersionNumber,
		AgentCapabilities: acp.AgentCapabilities{
			LoadSession: true,
			SessionCapabilities: acp.SessionCapabilities{
				List: &acp.SessionListCapabilities{}, Resume: &acp.SessionResumeCapabilities{}, Close: &acp.SessionCloseCapabilities{},
			},
		},
		AgentInfo:   &acp.Implementation{Name: "agenthost", Version: a.srv.Version},
		AuthMethods: []acp.AuthMethod{},
	}, nil
}

func (a *agent) Authenticate(context.Context, acp.AuthenticateRequest) (acp.AuthenticateResponse, error) {
	return acp.AuthenticateResponse{}, nil
}

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
	s, err := a.srv.Host.StartSession(ctx, host.SessionRequest{ID: meta.SessionID, Agent: name, Workspace: p.Cwd, Options: meta.Options})
	if err != nil {
		return acp.NewSessionResponse{}, apiError(err)
	}
	if err := a.follow(s.ID(), 0); err != nil {
		return acp.NewSessionResponse{}, apiError(err)
	}
	return acp.NewSessionResponse{SessionId: acp.SessionId(s.ID())}, nil
}

// resume makes sure the session runs in this host (starting or resuming it)
// and returns it.
func (a *agent) resume(ctx context.Context, id, cwd string) (*host.Session, error) {
	if s, ok := a.srv.Host.Session(id); ok {
		return s, nil
	}
	rec, err := a.srv.Host.Store().Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return a.srv.Host.StartSession(ctx, host.SessionRequest{ID: id, Agent: rec.Agent, Workspace: cwd})
}

// LoadSession replays the session's journal as session/update
// notifications, then follows it.
func (a *agent) LoadSession(ctx context.Context, p acp.LoadSessionRequest) (acp.LoadSessionResponse, error) {
	id := string(p.SessionId)
	s, err := a.resume(ctx, id, p.Cwd)
	if err != nil {
		return acp.LoadSessionResponse{}, apiError(err)
	}
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
		if n, ok := notification(id, e.Seq, rec); ok {
			return a.conn.SessionUpdate(ctx, n)
		}
		return nil
	})
	if err != nil && !errors.Is(err, errReplayed) {
		return acp.LoadSessionResponse{}, apiError(err)
	}
	if err := a.follow(s.ID(), last); err != nil {
		return acp.LoadSessionResponse{}, apiError(err)
	}
	return acp.LoadSessionResponse{}, nil
}

var errReplayed = errors.New("replayed")

func (a *agent) ResumeSession(ctx context.Context, p acp.ResumeSessionRequest) (acp.ResumeSessionResponse, error) {
	id := string(p.SessionId)
	s, err := a.resume(ctx, id, p.Cwd)
	if err != nil {
		return acp.ResumeSessionResponse{}, apiError(err)
	}
	last, err := a.srv.Host.Store().LastSeq(ctx, id)
	if err != nil {
		return acp.ResumeSessionResponse{}, apiError(err)
	}
	return acp.ResumeSessionResponse{}, apiError(a.follow(s.ID(), last))
}

// Prompt runs a turn and answers with its stop reason once every update
// of the turn has been sent.
func (a *agent) Prompt(ctx context.Context, p acp.PromptRequest) (acp.PromptResponse, error) {
	id := string(p.SessionId)
	s, ok := a.srv.Host.Session(id)
	if !ok && a.followerOf(id) != nil {
		// This connection has the session open, but its plugin is gone
		// (it died, or was stopped): the client expects its next prompt
		// to go on with the conversation, as it would have had the
		// plugin lived, so resume it here rather than refuse.
		rs, err := a.resume(ctx, id, "")
		if err != nil {
			return acp.PromptResponse{}, apiError(fmt.Errorf("session %q's plugin is gone and resuming it failed: %w", id, err))
		}
		s, ok = rs, true
	}
	if !ok {
		return acp.PromptResponse{}, &acp.RequestError{Code: api.CodeNotFound, Message: fmt.Sprintf("session %q is not running: load or resume it first", id)}
	}
	var text strings.Builder
	for _, b := range p.Prompt {
		if b.Text != nil {
			text.WriteString(b.Text.Text)
		}
	}
	f := a.followerOf(id)
	// The ACP library cancels a prompt's request context on session/cancel;
	// the turn itself is cancelled through Cancel and ends with stop reason
	// "cancelled", which is the answer the client expects. So wait on the
	// connection's lifetime instead.
	pctx := a.ctx
	res, err := s.Prompt(pctx, text.String())
	if err != nil {
		return acp.PromptResponse{}, apiError(err)
	}
	if f != nil {
		f.waitTurn(pctx, res.TurnID)
	}
	if res.StopReason == "failed" {
		return acp.PromptResponse{}, &acp.RequestError{Code: api.CodeServerError, Message: "the turn failed: " + res.Error}
	}
	return acp.PromptResponse{StopReason: acp.StopReason(res.StopReason)}, nil
}

func (a *agent) Cancel(ctx context.Context, p acp.CancelNotification) error {
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

func (a *agent) ListSessions(ctx context.Context, p acp.ListSessionsRequest) (acp.ListSessionsResponse, error) {
	sessions, err := a.srv.Host.Store().List(ctx)
	if err != nil && len(sessions) == 0 {
		return acp.ListSessionsResponse{}, apiError(err)
	}
	out := acp.ListSessionsResponse{Sessions: []acp.SessionInfo{}}
	for _, s := range sessions {
		if p.Cwd != nil && *p.Cwd != s.Workspace {
			continue
		}
		updated := s.UpdatedAt.Format(time.RFC3339Nano)
		title := s.Agent
		out.Sessions = append(out.Sessions, acp.SessionInfo{
			SessionId: acp.SessionId(s.ID), Cwd: s.Workspace, Title: &title, UpdatedAt: &updated, Meta: listedMeta(s),
		})
	}
	return out, nil
}

func (a *agent) SetSessionMode(context.Context, acp.SetSessionModeRequest) (acp.SetSessionModeResponse, error) {
	return acp.SetSessionModeResponse{}, acp.NewMethodNotFound("session/set_mode")
}

func (a *agent) SetSessionConfigOption(context.Context, acp.SetSessionConfigOptionRequest) (acp.SetSessionConfigOptionResponse, error) {
	return acp.SetSessionConfigOptionResponse{}, acp.NewMethodNotFound("session/set_config_option")
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
		return api.AgentsResult{Agents: h.Agents()}, nil
	case api.MethodSession:
		rec, err := h.Store().Get(ctx, p.SessionID)
		if err != nil {
			return nil, apiError(err)
		}
		last, _ := h.Store().LastSeq(ctx, p.SessionID)
		_, running := h.Session(p.SessionID)
		return api.SessionResult{LastSeq: last, Running: running, Session: apiSession(rec)}, nil
	case api.MethodStop:
		s, ok := h.Session(p.SessionID)
		if !ok {
			return nil, &acp.RequestError{Code: api.CodeNotFound, Message: fmt.Sprintf("session %q is not running", p.SessionID)}
		}
		if err := s.Stop(ctx); err != nil {
			return nil, apiError(err)
		}
		return api.StopResult{}, nil
	case api.MethodSubscribe:
		last, err := h.Store().LastSeq(ctx, p.SessionID)
		if err != nil {
			return nil, apiError(err)
		}
		a.subscribe(p.SessionID, p.FromSeq)
		return api.SubscribeResult{LastSeq: last}, nil
	}
	return nil, acp.NewMethodNotFound(method)
}

// subscribe sends every journal entry from fromSeq on, then follows the
// journal, as _agenthost/journal notifications, until the connection ends.
// A client that reconnects with the last seq it saw misses nothing.
func (a *agent) subscribe(id string, from uint64) {
	ctx, cancel := context.WithCancel(a.ctx)
	a.mu.Lock()
	a.subs = append(a.subs, cancel)
	a.mu.Unlock()
	a.subWG.Go(func() {
		err := a.srv.Host.Store().Tail(ctx, id, from, func(e leasestore.Entry) error {
			return a.conn.NotifyExtension(ctx, api.MethodJournal, journalEntry(id, e))
		})
		if err != nil && ctx.Err() == nil {
			a.srv.log().Debug("subscription ended", "session", id, "error", err)
		}
	})
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
	subs := a.subs
	a.mu.Unlock()
	for _, f := range fs {
		f.stop()
	}
	for _, c := range subs {
		c()
	}
	a.subWG.Wait()
}
