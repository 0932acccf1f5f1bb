package codex

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/agenthost/agenthost/plugin/sdk"
	"github.com/agenthost/agenthost/plugin/sdk/cliproc"
	"github.com/agenthost/agenthost/plugins/internal/allowscope"
)

// interruptBound is how long a cancelled turn waits for codex to confirm
// the interrupt with turn/completed before it ends anyway. The API
// promises that session/cancel ends a turn within 2 s; this leaves the
// rest of that to the host and the client.
const interruptBound = 1500 * time.Millisecond

// turnRun is the state of one running turn.
type turnRun struct {
	a        *agent
	c        *conn
	turn     *sdk.Turn
	threadID string
	turnID   string
	opts     options
	// workspace is the session's, which with opts.addDirs bounds what a
	// "patch" scope covers.
	workspace string

	// streamed marks items whose text arrived as deltas, so their
	// item/completed is not reported twice.
	streamed map[string]bool
	// started holds the tool items announced as tool calls; approvals
	// read it from their goroutines.
	mu      sync.Mutex
	started map[string]threadItem
	// diffs are each fileChange item's diffs, computed when it was
	// announced (from the files as they were), for its approval and its
	// end.
	diffs map[string]itemDiff

	approvalCtx context.Context
	approvals   map[string]context.CancelCauseFunc // by JSON-RPC request id
	wg          sync.WaitGroup

	retryingSince time.Time  // first retry error since the last progress
	lastRetry     *turnError // the latest retry error
	lastError     *turnError // the latest non-retry error notification
}

// outcome is how a turn ended.
type outcome struct {
	reason sdk.StopReason
	err    error
}

