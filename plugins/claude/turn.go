package claude

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/agenthost/agenthost/plugin/sdk"
)

// interruptGrace is how long a cancelled turn waits for the CLI to end it
// after the interrupt request; then the turn ends cancelled and the CLI is
// stopped in the background (the next turn resumes the conversation in a
// new one). A session/cancel promises a cancelled turn within 2 s: the
// grace leaves the rest of that for the cancel to reach the plugin and the
// stop reason to reach the client. The live CLI ends an interrupted turn
// in well under a second.
const interruptGrace = 1500 * time.Millisecond

// Permission options offered for a can_use_tool request. "Reject
// always" is remembered by the plugin for the session's scope (the CLI
// has no deny rule an answer can add); "allow always" by the host, which
// answers later requests of the scope itself, and by the CLI where it
// suggests rules.
const (
	optAllow        = "allow"
	optAllowAlways  = "allow_always"
	optReject       = "reject"
	optRejectAlways = "reject_always"
)

// authError is the error of a turn the provider refused to authenticate:
// what the CLI said, and what to configure. source is where the CLI said
// (system/init's apiKeySource) it found its key: a variable the host let
// through was rejected and must be fixed where it is set; with none
// ("none", or unknown) the CLI had no usable credential at all.
func authError(said, source string) error {
	said = orDefault(said, "no reason given")
	if source != "" && source != "none" {
		return authRequired(fmt.Errorf("claude: authentication failed: the provider rejected the credential claude read from %s (%s): "+
			"set a valid one where %s comes from (agenthost passes it only to an agent whose agenthost.json entry says \"credentials\": \"inherit\", or a session with %s=true), or log in with `claude auth login`",
			source, said, source, OptAllowCredentials))
	}
	return authRequired(fmt.Errorf("claude: authentication failed (%s): claude has no usable credential: log in with `claude auth login`, "+
		"or set ANTHROPIC_API_KEY and pass it to the agent with \"credentials\": \"inherit\" in its agenthost.json entry (or the session option %s=true)",
		said, OptAllowCredentials))
}

// authRequired marks err, which says what to do, as the provider's
// refusal of credentials: errors.Is(err, sdk.ErrAuthRequired), so the
// host answers "auth required", with err's own words.
func authRequired(err error) error { return &authRequiredError{err} }

type authRequiredError struct{ err error }

func (e *authRequiredError) Error() string   { return e.err.Error() }
func (e *authRequiredError) Unwrap() []error { return []error{e.err, sdk.ErrAuthRequired} }

// turnRun maps one turn's stdout messages to SDK updates and answers the
// CLI's permission requests, until the result line.
type turnRun struct {
	a    *agent
	c    *cli
	turn *sdk.Turn
	log  hclog.Logger

	perms       map[string]*pendingPerm // by the CLI's request id
	answers     chan permAnswer
	outstanding int // permission goroutines not yet drained

	cancelled   bool
	interruptID string
	authFailed  bool
	// started is set by the turn's first stdout message: the CLI took
	// the prompt.
	started bool
	// model is the model the CLI said it uses (system/init);
	// modelNotFound is set when the provider refused it.
	model         string
	modelNotFound bool

	// streamed is the text and thinking reported from stream_event deltas
	// and not yet matched by the assistant message that completes them,
	// by API message id (see assistant).
	streamed map[string]*streamedText
	// lastCall is the usage of the turn's newest model call of the main
	// agent, from its stream events: the result's usage sums every call
	// of the turn, so only the last one says what the context holds.
	lastCall *usage
	// tools are the turn's tool calls by id: the tool's name and input,
	// for the permission request and the result that follow.
	tools map[string]toolUse
	// reset is set by a conversation_reset (/clear): the session id the
	// CLI reports next is a new conversation's.
	reset bool
}

// toolUse is a tool call the model made.
type toolUse struct {
	name  string
	input json.RawMessage
}

// streamedText is what the deltas of one API message reported ahead of
// its assistant lines.
type streamedText struct{ text, thinking string }

// pendingPerm is a can_use_tool request waiting for the user.
type pendingPerm struct {
	cancel context.CancelFunc
	req    controlRequest
	scope  string // the request's AlwaysScope
}

type permAnswer struct {
	id  string
	out sdk.PermissionOutcome
}

