// Command fakeclaude is a faithful fake of Claude Code 2.1.332 in
// stream-json mode, for the claude plugin's tests. It accepts the argv the
// plugin and the official SDKs use, answers the control protocol's
// initialize (its commands and models), interrupt, set_permission_mode
// (with the system/status line that reports a mode change), set_model and
// apply_flag_settings requests like the real CLI, emits system/init
// when each user message's turn starts (not at startup), prints the model's stream as
// stream_event lines before each block's assistant line when asked
// (--include-partial-messages; one delta per block unless the model below
// says otherwise), writes a transcript under
// $CLAUDE_CONFIG_DIR (or ~/.claude)/projects, fails an unknown --resume and
// a --session-id already in use with the real CLI's texts, and adds
// unknown fields to every message it prints.
//
// Its "model" is the prompt text:
//
//	count N [INTERVAL]  N assistant text messages "1".."N", INTERVAL apart
//	sleep DURATION      hold the turn until interrupted (or DURATION passes)
//	tool                a Bash tool_use, a can_use_tool permission request
//	                    (with --permission-prompt-tool stdio), its tool_result
//	todo                a TodoWrite tool_use and its tool_result
//	think               a thinking block, then a text block
//	stream TEXT         a thinking block and TEXT, streamed in 3-rune deltas
//	subagent            a background Task call whose sub-agent streams and
//	                    speaks (parent_tool_use_id set, as a CLI that
//	                    forwards sub-agent text does) while the main
//	                    agent's next message streams
//	edit FILE OLD NEW   an Edit of FILE (asking unless acceptEdits), its
//	                    structured result (originalFile, structuredPatch)
//	write FILE TEXT     a Write of FILE, its result (create or update)
//	exitplan            an ExitPlanMode call and its permission request;
//	                    allowed, the mode its setMode names (else default)
//	/clear              a conversation_reset and a new session id
//	huge N              one assistant line of at least N bytes
//	die                 one assistant message, then exit status 3
//	noauth              the real unauthenticated answer (also every turn
//	                    when no credential is configured)
//	fail                an API error (is_error result, subtype success)
//	nomodel             the provider's 404 for the model, as the CLI reports it
//	maxturns            an error_max_turns result
//	anything else       echoed as one assistant message
//
// Environment knobs: FAKECLAUDE_VERSION (what --version prints),
// FAKECLAUDE_EXIT_ON_PROMPT=N (exit status 4 on reading the N-th user
// line of the process, printing nothing),
// FAKECLAUDE_IGNORE_SIGTERM=1 (ignore SIGTERM and stdin EOF),
// FAKECLAUDE_DEAF_TO_INTERRUPT=1 (answer the interrupt request but never
// end the turn for it, as a CLI stuck in a tool or a hung model call),
// FAKECLAUDE_CLASSIC_USAGE=1 (message_delta events carry only
// output_tokens, as Anthropic's API did and gateways, Bedrock and Vertex
// still do),
// FAKECLAUDE_SLOW=DURATION (delay every line), FAKECLAUDE_NOISE=1 (a
// non-JSON line, a blank line and an unknown message type before every
// line), FAKECLAUDE_ROTATE_ON_RESUME=1 (a new session id on resume, as 1.x
// did; FAKE_CLAUDE_ROTATE_ON_RESUME also works), FAKECLAUDE_RECORD=DIR
// (write DIR/<pid>.json with argv, env, cwd and ppid, and append every
// stdin line to DIR/<pid>.stdin.jsonl), FAKECLAUDE_FORK_AND_DIE=N (on the
// first turn of every CLI process: one assistant message, then N
// grandchildren that inherit its environment, its stdout and stderr and its
// process group, as a tool's background jobs would; none is waited for, and
// the CLI exits with status 1 mid-turn, its last stderr line naming their
// pids; with FAKECLAUDE_GRANDCHILD_IGNORE_SIGTERM=1 they ignore SIGTERM).
// A grandchild is this program re-executed with FAKECLAUDE_LINGER=DURATION:
// it sleeps that long and exits.
package main

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agenthost/agenthost/plugins/internal/fakecli"
	"github.com/google/uuid"
)

const realVersion = "2.1.332"

func main() {
	if d := os.Getenv(lingerVar); d != "" {
		linger(d)
		return
	}
	recordInvocation()
	a := parseArgs(os.Args[1:])
	if a.version {
		v := os.Getenv("FAKECLAUDE_VERSION")
		if v == "" {
			v = realVersion
		}
		fmt.Println(v + " (Claude Code)")
		return
	}
	f := newFake(a)
	f.run()
}

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// ---- the fake CLI ----

type fake struct {
	a            args
	cwd          string
	configDir    string
	sessionID    string
	transcript   string
	authed       bool
	apiKeySource string
	slow         time.Duration
	noise        bool
	ignoreTerm   bool
	deaf         bool // FAKECLAUDE_DEAF_TO_INTERRUPT
	classicUsage bool // FAKECLAUDE_CLASSIC_USAGE
	forkAndDie   int
	recordStdin  *os.File

	outMu sync.Mutex

	mu               sync.Mutex
	cur              *turn
	queued           int
	interruptPending bool
	initSent         bool
	lastIsError      bool
	permWaiters      map[string]chan map[string]any
	blocks           map[string]int // content blocks streamed so far, by message id
	prompts          int            // user lines read
	exitOnPrompt     int            // FAKECLAUDE_EXIT_ON_PROMPT
	permMode         string         // the permission mode now
	curModel         string         // --model, or set_model's
	effort           string         // --effort, or apply_flag_settings' effortLevel

	turns chan string
	done  chan struct{}
}

// turn is the turn in progress.
type turn = fakecli.Turn