// run sends method (turn/start, or a command starting a turn such as
// thread/compact/start) and maps the turn until it ends. A method whose
// answer names no turn leaves the turn to be learnt from turn/started.
func (t *turnRun) run(ctx context.Context, method string, params any) (sdk.StopReason, error) {
	c := t.c
	c.openSink()
	defer c.closeSink()
	actx, cancelApprovals := context.WithCancelCause(ctx)
	t.approvalCtx = actx
	defer func() {
		// Codex clears a turn's requests when it ends: withdraw them.
		cancelApprovals(errWithdrawn)
		t.wg.Wait()
	}()

	startCh, err := c.start(method, params)
	if err != nil {
		return "", fmt.Errorf("codex: %s: %w", method, err)
	}
	var (
		ctxDone     = ctx.Done()
		cancelled   bool
		interruptCh <-chan *message
		giveUp      <-chan time.Time // after an interrupt, stop waiting for turn/completed
		wake        <-chan struct{}  // nil until the turn id is known
		stallErr    error
		stall       *time.Timer
		stallC      <-chan time.Time
	)
	defer func() {
		if stall != nil {
			stall.Stop()
		}
	}()
	interrupted := false
	// interrupt sends turn/interrupt once the turn id is known, and bounds
	// the wait for the turn's end.
	interrupt := func() {
		if giveUp == nil {
			giveUp = time.After(interruptBound)
		}
		if t.turnID == "" || interrupted {
			return
		}
		interrupted = true
		if ch, err := c.start("turn/interrupt", turnInterruptParams{ThreadID: t.threadID, TurnID: t.turnID}); err == nil {
			interruptCh = ch
		}
	}
	finish := func(o outcome) (sdk.StopReason, error) {
		switch {
		case stallErr != nil:
			return "", stallErr
		case cancelled:
			return sdk.StopCancelled, nil
		}
		return o.reason, o.err
	}
	// drain handles every queued event; it reports the turn's end.
	drain := func() (outcome, bool) {
		for {
			e, ok := c.next()
			if !ok {
				return outcome{}, false
			}
			if o, end := t.handle(e.msg); end {
				return o, true
			}
		}
	}
	for {
		// Arm the stall timer while codex only retries.
		if t.opts.modelRetryTimeout > 0 && !t.retryingSince.IsZero() && stallC == nil && stallErr == nil {
			stall = time.NewTimer(time.Until(t.retryingSince.Add(t.opts.modelRetryTimeout)))
			stallC = stall.C
		}
		select {
		case m, ok := <-startCh:
			startCh = nil
			var res turnResult
			if err := decodeResponse(m, ok, c, &res); err != nil {
				if cancelled {
					return sdk.StopCancelled, nil
				}
				var re *rpcError
				if errors.As(err, &re) {
					return "", fmt.Errorf("codex refused the turn (%s): %s", method, re.Error())
				}
				return "", fmt.Errorf("codex: %s: %w", method, err)
			}
			if res.Turn.ID != "" {
				t.turnID = res.Turn.ID
			}
			wake = c.wake
			if cancelled {
				interrupt()
			}
			// Events may have queued before the answer was read.
			if o, end := drain(); end {
				return finish(o)
			}
		case <-wake:
			if o, end := drain(); end {
				return finish(o)
			}
		case <-ctxDone:
			ctxDone, cancelled = nil, true
			interrupt()
		case m, ok := <-interruptCh:
			interruptCh = nil
			if ok && m.Error != nil {
				// "no active turn to interrupt": it ended meanwhile, and
				// its turn/completed is on its way.
				t.a.log.Debug("turn/interrupt refused", "error", m.Error.Error())
			}
		case <-stallC:
			stallC, stall = nil, nil
			if t.retryingSince.IsZero() {
				continue
			}
			if wait := time.Until(t.retryingSince.Add(t.opts.modelRetryTimeout)); wait > 0 {
				continue // progress and new retries since: re-arm
			}
			stallErr = t.stallError()
			interrupt()
		case <-giveUp:
			t.a.log.Warn("codex did not confirm the interrupt; ending the turn", "turn", t.turnID, "after", interruptBound)
			return finish(outcome{reason: sdk.StopCancelled})
		case <-c.done:
			// The turn's end may be queued ahead of the connection's.
			if t.turnID != "" {
				if o, end := drain(); end {
					return finish(o)
				}
			}
			if cancelled && stallErr == nil {
				return sdk.StopCancelled, nil
			}
			return "", fmt.Errorf("codex: the turn failed: %w", c.Err())
		}
	}
}

// stallError is the failure of a turn that only retried for longer than
// the session option model_retry_timeout.
func (t *turnRun) stallError() error {
	msg := "no answer"
	if e := t.lastRetry; e != nil {
		msg = e.Message
		if e.AdditionalDetails != nil && *e.AdditionalDetails != "" {
			msg += " (" + *e.AdditionalDetails + ")"
		}
	}
	return fmt.Errorf("codex could not reach its model for %s: %s; check the network and the model provider's configuration (base URL, credentials), or raise the session option %s",
		t.opts.modelRetryTimeout, msg, OptModelRetryTimeout)
}