// run is the turn loop.
func (r *turnRun) run(ctx context.Context) (sdk.StopReason, error) {
	defer r.finish()
	done := ctx.Done()
	var giveUp <-chan time.Time
	for {
		select {
		case ev, ok := <-r.c.events:
			if !ok {
				return r.streamEnded()
			}
			if ev.err != nil {
				r.a.retire(r.c)
				if r.cancelled {
					return sdk.StopCancelled, nil
				}
				return "", ev.err
			}
			r.started = true
			if stop, err, end := r.handle(ctx, ev.msg); end {
				return stop, err
			}
		case ans := <-r.answers:
			r.outstanding--
			r.answer(ans)
		case <-done:
			done = nil
			r.cancelled = true
			if err := r.interrupt(); err != nil {
				r.log.Warn("could not interrupt claude; stopping it", "error", err)
				r.a.retire(r.c)
				return sdk.StopCancelled, nil
			}
			giveUp = time.After(interruptGrace)
		case <-giveUp:
			r.log.Warn("claude did not end the turn after an interrupt; stopping it", "waited", interruptGrace)
			r.a.retire(r.c)
			return sdk.StopCancelled, nil
		}
	}
}

// finish cancels the permission requests still open and waits for their
// goroutines.
func (r *turnRun) finish() {
	for _, p := range r.perms {
		p.cancel()
	}
	for ; r.outstanding > 0; r.outstanding-- {
		<-r.answers
	}
	if r.interruptID != "" {
		r.c.forget(r.interruptID)
	}
}

// interrupt sends the control protocol's interrupt request. The CLI answers
// it, prints an interrupt marker and ends the turn with an
// error_during_execution result.
func (r *turnRun) interrupt() error {
	r.log.Info("cancelling the turn: interrupting claude")
	id, _, err := r.c.request("interrupt", nil)
	r.interruptID = id
	return err
}

// streamEnded handles the end of stdout in the middle of a turn: the CLI
// exited.
func (r *turnRun) streamEnded() (sdk.StopReason, error) {
	note := r.c.exitNote()
	r.a.retire(r.c)
	switch {
	case r.cancelled:
		return sdk.StopCancelled, nil
	case !r.started:
		return "", &notTakenError{why: fmt.Sprintf("claude exited before it took the prompt (%s); the next turn restarts it", note)}
	}
	return "", fmt.Errorf("claude exited during the turn (%s); the next turn restarts it", note)
}

// handle reports one message. end is true when the turn is over.
func (r *turnRun) handle(ctx context.Context, m *message) (stop sdk.StopReason, err error, end bool) {
	switch m.Type {
	case "system":
		switch m.Subtype {
		case "init":
			r.log.Debug("claude session", "session_id", m.SessionID, "model", m.Model, "version", m.ClaudeCodeVersion,
				"permission_mode", m.PermissionMode, "api_key_source", m.APIKeySource)
			r.c.setKeySource(m.APIKeySource)
			r.model = m.Model
			r.noteSession(m.SessionID)
			r.a.noteMode(m.PermissionMode, r.turn.Emit)
		case "status":
			r.a.noteMode(m.PermissionMode, r.turn.Emit)
		case "session_title_changed":
			if m.Title != "" {
				_ = r.turn.Emit(sdk.Update{SessionInfo: &sdk.SessionInfoUpdate{Title: m.Title}})
			}
		default:
			r.log.Debug("claude system message", "subtype", m.Subtype)
		}
	case "conversation_reset":
		r.log.Info("claude started a new conversation", "trigger", m.Trigger)
		r.reset = true
	case "stream_event":
		r.streamEvent(m)
	case "assistant":
		r.a.noteLine(m)
		r.assistant(m)
	case "user":
		r.a.noteLine(m)
		r.user(m)
	case "control_request":
		r.askPermission(ctx, m)
	case "control_cancel_request":
		if p, ok := r.perms[m.RequestID]; ok {
			r.log.Debug("claude withdrew a permission request", "request_id", m.RequestID)
			delete(r.perms, m.RequestID)
			p.cancel()
		}
	case "result":
		stop, err := r.result(m)
		return stop, err, true
	}
	return "", nil, false
}

// noteSession records the session id the CLI reports: after a
// conversation reset it is a new conversation's.
func (r *turnRun) noteSession(id string) {
	origin := ""
	if r.reset {
		origin = "created"
	}
	r.a.noteSession(id, r.turn, r.c.start.resume, origin)
}

