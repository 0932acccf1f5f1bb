package localapi

import (
	"context"
	"encoding/json"
	"sync"

	acp "github.com/coder/acp-go-sdk"

	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/leasestore"
)

// follower sends one session's journal to the client as session/update
// notifications, from a seq on, and asks the client the plugin's permission
// questions.
type follower struct {
	a      *agent
	id     string
	cancel context.CancelFunc
	done   chan struct{}

	// bound is the session this follower counts as following, and
	// release ends that (see bind); over once the follower stopped.
	bindMu  sync.Mutex
	bound   *host.Session
	release func()
	over    bool

	mu    sync.Mutex
	ended map[string]chan struct{} // turn id -> closed once its stop was sent
	asked map[string]bool          // permission requests asked of this client
	wg    sync.WaitGroup           // the questions being asked
}

// follow starts following session id after seq `after`, once per session
// per connection. A follower is a goroutine and a read-ahead like a
// subscription, and counts toward the same bound (roomToFollow).
func (a *agent) follow(id string, after uint64) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.followers[id]; ok {
		return nil
	}
	if err := a.roomLocked(); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(a.ctx)
	f := &follower{a: a, id: id, cancel: cancel, done: make(chan struct{}), ended: map[string]chan struct{}{}, asked: map[string]bool{}}
	a.followers[id] = f
	// Counted as following before the request that follows returns
	// (the caller's hold on the session ends then; see resumeHeld).
	if s, ok := a.srv.Host.Session(id); ok {
		f.bind(s)
	}
	go f.run(ctx, after+1)
	return nil
}

// roomToFollow refuses, before a session is started or resumed for this
// connection, a connection that could not follow one more session: the
// sessions it follows and its subscriptions together are bounded by
// Server.MaxSubscriptions. Following a session it follows already always
// has room.
func (a *agent) roomToFollow(id string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.followers[id]; ok && id != "" {
		return nil
	}
	return a.roomLocked()
}

func (a *agent) roomLocked() error {
	if n, max := len(a.subs)+len(a.followers), a.srv.maxSubscriptions(); n >= max {
		return overLimit("this connection follows or subscribes to %d sessions, its limit: use another connection, or close the sessions it no longer shows", max)
	}
	return nil
}

// unfollow stops following session id, if this connection does.
func (a *agent) unfollow(id string) {
	a.mu.Lock()
	f := a.followers[id]
	delete(a.followers, id)
	a.mu.Unlock()
	if f != nil {
		f.stop()
	}
}

func (a *agent) followerOf(id string) *follower {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.followers[id]
}

func (f *follower) stop() {
	f.cancel()
	<-f.done
}

func (f *follower) run(ctx context.Context, from uint64) {
	defer close(f.done)
	// The session counts this follower until its questions are over
	// (_agenthost/session's followers).
	defer f.unbind()
	defer f.wg.Wait()
	// The requests the plugin waits on that arrived before this client
	// followed (none followed, or another did): asked now.
	if s, ok := f.a.srv.Host.Session(f.id); ok {
		f.bind(s)
		wake := s.PermissionsAdded()
		for _, q := range s.PendingPermissions() {
			f.ask(ctx, q)
		}
		f.wg.Go(func() { f.askLate(ctx, s, wake) })
	}
	_ = f.a.srv.Host.Store().Tail(ctx, f.id, from, func(e leasestore.Entry) error {
		rec, err := journal.Decode(e)
		if err != nil {
			return nil // nothing a client could be told
		}
		for _, n := range notifications(f.id, e.Seq, rec) {
			if err := f.a.conn.SessionUpdate(ctx, n); err != nil {
				return err
			}
		}
		switch r := rec.(type) {
		case *journal.Update:
			if q, ok := r.Update.(*journal.PermissionRequest); ok {
				f.ask(ctx, q)
			}
		case *journal.Stop:
			f.turnEnded(r.TurnID)
		}
		return nil
	})
}

// bind makes the follower count as following s (Session.Followed), and
// no longer the session it followed before: a session resumed for this
// connection is a new host.Session. Nothing once the follower stopped.
func (f *follower) bind(s *host.Session) {
	f.bindMu.Lock()
	if f.over || f.bound == s {
		f.bindMu.Unlock()
		return
	}
	old := f.release
	f.bound, f.release = s, s.Followed()
	f.bindMu.Unlock()
	if old != nil {
		old()
	}
}

// unbind ends the follower's count for good.
func (f *follower) unbind() {
	f.bindMu.Lock()
	old := f.release
	f.over, f.bound, f.release = true, nil, nil
	f.bindMu.Unlock()
	if old != nil {
		old()
	}
}

// askLate asks the requests the session registers pending after their
// journal entry went by (the host failed to answer one itself; a
// readopted plugin's), until the follower, its connection or the session
// ends. A session
// started again meanwhile (a resume) is not watched: its late requests
// reach this client when it follows again.
func (f *follower) askLate(ctx context.Context, s *host.Session, wake <-chan struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.Done():
			return
		case <-f.a.conn.Done():
			return
		case <-wake:
		}
		wake = s.PermissionsAdded()
		for _, q := range s.PendingPermissions() {
			f.ask(ctx, q)
		}
	}
}