func newFake(a args) *fake {
	f := &fake{a: a, permWaiters: map[string]chan map[string]any{}, blocks: map[string]int{}, turns: make(chan string, 64), done: make(chan struct{}),
		permMode: a.permMode, curModel: a.model, effort: a.effort}
	if f.permMode == "" || f.permMode == "manual" {
		f.permMode = "default"
	}
	f.cwd, _ = os.Getwd()
	f.configDir = os.Getenv("CLAUDE_CONFIG_DIR")
	if f.configDir == "" {
		home, _ := os.UserHomeDir()
		f.configDir = filepath.Join(home, ".claude")
	}
	f.slow, _ = time.ParseDuration(os.Getenv("FAKECLAUDE_SLOW"))
	f.noise = os.Getenv("FAKECLAUDE_NOISE") == "1"
	f.ignoreTerm = os.Getenv("FAKECLAUDE_IGNORE_SIGTERM") == "1"
	f.deaf = os.Getenv("FAKECLAUDE_DEAF_TO_INTERRUPT") == "1"
	f.classicUsage = os.Getenv("FAKECLAUDE_CLASSIC_USAGE") == "1"
	f.forkAndDie, _ = strconv.Atoi(os.Getenv("FAKECLAUDE_FORK_AND_DIE"))
	f.exitOnPrompt, _ = strconv.Atoi(os.Getenv("FAKECLAUDE_EXIT_ON_PROMPT"))
	f.apiKeySource = "none"
	switch {
	case os.Getenv("ANTHROPIC_API_KEY") != "":
		f.authed, f.apiKeySource = true, "ANTHROPIC_API_KEY"
	case os.Getenv("ANTHROPIC_AUTH_TOKEN") != "", os.Getenv("CLAUDE_CODE_OAUTH_TOKEN") != "":
		f.authed = true
	default:
		_, err := os.Stat(filepath.Join(f.configDir, ".credentials.json"))
		f.authed = err == nil
	}
	if dir := os.Getenv("FAKECLAUDE_RECORD"); dir != "" {
		f.recordStdin, _ = os.OpenFile(filepath.Join(dir, strconv.Itoa(os.Getpid())+".stdin.jsonl"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	}
	return f
}

func (f *fake) run() {
	a := f.a
	if f.ignoreTerm {
		fakecli.IgnoreSIGTERM()
	}
	if a.print && a.outputFormat == "stream-json" && !a.verbose {
		fatal(1, "Error: When using --print, --output-format=stream-json requires --verbose")
	}
	if a.sessionID != "" && (a.resume != nil || a.cont) && !a.fork {
		fatal(1, "Error: --session-id with --continue or --resume also needs --fork-session.")
	}
	if (a.permMode == "bypassPermissions" || a.allowBypass) && os.Geteuid() == 0 && os.Getenv("IS_SANDBOX") != "1" {
		fatal(1, "--dangerously-skip-permissions cannot be used with root/sudo privileges for security reasons")
	}
	if a.inputFormat != "stream-json" || a.outputFormat != "stream-json" {
		fatal(2, "fakeclaude: only --input-format stream-json with --output-format stream-json is implemented")
	}
	switch {
	case a.resume != nil:
		id := *a.resume
		if !uuidRE.MatchString(id) {
			msg := fmt.Sprintf("Error: --resume requires a valid session ID or session title when used with --print. Usage: claude -p --resume <session-id|title>. Provided value %q is not a UUID and does not match any session title.", id)
			f.startupFailure(uuid.NewString(), msg, msg)
		}
		path := f.findTranscript(id)
		if path == "" {
			msg := "No conversation found with session ID: " + id
			f.startupFailure(id, msg, msg)
		}
		f.sessionID, f.transcript = id, path
		if os.Getenv("FAKECLAUDE_ROTATE_ON_RESUME") == "1" || os.Getenv("FAKE_CLAUDE_ROTATE_ON_RESUME") == "1" {
			f.sessionID = uuid.NewString()
			f.transcript = filepath.Join(filepath.Dir(path), f.sessionID+".jsonl")
			if b, err := os.ReadFile(path); err == nil {
				_ = os.WriteFile(f.transcript, b, 0o600)
			}
		}
	case a.sessionID != "":
		if !uuidRE.MatchString(a.sessionID) {
			fatal(1, "Error: Invalid session ID. Must be a valid UUID.")
		}
		if f.findTranscript(a.sessionID) != "" {
			fatal(1, fmt.Sprintf("Error: Session ID %s is already in use.", a.sessionID))
		}
		f.sessionID = a.sessionID
		f.transcript = filepath.Join(f.configDir, "projects", sanitize(f.cwd), f.sessionID+".jsonl")
	default:
		f.sessionID = uuid.NewString()
		f.transcript = filepath.Join(f.configDir, "projects", sanitize(f.cwd), f.sessionID+".jsonl")
	}

	go f.runTurns()
	f.readStdin()
	// Stdin closed: the session ends once the running turn has.
	if f.ignoreTerm {
		fakecli.Forever()
	}
	close(f.turns)
	<-f.done
	f.mu.Lock()
	failed := f.lastIsError
	f.mu.Unlock()
	if failed {
		os.Exit(1)
	}
	os.Exit(0)
}

// startupFailure is the real CLI's answer to a --resume it cannot honour:
// an error result on stdout, the message on stderr, exit status 1.
func (f *fake) startupFailure(sessionID, errText, stderr string) {
	f.emit(map[string]any{
		"type": "result", "subtype": "error_during_execution", "duration_ms": 0, "duration_api_ms": 0,
		"is_error": true, "num_turns": 0, "stop_reason": nil, "session_id": sessionID, "total_cost_usd": 0,
		"usage": zeroUsage(), "modelUsage": map[string]any{}, "permission_denials": []any{},
		"uuid": uuid.NewString(), "errors": []string{errText}, "result_index": 0,
	})
	fatal(1, stderr)
}

func (f *fake) findTranscript(id string) string {
	matches, _ := filepath.Glob(filepath.Join(f.configDir, "projects", "*", id+".jsonl"))
	if len(matches) == 0 {
		return ""
	}
	return matches[0]
}

var nonAlnum = regexp.MustCompile(`[^a-zA-Z0-9]`)

func sanitize(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		p = r
	}
	return nonAlnum.ReplaceAllString(p, "-")
}

// ---- stdin ----

func (f *fake) readStdin() {
	r := bufio.NewReaderSize(os.Stdin, 1<<20)
	for {
		line, err := r.ReadBytes('\n')
		if len(strings.TrimSpace(string(line))) > 0 {
			if f.recordStdin != nil {
				_, _ = f.recordStdin.Write(append(bytesTrimRight(line), '\n'))
			}
			f.handleInput(line)
		}
		if err != nil {
			return
		}
	}
}

func bytesTrimRight(b []byte) []byte { return []byte(strings.TrimRight(string(b), "\r\n")) }

func (f *fake) handleInput(line []byte) {
	var m struct {
		Type      string          `json:"type"`
		RequestID string          `json:"request_id"`
		Request   json.RawMessage `json:"request"`
		Response  json.RawMessage `json:"response"`
		Message   struct {
			Content json.RawMessage `json:"content"`
		} `json:"message"`
	}
	if err := json.Unmarshal(line, &m); err != nil {
		fmt.Fprintf(os.Stderr, "fakeclaude: ignoring malformed stdin line: %v\n", err)
		return
	}
	switch m.Type {
	case "control_request":
		var req struct {
			Subtype string `json:"subtype"`
		}
		_ = json.Unmarshal(m.Request, &req)
		switch req.Subtype {
		case "initialize":
			f.controlSuccess(m.RequestID, map[string]any{
				"commands": []any{
					map[string]any{"name": "code-review", "description": "Review the current diff", "argumentHint": "[low|medium|high|xhigh|max] [--fix]", "aliases": []string{"review"}, "builtin": true},
					map[string]any{"name": "clear", "description": "Start a new session with empty context; loops carry over, and the old one stays in /resume", "argumentHint": "[name]", "aliases": []string{"reset", "new"}, "builtin": true},
					map[string]any{"name": "compact", "description": "Free up context by summarizing the conversation so far", "argumentHint": "<optional custom summarization instructions>", "builtin": true},
					map[string]any{"name": "heapdump", "description": "Dump the JS heap", "argumentHint": "", "builtin": true},
					map[string]any{"name": "__remote-workflow", "description": "", "argumentHint": "", "builtin": true},
				},
				"models":       fakeModels,
				"output_style": "default", "available_output_styles": []string{"default", "Explanatory", "Learning"},
				"current_permission_mode": f.mode(), "claude_code_version": realVersion, "pid": os.Getpid(), "session_state": "idle",
				"account": map[string]any{"tokenSource": "none", "apiKeySource": f.apiKeySource, "apiProvider": "firstParty"},
			})
		case "interrupt":
			f.controlSuccess(m.RequestID, map[string]any{"still_queued": []any{}})
			f.mu.Lock()
			switch {
			case f.deaf: // acknowledged, and ignored
			case f.cur != nil:
				f.cur.Interrupt()
			case f.queued > 0:
				f.interruptPending = true
			}
			f.mu.Unlock()
		case "set_permission_mode":
			var r struct {
				Mode string `json:"mode"`
			}
			_ = json.Unmarshal(m.Request, &r)
			switch {
			case !slices.Contains([]string{"acceptEdits", "auto", "bypassPermissions", "default", "dontAsk", "plan"}, r.Mode):
				f.controlError(m.RequestID, "Cannot set permission mode: must be one of acceptEdits, auto, bypassPermissions, default, dontAsk, plan", "invalid_mode")
			case r.Mode == "bypassPermissions" && !f.a.allowBypass && f.a.permMode != "bypassPermissions":
				f.controlError(m.RequestID, "Cannot set permission mode to bypassPermissions because the session was not launched with --dangerously-skip-permissions", "bypass_not_launched")
			default:
				f.controlSuccess(m.RequestID, map[string]any{"mode": r.Mode})
				f.setMode(r.Mode)
			}
		case "set_model":
			var r struct {
				Model string `json:"model"`
			}
			_ = json.Unmarshal(m.Request, &r)
			resolved, ok := resolveModel(r.Model)
			if !ok {
				// 2.1.332 asks the provider about a model it does not list.
				f.emit(map[string]any{"type": "control_response", "response": map[string]any{"subtype": "error", "request_id": m.RequestID,
					"error": "API error: 404 model not found · model not changed", "error_code": "check_rejected", "model": f.model()}})
				break
			}
			f.mu.Lock()
			f.curModel = r.Model
			f.mu.Unlock()
			f.emit(f.userLine("<local-command-stdout>Set model to `"+r.Model+" ("+resolved+")`</local-command-stdout>", map[string]any{"isReplay": true}))
			f.controlSuccess(m.RequestID, map[string]any{"model": resolved})
		case "apply_flag_settings":
			var r struct {
				Settings map[string]any `json:"settings"`
			}
			_ = json.Unmarshal(m.Request, &r)
			if e, ok := r.Settings["effortLevel"]; ok {
				level, _ := e.(string)
				f.mu.Lock()
				f.effort = level
				f.mu.Unlock()
			}
			f.emit(map[string]any{"type": "control_response", "response": map[string]any{"subtype": "success", "request_id": m.RequestID}})
		default:
			f.emit(map[string]any{"type": "control_response", "response": map[string]any{
				"subtype": "error", "request_id": m.RequestID, "error": "Unsupported control request subtype: " + req.Subtype}})
		}
	case "control_response":
		var resp struct {
			RequestID string         `json:"request_id"`
			Response  map[string]any `json:"response"`
			Error     string         `json:"error"`
		}
		_ = json.Unmarshal(m.Response, &resp)
		f.mu.Lock()
		ch := f.permWaiters[resp.RequestID]
		delete(f.permWaiters, resp.RequestID)
		f.mu.Unlock()
		if ch != nil {
			if resp.Response == nil {
				resp.Response = map[string]any{"behavior": "deny", "message": "error: " + resp.Error}
			}
			ch <- resp.Response
		} else {
			fmt.Fprintf(os.Stderr, "fakeclaude: control response for unknown request %q\n", resp.RequestID)
		}
	case "user":
		f.mu.Lock()
		f.prompts++
		n := f.prompts
		f.mu.Unlock()
		if n == f.exitOnPrompt {
			// Gone before the turn starts, as a CLI killed between turns
			// is when its plugin has not reaped it yet.
			os.Exit(4)
		}
		text := contentText(m.Message.Content)
		f.mu.Lock()
		f.queued++
		f.mu.Unlock()
		f.turns <- text
	}
}

func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var blocks []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	_ = json.Unmarshal(raw, &blocks)
	var parts []string
	for _, b := range blocks {
		if b.Type == "text" {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n")
}

func (f *fake) controlError(id, msg, code string) {
	f.emit(map[string]any{"type": "control_response", "response": map[string]any{
		"subtype": "error", "request_id": id, "error": msg, "error_code": code}})
}

// fakeModels is the models list of 2.1.332's initialize response, less
// its descriptions' prices.
var fakeModels = []any{
	map[string]any{"value": "default", "resolvedModel": "claude-opus-5-5", "displayName": "Default (recommended)", "description": "Use the default model (currently Opus 5.5)",
		"supportsEffort": true, "supportedEffortLevels": []string{"low", "medium", "high", "xhigh", "max"}, "supportsAdaptiveThinking": true},
	map[string]any{"value": "opus", "resolvedModel": "claude-opus-5-5", "displayName": "Opus", "description": "Opus 5.5 · Best for everyday, complex tasks",
		"supportsEffort": true, "supportedEffortLevels": []string{"low", "medium", "high", "xhigh", "max"}, "supportsAdaptiveThinking": true},
	map[string]any{"value": "sonnet", "resolvedModel": "claude-sonnet-5-5", "displayName": "Sonnet", "description": "Sonnet 5.5 · Efficient for routine tasks",
		"supportsEffort": true, "supportedEffortLevels": []string{"low", "medium", "high", "xhigh", "max"}, "supportsAdaptiveThinking": true},
	map[string]any{"value": "haiku", "resolvedModel": "claude-haiku-4-5-20251001", "displayName": "Haiku", "description": "Haiku 4.5 · Fastest for quick answers",
		"supportsEffort": false},
}

// resolveModel is a model name as set_model resolves it; ok is false
// for a name the list lacks and that is no model id.
func resolveModel(name string) (string, bool) {
	for _, m := range fakeModels {
		e := m.(map[string]any)
		if e["value"] == name || e["resolvedModel"] == name {
			return e["resolvedModel"].(string), true
		}
	}
	return name, strings.HasPrefix(name, "claude-")
}

// mode is the permission mode now.
func (f *fake) mode() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.permMode
}

// setMode switches the permission mode and says so, as 2.1.332 does: a
// system/status line carrying the new mode.
func (f *fake) setMode(mode string) {
	f.mu.Lock()
	f.permMode = mode
	f.mu.Unlock()
	f.emit(map[string]any{"type": "system", "subtype": "status", "status": nil, "permissionMode": mode, "uuid": uuid.NewString(), "session_id": f.sessionID})
}

func (f *fake) controlSuccess(id string, response map[string]any) {
	f.emit(map[string]any{"type": "control_response", "response": map[string]any{
		"subtype": "success", "request_id": id, "response": response}})
}

// ---- output ----

// emit prints one message, with unknown fields added as a newer CLI would.
func (f *fake) emit(m map[string]any) {
	// Like 2.1.332, the main conversation's user and assistant lines are
	// the transcript's, with the same uuid, written before they are
	// printed.
	if t, _ := m["type"].(string); (t == "assistant" || t == "user") && m["parent_tool_use_id"] == nil && f.transcript != "" {
		f.appendTranscript(map[string]any{"type": t, "message": m["message"], "uuid": m["uuid"]})
	}
	m["fake_unknown_field"] = map[string]any{"nested": []any{1, "two", nil}, "added_in": "9.9.9"}
	m["emittedAtMs"] = time.Now().UnixMilli()
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	f.outMu.Lock()
	defer f.outMu.Unlock()
	if f.slow > 0 {
		time.Sleep(f.slow)
	}
	if f.noise {
		os.Stdout.WriteString("[SandboxDebug] fakeclaude noise: not JSON\n\n")
		os.Stdout.WriteString(`{"type":"fake_future_type","subtype":"whatever","payload":{"x":[1,2,3]},"session_id":` + strconv.Quote(f.sessionID) + "}\n")
		os.Stdout.WriteString(`{"type":"system","subtype":"fake_future_subtype","session_id":` + strconv.Quote(f.sessionID) + "}\n")
	}
	os.Stdout.Write(append(b, '\n'))
}

func (f *fake) appendTranscript(m map[string]any) {
	if err := os.MkdirAll(filepath.Dir(f.transcript), 0o700); err != nil {
		return
	}
	file, err := os.OpenFile(f.transcript, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return
	}
	defer file.Close()
	m["sessionId"] = f.sessionID
	m["cwd"] = f.cwd
	m["version"] = realVersion
	m["entrypoint"] = "sdk-cli"
	m["timestamp"] = now()
	m["isSidechain"] = false
	b, _ := json.Marshal(m)
	file.Write(append(b, '\n'))
}

func now() string { return time.Now().UTC().Format("2006-01-02T15:04:05.000Z") }

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func zeroUsage() map[string]any {
	return map[string]any{
		"output_tokens_details": map[string]any{"thinking_tokens": 0}, "input_tokens": 0,
		"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 0,
		"server_tool_use": map[string]any{"web_search_requests": 0, "web_fetch_requests": 0},
		"service_tier":    "standard", "cache_creation": map[string]any{"ephemeral_1h_input_tokens": 0, "ephemeral_5m_input_tokens": 0},
		"inference_geo": "", "iterations": []any{}, "speed": "standard", "fallback_credit": nil,
	}
}

func (f *fake) model() string {
	f.mu.Lock()
	name := f.curModel
	f.mu.Unlock()
	if name == "" {
		name = "default"
	}
	resolved, _ := resolveModel(name)
	return resolved
}

// mcpServers are system/init's entries for the --mcp-config servers, all
// connected.
func (f *fake) mcpServers() []any {
	var cfg struct {
		MCPServers map[string]any `json:"mcpServers"`
	}
	_ = json.Unmarshal([]byte(f.a.mcpConfig), &cfg)
	out := []any{}
	for _, name := range slices.Sorted(maps.Keys(cfg.MCPServers)) {
		out = append(out, map[string]any{"name": name, "status": "connected", "source": "dynamic"})
	}
	return out
}

func (f *fake) systemInit() map[string]any {
	perm := f.mode()
	return map[string]any{
		"type": "system", "subtype": "init", "cwd": f.cwd, "session_id": f.sessionID,
		"tools":       []string{"Task", "Bash", "Edit", "Read", "Write", "WebFetch", "WebSearch", "TodoWrite"},
		"mcp_servers": f.mcpServers(), "model": f.model(), "permissionMode": perm,
		"slash_commands": []string{"code-review", "clear", "compact", "heapdump"}, "terminal_slash_commands": []string{"doctor"},
		"apiKeySource": f.apiKeySource, "claude_code_version": realVersion, "output_style": "default",
		"agents": []string{"claude", "Explore", "general-purpose", "Plan"}, "skills": []string{"review"},
		"plugins":            []any{map[string]any{"name": "cc-plugin-agents-md", "path": "builtin", "source": "cc-plugin-agents-md@builtin"}},
		"capabilities":       []string{"interrupt_receipt_v1", "interrupt_cancel_queued_v1"},
		"analytics_disabled": false, "product_feedback_disabled": false, "served_by_anthropic": true,
		"uuid": uuid.NewString(), "sandbox_enabled": false,
		"memory_paths": map[string]any{"auto": filepath.Join(f.configDir, "projects", sanitize(f.cwd), "memory") + "/"},
		"original_cwd": f.cwd, "additional_directories": []any{},
		"messaging_socket_path": "/tmp/cc-socks/" + strconv.Itoa(os.Getpid()) + ".sock",
		"fast_mode_state":       "off", "fast_mode_disabled_reason": "sdk_opt_in_required",
		"per_turn_effort_active": true, "ultrathink_available": false, "ultrathink_typed_raises": false, "view_mode": "default",
	}
}

// block prints one content block of message msgID as the real CLI does:
// with --include-partial-messages, its stream events (message_start
// before the message's first block, content_block_start, the deltas of
// deltaRunes runes each, zero meaning one delta) and, after the deltas
// and before content_block_stop, an assistant line holding the whole
// block. Without the flag, only the assistant line.
func (f *fake) block(msgID string, b map[string]any, deltaRunes int) {
	if !f.a.partial {
		f.emit(f.assistant(msgID, nil, b))
		return
	}
	f.mu.Lock()
	index := f.blocks[msgID]
	f.blocks[msgID] = index + 1
	f.mu.Unlock()
	if index == 0 {
		f.streamEvent(msgID, map[string]any{"type": "message_start", "message": map[string]any{
			"id": msgID, "type": "message", "role": "assistant", "model": f.model(), "content": []any{},
			"stop_reason": nil, "stop_sequence": nil,
			"usage": map[string]any{"input_tokens": 12, "output_tokens": 1, "cache_creation_input_tokens": 3, "cache_read_input_tokens": 100}}})
	}
	var start map[string]any
	var field, deltaType, body string
	switch b["type"] {
	case "text":
		start, field, deltaType = map[string]any{"type": "text", "text": ""}, "text", "text_delta"
		body, _ = b["text"].(string)
	case "thinking":
		start, field, deltaType = map[string]any{"type": "thinking", "thinking": "", "signature": ""}, "thinking", "thinking_delta"
		body, _ = b["thinking"].(string)
	case "tool_use":
		start = map[string]any{"type": "tool_use", "id": b["id"], "name": b["name"], "input": map[string]any{}}
		field, deltaType = "partial_json", "input_json_delta"
		in, _ := json.Marshal(b["input"])
		body = string(in)
	}
	f.streamEvent(msgID, map[string]any{"type": "content_block_start", "index": index, "content_block": start})
	for _, d := range splitRunes(body, deltaRunes) {
		f.streamEvent(msgID, map[string]any{"type": "content_block_delta", "index": index, "delta": map[string]any{"type": deltaType, field: d}})
	}
	if sig, ok := b["signature"]; ok {
		f.streamEvent(msgID, map[string]any{"type": "content_block_delta", "index": index, "delta": map[string]any{"type": "signature_delta", "signature": sig}})
	}
	f.emit(f.assistant(msgID, nil, b))
	f.streamEvent(msgID, map[string]any{"type": "content_block_stop", "index": index})
}

// streamEvent prints one stream_event line.
func (f *fake) streamEvent(msgID string, event map[string]any) {
	f.emit(map[string]any{"type": "stream_event", "event": event, "session_id": f.sessionID, "parent_tool_use_id": nil,
		"uuid": uuid.NewString(), "api_message_id": msgID})
}

// splitRunes splits s into pieces of n runes; n <= 0 is one piece.
func splitRunes(s string, n int) []string {
	r := []rune(s)
	if n <= 0 || len(r) <= n {
		return []string{s}
	}
	var out []string
	for len(r) > 0 {
		k := min(n, len(r))
		out = append(out, string(r[:k]))
		r = r[k:]
	}
	return out
}

// assistant returns an assistant line with the given content blocks. The
// real CLI prints each block's line before the stream's message_delta, so
// its stop_reason is null but for synthetic messages.
func (f *fake) assistant(msgID string, stopReason any, blocks ...map[string]any) map[string]any {
	for _, b := range blocks {
		b["fake_block_field"] = true
	}
	return map[string]any{
		"type": "assistant",
		"message": map[string]any{
			"id": msgID, "container": nil, "model": f.model(), "role": "assistant", "stop_details": nil,
			"stop_reason": stopReason, "stop_sequence": nil, "type": "message",
			"usage": map[string]any{"input_tokens": 12, "output_tokens": 3, "cache_creation_input_tokens": 0,
				"cache_read_input_tokens": 100, "service_tier": "standard"},
			"content": blocks, "context_management": nil,
		},
		"parent_tool_use_id": nil, "session_id": f.sessionID, "uuid": uuid.NewString(), "timestamp": now(),
	}
}

func text(s string) map[string]any { return map[string]any{"type": "text", "text": s} }

func (f *fake) userLine(content any, extra map[string]any) map[string]any {
	m := map[string]any{
		"type":               "user",
		"message":            map[string]any{"role": "user", "content": content},
		"parent_tool_use_id": nil, "session_id": f.sessionID, "uuid": uuid.NewString(), "timestamp": now(),
	}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

// endMessages ends the stream of every message streamed since the last
// result, as the real CLI relays the API's: message_delta with the call's
// usage (the fake's per-call usage: what its results report for a turn of
// one call; only its output with FAKECLAUDE_CLASSIC_USAGE), then
// message_stop.
func (f *fake) endMessages(stopReason any, outTokens int) {
	f.mu.Lock()
	var ids []string
	for id := range f.blocks {
		ids = append(ids, id)
	}
	clear(f.blocks)
	f.mu.Unlock()
	for _, id := range ids {
		u := map[string]any{"input_tokens": 12, "cache_creation_input_tokens": 3, "cache_read_input_tokens": 100, "output_tokens": outTokens}
		if f.classicUsage {
			u = map[string]any{"output_tokens": outTokens}
		}
		f.streamEvent(id, map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stopReason, "stop_sequence": nil},
			"usage": u})
		f.streamEvent(id, map[string]any{"type": "message_stop"})
	}
}