// streamEvent reports a text or thinking delta of the model's stream as
// a message chunk or thought as it arrives, and remembers it so that the
// assistant line completing the block does not report it again.
//
// A sub-agent's events (parent_tool_use_id set: a Task call's agent)
// are handled as assistant handles its messages: their deltas are
// reported like the main agent's, once, matched with the sub-agent's
// assistant lines by API message id. Their usage is not the main
// conversation's: a sub-agent's context is its own, and one running in
// the background streams between the main agent's message_start and
// message_delta.
func (r *turnRun) streamEvent(m *message) {
	e := m.Event
	main := m.ParentToolUseID == ""
	switch {
	case e == nil:
		return
	case e.Type == "message_start" && e.Message != nil && e.Message.Usage != nil:
		if main {
			r.lastCall = e.Message.Usage
		}
		return
	case e.Type == "message_delta" && e.Usage != nil:
		// The delta may carry only output_tokens.
		if main {
			r.lastCall = r.lastCall.withDelta(e.Usage)
		}
		return
	case e.Type != "content_block_delta":
		return
	}
	if r.streamed == nil {
		r.streamed = map[string]*streamedText{}
	}
	s := r.streamed[m.APIMessageID]
	if s == nil {
		s = &streamedText{}
		r.streamed[m.APIMessageID] = s
	}
	switch e.Delta.Type {
	case "text_delta":
		if e.Delta.Text != "" {
			s.text += e.Delta.Text
			r.turn.Message(e.Delta.Text)
		}
	case "thinking_delta":
		if e.Delta.Thinking != "" {
			s.thinking += e.Delta.Thinking
			r.turn.Thought(e.Delta.Thinking)
		}
	}
}

// unstreamed returns the part of a completed block's text that its deltas
// did not report, consuming what they did from *streamed. With partial
// messages the CLI prints each block's deltas and then an assistant line
// holding the whole block (one line per block, or a line of several);
// without them, or for a block the deltas never reached, all of it is new.
func unstreamed(streamed *string, block string) string {
	switch {
	case *streamed == "":
		return block
	case strings.HasPrefix(*streamed, block):
		*streamed = (*streamed)[len(block):]
		return ""
	case strings.HasPrefix(block, *streamed):
		rest := block[len(*streamed):]
		*streamed = ""
		return rest
	}
	// The deltas and the block disagree: the deltas were reported; do not
	// report the block's text a second time.
	*streamed = ""
	return ""
}

// assistant reports an assistant message's text, thinking and tool calls,
// less what its stream events reported already. A synthetic message that
// reports a failed API call is not the agent speaking: its error surfaces
// with the result.
func (r *turnRun) assistant(m *message) {
	if m.IsAPIErrorMessage || m.Error != "" {
		switch m.Error {
		case "authentication_failed":
			r.authFailed = true
		case "model_not_found":
			r.modelNotFound = true
		}
		r.log.Debug("claude reports an API error", "error", m.Error)
		return
	}
	s := &streamedText{}
	if m.Message != nil && r.streamed[m.Message.ID] != nil {
		s = r.streamed[m.Message.ID]
	}
	for _, b := range m.Message.blocks() {
		switch b.Type {
		case "text":
			if t := unstreamed(&s.text, b.Text); t != "" {
				r.turn.Message(t)
			}
		case "thinking":
			if t := unstreamed(&s.thinking, b.Thinking); t != "" {
				r.turn.Thought(t)
			}
		case "tool_use", "server_tool_use", "mcp_tool_use":
			if r.tools == nil {
				r.tools = map[string]toolUse{}
			}
			r.tools[b.ID] = toolUse{name: b.Name, input: b.Input}
			info := toolInfoOf(b.Name, b.Input)
			r.turn.ToolCall(sdk.ToolCall{
				ToolCallID: b.ID, Title: info.title, Kind: info.kind,
				Status: "pending", RawInputJSON: rawJSON(b.Input),
				Content: info.content, Locations: info.locations,
			})
			if plan, ok := todoPlan(b.Name, b.Input); ok {
				r.turn.Plan(plan)
			}
		}
	}
}

