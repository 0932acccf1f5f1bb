package claude

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/agenthost/agenthost/plugin/sdk"
)

// interruptGrace is how long a cancelled turn waits for the CLI to end it
// after the interrupt request; then the CLI is stopped. The conformance kit
// allows a cancelled turn 5 s.
const interruptGrace = 3 * time.Second

// Permission options offered for a can_use_tool request.
const (
	optAllow       = "allow"
	optAllowAlways = "allow_always"
	optReject      = "reject"
)

// authError is the error of a turn the provider refused to authenticate:
// what the CLI said, and what to configure. source is where the CLI said
// (system/init's apiKeySource) it found its key: a variable the host let
// through was rejected and must be fixed where it is set; with none
// ("none", or unknown) the CLI had no usable credential at all.
func authError(said, source string) error {
	said = orDefault(said, "no reason given")
	if source != "" && source != "none" {
		return fmt.Errorf("claude: authentication failed: the provider rejected the credential claude read from %s (%s): "+
			"set a valid one where %s comes from (agenthost passes it only to an agent whose agenthost.json entry says \"credentials\": \"inherit\", or a session with %s=true), or log in with `claude auth login`",
			source, said, source, OptAllowCredentials)
	}
	return fmt.Errorf("claude: authentication failed (%s): claude has no usable credential: log in with `claude auth login`, "+
		"or set ANTHROPIC_API_KEY and pass it to the agent with \"credentials\": \"inherit\" in its agenthost.json entry (or the session option %s=true)",
		said, OptAllowCredentials)
}

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
	// lastCall is the usage of the turn's newest model call, from its
	// stream events: the result's usage sums every call of the turn, so
	// only the last one says what the context holds.
	lastCall *usage
}

// streamedText is what the deltas of one API message reported ahead of
// its assistant lines.
type streamedText struct{ text, thinking string }

// pendingPerm is a can_use_tool request waiting for the user.
type pendingPerm struct {
	cancel context.CancelFunc
	req    controlRequest
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
		if m.Subtype == "init" {
			r.log.Debug("claude session", "session_id", m.SessionID, "model", m.Model, "version", m.ClaudeCodeVersion,
				"permission_mode", m.PermissionMode, "api_key_source", m.APIKeySource)
			r.c.setKeySource(m.APIKeySource)
			r.model = m.Model
			r.a.noteSession(m.SessionID, r.turn, r.c.start.resume)
		} else {
			r.log.Debug("claude system message", "subtype", m.Subtype)
		}
	case "stream_event":
		r.streamEvent(m)
	case "assistant":
		r.assistant(m)
	case "user":
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

// streamEvent reports a text or thinking delta of the model's stream as
// a message chunk or thought as it arrives, and remembers it so that the
// assistant line completing the block does not report it again.
func (r *turnRun) streamEvent(m *message) {
	e := m.Event
	switch {
	case e == nil:
		return
	case e.Type == "message_start" && e.Message != nil && e.Message.Usage != nil:
		r.lastCall = e.Message.Usage
		return
	case e.Type == "message_delta" && e.Usage != nil:
		r.lastCall = e.Usage
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
			r.turn.ToolCall(sdk.ToolCall{
				ToolCallID: b.ID, Title: toolTitle(b.Name, b.Input), Kind: toolKind(b.Name),
				Status: "pending", RawInputJSON: rawJSON(b.Input),
			})
			if plan, ok := todoPlan(b.Name, b.Input); ok {
				r.turn.Plan(plan)
			}
		}
	}
}

// user reports tool results; other user messages (the interrupt marker,
// replays) are the CLI's bookkeeping.
func (r *turnRun) user(m *message) {
	for _, b := range m.Message.blocks() {
		if b.Type != "tool_result" {
			continue
		}
		status := "completed"
		if b.IsError {
			status = "failed"
		}
		u := sdk.ToolCallUpdate{ToolCallID: b.ToolUseID, Status: status}
		if t := b.resultText(); t != "" {
			u.Content = []sdk.ContentBlock{sdk.TextBlock(t)}
		}
		r.turn.ToolCallUpdate(u)
	}
}