// result returns a result line, after ending the streams of the turn's
// messages.
func (f *fake) result(subtype string, isError bool, resultText string, stopReason any, terminal string, numTurns int, outTokens int) map[string]any {
	f.endMessages(stopReason, outTokens)
	m := map[string]any{
		"type": "result", "subtype": subtype, "is_error": isError, "duration_ms": 42, "duration_api_ms": 30,
		"num_turns": numTurns, "stop_reason": stopReason, "session_id": f.sessionID,
		"total_cost_usd": 0.0123,
		"usage": map[string]any{
			"output_tokens_details": map[string]any{"thinking_tokens": 2}, "input_tokens": 12,
			"cache_creation_input_tokens": 3, "cache_read_input_tokens": 100, "output_tokens": outTokens,
			"server_tool_use": map[string]any{"web_search_requests": 0, "web_fetch_requests": 0}, "service_tier": "standard",
		},
		// One entry per model the turn used, each naming its context
		// window (the failures the reference captured carry none).
		"modelUsage": map[string]any{"claude-sonnet-4-5": map[string]any{
			"inputTokens": 12, "outputTokens": outTokens, "cacheReadInputTokens": 100, "cacheCreationInputTokens": 3,
			"costUSD": 0.0123, "contextWindow": 200000, "maxOutputTokens": 64000,
		}},
		"permission_denials": []any{}, "terminal_reason": terminal,
		"uuid": uuid.NewString(), "queued_turn_count": 0, "result_index": 0,
	}
	if resultText != "" || !isError {
		m["result"] = resultText
	}
	return m
}