// user reports tool results; other user messages (the interrupt marker,
// replays) are the CLI's bookkeeping. A result line's tool_use_result is
// the tool's structured result: the update's rawOutput, and for the
// file-editing tools the diffs and lines of what changed. A Bash
// command's output arrives only here, whole: 2.1.332 prints nothing
// while a command runs.
func (r *turnRun) user(m *message) {
	var results []contentBlock
	for _, b := range m.Message.blocks() {
		if b.Type == "tool_result" {
			results = append(results, b)
		}
	}
	for _, b := range results {
		status := "completed"
		if b.IsError {
			status = "failed"
		}
		u := sdk.ToolCallUpdate{ToolCallID: b.ToolUseID, Status: status}
		structured := len(results) == 1 && len(bytes.TrimSpace(m.ToolUseResult)) > 0 && !b.IsError
		if structured {
			u.RawOutputJSON = string(m.ToolUseResult)
		} else if t := b.resultText(); t != "" {
			out, _ := json.Marshal(t)
			u.RawOutputJSON = string(out)
		}
		diffs, locs := []sdk.ToolCallContent(nil), []sdk.Location(nil)
		if structured {
			diffs, locs = toolResultUpdate(r.tools[b.ToolUseID].name, m.ToolUseResult)
		}
		switch {
		case len(diffs) > 0:
			u.ToolContent, u.Locations = diffs, locs
		case r.tools[b.ToolUseID].name == "ExitPlanMode" && !b.IsError:
			u.Title = "Exited Plan Mode"
		default:
			if t := b.resultText(); t != "" {
				u.Content = []sdk.ContentBlock{sdk.TextBlock(t)}
			}
		}
		r.turn.ToolCallUpdate(u)
	}
}

// result ends the turn. is_error is always checked: an API or
// authentication failure arrives as subtype "success" with is_error true.
func (r *turnRun) result(m *message) (sdk.StopReason, error) {
	r.noteSession(m.SessionID)
	if u := m.Usage; u != nil || m.TotalCostUSD != 0 {
		var su sdk.Usage
		if u != nil {
			su = sdk.Usage{
				InputTokens:       u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens,
				OutputTokens:      u.OutputTokens,
				CachedInputTokens: u.CacheReadInputTokens,
			}
			if u.OutputTokensDetails != nil {
				su.ReasoningTokens = u.OutputTokensDetails.ThinkingTokens
			}
			// What the context holds after the turn: what its last model
			// call read and wrote. Without stream events, the sum over
			// the turn's calls, which is that for a turn of one call.
			su.ContextTokens = u.context()
			if r.lastCall != nil {
				su.ContextTokens = r.lastCall.context()
			}
		}
		for _, mu := range m.ModelUsage {
			su.ContextWindow = max(su.ContextWindow, mu.ContextWindow)
		}
		su.CostUSD = m.TotalCostUSD
		if su != (sdk.Usage{}) {
			r.turn.Usage(su)
		}
	}
	switch {
	case r.cancelled:
		return sdk.StopCancelled, nil
	case m.Subtype == "error_max_turns":
		return sdk.StopMaxTurnRequests, nil
	case m.IsError && (r.authFailed || isAuthText(m.Result)):
		return "", authError(resultText(m), r.c.keySource())
	case m.IsError && r.modelNotFound:
		return "", fmt.Errorf("claude: the provider does not serve the model %s (%s): choose another with the session option %s",
			orDefault(r.model, "the CLI chose"), resultText(m), OptModel)
	case m.IsError:
		return "", fmt.Errorf("claude failed the turn: %s", resultText(m))
	}
	switch m.StopReason {
	case "max_tokens":
		return sdk.StopMaxTokens, nil
	case "refusal":
		return sdk.StopRefusal, nil
	}
	return sdk.StopEndTurn, nil
}

// isAuthText recognises the CLI's texts for a missing or rejected
// credential.
func isAuthText(s string) bool {
	s = strings.ToLower(s)
	for _, t := range []string{"not logged in", "invalid api key", "please run /login", "oauth token has expired", "authentication_error"} {
		if strings.Contains(s, t) {
			return true
		}
	}
	return false
}