// result ends the turn. is_error is always checked: an API or
// authentication failure arrives as subtype "success" with is_error true.
func (r *turnRun) result(m *message) (sdk.StopReason, error) {
	r.a.noteSession(m.SessionID, r.turn, r.c.start.resume)
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
// can withdraw the request and a cancel still interrupts.
func (r *turnRun) askPermission(ctx context.Context, m *message) {
	var req controlRequest
	if err := json.Unmarshal(m.Request, &req); err != nil && !isTypeError(err) {
		r.log.Warn("malformed can_use_tool request", "error", err)
	}
	if r.cancelled {
		r.respond(m.RequestID, permissionDeny{Behavior: "deny", Message: "The turn was cancelled.", Interrupt: true})
		return
	}
	title := req.Title
	if title == "" {
		title = toolTitle(req.ToolName, req.Input)
	}
	opts := []sdk.PermissionOption{{OptionID: optAllow, Name: "Allow", Kind: "allow_once"}}
	if hasSuggestions(req.PermissionSuggestions) {
		opts = append(opts, sdk.PermissionOption{OptionID: optAllowAlways, Name: "Always allow", Kind: "allow_always"})
	}
	opts = append(opts, sdk.PermissionOption{OptionID: optReject, Name: "Reject", Kind: "reject_once"})
	preq := sdk.PermissionRequest{
		ToolCall: sdk.ToolCall{ToolCallID: req.ToolUseID, Title: title, Kind: toolKind(req.ToolName),
			Status: "pending", RawInputJSON: rawJSON(req.Input)},
		Options: opts,
	}
	pctx, cancel := context.WithCancel(ctx)
	r.perms[m.RequestID] = &pendingPerm{cancel: cancel, req: req}
	r.outstanding++
	id := m.RequestID
	go func() {
		out, _ := r.turn.RequestPermission(pctx, preq)
		r.answers <- permAnswer{id: id, out: out}
	}()
}

func hasSuggestions(raw json.RawMessage) bool {
	var s []json.RawMessage
	return json.Unmarshal(raw, &s) == nil && len(s) > 0
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
	var resp any
	switch {
	case a.out.Cancelled():
		resp = permissionDeny{Behavior: "deny", Message: "The user cancelled this tool call.", Interrupt: true}
	case a.out.OptionID == optAllow || a.out.OptionID == optAllowAlways:
		allow := permissionAllow{Behavior: "allow", UpdatedInput: p.req.Input}
		if len(allow.UpdatedInput) == 0 {
			allow.UpdatedInput = json.RawMessage("{}")
		}
		if a.out.OptionID == optAllowAlways && hasSuggestions(p.req.PermissionSuggestions) {
			allow.UpdatedPermissions = p.req.PermissionSuggestions
		}
		resp = allow
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

// toolKind maps a Claude Code tool to its ACP tool kind.
func toolKind(name string) string {
	switch name {
	case "Bash", "BashOutput", "KillShell", "KillBash", "Monitor":
		return "execute"
	case "Read", "NotebookRead":
		return "read"
	case "Edit", "MultiEdit", "Write", "NotebookEdit":
		return "edit"
	case "Glob", "Grep", "LS", "ToolSearch":
		return "search"
	case "WebFetch", "WebSearch":
		return "fetch"
	case "Task", "Agent", "TodoWrite", "EnterPlanMode", "ExitPlanMode":
		return "think"
	}
	return "other"
}

// toolSubjects name, per tool, the input field that says what a call is
// about.
var toolSubjects = map[string]string{
	"Bash": "command", "Read": "file_path", "Edit": "file_path", "MultiEdit": "file_path",
	"Write": "file_path", "NotebookEdit": "notebook_path", "Grep": "pattern", "Glob": "pattern",
	"WebFetch": "url", "WebSearch": "query", "Task": "description", "Agent": "description",
}

// toolTitle is a short human title for a tool call: the tool's name and
// what it is about ("Bash ls -la", "Read /etc/hosts").
func toolTitle(name string, input json.RawMessage) string {
	if name == "" {
		name = "tool"
	}
	key, ok := toolSubjects[name]
	if !ok {
		return name
	}
	var in map[string]any
	if json.Unmarshal(input, &in) != nil {
		return name
	}
	s, _ := in[key].(string)
	s = strings.Join(strings.Fields(s), " ")
	if s == "" {
		return name
	}
	if r := []rune(s); len(r) > 100 {
		s = string(r[:100]) + "…"
	}
	return name + " " + s
}

// rawJSON returns input as a JSON string, "{}" when empty.
func rawJSON(input json.RawMessage) string {
	if len(strings.TrimSpace(string(input))) == 0 {
		return "{}"
	}
	return string(input)
}

// todoPlan reads a TodoWrite call's todos as a plan; ok is false for
// another tool or a malformed input.
func todoPlan(name string, input json.RawMessage) ([]sdk.PlanEntry, bool) {
	if name != "TodoWrite" {
		return nil, false
	}
	var in struct {
		Todos []struct {
			Content  string `json:"content"`
			Status   string `json:"status"`
			Priority string `json:"priority"`
		} `json:"todos"`
	}
	if err := json.Unmarshal(input, &in); err != nil && !isTypeError(err) {
		return nil, false
	}
	plan := make([]sdk.PlanEntry, 0, len(in.Todos))
	for _, t := range in.Todos {
		p := t.Priority
		if p == "" {
			p = "medium"
		}
		plan = append(plan, sdk.PlanEntry{Content: t.Content, Priority: p, Status: t.Status})
	}
	return plan, true
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

// anthropicBlock converts one ACP content block.
func anthropicBlock(b sdk.ContentBlock) (map[string]any, error) {
	text := func(s string) map[string]any { return map[string]any{"type": "text", "text": s} }
	var acp struct {
		Data     string `json:"data"`
		MimeType string `json:"mimeType"`
		URI      string `json:"uri"`
		Name     string `json:"name"`
		Resource struct {
			URI      string `json:"uri"`
			Text     string `json:"text"`
			Blob     string `json:"blob"`
			MimeType string `json:"mimeType"`
		} `json:"resource"`
	}
	if b.Type != "text" && b.Type != "" {
		if err := json.Unmarshal([]byte(b.JSON), &acp); err != nil {
			return nil, fmt.Errorf("claude: prompt content block of type %q has malformed JSON: %v", b.Type, err)
		}
	}
	image := func(data, mime, uri string) (map[string]any, error) {
		switch {
		case data != "":
			return map[string]any{"type": "image", "source": map[string]any{"type": "base64", "media_type": mime, "data": data}}, nil
		case uri != "":
			return map[string]any{"type": "image", "source": map[string]any{"type": "url", "url": uri}}, nil
		}
		return nil, fmt.Errorf("claude: prompt image block has neither data nor uri")
	}
	switch b.Type {
	case "text", "":
		return text(b.Text), nil
	case "image":
		return image(acp.Data, acp.MimeType, acp.URI)
	case "resource_link":
		name := acp.Name
		if name == "" {
			name = acp.URI
		}
		return text(fmt.Sprintf("[%s](%s)", name, acp.URI)), nil
	case "resource":
		r := acp.Resource
		switch {
		case r.Text != "":
			return text(fmt.Sprintf("<context ref=%q>\n%s\n</context>", r.URI, r.Text)), nil
		case r.Blob != "" && strings.HasPrefix(r.MimeType, "image/"):
			return image(r.Blob, r.MimeType, "")
		}
		return nil, fmt.Errorf("claude: cannot send embedded resource %q of type %q (only text and images)", r.URI, r.MimeType)
	}
	return nil, fmt.Errorf("claude: cannot send a prompt content block of type %q (supported: text, image, resource, resource_link)", b.Type)
}