// ---- turns ----

func (f *fake) runTurns() {
	defer close(f.done)
	for prompt := range f.turns {
		t := fakecli.NewTurn()
		f.mu.Lock()
		f.queued--
		f.cur = t
		if f.interruptPending {
			f.interruptPending = false
			t.Interrupt()
		}
		first := !f.initSent
		f.initSent = true
		f.mu.Unlock()
		if strings.TrimSpace(prompt) == "/clear" {
			f.clear()
			f.mu.Lock()
			f.cur = nil
			f.mu.Unlock()
			continue
		}
		// Like 2.1.332, system/init opens every turn, not only the first.
		f.emit(f.systemInit())
		f.appendTranscript(map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": prompt}, "uuid": uuid.NewString()})
		if first && f.forkAndDie > 0 {
			f.forkGrandchildrenAndDie(f.forkAndDie)
		}
		isError := f.runTurn(t, strings.TrimSpace(prompt))
		f.mu.Lock()
		f.cur = nil
		f.lastIsError = isError
		f.mu.Unlock()
	}
}

// interrupted ends the turn as the real CLI does after an interrupt.
func (f *fake) interrupted(marker string) bool {
	f.emit(f.userLine([]any{text(marker)}, nil))
	r := f.result("error_during_execution", true, "", nil, "aborted_streaming", 2, 0)
	r["errors"] = []string{"[ede_diagnostic] result_type=user last_content_type=n/a stop_reason=null"}
	r["usage"] = zeroUsage()
	r["total_cost_usd"] = 0
	f.emit(r)
	return true
}

const interruptMarker = "[Request interrupted by user]"

// interruptedTool ends a turn interrupted while a tool call waited for
// permission, as 2.1.332 does.
func (f *fake) interruptedTool() bool {
	f.emit(f.userLine([]any{text("[Request interrupted by user for tool use]")}, nil))
	r := f.result("error_during_execution", true, "", "tool_use", "aborted_tools", 3, 0)
	r["errors"] = []string{"[ede_diagnostic] result_type=user last_content_type=n/a stop_reason=tool_use"}
	f.emit(r)
	return true
}

// runTurn plays one turn and reports whether its result was an error.
func (f *fake) runTurn(t *turn, prompt string) bool {
	if !t.Wait(0) {
		return f.interrupted(interruptMarker)
	}
	model := fakecli.ParsePrompt(prompt)
	word := model.Word
	if !f.authed {
		word = "noauth"
	}
	msgID := "msg_01" + randHex(10)
	if f.authed {
		// The real CLI says so before every model call.
		f.emit(map[string]any{"type": "system", "subtype": "status", "status": "requesting", "session_id": f.sessionID, "uuid": uuid.NewString()})
	}
	say := func(s string) {
		f.block(msgID, text(s), 0)
	}
	done := func(last string, n int) bool {
		f.emit(f.result("success", false, last, "end_turn", "completed", n, 5))
		return false
	}
	switch word {
	case "count":
		n, interval := model.Int(0, 0), model.Duration(1, 0)
		for i := 1; i <= n; i++ {
			if i > 1 && !t.Wait(interval) {
				return f.interrupted(interruptMarker)
			}
			say(strconv.Itoa(i))
		}
		return done(strconv.Itoa(n), 1)
	case "sleep":
		d := model.Duration(0, 0)
		if !t.Wait(d) {
			return f.interrupted(interruptMarker)
		}
		say("slept " + d.String())
		return done("slept "+d.String(), 1)
	case "think":
		f.block(msgID, map[string]any{"type": "thinking", "thinking": "Let me think about it.", "signature": "c2lnbmF0dXJl"}, 0)
		say("thought it through")
		return done("thought it through", 1)
	case "stream":
		// A thought and a text, each streamed in deltas of 3 runes.
		rest := strings.TrimSpace(strings.TrimPrefix(prompt, "stream"))
		f.block(msgID, map[string]any{"type": "thinking", "thinking": "Thinking about " + rest, "signature": "c2lnbmF0dXJl"}, 3)
		f.block(msgID, text(rest), 3)
		f.appendTranscript(map[string]any{"type": "assistant", "message": map[string]any{"role": "assistant", "content": []any{text(rest)}}, "uuid": uuid.NewString()})
		return done(rest, 1)
	case "subagent":
		return f.subagent(msgID)
	case "edit":
		// edit FILE OLD NEW: an Edit of FILE replacing OLD by NEW.
		args := strings.Fields(prompt)
		if len(args) != 4 {
			fatal(2, "fakeclaude: edit FILE OLD NEW")
		}
		return f.edit(t, msgID, "Edit", map[string]any{"file_path": args[1], "old_string": args[2], "new_string": args[3], "replace_all": false})
	case "write":
		// write FILE TEXT: a Write of TEXT and a newline to FILE.
		args := strings.Fields(prompt)
		if len(args) != 3 {
			fatal(2, "fakeclaude: write FILE TEXT")
		}
		return f.edit(t, msgID, "Write", map[string]any{"file_path": args[1], "content": args[2] + "\n"})
	case "exitplan":
		return f.exitPlan(t, msgID)
	case "tool":
		return f.tool(t, msgID)
	case "todo":
		id := "toolu_01" + randHex(10)
		input := map[string]any{"todos": []any{
			map[string]any{"content": "write the code", "status": "completed", "activeForm": "Writing the code"},
			map[string]any{"content": "test it", "status": "in_progress", "activeForm": "Testing it"},
		}}
		f.block(msgID, map[string]any{"type": "tool_use", "id": id, "name": "TodoWrite", "input": input}, 0)
		f.emit(f.userLine([]any{map[string]any{"tool_use_id": id, "type": "tool_result",
			"content": "Todos have been modified successfully. Ensure that you continue to use the todo list to track your progress."}}, nil))
		say("planned")
		return done("planned", 2)
	case "huge":
		say(strings.Repeat("x", model.Int(0, 0)))
		return done("huge", 1)
	case "die":
		say("dying")
		fatal(3, "fakeclaude: dying mid-turn as asked")
	case "noauth":
		f.noAuth()
		return true
	case "fail":
		// 2.1.332's words for a 500 from a model server at a custom
		// ANTHROPIC_BASE_URL, once its retries are spent.
		return f.apiError(500, "server_error", "API Error: 500 Internal server error. This is a server-side issue, usually temporary — try again in a moment. If it persists, check your inference gateway (127.0.0.1:8080).")
	case "nomodel":
		// 2.1.332 when the provider answers 404 for the model.
		return f.apiError(404, "model_not_found", "There's an issue with the selected model ("+f.model()+"). It may not exist or you may not have access to it. Run --model to pick a different model.")
	case "maxturns":
		say("still working")
		r := f.result("error_max_turns", true, "", nil, "max_turns", 2, 5)
		r["errors"] = []string{"Reached maximum number of turns (1)"}
		f.emit(r)
		return true
	}
	say(prompt)
	return done(prompt, 1)
}

// apiError ends a turn whose model call failed with status, as the real
// CLI does: a synthetic assistant message carrying the error's kind and
// msg, then an is_error result of subtype success.
func (f *fake) apiError(status int, kind, msg string) bool {
	a := f.assistant(uuid.NewString(), "stop_sequence", text(msg))
	a["error"] = kind
	a["is_api_error_message"] = true
	a["message"].(map[string]any)["model"] = "<synthetic>"
	f.emit(a)
	r := f.result("success", true, msg, "stop_sequence", "api_error", 1, 0)
	r["api_error_status"] = status
	f.emit(r)
	return true
}

// noAuth is the real unauthenticated turn (samples/claude_stream_noauth.jsonl).
func (f *fake) noAuth() {
	u := zeroUsage()
	u["output_tokens_details"] = nil
	u["service_tier"] = nil
	u["inference_geo"], u["iterations"], u["speed"] = nil, nil, nil
	f.emit(map[string]any{
		"type": "assistant",
		"message": map[string]any{
			"diagnostics": nil, "id": uuid.NewString(), "container": nil, "model": "<synthetic>", "role": "assistant",
			"stop_details": nil, "stop_reason": "stop_sequence", "stop_sequence": "", "type": "message", "usage": u,
			"content": []any{text("Not logged in · Please run /login")}, "context_management": nil,
		},
		"parent_tool_use_id": nil, "session_id": f.sessionID, "uuid": uuid.NewString(), "timestamp": now(),
		"error": "authentication_failed", "is_api_error_message": true,
	})
	f.emit(map[string]any{
		"duration_api_ms": 0, "stop_reason": "stop_sequence", "session_id": f.sessionID, "total_cost_usd": 0,
		"usage": zeroUsage(), "modelUsage": map[string]any{}, "permission_denials": []any{},
		"terminal_reason": "api_error", "fast_mode_state": "off", "fast_mode_disabled_reason": "sdk_opt_in_required",
		"safety_stops": 0, "is_error": true, "num_turns": 1, "subtype": "success", "api_error_status": nil,
		"result": "Not logged in · Please run /login", "type": "result", "duration_ms": 158, "uuid": uuid.NewString(),
		"queued_turn_count": 0, "result_index": 0, "model_usage_since_last_result": map[string]any{},
	})
}

// tool runs a Bash tool call, asking for permission over the control
// protocol when the permission prompt tool is stdio.
func (f *fake) tool(t *turn, msgID string) bool {
	id := "toolu_01" + randHex(10)
	input := map[string]any{"command": "ls", "description": "List files in the workspace"}
	f.block(msgID, map[string]any{"type": "tool_use", "id": id, "name": "Bash", "input": input}, 0)
	ask := f.a.permPromptTool == "stdio" && f.mode() != "bypassPermissions" && f.mode() != "dontAsk"
	note := ""
	if ask {
		reqID := uuid.NewString()
		ch := make(chan map[string]any, 1)
		f.mu.Lock()
		f.permWaiters[reqID] = ch
		f.mu.Unlock()
		f.emit(map[string]any{"type": "control_request", "request_id": reqID, "request": map[string]any{
			"subtype": "can_use_tool", "tool_name": "Bash", "input": input,
			"permission_suggestions": []any{map[string]any{"type": "addRules",
				"rules": []any{map[string]any{"toolName": "Bash", "ruleContent": "ls"}}, "behavior": "allow", "destination": "localSettings"}},
			"decision_reason_type": "subcommandResults", "tool_use_id": id,
			"display_name": "Bash", "description": "List files in the workspace",
		}})
		var resp map[string]any
		select {
		case resp = <-ch:
		case <-t.Interrupted():
			f.mu.Lock()
			delete(f.permWaiters, reqID)
			f.mu.Unlock()
			// 2.1.332 withdraws the request, rejects the tool call in a
			// tool_result and marks the interrupt as one "for tool use".
			f.emit(map[string]any{"type": "control_cancel_request", "request_id": reqID})
			f.emit(f.userLine([]any{map[string]any{"type": "tool_result", "tool_use_id": id, "is_error": true,
				"content": "The user doesn't want to proceed with this tool use. The tool use was rejected (eg. if it was a file edit, the new_string was NOT written to the file). STOP what you are doing and wait for the user to tell you how to proceed."}}, nil))
			return f.interruptedTool()
		}
		if resp["behavior"] != "allow" {
			msg, _ := resp["message"].(string)
			f.emit(f.userLine([]any{map[string]any{"tool_use_id": id, "type": "tool_result", "content": msg, "is_error": true}},
				map[string]any{"tool_use_result": "Error: " + msg}))
			if resp["interrupt"] == true {
				return f.interruptedTool()
			}
			f.block("msg_01"+randHex(10), text("permission denied: "+msg), 0)
			f.emit(f.result("success", false, "permission denied: "+msg, "end_turn", "completed", 2, 5))
			return false
		}
		if in, ok := resp["updatedInput"].(map[string]any); ok {
			input = in
		}
		if p, ok := resp["updatedPermissions"].([]any); ok && len(p) > 0 {
			note = fmt.Sprintf(" (%d permission rules saved)", len(p))
		}
	}
	out := "README.md\nmain.go"
	f.emit(f.userLine([]any{map[string]any{"tool_use_id": id, "type": "tool_result", "content": out, "is_error": false}},
		map[string]any{"tool_use_result": map[string]any{"stdout": out, "stderr": "", "interrupted": false, "isImage": false, "command": input["command"]}}))
	say := "listed 2 files" + note
	f.block("msg_01"+randHex(10), text(say), 0)
	f.emit(f.result("success", false, say, "end_turn", "completed", 2, 5))
	return false
}

// clear is 2.1.332's /clear: a conversation_reset line (still under the
// old session id), then system/init and an empty result under the new
// conversation's id, whose transcript exists from then on.
func (f *fake) clear() {
	old := f.sessionID
	f.emit(map[string]any{"type": "conversation_reset", "new_conversation_id": uuid.NewString(), "uuid": uuid.NewString(), "trigger": "clear",
		"user_message_uuid": uuid.NewString(), "timestamp": now(), "session_id": old})
	f.sessionID = uuid.NewString()
	f.transcript = filepath.Join(filepath.Dir(f.transcript), f.sessionID+".jsonl")
	f.appendTranscript(map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": "<command-name>/clear</command-name>"}, "uuid": uuid.NewString()})
	f.emit(map[string]any{"type": "system", "subtype": "background_tasks_changed", "tasks": []any{}, "uuid": uuid.NewString(), "session_id": f.sessionID})
	f.emit(f.systemInit())
	r := f.result("success", false, "", nil, "", 0, 0)
	delete(r, "terminal_reason")
	r["local_command"] = "clear"
	r["usage"], r["modelUsage"], r["total_cost_usd"] = zeroUsage(), map[string]any{}, 0
	f.emit(r)
}

// permit asks for permission over the control protocol as 2.1.332 does
// and returns the answer, or nil when the turn was interrupted first (the
// request withdrawn).
func (f *fake) permit(t *turn, req map[string]any) map[string]any {
	reqID := uuid.NewString()
	ch := make(chan map[string]any, 1)
	f.mu.Lock()
	f.permWaiters[reqID] = ch
	f.mu.Unlock()
	req["subtype"] = "can_use_tool"
	f.emit(map[string]any{"type": "control_request", "request_id": reqID, "request": req})
	select {
	case resp := <-ch:
		return resp
	case <-t.Interrupted():
		f.mu.Lock()
		delete(f.permWaiters, reqID)
		f.mu.Unlock()
		f.emit(map[string]any{"type": "control_cancel_request", "request_id": reqID})
		return nil
	}
}

// edit runs an Edit or a Write as 2.1.332 does: asking in the default
// and plan modes (suggesting acceptEdits), changing the file, and
// reporting its structured result (Edit: originalFile and
// structuredPatch; Write: create or update).
func (f *fake) edit(t *turn, msgID, tool string, input map[string]any) bool {
	id := "toolu_01" + randHex(10)
	f.block(msgID, map[string]any{"type": "tool_use", "id": id, "name": tool, "input": input}, 0)
	path := input["file_path"].(string)
	if mode := f.mode(); mode != "acceptEdits" && mode != "bypassPermissions" {
		resp := f.permit(t, map[string]any{"tool_name": tool, "display_name": tool, "input": input, "description": filepath.Base(path),
			"permission_suggestions": []any{map[string]any{"type": "setMode", "mode": "acceptEdits", "destination": "session"}}, "tool_use_id": id})
		if resp == nil {
			return f.interruptedTool()
		}
		if resp["behavior"] != "allow" {
			msg, _ := resp["message"].(string)
			f.emit(f.userLine([]any{map[string]any{"tool_use_id": id, "type": "tool_result", "content": msg, "is_error": true}}, map[string]any{"tool_use_result": "Error: " + msg}))
			f.block("msg_01"+randHex(10), text("not changed"), 0)
			f.emit(f.result("success", false, "not changed", "end_turn", "completed", 2, 5))
			return false
		}
		if p, ok := resp["updatedPermissions"].([]any); ok {
			for _, u := range p {
				if u, ok := u.(map[string]any); ok && u["type"] == "setMode" {
					f.setMode(u["mode"].(string))
				}
			}
		}
	}
	before, err := os.ReadFile(path)
	var result map[string]any
	var said string
	if tool == "Write" {
		content := input["content"].(string)
		_ = os.WriteFile(path, []byte(content), 0o644)
		if err != nil {
			result = map[string]any{"type": "create", "filePath": path, "content": content, "structuredPatch": []any{}, "originalFile": nil, "userModified": false}
			said = "File created successfully at: " + path
		} else {
			result = map[string]any{"type": "update", "filePath": path, "content": content, "originalFile": string(before), "userModified": false,
				"structuredPatch": []any{map[string]any{"oldStart": 1, "oldLines": 1, "newStart": 1, "newLines": 1, "lines": []string{"-" + strings.TrimSuffix(string(before), "\n"), "+" + strings.TrimSuffix(content, "\n")}}}}
			said = "The file " + path + " has been updated successfully."
		}
	} else {
		old, repl := input["old_string"].(string), input["new_string"].(string)
		if err != nil || !strings.Contains(string(before), old) {
			f.emit(f.userLine([]any{map[string]any{"tool_use_id": id, "type": "tool_result", "content": "<tool_use_error>String to replace not found in file.</tool_use_error>", "is_error": true}},
				map[string]any{"tool_use_result": "Error: String to replace not found in file."}))
			f.emit(f.result("success", false, "", "end_turn", "completed", 2, 5))
			return false
		}
		after := strings.Replace(string(before), old, repl, 1)
		_ = os.WriteFile(path, []byte(after), 0o644)
		var lines []string
		oldLines, newLines := strings.Split(strings.TrimSuffix(string(before), "\n"), "\n"), strings.Split(strings.TrimSuffix(after, "\n"), "\n")
		for i := range oldLines {
			if oldLines[i] == newLines[i] {
				lines = append(lines, " "+oldLines[i])
			} else {
				lines = append(lines, "-"+oldLines[i], "+"+newLines[i])
			}
		}
		result = map[string]any{"filePath": path, "oldString": old, "newString": repl, "originalFile": string(before), "userModified": false, "replaceAll": false,
			"structuredPatch": []any{map[string]any{"oldStart": 1, "oldLines": len(oldLines), "newStart": 1, "newLines": len(newLines), "lines": lines}}}
		said = "The file " + path + " has been updated successfully."
	}
	f.emit(f.userLine([]any{map[string]any{"tool_use_id": id, "type": "tool_result", "content": said}}, map[string]any{"tool_use_result": result}))
	f.block("msg_01"+randHex(10), text("changed "+filepath.Base(path)), 0)
	f.emit(f.result("success", false, "changed "+filepath.Base(path), "end_turn", "completed", 2, 5))
	return false
}

// exitPlan is the agent leaving plan mode as 2.1.332 does it: an
// ExitPlanMode call with the plan, a permission request without it
// (requires_user_interaction), and when allowed a switch to the mode the
// answer's setMode names, default without one.
func (f *fake) exitPlan(t *turn, msgID string) bool {
	id := "toolu_01" + randHex(10)
	f.block(msgID, map[string]any{"type": "tool_use", "id": id, "name": "ExitPlanMode", "input": map[string]any{"plan": "1. write the code"}}, 0)
	resp := f.permit(t, map[string]any{"tool_name": "ExitPlanMode", "display_name": "ExitPlanMode", "input": map[string]any{}, "tool_use_id": id, "requires_user_interaction": true})
	if resp == nil {
		return f.interruptedTool()
	}
	if resp["behavior"] != "allow" {
		msg, _ := resp["message"].(string)
		f.emit(f.userLine([]any{map[string]any{"tool_use_id": id, "type": "tool_result", "content": msg, "is_error": true}}, nil))
		f.block("msg_01"+randHex(10), text("still planning"), 0)
		f.emit(f.result("success", false, "still planning", "end_turn", "completed", 2, 5))
		return false
	}
	mode := "default"
	if p, ok := resp["updatedPermissions"].([]any); ok {
		for _, u := range p {
			if u, ok := u.(map[string]any); ok && u["type"] == "setMode" {
				mode, _ = u["mode"].(string)
			}
		}
	}
	f.setMode(mode)
	f.emit(f.userLine([]any{map[string]any{"type": "tool_result", "content": "User has approved exiting plan mode. You can now proceed.", "tool_use_id": id}},
		map[string]any{"tool_use_result": map[string]any{"plan": nil, "isAgent": false, "filePath": filepath.Join(f.configDir, "plans", "plan.md")}}))
	f.block("msg_01"+randHex(10), text("coding in "+mode), 0)
	f.emit(f.result("success", false, "coding in "+mode, "end_turn", "completed", 2, 5))
	return false
}

// subagent runs a background Task call: the main agent's next message
// starts streaming, the sub-agent streams a message of its own (its
// deltas, its assistant line, its message_delta), and the main message
// ends.
func (f *fake) subagent(msgID string) bool {
	taskID := "toolu_01" + randHex(10)
	f.block(msgID, map[string]any{"type": "tool_use", "id": taskID, "name": "Task", "input": map[string]any{
		"description": "Look around", "prompt": "Look around the workspace.", "subagent_type": "general-purpose", "run_in_background": true}}, 0)
	f.emit(f.userLine([]any{map[string]any{"tool_use_id": taskID, "type": "tool_result", "content": "Async agent launched successfully."}}, nil))
	next := "msg_01" + randHex(10)
	f.block(next, text("waiting for it"), 0)

	sub := "msg_01" + randHex(10)
	const said = "the sub-agent looked"
	event := func(e map[string]any) {
		if f.a.partial {
			f.emit(map[string]any{"type": "stream_event", "event": e, "session_id": f.sessionID, "parent_tool_use_id": taskID,
				"uuid": uuid.NewString(), "api_message_id": sub})
		}
	}
	event(map[string]any{"type": "message_start", "message": map[string]any{
		"id": sub, "type": "message", "role": "assistant", "model": f.model(), "content": []any{}, "stop_reason": nil,
		"usage": map[string]any{"input_tokens": 5000, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}})
	event(map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
	for _, d := range splitRunes(said, 3) {
		event(map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": d}})
	}
	a := f.assistant(sub, nil, text(said))
	a["parent_tool_use_id"] = taskID
	f.emit(a)
	event(map[string]any{"type": "content_block_stop", "index": 0})
	u := map[string]any{"output_tokens": 9}
	if !f.classicUsage {
		u = map[string]any{"input_tokens": 5000, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 9}
	}
	event(map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "end_turn"}, "usage": u})
	event(map[string]any{"type": "message_stop"})

	f.block(next, text(" done"), 0)
	f.emit(f.result("success", false, "waiting for it done", "end_turn", "completed", 2, 5))
	return false
}

// lingerVar makes this program a grandchild left behind by
// FAKECLAUDE_FORK_AND_DIE: it sleeps for the duration it holds.
const lingerVar = "FAKECLAUDE_LINGER"

// forkGrandchildrenAndDie starts n grandchildren in this process's group,
// with its stdout and stderr, waits for none of them and exits mid-turn.
func (f *fake) forkGrandchildrenAndDie(n int) {
	msgID := "msg_01" + randHex(10)
	f.block(msgID, text(fmt.Sprintf("forking %d grandchildren", n)), 0)
	self, err := os.Executable()
	if err != nil {
		fatal(1, "fakeclaude: "+err.Error())
	}
	var pids []string
	for range n {
		// No SysProcAttr: no setsid, no new group, no parent-death signal.
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), lingerVar+"=600s")
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Start(); err != nil {
			fatal(1, "fakeclaude: fork a grandchild: "+err.Error())
		}
		pids = append(pids, strconv.Itoa(cmd.Process.Pid))
	}
	fatal(1, fmt.Sprintf("fakeclaude: forked %d grandchildren (pids %s); dying mid-turn as asked", n, strings.Join(pids, " ")))
}

// linger is a grandchild's life: sleep, ignoring SIGTERM when asked.
func linger(d string) {
	if os.Getenv("FAKECLAUDE_GRANDCHILD_IGNORE_SIGTERM") == "1" {
		fakecli.IgnoreSIGTERM()
	}
	dur, err := time.ParseDuration(d)
	if err != nil {
		fatal(2, "fakeclaude: "+lingerVar+": "+err.Error())
	}
	time.Sleep(dur)
}

// recordInvocation writes argv, environment, cwd and parent pid for the
// tests when FAKECLAUDE_RECORD names a directory.
func recordInvocation() {
	dir := os.Getenv("FAKECLAUDE_RECORD")
	if dir == "" {
		return
	}
	cwd, _ := os.Getwd()
	b, _ := json.Marshal(map[string]any{"args": os.Args[1:], "env": os.Environ(), "cwd": cwd, "pid": os.Getpid(), "ppid": os.Getppid()})
	_ = os.WriteFile(filepath.Join(dir, strconv.Itoa(os.Getpid())+".json"), b, 0o600)
}