// askPermission asks the user about a can_use_tool request, in the
// background: the turn keeps reading while the user decides, so the CLI
// can withdraw the request and a cancel still interrupts. The request
// carries the whole tool call (title, kind, input, locations, the diff of
// an edit) and the four answers, with the scope an "allow always" covers;
// a scope the user rejected always is refused without asking. Leaving
// plan mode (ExitPlanMode) offers the modes to go on in instead.
func (r *turnRun) askPermission(ctx context.Context, m *message) {
	var req controlRequest
	if err := json.Unmarshal(m.Request, &req); err != nil && !isTypeError(err) {
		r.log.Warn("malformed can_use_tool request", "error", err)
	}
	if r.cancelled {
		r.respond(m.RequestID, permissionDeny{Behavior: "deny", Message: "The turn was cancelled.", Interrupt: true})
		return
	}
	// ExitPlanMode's request carries no plan; the tool call does.
	input := req.Input
	if tu, ok := r.tools[req.ToolUseID]; ok && req.ToolName == "ExitPlanMode" {
		input = tu.input
	}
	info := toolInfoOf(req.ToolName, input)
	if req.Title != "" {
		info.title = req.Title
	}
	preq := sdk.PermissionRequest{
		ToolCall: sdk.ToolCall{ToolCallID: req.ToolUseID, Title: info.title, Kind: info.kind,
			Status: "pending", RawInputJSON: rawJSON(input), Content: info.content, Locations: info.locations},
	}
	if req.ToolName == "ExitPlanMode" {
		preq.Options = r.a.planExitOptions()
	} else {
		workspace, dirs := r.a.roots()
		preq.AlwaysScope = alwaysScope(req.ToolName, req.Input, workspace, dirs)
		if preq.AlwaysScope != "" && r.a.rejectedAlways(preq.AlwaysScope) {
			r.log.Debug("refusing a tool call the user rejected always", "scope", preq.AlwaysScope)
			r.respond(m.RequestID, permissionDeny{Behavior: "deny", Message: "The user denied tool calls of " + preq.AlwaysScope + " for this session."})
			return
		}
		preq.Options = []sdk.PermissionOption{
			{OptionID: optAllow, Name: "Allow", Kind: "allow_once"},
			{OptionID: optAllowAlways, Name: "Always allow " + preq.AlwaysScope, Kind: "allow_always"},
			{OptionID: optReject, Name: "Reject", Kind: "reject_once"},
			{OptionID: optRejectAlways, Name: "Always reject " + preq.AlwaysScope, Kind: "reject_always"},
		}
		if preq.AlwaysScope == "" {
			// No honest scope: only the once answers (an "always" here
			// would cover commands or files the user never saw).
			preq.Options = []sdk.PermissionOption{preq.Options[0], preq.Options[2]}
		}
	}
	pctx, cancel := context.WithCancel(ctx)
	r.perms[m.RequestID] = &pendingPerm{cancel: cancel, req: req, scope: preq.AlwaysScope}
	r.outstanding++
	id := m.RequestID
	go func() {
		out, _ := r.turn.RequestPermission(pctx, preq)
		r.answers <- permAnswer{id: id, out: out}
	}()
}

// alwaysRules are the rules of the CLI's permission suggestions an
// "allow always" passes back, so the CLI stops asking too. A suggestion
// to switch mode (the CLI suggests acceptEdits for an edit) is left out:
// the host remembers the edit scope, and a mode change nobody chose
// would surprise the user.
func alwaysRules(raw json.RawMessage) json.RawMessage {
	var all []json.RawMessage
	if json.Unmarshal(raw, &all) != nil {
		return nil
	}
	var keep []json.RawMessage
	for _, s := range all {
		var t struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(s, &t) == nil && t.Type != "setMode" {
			keep = append(keep, s)
		}
	}
	if len(keep) == 0 {
		return nil
	}
	b, _ := json.Marshal(keep)
	return b
}

// answer sends the user's decision back as the control response, unless
// the CLI withdrew the request.
func (r *turnRun) answer(a permAnswer) {
	p, ok := r.perms[a.id]
	if !ok {
		return
	}
	delete(r.perms, a.id)
	p.cancel()
	allow := permissionAllow{Behavior: "allow", UpdatedInput: p.req.Input}
	if len(allow.UpdatedInput) == 0 {
		allow.UpdatedInput = json.RawMessage("{}")
	}
	var resp any
	switch {
	case a.out.Cancelled():
		resp = permissionDeny{Behavior: "deny", Message: "The user cancelled this tool call.", Interrupt: true}
	case p.req.ToolName == "ExitPlanMode":
		// The option ids are modes; "plan" keeps planning.
		if a.out.OptionID == "plan" || !slices.ContainsFunc(r.a.modes(), func(m sdk.Mode) bool { return m.ID == a.out.OptionID }) {
			resp = permissionDeny{Behavior: "deny", Message: "The user wants to keep planning."}
			break
		}
		set, _ := json.Marshal([]map[string]string{{"type": "setMode", "mode": a.out.OptionID, "destination": "session"}})
		allow.UpdatedPermissions = set
		resp = allow
	case a.out.OptionID == optAllow || (a.out.OptionID == optAllowAlways && p.scope == ""):
		// An "always" answer to a request without a scope was not
		// offered: it counts once.
		resp = allow
	case a.out.OptionID == optAllowAlways:
		allow.UpdatedPermissions = alwaysRules(p.req.PermissionSuggestions)
		resp = allow
	case a.out.OptionID == optRejectAlways && p.scope != "":
		r.a.rejectAlways(p.scope)
		resp = permissionDeny{Behavior: "deny", Message: "The user denied this tool call, and every call of " + p.scope + " for this session."}
	default:
		resp = permissionDeny{Behavior: "deny", Message: "The user denied this tool call."}
	}
	r.log.Debug("answering claude's permission request", "request_id", a.id, "outcome", a.out.Outcome, "option", a.out.OptionID)
	r.respond(a.id, resp)
}