// turnChan returns the channel closed when the turn's stop is sent.
func (f *follower) turnChan(turnID string) chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch, ok := f.ended[turnID]
	if !ok {
		ch = make(chan struct{})
		f.ended[turnID] = ch
	}
	return ch
}

func (f *follower) turnEnded(turnID string) {
	ch := f.turnChan(turnID)
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// waitTurn waits until every update of the turn has been sent.
func (f *follower) waitTurn(ctx context.Context, turnID string) {
	select {
	case <-f.turnChan(turnID):
	case <-ctx.Done():
	case <-f.done:
	}
}

// ask forwards a plugin's permission request to the client, with the
// whole tool call and every option, and sends the answer back to the
// plugin; only a request the plugin still waits on, and only once per
// client. A client that goes away without answering leaves the request
// pending, for the next client that follows the session.
func (f *follower) ask(ctx context.Context, q *journal.PermissionRequest) {
	s, ok := f.a.srv.Host.Session(f.id)
	if !ok || !s.PermissionPending(q.RequestID) {
		return
	}
	f.mu.Lock()
	if f.asked[q.RequestID] {
		f.mu.Unlock()
		return
	}
	f.asked[q.RequestID] = true
	f.mu.Unlock()
	req := acp.RequestPermissionRequest{SessionId: acp.SessionId(f.id), ToolCall: permissionToolCall(q.ToolCall), Options: []acp.PermissionOption{}}
	for _, o := range q.Options {
		req.Options = append(req.Options, acp.PermissionOption{OptionId: o.OptionId, Name: o.Name, Kind: o.Kind})
	}
	// Ask without holding up the journal: the plugin's turn waits, not
	// the stream of updates.
	// A question answered elsewhere (another client, the host) is
	// withdrawn: the library sends the client $/cancel_request.
	rctx, withdraw := context.WithCancel(ctx)
	resolved := s.PermissionDone(q.RequestID)
	f.wg.Go(func() {
		select {
		case <-resolved:
			withdraw()
		case <-rctx.Done():
		}
	})
	f.wg.Go(func() {
		defer withdraw()
		resp, err := f.a.conn.RequestPermission(rctx, req)
		if err != nil {
			// No outcome from the client: it left, stopped following,
			// the question was withdrawn, or the write to a peer that
			// just closed failed (the library reports that before the
			// connection's Done closes). The request stays pending for
			// the next client that follows; the host's
			// PermissionTimeout bounds the wait.
			f.a.srv.log().Debug("a permission question got no answer from the client", "session", f.id, "request", q.RequestID, "error", err)
			return
		}
		select {
		case <-resolved:
			return // answered elsewhere
		default:
		}
		option := ""
		if resp.Outcome.Selected != nil {
			option = string(resp.Outcome.Selected.OptionId)
		}
		if err := s.AnswerPermission(context.WithoutCancel(ctx), q.RequestID, option); err != nil {
			f.a.srv.log().Warn("answer a permission request", "session", f.id, "request", q.RequestID, "error", err)
		}
	})
}

// permissionToolCall is the tool call a permission request asks about, in
// full (kind, title, status, rawInput, content with diffs, locations), as
// the journal's tool_call renders it.
func permissionToolCall(tc journal.ToolCall) acp.ToolCallUpdate {
	out := acp.ToolCallUpdate{ToolCallId: acp.ToolCallId(tc.ToolCallID)}
	b, err := json.Marshal(&tc)
	if err != nil || json.Unmarshal(b, &out) != nil {
		return acp.ToolCallUpdate{ToolCallId: acp.ToolCallId(tc.ToolCallID)}
	}
	return out
}

// notifications render the record of journal entry seq as session/update
// notifications: an agent update in its ACP shape, a prompt as one
// user_message_chunk per block, every block as it was sent. Host lifecycle
// entries and agenthost-specific updates have no ACP form.
func notifications(id string, seq uint64, rec journal.Record) []acp.SessionNotification {
	switch r := rec.(type) {
	case *journal.Update:
		u, ok := journal.ACP(r.Update)
		if !ok {
			return nil
		}
		return []acp.SessionNotification{{SessionId: acp.SessionId(id), Update: u, Meta: updateMeta(seq, r.TurnID)}}
	case *journal.Prompt:
		var out []acp.SessionNotification
		for _, b := range r.Prompt {
			u, ok := journal.ACP(&journal.Chunk{Kind: journal.KindUserMessageChunk, Content: b})
			if !ok {
				continue
			}
			out = append(out, acp.SessionNotification{SessionId: acp.SessionId(id), Update: u, Meta: updateMeta(seq, r.TurnID)})
		}
		return out
	}
	return nil
}