// handle maps one notification or server request of the turn. It reports
// whether the turn has ended, and how.
func (t *turnRun) handle(m *message) (outcome, bool) {
	if m.isRequest() {
		t.request(m)
		return outcome{}, false
	}
	// Every turn notification names its thread; other threads (sub-agents)
	// are not this session's.
	var ids struct {
		ThreadID string `json:"threadId"`
		TurnID   string `json:"turnId"`
	}
	_ = json.Unmarshal(m.Params, &ids)
	if ids.ThreadID != "" && ids.ThreadID != t.threadID {
		return outcome{}, false
	}
	if t.turnID == "" && m.Method == "turn/started" {
		// A command's turn (compaction): its id arrives here first.
		var n turnNotification
		if t.decode(m, &n) {
			t.turnID = n.Turn.ID
		}
	}
	if ids.TurnID != "" && ids.TurnID != t.turnID {
		return outcome{}, false
	}
	switch m.Method {
	case "turn/started":
		var n turnNotification
		if t.decode(m, &n) && (n.Turn.ID == t.turnID || n.Turn.RootTurnID == t.turnID) {
			t.a.turnStarted(t.turn)
		}
	case "turn/completed":
		var n turnNotification
		if !t.decode(m, &n) || n.Turn.ID != t.turnID {
			return outcome{}, false
		}
		t.a.noteTurnEnded(t.threadID, n.Turn.ID)
		return t.completed(n.Turn), true
	case "item/agentMessage/delta":
		var n deltaNotification
		if t.decode(m, &n) {
			t.progress()
			t.streamed[n.ItemID] = true
			t.turn.Message(n.Delta)
		}
	case "item/reasoning/summaryTextDelta", "item/reasoning/textDelta":
		var n deltaNotification
		if t.decode(m, &n) {
			t.progress()
			t.streamed[n.ItemID] = true
			t.turn.Thought(n.Delta)
		}
	case "item/started":
		var n itemNotification
		if t.decode(m, &n) {
			t.progress()
			t.itemStarted(n.Item)
		}
	case "item/completed":
		var n itemNotification
		if t.decode(m, &n) {
			t.progress()
			t.itemCompleted(n.Item)
		}
	case "item/commandExecution/outputDelta":
		var n deltaNotification
		if t.decode(m, &n) {
			t.progress()
			if n.Delta != "" {
				t.turn.ToolCallUpdate(sdk.ToolCallUpdate{ToolCallID: n.ItemID, OutputDelta: n.Delta})
			}
		}
	case "item/fileChange/outputDelta", "item/mcpToolCall/progress", "turn/diff/updated":
		t.progress()
	case "thread/name/updated":
		t.a.nameUpdated(m)
	case "turn/plan/updated":
		var n planNotification
		if t.decode(m, &n) {
			t.progress()
			entries := make([]sdk.PlanEntry, 0, len(n.Plan))
			for _, s := range n.Plan {
				entries = append(entries, sdk.PlanEntry{Content: s.Step, Priority: "medium", Status: planStatus(s.Status)})
			}
			t.turn.Plan(entries)
		}
	case "thread/tokenUsage/updated":
		var n tokenUsageNotification
		if t.decode(m, &n) {
			t.progress()
			u := n.TokenUsage.Last
			t.turn.Usage(sdk.Usage{
				InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
				CachedInputTokens: u.CachedInputTokens, ReasoningTokens: u.ReasoningOutputTokens,
				// The last request's total is what its context held.
				ContextTokens: u.TotalTokens, ContextWindow: n.TokenUsage.ModelContextWindow,
			})
		}
	case "error":
		var n errorNotification
		if t.decode(m, &n) {
			if n.WillRetry {
				if t.retryingSince.IsZero() {
					t.retryingSince = time.Now()
				}
				t.lastRetry = &n.Error
				t.a.log.Info("codex is retrying its model", "turn", t.turnID, "error", n.Error.Message)
			} else {
				t.lastError = &n.Error
				t.a.log.Warn("codex reported an error", "turn", t.turnID, "error", n.Error.Message)
			}
		}
	case "serverRequest/resolved":
		var n serverRequestResolved
		if t.decode(m, &n) {
			// Codex cleared the request (answered, or the turn ended): stop
			// asking the user.
			if cancel, ok := t.approvals[string(n.RequestID)]; ok {
				cancel(errWithdrawn)
				delete(t.approvals, string(n.RequestID))
			}
		}
	case "warning":
		t.a.log.Warn("codex warning", "params", cliproc.Clip(string(m.Params), 500))
	}
	return outcome{}, false
}

// progress notes that the turn moved, which ends a retry streak.
func (t *turnRun) progress() {
	t.retryingSince, t.lastRetry = time.Time{}, nil
}

func (t *turnRun) decode(m *message, v any) bool {
	if err := json.Unmarshal(m.Params, v); err != nil {
		t.a.log.Warn("skipped a codex notification that did not decode", "method", m.Method, "error", err)
		return false
	}
	return true
}

