package host

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	acp "github.com/coder/acp-go-sdk"

	"github.com/agenthost/agenthost/internal/pluginclient"
	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/leasestore"
)

// Permission requests. The plugin's turn waits for each answer; the
// Session owns the requests it has not seen answered (pending): the pump
// registers one before the request is journaled, so that whoever reads
// the journal finds it pending, and forgets it once a permission_resolved
// update is journaled or an answer is accepted. A client asks the user
// only about pending requests (PermissionPending), so a request resolved
// long ago is never asked again when a journal is replayed, and one that
// arrived while no client followed the session is asked of the next that
// does (PendingPermissions). A request still pending after
// Config.PermissionTimeout is answered "cancelled" by the host, and
// logged, so a turn never waits forever for a user who is gone.
//
// A pending request is durable: a host going away (SIGKILL, or a detach
// for an app update) answers nothing, the plugin keeps waiting, and the
// host that readopts it registers the request again (the plugin reports
// what it waits on; see readoptedPermissions), so the next client that
// follows is asked. A client leaving answers nothing either: only an
// answer, a turn cancel or the timeout resolves a request.
//
// A request with an always-scope (a name the agent chooses for what an
// "always" covers, such as one exact command, or file edits inside the
// workspace) is answered by the host itself, with its
// allow_always option (allow_once when it offers none), once a client
// chose an allow_always option for that scope before: the scope is
// stored with the session (leasestore.Session.AllowedScopes), so the grant
// survives resumes and restarts.

// DefaultPermissionTimeout is Config.PermissionTimeout's default.
const DefaultPermissionTimeout = 10 * time.Minute

// pendingPermission is one request the plugin waits on.
type pendingPermission struct {
	req   *journal.PermissionRequest
	timer *time.Timer
	done  chan struct{} // closed once the request is no longer pending
}

// closedChan is what PermissionDone returns for a request not pending.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// PermissionDone returns a channel closed once the request is no longer
// pending (answered by any client or by the host, timed out, or its
// session ended): a client still asking may withdraw the question.
func (s *Session) PermissionDone(requestID string) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.perms[requestID]; ok {
		return p.done
	}
	return closedChan
}

// PermissionPending reports whether the plugin still waits for an answer
// to the request.
func (s *Session) PermissionPending(requestID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.perms[requestID]
	return ok
}

// PendingPermissions returns the requests the plugin waits on, oldest
// first.
func (s *Session) PendingPermissions() []*journal.PermissionRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*journal.PermissionRequest, 0, len(s.permOrder))
	for _, id := range s.permOrder {
		if p, ok := s.perms[id]; ok {
			out = append(out, p.req)
		}
	}
	return out
}

// AnswerPermission answers a permission request: optionID selects an
// option; empty cancels the request. Selecting an allow_always option of a
// request with an always-scope grants the scope for the session: it is
// stored, and later requests of the scope are answered without asking.
func (s *Session) AnswerPermission(ctx context.Context, requestID, optionID string) error {
	s.mu.Lock()
	var req *journal.PermissionRequest
	if p, ok := s.perms[requestID]; ok {
		req = p.req
	}
	s.mu.Unlock()
	if err := s.answerPlugin(ctx, requestID, optionID); err != nil {
		if errors.Is(err, pluginclient.ErrUnknownRequest) {
			// The plugin waits on it no longer (answered otherwise, or
			// asked by an earlier process of the session): nobody is to
			// be asked it again.
			s.forgetPermission(requestID)
		}
		return err
	}
	s.forgetPermission(requestID)
	if req == nil || req.AlwaysScope == "" || optionID == "" {
		return nil
	}
	for _, o := range req.Options {
		if string(o.OptionId) == optionID && o.Kind == acp.PermissionOptionKindAllowAlways {
			return s.grantScope(ctx, req.AlwaysScope)
		}
	}
	return nil
}

// grantScope stores scope as answered "allow always", then answers later
// requests of it: a grant the store did not take is not kept in memory
// either (the user is asked again rather than the grant silently lost at
// the next restart), and the failure is reported.
func (s *Session) grantScope(ctx context.Context, scope string) error {
	s.settingsMu.Lock()
	defer s.settingsMu.Unlock()
	s.mu.Lock()
	granted := slices.Contains(s.state.allowed, scope)
	s.mu.Unlock()
	if granted {
		return nil
	}
	if _, err := s.h.store.Apply(context.WithoutCancel(ctx), s.id, leasestore.RecordSettings{Fence: s.fence, AllowScope: scope}); err != nil {
		err = fmt.Errorf("session %q: store the permission scope %q allowed always (later requests of it are asked again): %w", s.id, scope, err)
		s.h.report(JournalScope, err)
		return err
	}
	s.mu.Lock()
	s.state.allowed = append(s.state.allowed, scope)
	s.mu.Unlock()
	s.h.log.Info("permission scope allowed always", "session", s.id, "scope", scope)
	return nil
}

// autoAnswer is the option the host answers req with itself: its
// allow_always option (else allow_once) when its scope was granted; ""
// when a client must be asked.
func (s *Session) autoAnswer(req *journal.PermissionRequest) string {
	s.mu.Lock()
	allowed := s.state.allowed
	s.mu.Unlock()
	return grantedOption(allowed, req)
}

// grantedOption is autoAnswer's answer given the scopes allowed always.
func grantedOption(allowed []string, req *journal.PermissionRequest) string {
	if req.AlwaysScope == "" || !slices.Contains(allowed, req.AlwaysScope) {
		return ""
	}
	once := ""
	for _, o := range req.Options {
		switch o.Kind {
		case acp.PermissionOptionKindAllowAlways:
			return string(o.OptionId)
		case acp.PermissionOptionKindAllowOnce:
			if once == "" {
				once = string(o.OptionId)
			}
		}
	}
	return once
}

