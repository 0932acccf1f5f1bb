// Command fakecodex is a faithful fake of the `codex` CLI 0.171.0 for the
// codex plugin's tests: `codex --version` and `codex app-server`, JSON-RPC
// over stdio as JSONL without the "jsonrpc" member, with the real method
// names, shapes, errors (codes and texts) and extra fields. Its "model" is
// the prompt text:
//
//	count N [INTERVAL]  stream N agentMessage deltas "1".."N", INTERVAL apart
//	sleep DURATION      hold the turn for DURATION or until interrupted
//	tool                run a command item "ls", asking for approval first
//	                    when approvalPolicy is untrusted or on-request;
//	                    replies "approval: DECISION"
//	edit                a fileChange item adding notes.txt, approved the
//	                    same way (written when approved)
//	patch               a fileChange item updating the workspace's a.txt
//	                    (line2 becomes LINE2), approved the same way
//	patchroot           the same, its approval asking for grantRoot "/"
//	settings            reply with the thread's settings as JSON (model,
//	                    effort, approval policy, sandbox, instructions,
//	                    MCP servers, writable roots)
//	echo TEXT           reply with the whole prompt (images shown as
//	                    [image URL…])
//	name TEXT           name the thread TEXT (thread/name/updated)
//	perm                an item/permissions/requestApproval request;
//	                    replies "permissions: RESULT"
//	think               a reasoning item (summary deltas), then a message
//	plan                a turn/plan/updated notification, then a message
//	huge N              one agentMessage delta on a line of exactly N bytes
//	die                 exit with status 3 in the middle of the turn
//	fail MESSAGE        complete the turn as failed with MESSAGE
//	http STATUS MESSAGE the model provider answering STATUS with MESSAGE
//	                    on every attempt: one retry error, then the turn
//	                    failed as codex reports it (a 500's body dropped,
//	                    a 400 not retried, its message the whole body)
//	offline             retry errors (willRetry) until interrupted
//	env NAME            reply with the value of NAME in its environment
//	noise               non-JSON and unknown lines, an unknown request
//	anything else       echoed back as one delta
//
// Environment knobs: FAKECODEX_VERSION overrides the version,
// FAKECODEX_SLOW delays every line it writes, FAKECODEX_IGNORE_SIGTERM=1
// ignores SIGTERM and stdin EOF, FAKECODEX_RESUME_OTHER=1 answers
// thread/resume with another thread, FAKECODEX_LOG appends every line it
// reads to a file, FAKECODEX_FAIL_START=MESSAGE makes app-server print
// MESSAGE to stderr and exit 1 before reading anything (as a codex that
// cannot read its config does), FAKECODEX_IGNORE_INTERRUPT=1 answers
// turn/interrupt but never stops the turn.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/agenthost/agenthost/plugins/internal/fakecli"
	"github.com/google/uuid"
)

func main() {
	args := os.Args[1:]
	switch {
	case len(args) == 1 && (args[0] == "--version" || args[0] == "-V"):
		v := os.Getenv("FAKECODEX_VERSION")
		if v == "" {
			v = "0.171.0"
		}
		fmt.Println("codex-cli " + v)
	case len(args) >= 1 && args[0] == "app-server" && os.Getenv("FAKECODEX_FAIL_START") != "":
		fmt.Fprintln(os.Stderr, os.Getenv("FAKECODEX_FAIL_START"))
		os.Exit(1)
	case len(args) >= 1 && args[0] == "app-server":
		newServer().serve()
	default:
		fmt.Fprintf(os.Stderr, "error: unrecognized subcommand %q\n\nUsage: codex [OPTIONS] [PROMPT]\n", strings.Join(args, " "))
		os.Exit(2)
	}
}

type server struct {
	wmu  sync.Mutex
	w    *bufio.Writer
	slow time.Duration
	log  *os.File
	home string

	mu          sync.Mutex
	gotInit     bool // initialize was answered
	initialized bool // the client sent initialized
	optOut      map[string]bool
	threads     map[string]*thread
	nextReq     int
	waiting     map[string]chan json.RawMessage // answers to our requests
}

type thread struct {
	id, cwd, policy string
	ephemeral       bool
	rollout         string
	turns           int
	active          *turn
	// The settings thread/start (or resume) and turn/start gave it, which
	// the prompt "settings" reports.
	model, effort, sandbox string
	base, developer        string
	config                 map[string]any
	name                   string
}

// turn is a turn in progress.
type turn struct {
	id string
	*fakecli.Turn
}

// interrupted reports whether the turn was interrupted.
func (t *turn) interrupted() bool { return !t.Wait(0) }

func newServer() *server {
	s := &server{w: bufio.NewWriterSize(os.Stdout, 1<<16), threads: map[string]*thread{}, waiting: map[string]chan json.RawMessage{}, optOut: map[string]bool{}}
	s.slow, _ = time.ParseDuration(os.Getenv("FAKECODEX_SLOW"))
	if p := os.Getenv("FAKECODEX_LOG"); p != "" {
		s.log, _ = os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	}
	s.home = os.Getenv("CODEX_HOME")
	if s.home == "" {
		h, _ := os.UserHomeDir()
		s.home = filepath.Join(h, ".codex")
	}
	return s
}

func (s *server) serve() {
	ignoreTerm := os.Getenv("FAKECODEX_IGNORE_SIGTERM") == "1"
	if ignoreTerm {
		fakecli.IgnoreSIGTERM()
	}
	// Like the real server, a log line on stderr at startup.
	fmt.Fprintln(os.Stderr, "\x1b[2m2026-11-29T20:17:09.000000Z\x1b[0m \x1b[31mERROR\x1b[0m codex_app_server: Codex could not find bubblewrap on PATH (fake)")
	r := bufio.NewReaderSize(os.Stdin, 1<<16)
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			if s.log != nil {
				s.log.Write(line)
				if line[len(line)-1] != '\n' {
					s.log.Write([]byte("\n"))
				}
			}
			s.handleLine(line)
		}
		if err != nil {
			if ignoreTerm {
				fakecli.Forever() // stdin EOF ignored too
			}
			os.Exit(0)
		}
	}
}