// completed maps turn/completed's status to the turn's end.
func (t *turnRun) completed(turn turnInfo) outcome {
	switch turn.Status {
	case "completed":
		return outcome{reason: sdk.StopEndTurn}
	case "interrupted":
		return outcome{reason: sdk.StopCancelled}
	case "failed":
		e := turn.Error
		if e == nil {
			e = t.lastError
		}
		if e == nil || e.Message == "" {
			return outcome{err: errors.New("codex failed the turn without saying why")}
		}
		return outcome{err: t.a.turnFailure(e)}
	}
	return outcome{err: fmt.Errorf("codex ended the turn with the unknown status %q", turn.Status)}
}

// turnStarted reports the thread's handle once codex has saved the thread,
// which it does when the first turn starts.
func (a *agent) turnStarted(turn *sdk.Turn) {
	a.mu.Lock()
	report := !a.resumable && !a.opts.ephemeral
	a.resumable = a.resumable || !a.opts.ephemeral
	id := a.threadID
	a.mu.Unlock()
	if report {
		turn.HandleChanged(id, "created")
	}
}

// Tool items: their item/started becomes a tool call, their item/completed
// its final update.

func (t *turnRun) itemStarted(it threadItem) {
	call, ok := toolCall(it)
	if !ok {
		return
	}
	if it.Type == "fileChange" {
		// The files are as they were: codex writes them after this.
		call.Content, call.Locations = fileDiffs(it.Changes, false)
	}
	t.mu.Lock()
	t.started[it.ID] = it
	if it.Type == "fileChange" {
		t.diffs[it.ID] = itemDiff{call.Content, call.Locations}
	}
	t.mu.Unlock()
	t.turn.ToolCall(call)
}

func (t *turnRun) itemCompleted(it threadItem) {
	switch it.Type {
	case "agentMessage":
		if !t.streamed[it.ID] && it.Text != "" {
			t.turn.Message(it.Text)
		}
		return
	case "reasoning":
		if !t.streamed[it.ID] {
			if s := reasoningText(it); s != "" {
				t.turn.Thought(s)
			}
		}
		return
	case "contextCompaction":
		_ = t.turn.Message("Conversation compacted.")
		return
	}
	call, ok := toolCall(it)
	if !ok {
		return
	}
	t.mu.Lock()
	_, seen := t.started[it.ID]
	delete(t.started, it.ID)
	delete(t.diffs, it.ID)
	t.mu.Unlock()
	if !seen {
		if it.Type == "fileChange" {
			call.Content, call.Locations = fileDiffs(it.Changes, it.Status == "completed")
		}
		t.turn.ToolCall(call)
	}
	t.turn.ToolCallUpdate(toolUpdate(it))
}

func reasoningText(it threadItem) string {
	parts := append([]string(nil), it.Summary...)
	if len(parts) == 0 {
		var content []string
		_ = json.Unmarshal(it.Content, &content)
		parts = content
	}
	return strings.Join(parts, "\n")
}

// toolCall maps a tool item to an ACP tool call; other items are not tools.
func toolCall(it threadItem) (sdk.ToolCall, bool) {
	c := sdk.ToolCall{ToolCallID: it.ID, Status: "in_progress"}
	switch it.Type {
	case "commandExecution":
		c.Kind, c.Title = "execute", commandTitle(it.Command)
		c.RawInputJSON = marshal(CommandInput{Command: it.Command, Cwd: it.Cwd})
	case "fileChange":
		c.Kind, c.Title = "edit", "edit "+paths(it.Changes)
		c.RawInputJSON = marshal(PatchInput{Changes: patchChanges(it.Changes, false)})
	case "mcpToolCall":
		c.Kind, c.Title = "other", it.Server+"/"+it.Tool
		c.RawInputJSON = rawOrEmpty(it.Arguments)
	case "dynamicToolCall":
		c.Kind, c.Title = "other", it.Tool
		c.RawInputJSON = rawOrEmpty(it.Arguments)
	case "webSearch":
		c.Kind, c.Title = "fetch", "web search: "+it.Query
		c.RawInputJSON = marshal(map[string]any{"query": it.Query})
	default:
		return sdk.ToolCall{}, false
	}
	if it.Status == "" || it.Status == "inProgress" {
		return c, true
	}
	c.Status = toolStatus(it.Status)
	return c, true
}