// grantedAnswer is a request the host answers itself, and the option.
type grantedAnswer struct {
	req    *journal.PermissionRequest
	option string
}

// notePermissions registers the batch's new permission requests as
// pending before the batch is journaled, and returns those the host
// answers itself. The pump answers them once the batch is journaled.
func (s *Session) notePermissions(batch []*pluginclient.Update, first uint64) []grantedAnswer {
	var auto []grantedAnswer
	for _, u := range batch {
		if u.Seq < first {
			continue
		}
		req, ok := u.SessionUpdate().(*journal.PermissionRequest)
		if !ok {
			continue
		}
		if opt := s.autoAnswer(req); opt != "" {
			auto = append(auto, grantedAnswer{req: req, option: opt})
			continue
		}
		s.addPermission(req, false)
	}
	return auto
}

// PermissionsAdded returns a channel closed the next time a request is
// registered pending after its journal entry: one the host failed to
// answer itself, or one a readopted plugin asked before this host. A
// client's follower, already past that entry, asks PendingPermissions
// again when it closes.
func (s *Session) PermissionsAdded() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.permWake
}

// addPermission registers req as pending; late: its journal entry may
// already be behind the followers, so they are woken.
func (s *Session) addPermission(req *journal.PermissionRequest, late bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.perms[req.RequestID]; ok {
		return
	}
	select {
	case <-s.done:
		return
	default:
	}
	if late {
		close(s.permWake)
		s.permWake = make(chan struct{})
	}
	id := req.RequestID
	timeout := s.h.cfg.PermissionTimeout
	p := &pendingPermission{req: req, done: make(chan struct{})}
	p.timer = time.AfterFunc(timeout, func() { s.expirePermission(id, timeout) })
	s.perms[id] = p
	s.permOrder = append(s.permOrder, id)
	s.idleCheckLocked()
}

// forgetPermission drops a request that was answered.
func (s *Session) forgetPermission(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.perms[id]; ok {
		p.timer.Stop()
		close(p.done)
		delete(s.perms, id)
		s.permOrder = slices.DeleteFunc(s.permOrder, func(x string) bool { return x == id })
		s.idleCheckLocked()
	}
}

// stopPermissions forgets every pending request of a session that ended.
func (s *Session) stopPermissions() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, p := range s.perms {
		p.timer.Stop()
		close(p.done)
		delete(s.perms, id)
	}
	s.permOrder = nil
}

// answerPlugin gives the plugin the answer to request id (option "" is
// cancelled), bounded by StopTimeout: a wedged plugin must not hold up the
// caller (a client's follower, and with it unfollow and session/close,
// or the pump).
func (s *Session) answerPlugin(ctx context.Context, id, optionID string) error {
	ctx, cancel := context.WithTimeout(ctx, s.h.cfg.StopTimeout)
	defer cancel()
	return s.proc.att.AnswerPermission(ctx, id, pluginclient.Answer(optionID))
}

// expirePermission answers a request nobody answered in time: cancelled.
func (s *Session) expirePermission(id string, after time.Duration) {
	if !s.PermissionPending(id) {
		return
	}
	s.h.log.Warn("a permission request was not answered in time; the host answers it cancelled", "session", s.id, "request", id, "timeout", after)
	if err := s.answerPlugin(context.Background(), id, ""); err != nil {
		s.h.log.Warn("answer a permission request that timed out", "session", s.id, "request", id, "error", err)
	}
	s.forgetPermission(id)
}

// answerGranted answers, as the pump found them, the requests whose scope
// the session allows always. One the plugin does not take the answer for
// is left to a client, pending.
func (s *Session) answerGranted(ctx context.Context, auto []grantedAnswer) {
	for _, g := range auto {
		id := g.req.RequestID
		err := s.answerPlugin(ctx, id, g.option)
		if errors.Is(err, pluginclient.ErrUnknownRequest) {
			// Not waited on any more (an earlier process asked it, or
			// it was answered): nobody is to be asked it.
			s.h.log.Debug("a permission request of a scope allowed always is no longer pending", "session", s.id, "request", id)
			continue
		}
		if err != nil {
			s.h.log.Warn("answer a permission request of a scope allowed always; asking a client instead", "session", s.id, "request", id, "error", err)
			s.addPermission(g.req, true)
			continue
		}
		s.h.log.Debug("answered a permission request of a scope allowed always", "session", s.id, "request", id, "option", g.option)
	}
}

// readoptedPermissions returns the requests a readopted plugin waits on,
// oldest first: those it reported when it was reattached, which it knows
// whatever the journal holds (the journal may have lost the request to a
// restore from an older backup, or hold it further back than
// unansweredPermissions reads). A plugin that reports none (none pending,
// or built before plugins reported them) leaves the journal's unanswered
// requests: one the plugin no longer knows is refused as unknown when
// answered, and forgotten.
func (h *Host) readoptedPermissions(ctx context.Context, id string, reported []*journal.PermissionRequest) []*journal.PermissionRequest {
	if len(reported) > 0 {
		return reported
	}
	return h.unansweredPermissions(ctx, id)
}

// notePermissionsResolved forgets the requests the batch reports answered.
func (s *Session) notePermissionsResolved(batch []*pluginclient.Update, first uint64) {
	for _, u := range batch {
		if r, ok := u.SessionUpdate().(*journal.PermissionResolved); ok && u.Seq >= first {
			s.forgetPermission(r.RequestID)
		}
	}
}
