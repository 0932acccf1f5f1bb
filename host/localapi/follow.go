package localapi

import (
	"context"
	"encoding/json"
	"sync"

	acp "github.com/coder/acp-go-sdk"

	"github.com/agenthost/agenthost/host"
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

	mu    sync.Mutex
	ended map[string]chan struct{} // turn id -> closed once its stop was sent
}

// follow starts following session id after seq `after`, once per session
// per connection.
func (a *agent) follow(id string, after uint64) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.followers[id]; ok {
		return nil
	}
	ctx, cancel := context.WithCancel(a.ctx)
	f := &follower{a: a, id: id, cancel: cancel, done: make(chan struct{}), ended: map[string]chan struct{}{}}
	a.followers[id] = f
	go f.run(ctx, after+1)
	return nil
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
	_ = f.a.srv.Host.Store().Tail(ctx, f.id, from, func(e leasestore.Entry) error {
		if n, ok := notification(f.id, e); ok {
			if err := f.a.conn.SessionUpdate(ctx, n); err != nil {
				return err
			}
		}
		if e.Kind == leasestore.KindUpdate {
			f.maybeAsk(ctx, e)
		}
		if e.Kind == leasestore.KindStop {
			var r host.StopRecord
			if json.Unmarshal(e.Payload, &r) == nil {
				f.turnEnded(r.TurnID)
			}
		}
		return nil
	})
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

// maybeAsk forwards a plugin's permission request to the client and sends
// the answer back to the plugin.
func (f *follower) maybeAsk(ctx context.Context, e leasestore.Entry) {
	var rec host.UpdateRecord
	if json.Unmarshal(e.Payload, &rec) != nil {
		return
	}
	var u struct {
		SessionUpdate string `json:"sessionUpdate"`
		RequestID     string `json:"requestId"`
		ToolCall      struct {
			ToolCallID string `json:"toolCallId"`
			Title      string `json:"title"`
		} `json:"toolCall"`
		Options []struct {
			OptionID string `json:"optionId"`
			Name     string `json:"name"`
			Kind     string `json:"kind"`
		} `json:"options"`
	}
	if json.Unmarshal(rec.Update, &u) != nil || u.SessionUpdate != "_agenthost/permission_request" {
		return
	}
	s, ok := f.a.srv.Host.Session(f.id)
	if !ok {
		return
	}
	req := acp.RequestPermissionRequest{SessionId: acp.SessionId(f.id), ToolCall: acp.ToolCallUpdate{ToolCallId: acp.ToolCallId(u.ToolCall.ToolCallID)}}
	if u.ToolCall.Title != "" {
		title := u.ToolCall.Title
		req.ToolCall.Title = &title
	}
	for _, o := range u.Options {
		req.Options = append(req.Options, acp.PermissionOption{OptionId: acp.PermissionOptionId(o.OptionID), Name: o.Name, Kind: acp.PermissionOptionKind(o.Kind)})
	}
	// Ask without holding up the journal: the plugin's turn waits, not
	// the stream of updates.
	go func() {
		resp, err := f.a.conn.RequestPermission(ctx, req)
		option := ""
		if err == nil && resp.Outcome.Selected != nil {
			option = string(resp.Outcome.Selected.OptionId)
		}
		_ = s.AnswerPermission(context.WithoutCancel(ctx), u.RequestID, option)
	}()
}

// notification renders a journal entry as a session/update notification:
// agent updates in their ACP shape, prompts as user message chunks. Host
// lifecycle entries and agenthost-specific updates have no ACP form.
func notification(id string, e leasestore.Entry) (acp.SessionNotification, bool) {
	n := acp.SessionNotification{SessionId: acp.SessionId(id)}
	switch e.Kind {
	case leasestore.KindUpdate:
		var rec host.UpdateRecord
		if json.Unmarshal(e.Payload, &rec) != nil {
			return n, false
		}
		var kind struct {
			SessionUpdate string `json:"sessionUpdate"`
		}
		if json.Unmarshal(rec.Update, &kind) != nil || len(kind.SessionUpdate) == 0 || kind.SessionUpdate[0] == '_' {
			return n, false
		}
		if err := json.Unmarshal(rec.Update, &n.Update); err != nil {
			return n, false
		}
		n.Meta = map[string]any{"agenthost": map[string]any{"seq": e.Seq, "turnId": rec.TurnID}}
		return n, true
	case leasestore.KindPrompt:
		var rec host.PromptRecord
		if json.Unmarshal(e.Payload, &rec) != nil || len(rec.Prompt) == 0 {
			return n, false
		}
		var text struct {
			Text string `json:"text"`
		}
		_ = json.Unmarshal(rec.Prompt[0], &text)
		n.Update = acp.UpdateUserMessageText(text.Text)
		n.Meta = map[string]any{"agenthost": map[string]any{"seq": e.Seq, "turnId": rec.TurnID}}
		return n, true
	}
	return n, false
}