func (r *turnRun) respond(id string, resp any) {
	if err := r.c.write(successResponse(id, resp)); err != nil && !errors.Is(err, context.Canceled) {
		r.log.Warn("could not answer claude's permission request", "request_id", id, "error", err)
	}
}

// promptContent turns a prompt into the content of a user line: a string
// when it is all text (as the official SDKs send it), otherwise an array of
// Anthropic content blocks.
func promptContent(blocks []sdk.ContentBlock) (any, error) {
	allText := true
	for _, b := range blocks {
		if b.Type != "text" && b.Type != "" {
			allText = false
		}
	}
	if allText {
		var s strings.Builder
		for _, b := range blocks {
			s.WriteString(b.Text)
		}
		return s.String(), nil
	}
	out := make([]map[string]any, 0, len(blocks))
	for _, b := range blocks {
		blk, err := anthropicBlock(b)
		if err != nil {
			return nil, err
		}
		out = append(out, blk)
	}
	return out, nil
}

// anthropicBlock converts one ACP content block into what the CLI's
// stream-json takes: an image block (base64, or a URL), a document block
// for a PDF, text for the rest. An embedded text resource is wrapped so
// the model sees where it came from and what it holds (as Zed's adapter
// does), a resource link becomes a markdown link the agent may follow.
// A block the CLI cannot take is an error, never dropped.
func anthropicBlock(b sdk.ContentBlock) (map[string]any, error) {
	text := func(s string) map[string]any { return map[string]any{"type": "text", "text": s} }
	base64Source := func(mime, data string) map[string]any {
		return map[string]any{"type": "base64", "media_type": mime, "data": data}
	}
	switch b.Type {
	case sdk.BlockText, "":
		return text(b.Text), nil
	case sdk.BlockImage:
		img, err := b.Image()
		switch {
		case err != nil:
			return nil, fmt.Errorf("claude: %w", err)
		case img.Data != "":
			return map[string]any{"type": "image", "source": base64Source(img.MimeType, img.Data)}, nil
		case strings.HasPrefix(img.URI, "http://") || strings.HasPrefix(img.URI, "https://"):
			return map[string]any{"type": "image", "source": map[string]any{"type": "url", "url": img.URI}}, nil
		}
		return nil, fmt.Errorf("claude: a prompt image has neither data nor an http(s) uri")
	case sdk.BlockResourceLink:
		l, err := b.ResourceLink()
		if err != nil {
			return nil, fmt.Errorf("claude: %w", err)
		}
		return text(fmt.Sprintf("[@%s](%s)", orDefault(l.Name, l.URI), l.URI)), nil
	case sdk.BlockResource:
		r, err := b.Resource()
		if err != nil {
			return nil, fmt.Errorf("claude: %w", err)
		}
		switch {
		case r.Blob == "":
			return text(fmt.Sprintf("<context ref=%q>\n%s\n</context>", r.URI, r.Text)), nil
		case strings.HasPrefix(r.MimeType, "image/"):
			return map[string]any{"type": "image", "source": base64Source(r.MimeType, r.Blob)}, nil
		case r.MimeType == "application/pdf":
			return map[string]any{"type": "document", "source": base64Source(r.MimeType, r.Blob)}, nil
		}
		return nil, fmt.Errorf("claude: cannot send the embedded resource %s of type %q: claude takes text, images and PDFs", r.URI, r.MimeType)
	}
	return nil, fmt.Errorf("claude: cannot send a prompt content block of type %q (claude takes text, image, resource and resource_link)", b.Type)
}