// toolUpdate is a tool item's final update.
func toolUpdate(it threadItem) sdk.ToolCallUpdate {
	u := sdk.ToolCallUpdate{ToolCallID: it.ID, Status: toolStatus(it.Status)}
	if it.Status == "" {
		u.Status = "completed"
	}
	switch it.Type {
	case "commandExecution":
		if it.AggregatedOutput != nil && *it.AggregatedOutput != "" {
			u.Content = []sdk.ContentBlock{sdk.TextBlock(*it.AggregatedOutput)}
		}
		u.RawOutputJSON = marshal(map[string]any{"status": it.Status, "exitCode": it.ExitCode, "durationMs": it.DurationMs})
	case "fileChange":
		// The diffs went with the tool call.
		u.RawOutputJSON = marshal(map[string]any{"status": it.Status})
	case "mcpToolCall", "dynamicToolCall":
		u.RawOutputJSON = marshal(map[string]any{"status": it.Status, "result": json.RawMessage(rawOrNull(it.Result)), "error": json.RawMessage(rawOrNull(it.Error))})
	}
	return u
}

// toolStatus maps codex item statuses to ACP's; declined is a failure.
func toolStatus(s string) string {
	switch s {
	case "inProgress":
		return "in_progress"
	case "completed":
		return "completed"
	case "failed", "declined":
		return "failed"
	}
	return s
}

// shellWrappers are the prefixes codex wraps a command in: it runs the
// model's cmd as `/bin/bash -lc '<cmd>'` and reports it so.
var shellWrappers = []string{"/bin/bash -lc ", "/bin/bash -c ", "bash -lc ", "bash -c ", "/bin/zsh -lc ", "/bin/zsh -c ", "/bin/sh -c ", "sh -c "}

// commandTitle is a command item's title: the command the model asked
// for, without the login shell codex wraps it in (rawInput keeps the
// whole command line).
func commandTitle(command string) string {
	if command == "" {
		return "run a command"
	}
	for _, w := range shellWrappers {
		rest, ok := strings.CutPrefix(command, w)
		if !ok {
			continue
		}
		if inner, ok := shellWord(rest); ok && inner != "" {
			return inner
		}
		break
	}
	return command
}

// shellWord undoes the quoting of one POSIX shell word made of
// single-quoted pieces ('…', a quote written as '\” inside) and plain
// characters, as codex quotes the command it wraps. It reports false for
// anything else (blanks, double quotes, expansions), which is then shown
// as it is.
func shellWord(s string) (string, bool) {
	var b strings.Builder
	for s != "" {
		switch {
		case strings.HasPrefix(s, `\'`):
			b.WriteByte('\'')
			s = s[2:]
		case s[0] == '\'':
			end := strings.IndexByte(s[1:], '\'')
			if end < 0 {
				return "", false
			}
			b.WriteString(s[1 : 1+end])
			s = s[2+end:]
		case strings.ContainsRune(" \t\n\"$`\\", rune(s[0])):
			return "", false
		default:
			b.WriteByte(s[0])
			s = s[1:]
		}
	}
	return b.String(), true
}

func planStatus(s string) string {
	if s == "inProgress" {
		return "in_progress"
	}
	return s
}

func paths(changes []fileChange) string {
	var ps []string
	for i, c := range changes {
		if i == 3 {
			ps = append(ps, fmt.Sprintf("and %d more", len(changes)-3))
			break
		}
		ps = append(ps, c.Path)
	}
	if len(ps) == 0 {
		return "files"
	}
	return strings.Join(ps, ", ")
}