type inMsg struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  json.RawMessage `json:"error"`
}

func (s *server) handleLine(line []byte) {
	var m inMsg
	if err := json.Unmarshal(line, &m); err != nil {
		fmt.Fprintf(os.Stderr, "fakecodex: failed to deserialize message: %v\n", err)
		return
	}
	switch {
	case m.Method != "" && len(m.ID) > 0:
		s.request(m)
	case m.Method != "":
		if m.Method == "initialized" {
			s.mu.Lock()
			s.initialized = true
			s.mu.Unlock()
		}
	case len(m.ID) > 0:
		s.mu.Lock()
		ch := s.waiting[string(m.ID)]
		delete(s.waiting, string(m.ID))
		s.mu.Unlock()
		if ch != nil {
			if len(m.Error) > 0 {
				ch <- json.RawMessage(`{"error":` + string(m.Error) + `}`)
			} else {
				ch <- m.Result
			}
		}
	}
}

// Writing. Every line is delayed by FAKECODEX_SLOW.

func (s *server) writeLine(b []byte) {
	if s.slow > 0 {
		time.Sleep(s.slow)
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.w.Write(b)
	s.w.WriteByte('\n')
	s.w.Flush()
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

type response struct {
	ID     json.RawMessage `json:"id"`
	Result any             `json:"result"`
}

type errorResponse struct {
	Error struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	ID json.RawMessage `json:"id"`
}

type notification struct {
	Method      string `json:"method"`
	Params      any    `json:"params"`
	EmittedAtMs int64  `json:"emittedAtMs"`
}

type serverRequest struct {
	Method string `json:"method"`
	ID     int    `json:"id"`
	Params any    `json:"params"`
}

func (s *server) result(id json.RawMessage, v any) {
	s.writeLine(mustJSON(response{ID: id, Result: v}))
}

func (s *server) fail(id json.RawMessage, code int, msg string) {
	var e errorResponse
	e.Error.Code, e.Error.Message, e.ID = code, msg, id
	s.writeLine(mustJSON(e))
}

func (s *server) notify(method string, params any) {
	if method == "turn/completed" {
		s.recordTurnEnd(params)
	}
	s.mu.Lock()
	skip := s.optOut[method]
	s.mu.Unlock()
	if !skip {
		s.writeLine(mustJSON(notification{Method: method, Params: params, EmittedAtMs: time.Now().UnixMilli()}))
	}
}

// ask sends a request to the client and waits for its answer or the end
// of the turn; the answer is nil when the turn was interrupted first.
func (s *server) ask(th *thread, t *turn, method string, params any) json.RawMessage {
	s.mu.Lock()
	id := s.nextReq
	s.nextReq++
	ch := make(chan json.RawMessage, 1)
	s.waiting[fmt.Sprint(id)] = ch
	s.mu.Unlock()
	s.writeLine(mustJSON(serverRequest{Method: method, ID: id, Params: params}))
	var answer json.RawMessage
	select {
	case answer = <-ch:
	case <-t.Interrupted():
	}
	s.notify("serverRequest/resolved", map[string]any{"threadId": th.id, "requestId": id})
	return answer
}

func nowMs() int64 { return time.Now().UnixMilli() }

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func newID() string { return uuid.Must(uuid.NewV7()).String() }

// Requests.

var knownMethods = []string{"initialize", "thread/start", "thread/resume", "thread/fork", "thread/archive", "thread/read", "thread/list", "thread/name/set", "thread/compact/start", "review/start", "turn/start", "turn/steer", "turn/interrupt", "model/list", "account/read", "config/read"}

// models are what model/list answers, in 0.171.0's shape.
func models() []any {
	effort := func(e, d string) map[string]any { return map[string]any{"reasoningEffort": e, "description": d} }
	return []any{
		map[string]any{"id": "gpt-fake", "model": "gpt-fake", "upgrade": nil, "displayName": "GPT-Fake", "description": "The fake's default model.",
			"hidden": false, "supportedReasoningEfforts": []any{effort("low", "Fast"), effort("medium", "Balanced"), effort("high", "Deep")},
			"defaultReasoningEffort": "low", "inputModalities": []string{"text", "image"}, "isDefault": true},
		map[string]any{"id": "gpt-fake-big", "model": "gpt-fake-big", "upgrade": nil, "displayName": "GPT-Fake-Big", "description": "A bigger fake model.",
			"hidden": false, "supportedReasoningEfforts": []any{effort("medium", "Balanced"), effort("xhigh", "Extra deep")},
			"defaultReasoningEffort": "medium", "inputModalities": []string{"text", "image"}, "isDefault": false},
		map[string]any{"id": "gpt-fake-hidden", "model": "gpt-fake-hidden", "upgrade": nil, "displayName": "Hidden", "description": "Not in the picker.",
			"hidden": true, "supportedReasoningEfforts": []any{}, "defaultReasoningEffort": "low", "inputModalities": []string{"text"}, "isDefault": false},
	}
}

func (s *server) request(m inMsg) {
	s.mu.Lock()
	inited := s.gotInit
	s.mu.Unlock()
	switch m.Method {
	case "initialize":
		s.mu.Lock()
		already := s.gotInit
		s.gotInit = true
		s.mu.Unlock()
		if already {
			s.fail(m.ID, -32600, "Already initialized")
			return
		}
		var p struct {
			ClientInfo struct {
				Name    string `json:"name"`
				Version string `json:"version"`
			} `json:"clientInfo"`
			Capabilities *struct {
				OptOut []string `json:"optOutNotificationMethods"`
			} `json:"capabilities"`
		}
		_ = json.Unmarshal(m.Params, &p)
		s.mu.Lock()
		if p.Capabilities != nil {
			for _, o := range p.Capabilities.OptOut {
				s.optOut[o] = true
			}
		}
		s.mu.Unlock()
		s.result(m.ID, map[string]any{
			"userAgent":      fmt.Sprintf("%s/0.171.0 (Debian 12.0.0; x86_64) unknown (%s; %s)", p.ClientInfo.Name, p.ClientInfo.Name, p.ClientInfo.Version),
			"codexHome":      s.home,
			"platformFamily": "unix", "platformOs": "linux",
		})
		s.notify("configWarning", map[string]any{"summary": "Codex could not find bubblewrap on PATH (fake).", "details": nil})
		s.notify("remoteControl/status/changed", map[string]any{"status": "disabled", "serverName": "fake", "installationId": newID(), "environmentId": nil})
		return
	}
	if !inited {
		s.fail(m.ID, -32600, "Not initialized")
		return
	}
	switch m.Method {
	case "thread/start":
		s.threadStart(m)
	case "thread/resume":
		s.threadResume(m)
	case "turn/start":
		s.turnStart(m)
	case "turn/interrupt":
		s.turnInterrupt(m)
	case "model/list":
		s.result(m.ID, map[string]any{"data": models(), "nextCursor": nil})
	case "thread/name/set":
		s.threadNameSet(m)
	case "thread/compact/start":
		s.compactStart(m)
	case "review/start":
		s.reviewStart(m)
	default:
		s.fail(m.ID, -32600, fmt.Sprintf("Invalid request: unknown variant `%s`, expected one of `%s`", m.Method, strings.Join(knownMethods, "`, `")))
	}
}

type threadParams struct {
	ThreadID              string          `json:"threadId"`
	Cwd                   string          `json:"cwd"`
	Model                 string          `json:"model"`
	ApprovalPolicy        json.RawMessage `json:"approvalPolicy"`
	Sandbox               string          `json:"sandbox"`
	Ephemeral             bool            `json:"ephemeral"`
	Config                map[string]any  `json:"config"`
	BaseInstructions      string          `json:"baseInstructions"`
	DeveloperInstructions string          `json:"developerInstructions"`
}

// apply records p's settings on th, as codex makes them the thread's.
func (th *thread) apply(p threadParams) {
	if p.Model != "" {
		th.model = p.Model
	}
	if p.Sandbox != "" {
		th.sandbox = p.Sandbox
	}
	if e, ok := p.Config["model_reasoning_effort"].(string); ok {
		th.effort = e
	}
	th.base, th.developer, th.config = p.BaseInstructions, p.DeveloperInstructions, p.Config
}

func (th *thread) modelName() string {
	if th.model == "" {
		return "gpt-fake"
	}
	return th.model
}

// sandboxJSON is the thread's SandboxPolicy as 0.171.0 reports it.
func (th *thread) sandboxJSON() map[string]any {
	switch th.sandbox {
	case "read-only":
		return map[string]any{"type": "readOnly", "networkAccess": false}
	case "danger-full-access":
		return map[string]any{"type": "dangerFullAccess"}
	}
	return map[string]any{"type": "workspaceWrite", "writableRoots": []string{}, "networkAccess": false}
}

func (s *server) threadJSON(th *thread) map[string]any {
	var path any
	if th.rollout != "" {
		path = th.rollout
	} else if !th.ephemeral {
		path = s.rolloutPath(th.id, time.Now())
	}
	now := time.Now().Unix()
	return map[string]any{
		"id": th.id, "environments": []any{map[string]any{"environmentId": "local", "cwd": th.cwd, "runtimeWorkspaceRoots": []string{th.cwd}}},
		"extra": nil, "sessionId": th.id, "forkedFromId": nil, "attachedToThreadId": nil, "parentThreadId": nil, "preview": "",
		"ephemeral": th.ephemeral, "section": nil, "historyMode": "paginated", "modelProvider": "openai", "model": th.modelName(),
		"reasoningEffort": nil, "createdAt": now, "updatedAt": now, "recencyAt": now, "status": map[string]any{"type": "idle"},
		"path": path, "cwd": th.cwd, "cliVersion": "0.171.0", "originator": "agenthost", "source": "vscode",
		"canAcceptDirectInput": true, "gitInfo": nil, "name": nilIfEmpty(th.name), "turns": []any{}, "fakeUnknownField": map[string]any{"nested": []int{1, 2}},
	}
}

func (s *server) threadResult(th *thread) map[string]any {
	return map[string]any{
		"thread": s.threadJSON(th), "model": th.modelName(), "modelProvider": "openai", "serviceTier": nil, "cwd": th.cwd,
		"approvalPolicy": th.policy, "approvalsReviewer": "user",
		"sandbox": th.sandboxJSON(), "reasoningEffort": nilIfEmpty(th.effort),
	}
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func policyOf(raw json.RawMessage) string {
	var p string
	if json.Unmarshal(raw, &p) == nil && p != "" {
		return p
	}
	return "never"
}

func (s *server) threadStart(m inMsg) {
	var p threadParams
	_ = json.Unmarshal(m.Params, &p)
	if p.Cwd == "" {
		p.Cwd, _ = os.Getwd()
	}
	th := &thread{id: newID(), cwd: p.Cwd, policy: policyOf(p.ApprovalPolicy), ephemeral: p.Ephemeral}
	th.apply(p)
	s.mu.Lock()
	s.threads[th.id] = th
	s.mu.Unlock()
	s.result(m.ID, s.threadResult(th))
	s.notify("thread/started", map[string]any{"thread": s.threadJSON(th)})
}

func (s *server) threadResume(m inMsg) {
	var p threadParams
	_ = json.Unmarshal(m.Params, &p)
	if _, err := uuid.Parse(p.ThreadID); err != nil {
		s.fail(m.ID, -32600, "invalid session id: "+err.Error())
		return
	}
	s.mu.Lock()
	th := s.threads[p.ThreadID]
	s.mu.Unlock()
	if th == nil {
		matches, _ := filepath.Glob(filepath.Join(s.home, "sessions", "*", "*", "*", "rollout-*-"+p.ThreadID+".jsonl"))
		if len(matches) == 0 {
			s.fail(m.ID, -32600, "no rollout found for thread id "+p.ThreadID)
			return
		}
		th = &thread{id: p.ThreadID, cwd: p.Cwd, rollout: matches[0], turns: 1}
		s.mu.Lock()
		s.threads[th.id] = th
		s.mu.Unlock()
	}
	if len(p.ApprovalPolicy) > 0 {
		th.policy = policyOf(p.ApprovalPolicy)
	} else if th.policy == "" {
		th.policy = "never"
	}
	th.apply(p)
	res := s.threadResult(th)
	if os.Getenv("FAKECODEX_RESUME_OTHER") == "1" {
		other := *th
		other.id = newID()
		res = s.threadResult(&other)
	}
	s.result(m.ID, res)
}

// threadNameSet names a thread, which saves it (its rollout appears), as
// 0.171.0 does.
func (s *server) threadNameSet(m inMsg) {
	var p struct {
		ThreadID string `json:"threadId"`
		Name     string `json:"name"`
	}
	_ = json.Unmarshal(m.Params, &p)
	s.mu.Lock()
	th := s.threads[p.ThreadID]
	if th != nil {
		th.name = p.Name
		s.materialize(th)
	}
	s.mu.Unlock()
	if th == nil {
		s.fail(m.ID, -32600, "thread not found: "+p.ThreadID)
		return
	}
	s.result(m.ID, map[string]any{})
	s.notify("thread/name/updated", map[string]any{"threadId": th.id, "threadName": p.Name})
}

// commandTurn starts the turn a command (compaction, review) runs on
// thread id, or answers the request with an error when the thread is
// unknown or busy (a nil turn).
func (s *server) commandTurn(m inMsg, id string) (*thread, *turn) {
	s.mu.Lock()
	th := s.threads[id]
	var tu *turn
	if th != nil && th.active == nil {
		tu = &turn{id: newID(), Turn: fakecli.NewTurn()}
		th.active = tu
	}
	s.mu.Unlock()
	if tu == nil {
		s.fail(m.ID, -32600, "thread not found or busy: "+id)
	}
	return th, tu
}

// compactStart answers {} and runs the compaction as a turn of its own
// (turn/started, a contextCompaction item, turn/completed), as 0.171.0.
func (s *server) compactStart(m inMsg) {
	var p struct {
		ThreadID string `json:"threadId"`
	}
	_ = json.Unmarshal(m.Params, &p)
	th, tu := s.commandTurn(m, p.ThreadID)
	if tu == nil {
		return
	}
	s.result(m.ID, map[string]any{})
	go func() {
		started := time.Now().Unix()
		s.notify("turn/started", map[string]any{"threadId": th.id, "turn": turnJSON(tu.id, "inProgress", nil, started, nil)})
		item := map[string]any{"type": "contextCompaction", "id": newID(), "startedAtMs": nowMs(), "completedAtMs": nil}
		s.notify("item/started", map[string]any{"item": item, "threadId": th.id, "turnId": tu.id, "startedAtMs": nowMs()})
		item["completedAtMs"] = nowMs()
		s.notify("item/completed", map[string]any{"item": item, "threadId": th.id, "turnId": tu.id, "completedAtMs": nowMs()})
		s.mu.Lock()
		th.active = nil
		s.mu.Unlock()
		s.notify("turn/completed", map[string]any{"threadId": th.id, "turn": turnJSON(tu.id, "completed", nil, started, time.Now().Unix())})
	}()
}

// reviewStart runs a review as 0.171.0 does: the answer names the root
// turn, whose items (enteredReviewMode, exitedReviewMode with the review,
// an agentMessage repeating it) and turn/completed name it too, while
// turn/started announces an inner turn of another id with the root's as
// its rootTurnId.
func (s *server) reviewStart(m inMsg) {
	var p struct {
		ThreadID string `json:"threadId"`
		Target   struct {
			Type         string `json:"type"`
			Instructions string `json:"instructions"`
		} `json:"target"`
	}
	_ = json.Unmarshal(m.Params, &p)
	th, tu := s.commandTurn(m, p.ThreadID)
	if tu == nil {
		return
	}
	s.result(m.ID, map[string]any{"turn": turnJSON(tu.id, "inProgress", nil, nil, nil), "reviewThreadId": th.id})
	go func() {
		started := time.Now().Unix()
		what := "current changes"
		if p.Target.Type == "custom" {
			what = p.Target.Instructions
		}
		item := func(typ, review string) {
			it := map[string]any{"type": typ, "id": newID(), "review": review, "startedAtMs": nowMs(), "completedAtMs": nil}
			s.notify("item/started", map[string]any{"item": it, "threadId": th.id, "turnId": tu.id, "startedAtMs": nowMs()})
			it["completedAtMs"] = nowMs()
			s.notify("item/completed", map[string]any{"item": it, "threadId": th.id, "turnId": tu.id, "completedAtMs": nowMs()})
		}
		item("enteredReviewMode", what)
		inner := turnJSON(newID(), "inProgress", nil, started, nil)
		inner["rootTurnId"] = tu.id
		s.notify("turn/started", map[string]any{"threadId": th.id, "turn": inner})
		review := "reviewed " + what + ": no findings"
		item("exitedReviewMode", review)
		msg := map[string]any{"type": "agentMessage", "id": "msg_" + newID(), "text": review, "phase": nil}
		s.notify("item/started", map[string]any{"item": msg, "threadId": th.id, "turnId": tu.id, "startedAtMs": nowMs()})
		s.notify("item/completed", map[string]any{"item": msg, "threadId": th.id, "turnId": tu.id, "completedAtMs": nowMs()})
		s.mu.Lock()
		th.active = nil
		s.mu.Unlock()
		s.notify("turn/completed", map[string]any{"threadId": th.id, "turn": turnJSON(tu.id, "completed", nil, started, time.Now().Unix())})
	}()
}

func (s *server) rolloutPath(id string, t time.Time) string {
	return filepath.Join(s.home, "sessions", t.Format("2006"), t.Format("01"), t.Format("02"),
		"rollout-"+t.Format("2006-01-02T15-04-05")+"-"+id+".jsonl")
}

// materialize writes the thread's rollout file, lazily, on its first turn.
func (s *server) materialize(th *thread) {
	if th.ephemeral || th.rollout != "" {
		return
	}
	now := time.Now()
	th.rollout = s.rolloutPath(th.id, now)
	_ = os.MkdirAll(filepath.Dir(th.rollout), 0o700)
	meta := map[string]any{"timestamp": now.UTC().Format(time.RFC3339Nano), "ordinal": 0, "type": "session_meta",
		"payload": map[string]any{"session_id": th.id, "id": th.id, "cwd": th.cwd, "originator": "agenthost", "cli_version": "0.171.0", "source": "vscode", "model_provider": "openai"}}
	_ = os.WriteFile(th.rollout, append(mustJSON(meta), '\n'), 0o600)
}

// recordTurnEnd appends the event that ends a turn to its thread's
// rollout, before turn/completed is sent, as codex 0.171.0 records
// task_complete (turn_aborted for an interrupted turn) with the turn's id.
func (s *server) recordTurnEnd(params any) {
	p, _ := params.(map[string]any)
	id, _ := p["threadId"].(string)
	tu, _ := p["turn"].(map[string]any)
	turnID, _ := tu["id"].(string)
	status, _ := tu["status"].(string)
	s.mu.Lock()
	th := s.threads[id]
	path := ""
	if th != nil {
		path = th.rollout
	}
	s.mu.Unlock()
	if path == "" || turnID == "" {
		return
	}
	kind := "task_complete"
	if status == "interrupted" {
		kind = "turn_aborted"
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	line := map[string]any{"timestamp": time.Now().UTC().Format(time.RFC3339Nano), "type": "event_msg",
		"payload": map[string]any{"type": kind, "turn_id": turnID}}
	_, _ = f.Write(append(mustJSON(line), '\n'))
}

func turnJSON(id, status string, turnErr any, started, completed any) map[string]any {
	return map[string]any{"id": id, "rootTurnId": id, "items": []any{}, "itemsView": "notLoaded", "status": status,
		"error": turnErr, "startedAt": started, "completedAt": completed, "durationMs": nil}
}

func (s *server) turnStart(m inMsg) {
	var p struct {
		ThreadID string `json:"threadId"`
		Input    []struct {
			Type string `json:"type"`
			Text string `json:"text"`
			URL  string `json:"url"`
			Path string `json:"path"`
		} `json:"input"`
		ApprovalPolicy json.RawMessage `json:"approvalPolicy"`
		Model          string          `json:"model"`
		Effort         string          `json:"effort"`
		SandboxPolicy  *struct {
			Type string `json:"type"`
		} `json:"sandboxPolicy"`
	}
	if err := json.Unmarshal(m.Params, &p); err != nil {
		s.fail(m.ID, -32600, "Invalid request: "+err.Error())
		return
	}
	s.mu.Lock()
	th := s.threads[p.ThreadID]
	busy := th != nil && th.active != nil
	var tu *turn
	if th != nil && !busy {
		tu = &turn{id: newID(), Turn: fakecli.NewTurn()}
		th.active = tu
		// The overrides become the thread's defaults.
		if len(p.ApprovalPolicy) > 0 {
			th.policy = policyOf(p.ApprovalPolicy)
		}
		if p.Model != "" {
			th.model = p.Model
		}
		if p.Effort != "" {
			th.effort = p.Effort
		}
		if p.SandboxPolicy != nil {
			th.sandbox = map[string]string{"readOnly": "read-only", "workspaceWrite": "workspace-write", "dangerFullAccess": "danger-full-access"}[p.SandboxPolicy.Type]
		}
	}
	s.mu.Unlock()
	switch {
	case th == nil:
		s.fail(m.ID, -32600, "thread not found: "+p.ThreadID)
		return
	case busy:
		s.fail(m.ID, -32600, "a turn is already in progress on thread "+p.ThreadID)
		return
	}
	var text []string
	for _, in := range p.Input {
		switch in.Type {
		case "text":
			text = append(text, in.Text)
		case "image":
			text = append(text, "[image "+clip(in.URL, 40)+"]")
		case "localImage":
			text = append(text, "[localImage "+in.Path+"]")
		}
	}
	s.result(m.ID, map[string]any{"turn": turnJSON(tu.id, "inProgress", nil, nil, nil)})
	go s.runTurn(th, tu, strings.Join(text, "\n"))
}

func (s *server) turnInterrupt(m inMsg) {
	var p struct {
		ThreadID string `json:"threadId"`
		TurnID   string `json:"turnId"`
	}
	_ = json.Unmarshal(m.Params, &p)
	s.mu.Lock()
	var tu *turn
	if th := s.threads[p.ThreadID]; th != nil && th.active != nil && th.active.id == p.TurnID {
		tu = th.active
	}
	s.mu.Unlock()
	if tu == nil {
		s.fail(m.ID, -32600, "no active turn to interrupt")
		return
	}
	s.result(m.ID, map[string]any{})
	if os.Getenv("FAKECODEX_IGNORE_INTERRUPT") != "1" {
		tu.Interrupt()
	}
}

// The turn.

type turnEnd struct {
	status string
	err    any
	output int
}

func (s *server) runTurn(th *thread, tu *turn, text string) {
	started := time.Now().Unix()
	s.notify("thread/status/changed", map[string]any{"threadId": th.id, "status": map[string]any{"type": "active", "activeFlags": []any{}}})
	s.notify("turn/started", map[string]any{"threadId": th.id, "turn": turnJSON(tu.id, "inProgress", nil, started, nil)})
	s.mu.Lock()
	s.materialize(th)
	th.turns++
	s.mu.Unlock()
	userItem := map[string]any{"type": "userMessage", "id": newID(), "clientId": nil,
		"content": []any{map[string]any{"type": "text", "text": text, "text_elements": []any{}}}, "startedAtMs": nowMs(), "completedAtMs": nil}
	s.notify("item/started", map[string]any{"item": userItem, "threadId": th.id, "turnId": tu.id, "startedAtMs": nowMs()})
	userItem["completedAtMs"] = nowMs()
	s.notify("item/completed", map[string]any{"item": userItem, "threadId": th.id, "turnId": tu.id, "contentTokenCount": nil, "completedAtMs": nowMs()})

	end := s.model(th, tu, text)
	if tu.interrupted() && end.status == "completed" {
		end.status = "interrupted"
	}
	if end.status != "interrupted" {
		out := int64(end.output)
		last := map[string]int64{"totalTokens": 120 + out + 5, "inputTokens": 100, "cachedInputTokens": 20, "cacheWriteInputTokens": 0,
			"outputTokens": out, "reasoningOutputTokens": 5}
		s.notify("thread/tokenUsage/updated", map[string]any{"threadId": th.id, "turnId": tu.id,
			"tokenUsage": map[string]any{"total": last, "last": last, "modelContextWindow": 272000}})
	}
	if end.status == "failed" {
		s.notify("thread/status/changed", map[string]any{"threadId": th.id, "status": map[string]any{"type": "systemError"}})
	} else {
		s.notify("thread/status/changed", map[string]any{"threadId": th.id, "status": map[string]any{"type": "idle"}})
	}
	s.mu.Lock()
	th.active = nil
	s.mu.Unlock()
	s.notify("turn/completed", map[string]any{"threadId": th.id, "turn": turnJSON(tu.id, end.status, end.err, started, time.Now().Unix())})
}

// message streams deltas as one agentMessage item.
func (s *server) message(th *thread, tu *turn, deltas []string, gap time.Duration) bool {
	id := newID()
	s.notify("item/started", map[string]any{"item": map[string]any{"type": "agentMessage", "id": id, "text": "", "phase": nil}, "threadId": th.id, "turnId": tu.id, "startedAtMs": nowMs()})
	var full strings.Builder
	for i, d := range deltas {
		if i > 0 && !tu.Wait(gap) {
			return false
		}
		if tu.interrupted() {
			return false
		}
		s.notify("item/agentMessage/delta", map[string]any{"threadId": th.id, "turnId": tu.id, "itemId": id, "delta": d})
		full.WriteString(d)
	}
	s.notify("item/completed", map[string]any{"item": map[string]any{"type": "agentMessage", "id": id, "text": full.String(), "phase": "final_answer"},
		"threadId": th.id, "turnId": tu.id, "completedAtMs": nowMs()})
	return true
}

func (s *server) asksApproval(th *thread) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return th.policy == "untrusted" || th.policy == "on-request"
}

func (s *server) model(th *thread, tu *turn, text string) turnEnd {
	prompt := fakecli.ParsePrompt(text)
	word := prompt.Word
	ok := turnEnd{status: "completed", output: 1}
	interrupted := turnEnd{status: "interrupted"}
	switch word {
	case "count":
		n, gap := prompt.Int(0, 1), prompt.Duration(1, 0)
		deltas := make([]string, n)
		for i := range deltas {
			deltas[i] = fmt.Sprint(i + 1)
		}
		if !s.message(th, tu, deltas, gap) {
			return interrupted
		}
		ok.output = n
		return ok
	case "sleep":
		d := prompt.Duration(0, time.Hour)
		if !tu.Wait(d) {
			return interrupted
		}
		s.message(th, tu, []string{"slept " + d.String()}, 0)
		return ok
	case "tool", "edit", "patch", "patchroot":
		return s.tool(th, tu, word)
	case "perm":
		answer := s.ask(th, tu, "item/permissions/requestApproval", map[string]any{"threadId": th.id, "turnId": tu.id, "itemId": newID(),
			"cwd": th.cwd, "reason": "needs the network", "permissions": map[string]any{"network": map[string]any{"enabled": true}}, "startedAtMs": nowMs(), "environmentId": nil})
		if answer == nil {
			return interrupted
		}
		s.message(th, tu, []string{"permissions: " + string(answer)}, 0)
		return ok
	case "think":
		id := newID()
		s.notify("item/started", map[string]any{"item": map[string]any{"type": "reasoning", "id": id, "summary": []string{}, "content": []string{}}, "threadId": th.id, "turnId": tu.id, "startedAtMs": nowMs()})
		for _, d := range []string{"thinking ", "hard"} {
			s.notify("item/reasoning/summaryTextDelta", map[string]any{"threadId": th.id, "turnId": tu.id, "itemId": id, "delta": d, "summaryIndex": 0})
		}
		s.notify("item/completed", map[string]any{"item": map[string]any{"type": "reasoning", "id": id, "summary": []string{"thinking hard"}, "content": []string{}}, "threadId": th.id, "turnId": tu.id, "completedAtMs": nowMs()})
		s.message(th, tu, []string{"thought"}, 0)
		return ok
	case "plan":
		s.notify("turn/plan/updated", map[string]any{"threadId": th.id, "turnId": tu.id, "explanation": nil, "plan": []any{
			map[string]any{"step": "read the code", "status": "completed"}, map[string]any{"step": "fix the bug", "status": "inProgress"}}})
		s.message(th, tu, []string{"planned"}, 0)
		return ok
	case "huge":
		n := prompt.Int(0, 1<<20)
		id := newID()
		frame := func(delta string) []byte {
			return mustJSON(notification{Method: "item/agentMessage/delta", EmittedAtMs: nowMs(),
				Params: map[string]any{"threadId": th.id, "turnId": tu.id, "itemId": id, "delta": delta}})
		}
		pad := max(n-len(frame("")), 0)
		s.writeLine(frame(strings.Repeat("x", pad)))
		s.message(th, tu, []string{"huge done"}, 0)
		return ok
	case "die":
		s.message(th, tu, []string{"dying"}, 0)
		fmt.Fprintln(os.Stderr, "fakecodex: fatal: the model process crashed (asked to die)")
		os.Exit(3)
	case "fail":
		msg := strings.TrimSpace(strings.TrimPrefix(text, "fail"))
		e := map[string]any{"message": msg, "codexErrorInfo": "other", "additionalDetails": nil, "misalignment": nil}
		s.notify("error", map[string]any{"error": e, "willRetry": false, "threadId": th.id, "turnId": tu.id})
		return turnEnd{status: "failed", err: e}
	case "http":
		return s.httpFailure(th, tu, strings.TrimSpace(strings.TrimPrefix(text, "http")))
	case "offline":
		for i := 2; ; i++ {
			msg := "Reconnecting... waiting for network"
			if i <= 5 {
				msg = fmt.Sprintf("Reconnecting... %d/5", i)
			}
			s.notify("error", map[string]any{"error": map[string]any{"message": msg,
				"codexErrorInfo":    map[string]any{"responseStreamDisconnected": map[string]any{"httpStatusCode": nil}},
				"additionalDetails": "Connection failed: error sending request", "misalignment": nil},
				"willRetry": true, "threadId": th.id, "turnId": tu.id})
			if !tu.Wait(50 * time.Millisecond) {
				return interrupted
			}
		}
	case "settings":
		// What the thread runs with now, as one JSON message.
		s.mu.Lock()
		var mcp []string
		for k := range th.config {
			if name, ok := strings.CutPrefix(k, "mcp_servers."); ok {
				mcp = append(mcp, name)
			}
		}
		sort.Strings(mcp)
		st := map[string]any{"model": th.modelName(), "effort": th.effort, "approvalPolicy": th.policy, "sandbox": th.sandbox,
			"baseInstructions": th.base, "developerInstructions": th.developer, "mcpServers": mcp,
			"writableRoots": th.config["sandbox_workspace_write.writable_roots"], "mcpConfig": th.config}
		s.mu.Unlock()
		s.message(th, tu, []string{string(mustJSON(st))}, 0)
		return ok
	case "echo":
		s.message(th, tu, []string{text}, 0)
		return ok
	case "name":
		// Codex naming the thread itself, as thread/name/set reports it.
		name := strings.TrimSpace(strings.TrimPrefix(text, "name"))
		s.mu.Lock()
		th.name = name
		s.mu.Unlock()
		s.notify("thread/name/updated", map[string]any{"threadId": th.id, "threadName": name})
		s.message(th, tu, []string{"named"}, 0)
		return ok
	case "env":
		v, set := "", false
		if len(prompt.Args) > 0 {
			v, set = os.LookupEnv(prompt.Args[0])
		}
		if !set {
			v = "<unset>"
		}
		s.message(th, tu, []string{v}, 0)
		return ok
	case "noise":
		s.writeLine([]byte("fakecodex: this line is not JSON"))
		s.writeLine([]byte(""))
		s.writeLine([]byte(`["a","JSON","array"]`))
		s.writeLine([]byte(`{"method": broken json`))
		s.notify("fake/unknownNotification", map[string]any{"threadId": th.id, "whatever": 1})
		s.notify("item/started", map[string]any{"item": map[string]any{"type": "futureItemType", "id": newID(), "shape": []int{1}}, "threadId": th.id, "turnId": tu.id, "startedAtMs": nowMs()})
		answer := s.ask(th, tu, "fake/unknownRequest", map[string]any{"threadId": th.id})
		s.message(th, tu, []string{"noise answered: " + string(answer)}, 0)
		return ok
	}
	if !s.message(th, tu, []string{text}, 0) {
		return interrupted
	}
	return ok
}

// tool runs a command (or file change) item, asking first when the
// approval policy says so.
func (s *server) tool(th *thread, tu *turn, kind string) turnEnd {
	// As 0.171.0 reports a command the model ran through exec_command:
	// an "exec-" id, the command wrapped in the login shell, the approval
	// request listing its decisions (without acceptForSession and decline,
	// which it honours all the same) and no reason.
	id := "exec-" + uuid.NewString()
	const command = "/bin/bash -lc ls"
	actions := []any{map[string]any{"type": "listFiles", "command": "ls", "path": nil}}
	item := map[string]any{"type": "commandExecution", "id": id, "pluginId": nil, "scriptPath": nil, "command": command, "cwd": th.cwd,
		"processId": nil, "source": "agent", "status": "inProgress", "commandActions": actions,
		"aggregatedOutput": nil, "exitCode": nil, "durationMs": nil, "startedAtMs": nowMs(), "completedAtMs": nil}
	method := "item/commandExecution/requestApproval"
	amendment := []any{"/bin/bash", "-lc", "ls"}
	params := map[string]any{"kind": "command", "threadId": th.id, "turnId": tu.id, "itemId": id, "startedAtMs": nowMs(), "environmentId": "local",
		"command": command, "cwd": th.cwd, "commandActions": actions, "proposedExecpolicyAmendment": amendment,
		"availableDecisions": []any{"accept", map[string]any{"acceptWithExecpolicyAmendment": map[string]any{"execpolicy_amendment": amendment}}, "cancel"}}
	// A file change as 0.171.0 reports it: an added file's diff is its
	// content, an updated file's the hunks without file headers. Codex
	// writes the files once the change is approved.
	var write func()
	switch kind {
	case "edit":
		path := filepath.Join(th.cwd, "notes.txt")
		item = map[string]any{"type": "fileChange", "id": id, "status": "inProgress", "startedAtMs": nowMs(), "completedAtMs": nil,
			"changes": []any{map[string]any{"path": path, "kind": map[string]any{"type": "add"}, "diff": "hello\n"}}}
		write = func() { _ = os.WriteFile(path, []byte("hello\n"), 0o644) }
	case "patch", "patchroot":
		// a.txt, "line1\nline2\nline3\n", gets its second line changed.
		path := filepath.Join(th.cwd, "a.txt")
		item = map[string]any{"type": "fileChange", "id": id, "status": "inProgress", "startedAtMs": nowMs(), "completedAtMs": nil,
			"changes": []any{map[string]any{"path": path, "kind": map[string]any{"type": "update", "move_path": nil},
				"diff": "@@ -1,3 +1,3 @@\n line1\n-line2\n+LINE2\n line3\n"}}}
		write = func() {
			b, _ := os.ReadFile(path)
			_ = os.WriteFile(path, []byte(strings.Replace(string(b), "line2\n", "LINE2\n", 1)), 0o644)
		}
	}
	if write != nil {
		method = "item/fileChange/requestApproval"
		params = map[string]any{"threadId": th.id, "turnId": tu.id, "itemId": id, "startedAtMs": nowMs(), "reason": nil, "grantRoot": nil}
		if kind == "patchroot" {
			params["grantRoot"] = "/"
		}
	}
	s.notify("item/started", map[string]any{"item": item, "threadId": th.id, "turnId": tu.id, "startedAtMs": nowMs()})
	decision := "not asked"
	if s.asksApproval(th) {
		answer := s.ask(th, tu, method, params)
		if answer == nil {
			return turnEnd{status: "interrupted"}
		}
		var a struct {
			Decision any `json:"decision"`
		}
		_ = json.Unmarshal(answer, &a)
		decision = fmt.Sprint(a.Decision)
	}
	switch decision {
	case "accept", "acceptForSession", "not asked":
		if write != nil {
			write()
		}
		if kind == "tool" {
			s.notify("item/commandExecution/outputDelta", map[string]any{"threadId": th.id, "turnId": tu.id, "itemId": id, "delta": "README.md\nmain.go\n"})
			item["aggregatedOutput"], item["exitCode"], item["durationMs"] = "README.md\nmain.go\n", 0, 3
			item["processId"], item["source"] = fmt.Sprint(os.Getpid()), "unifiedExecStartup"
		}
		item["status"] = "completed"
	default:
		item["status"] = "declined"
	}
	item["completedAtMs"] = nowMs()
	s.notify("item/completed", map[string]any{"item": item, "threadId": th.id, "turnId": tu.id, "completedAtMs": nowMs()})
	if decision == "cancel" {
		tu.Interrupt()
		return turnEnd{status: "interrupted"}
	}
	s.message(th, tu, []string{"approval: " + decision}, 0)
	return turnEnd{status: "completed", output: 2}
}

// httpFailure fails the turn as 0.171.0 does once its retries of a model
// request answered with an HTTP error status are spent: a willRetry error
// (the stream retry) naming the status, then the final error, whose shape
// depends on the status. A 5xx's body never reaches the client: codex
// reports a text of its own.
func (s *server) httpFailure(th *thread, tu *turn, arg string) turnEnd {
	code, msg, _ := strings.Cut(arg, " ")
	status := 0
	fmt.Sscan(code, &status)
	reasons := map[int]string{401: "Unauthorized", 403: "Forbidden", 429: "Too Many Requests", 529: "<unknown status code>"}
	detail := fmt.Sprintf("unexpected status %d %s: %s, url: http://127.0.0.1:1/v1/responses, request id: req_0001", status, reasons[status], msg)
	retry := map[string]any{"message": "Reconnecting... 1/1", "codexErrorInfo": map[string]any{"responseStreamDisconnected": map[string]any{"httpStatusCode": status}},
		"additionalDetails": detail, "misalignment": nil}
	final := map[string]any{"message": strings.Replace(detail, "req_0001", "req_0002", 1),
		"codexErrorInfo": map[string]any{"httpConnectionFailed": map[string]any{"httpStatusCode": status}}, "additionalDetails": nil, "misalignment": nil}
	if status == 400 {
		// Not retried; the message is the provider's error body.
		body, _ := json.Marshal(map[string]any{"error": map[string]any{"code": "invalid_request_error", "message": msg, "param": nil, "type": "invalid_request_error"}})
		final = map[string]any{"message": string(body), "codexErrorInfo": "other", "additionalDetails": nil, "misalignment": nil}
		s.notify("error", map[string]any{"error": final, "willRetry": false, "threadId": th.id, "turnId": tu.id})
		return turnEnd{status: "failed", err: final}
	}
	if status >= 500 && status != 529 {
		const busy = "We\u2019re currently experiencing high demand, which may cause temporary errors."
		retry["codexErrorInfo"] = map[string]any{"responseStreamDisconnected": map[string]any{"httpStatusCode": nil}}
		retry["additionalDetails"] = busy
		final = map[string]any{"message": busy, "codexErrorInfo": "internalServerError", "additionalDetails": nil, "misalignment": nil}
	}
	s.notify("error", map[string]any{"error": retry, "willRetry": true, "threadId": th.id, "turnId": tu.id})
	s.notify("error", map[string]any{"error": final, "willRetry": false, "threadId": th.id, "turnId": tu.id})
	return turnEnd{status: "failed", err: final}
}