func marshal(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(b)
}

func rawOrEmpty(b json.RawMessage) string {
	if len(b) == 0 || string(b) == "null" {
		return ""
	}
	return string(b)
}

func rawOrNull(b json.RawMessage) []byte {
	if len(b) == 0 {
		return []byte("null")
	}
	return b
}

// errWithdrawn is the cause of an approval request's end when codex
// withdrew it (serverRequest/resolved) or its turn ended.
var errWithdrawn = errors.New("codex withdrew the request")

// approvalOptions are the answers a codex approval offers the user; their
// ids are codex's decisions. Codex's fourth decision, "cancel" (deny and
// interrupt the turn), is the answer to a cancelled request.
//
// Codex has no "reject always": its decisions are per request (accept,
// decline, cancel) or for the session (acceptForSession), so no
// reject_always option is offered.
var approvalOptions = []sdk.PermissionOption{
	{OptionID: "accept", Name: "Allow", Kind: "allow_once"},
	{OptionID: "acceptForSession", Name: "Allow for this session", Kind: "allow_always"},
	{OptionID: "decline", Name: "Deny", Kind: "reject_once"},
}

// request answers a request the app-server sends during the turn.
// Approvals ask the user (each in its own goroutine, so the turn keeps
// streaming); requests the plugin cannot serve get a JSON-RPC error or,
// for MCP elicitations, a decline, so codex never waits on them.
func (t *turnRun) request(m *message) {
	switch m.Method {
	case "item/commandExecution/requestApproval", "item/fileChange/requestApproval", "item/permissions/requestApproval",
		"execCommandApproval", "applyPatchApproval":
		ctx, cancel := context.WithCancelCause(t.approvalCtx)
		t.approvals[string(m.ID)] = cancel
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			defer cancel(nil)
			t.approve(ctx, m)
		}()
	case "mcpServer/elicitation/request":
		t.a.log.Info("declined an MCP elicitation: agenthost cannot show its form", "turn", t.turnID)
		_ = t.c.respond(m.ID, map[string]any{"action": "decline", "content": nil})
	default:
		t.a.log.Info("refused a codex request the plugin does not handle", "method", m.Method)
		_ = t.c.respondError(m.ID, codeMethodNotFound, "agenthost's codex plugin does not handle "+m.Method)
	}
}

// approve asks the user about one approval request and answers codex in
// the shape the request's method expects.
func (t *turnRun) approve(ctx context.Context, m *message) {
	var p approvalParams
	var legacy legacyApprovalParams
	_ = json.Unmarshal(m.Params, &p)
	call := sdk.ToolCall{ToolCallID: p.ItemID, Status: "pending"}
	scope := ""
	switch m.Method {
	case "item/commandExecution/requestApproval":
		call.Kind, call.Title = "execute", commandTitle(deref(p.Command))
		call.RawInputJSON = marshal(CommandInput{Command: deref(p.Command), Cwd: deref(p.Cwd), Reason: deref(p.Reason)})
		scope = commandScope(deref(p.Command))
	case "item/fileChange/requestApproval":
		// The request names only the item: what it would write is in the
		// fileChange item codex announced just before.
		call.Kind, call.Title = "edit", "apply file changes"
		input := PatchInput{Reason: deref(p.Reason), GrantRoot: deref(p.GrantRoot)}
		if it, ok := t.startedItem(p.ItemID); ok {
			call.Title = "edit " + paths(it.Changes)
			input.Changes = patchChanges(it.Changes, true)
			call.Content, call.Locations = t.itemDiffs(it)
		}
		call.RawInputJSON = marshal(input)
		var changed []string
		if it, ok := t.startedItem(p.ItemID); ok {
			for _, c := range it.Changes {
				changed = append(changed, c.Path)
			}
		}
		scope = t.patchScope(changed, deref(p.GrantRoot))
	case "item/permissions/requestApproval":
		call.Kind, call.Title = "other", "grant additional permissions"
		if r := deref(p.Reason); r != "" {
			call.Title += ": " + r
		}
		call.RawInputJSON = rawOrEmpty(p.Permissions)
	case "execCommandApproval", "applyPatchApproval":
		_ = json.Unmarshal(m.Params, &legacy)
		call.ToolCallID = legacy.CallID
		if m.Method == "execCommandApproval" {
			call.Kind, call.Title = "execute", strings.Join(legacy.Command, " ")
			if inner, ok := allowscope.UnwrapArgv(legacy.Command); ok {
				scope = execScope(inner)
			}
		} else {
			var changes map[string]json.RawMessage
			_ = json.Unmarshal(legacy.FileChanges, &changes)
			changed := make([]string, 0, len(changes))
			for path := range changes {
				changed = append(changed, path)
			}
			call.Kind, call.Title = "edit", "apply file changes"
			scope = t.patchScope(changed, deref(legacy.GrantRoot))
		}
		call.RawInputJSON = string(m.Params)
	}
	options := approvalOptions
	if scope == "" && call.Kind == "edit" {
		// Codex's acceptForSession of a patch covers more than its files
		// (a grantRoot's whole tree): without an honest scope only the
		// once answers are offered. A command's acceptForSession stays:
		// codex remembers it for that exact command only.
		options = []sdk.PermissionOption{approvalOptions[0], approvalOptions[2]}
	}
	out, err := t.turn.RequestPermission(ctx, sdk.PermissionRequest{ToolCall: call, Options: options, AlwaysScope: scope})
	if err != nil && errors.Is(context.Cause(ctx), errWithdrawn) {
		// Codex resolved the request itself (or the turn ended): nothing
		// waits for an answer.
		t.a.log.Info("approval withdrawn by codex", "method", m.Method, "item", call.ToolCallID)
		return
	}
	decision := "cancel"
	if err == nil && !out.Cancelled() {
		decision = "decline"
		if out.OptionID == "acceptForSession" && len(options) < len(approvalOptions) {
			decision = "accept" // not offered: it counts once
		}
		for _, o := range options {
			if o.OptionID == out.OptionID {
				decision = o.OptionID
			}
		}
	}
	t.a.log.Info("approval answered", "method", m.Method, "item", call.ToolCallID, "decision", decision)
	var result any
	switch m.Method {
	case "item/permissions/requestApproval":
		granted := json.RawMessage(`{}`)
		scope := "turn"
		switch decision {
		case "accept":
			granted = json.RawMessage(rawOrNull(p.Permissions))
		case "acceptForSession":
			granted, scope = json.RawMessage(rawOrNull(p.Permissions)), "session"
		}
		result = map[string]any{"permissions": granted, "scope": scope}
	case "execCommandApproval", "applyPatchApproval":
		result = map[string]any{"decision": map[string]string{
			"accept": "approved", "acceptForSession": "approved_for_session", "decline": "denied", "cancel": "abort",
		}[decision]}
	default:
		result = map[string]any{"decision": decision}
	}
	if err := t.c.respond(m.ID, result); err != nil {
		t.a.log.Warn("could not answer codex's approval request", "error", err)
	}
}

// startedItem is the tool item announced with id, if any. It is read from
// an approval's goroutine while the turn's goroutine writes the map, so
// it takes the turn's lock.
func (t *turnRun) startedItem(id string) (threadItem, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	it, ok := t.started[id]
	return it, ok
}

// itemDiffs are a fileChange item's diffs and locations, as computed when
// it was announced.
func (t *turnRun) itemDiffs(it threadItem) ([]sdk.ToolCallContent, []sdk.Location) {
	t.mu.Lock()
	d, ok := t.diffs[it.ID]
	t.mu.Unlock()
	if ok {
		return d.content, d.locations
	}
	return fileDiffs(it.Changes, false)
}

// itemDiff is a fileChange item's diffs and the files they touch.
type itemDiff struct {
	content   []sdk.ToolCallContent
	locations []sdk.Location
}

// commandScope is what "allow always" covers for a command codex reports
// as one line (`/bin/bash -lc '<cmd>'`): its exact inner command, or ""
// when the wrapper does not unwrap or the command is not one an exact
// scope can honestly cover (the package doc's "What an allow-always
// covers").
func commandScope(line string) string {
	inner, ok := allowscope.Unwrap(line)
	if !ok {
		return ""
	}
	return execScope(inner)
}

// execScope is "exec:<command>" for a command allowscope finds honest,
// else "".
func execScope(command string) string {
	if c := allowscope.Command(command); c != "" {
		return "exec:" + c
	}
	return ""
}

// patchScope is what "allow always" covers for a patch: "patch" when it
// names its files, all inside the workspace or add_dirs, and asks for no
// grantRoot (a write root beyond them); otherwise "".
func (t *turnRun) patchScope(paths []string, grantRoot string) string {
	if grantRoot != "" || len(paths) == 0 {
		return ""
	}
	roots := append([]string{t.workspace}, t.opts.addDirs...)
	for _, p := range paths {
		if !allowscope.Within(p, t.workspace, roots) {
			return ""
		}
	}
	return "patch"
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// toInput converts a prompt to codex user input: text as text, ACP image
// blocks as images (a data URL, or a local file for a file: URI), an
// embedded text resource as a text item carrying its URI and text, and a
// resource link as a text reference. Blocks codex cannot take (audio, a
// binary resource) fail the prompt rather than being dropped.
func toInput(blocks []sdk.ContentBlock) ([]userInput, error) {
	var out []userInput
	text := func(s string) { out = append(out, userInput{"type": "text", "text": s, "text_elements": []any{}}) }
	for _, b := range blocks {
		switch b.Type {
		case "", sdk.BlockText:
			text(b.Text)
		case sdk.BlockImage:
			img, err := b.Image()
			if err != nil {
				return nil, fmt.Errorf("codex: the prompt's image block: %w", err)
			}
			switch {
			case strings.HasPrefix(img.URI, "file://") && img.Data == "":
				out = append(out, userInput{"type": "localImage", "path": strings.TrimPrefix(img.URI, "file://")})
			case img.Data != "":
				mt := img.MimeType
				if mt == "" {
					return nil, errors.New("codex: the prompt's image block has data but no mimeType")
				}
				out = append(out, userInput{"type": "image", "url": "data:" + mt + ";base64," + img.Data})
			case img.URI != "":
				out = append(out, userInput{"type": "image", "url": img.URI})
			default:
				return nil, errors.New("codex: the prompt's image block has neither data nor a URI")
			}
		case sdk.BlockResource:
			r, err := b.Resource()
			if err != nil {
				return nil, fmt.Errorf("codex: the prompt's resource block: %w", err)
			}
			if r.Text == "" && r.Blob != "" {
				return nil, fmt.Errorf("codex: the prompt's resource %s is binary; codex takes text resources (and images as image blocks)", r.URI)
			}
			text(fmt.Sprintf("<resource uri=%q>\n%s\n</resource>", r.URI, r.Text))
		case sdk.BlockResourceLink:
			l, err := b.ResourceLink()
			if err != nil || l.URI == "" {
				return nil, errors.New("codex: the prompt's resource_link block has no URI")
			}
			name := l.Name
			if name == "" {
				name = l.URI
			}
			text(fmt.Sprintf("[@%s](%s)", name, l.URI))
		default:
			return nil, fmt.Errorf("codex: cannot send a prompt block of type %q to codex (it takes text, image, resource and resource_link blocks)", b.Type)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("codex: the prompt is empty")
	}
	return out, nil
}
