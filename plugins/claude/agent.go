package claude

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"

	"github.com/agenthost/agenthost/plugin/sdk"
)

// retireTimeout bounds the stop of a CLI the plugin gives up on in the
// middle of a session (a broken stream, an interrupt left unanswered):
// under cliproc's rule, a second after stdin EOF, a second after SIGTERM,
// then SIGKILL.
const retireTimeout = 3 * time.Second

// agent is the sdk.Agent for one Claude Code conversation. It owns at most
// one running CLI at a time; a CLI that died or was given up on is
// replaced, resuming the conversation, at the next turn.
type agent struct {
	log hclog.Logger
	// rep reports what changes outside a turn: the slash commands at
	// session open, a mode the CLI switched to between turns.
	rep *sdk.Reporter

	mu  sync.Mutex
	cfg config
	// bypass is whether the session may use bypassPermissions (see
	// bypassAllowed).
	bypass bool
	// models are the models the CLI said it supports (its initialize
	// response), for the model and effort config options.
	models []cliModel
	// rejected are the scopes the user answered "reject always" for.
	rejected  map[string]bool
	opened    bool
	workspace string
	path      string // the claude binary
	version   string
	env       []string
	handle    string // the Claude session id, as last reported
	// persisted is true once the CLI has taken a turn, so its transcript
	// exists and a replacement CLI must --resume rather than reuse
	// --session-id.
	persisted bool
	proc      *cli
	retired   []*cli // CLIs being stopped in the background
	// lastLine is the uuid of the newest line of the main conversation
	// the CLI printed (an assistant or user message): ExportState waits
	// for the transcript to hold it, since the CLI writes the transcript
	// behind what it prints.
	lastLine string
	closed   bool
}

var (
	_ sdk.Agent              = (*agent)(nil)
	_ sdk.Closer             = (*agent)(nil)
	_ sdk.Describer          = (*agent)(nil)
	_ sdk.ModeSetter         = (*agent)(nil)
	_ sdk.ConfigOptionSetter = (*agent)(nil)
	_ sdk.StateExporter      = (*agent)(nil)
	_ sdk.StateImporter      = (*agent)(nil)
)

// New is the plugin's sdk.Factory. It starts nothing: the CLI is found,
// checked and started when the host opens the session.
func New(ctx context.Context, env sdk.Environment) (sdk.Agent, error) {
	return &agent{log: env.Log(), rep: env.Reporter, rejected: map[string]bool{}}, nil
}

// authMethods are the ways to authenticate Claude Code: its own login,
// or an API key the operator lets through.
var authMethods = []sdk.AuthMethod{
	{ID: "claude-login", Name: "Log in to Claude Code",
		Description:     "Run `claude` in a terminal and type /login; the login is kept in ~/.claude and every session uses it.",
		TerminalCommand: []string{"claude", "/login"}},
	{ID: "anthropic-api-key", Name: "Anthropic API key",
		Description: "The operator sets ANTHROPIC_API_KEY in agenthost's environment and gives the claude agent \"credentials\": \"inherit\" in agenthost.json.",
		EnvVars:     []string{"ANTHROPIC_API_KEY"}},
}

// Capabilities is what the claude agent supports, for
// sdk.WithCapabilities: images, embedded text resources and PDFs,
// resource links, MCP servers of every transport Claude Code's
// --mcp-config takes, the two ways to log in, and its session options.
func Capabilities() sdk.Capabilities {
	return sdk.Capabilities{
		Image: true, EmbeddedContext: true, ResourceLink: true,
		MCPStdio: true, MCPHTTP: true, MCPSSE: true,
		Modes: true, ConfigOptions: true,
		AuthMethods: slices.Clone(authMethods),
		Options:     slices.Clone(optionSpecs),
	}
}

// AgentVersion implements sdk.Describer: the Claude Code version, once a
// session is open.
func (a *agent) AgentVersion() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.version
}

// NewSession starts a CLI on a new conversation with a pre-assigned
// session id (--session-id), which is the session's handle.
func (a *agent) NewSession(ctx context.Context, req sdk.NewSessionRequest) (sdk.SessionInfo, error) {
	return a.open(ctx, req.Workspace, req.Options, req.MCPServers, "")
}

// ResumeSession starts a CLI on the conversation req.Handle (--resume). An
// unknown id fails with the CLI's own message.
func (a *agent) ResumeSession(ctx context.Context, req sdk.ResumeSessionRequest) (sdk.SessionInfo, error) {
	if req.Handle == "" {
		return sdk.SessionInfo{}, errors.New("claude: resume needs the Claude session id")
	}
	return a.open(ctx, req.Workspace, req.Options, req.MCPServers, req.Handle)
}

// open runs the readiness checks (options, workspace, binary, version,
// credentials) and starts the CLI: on a new conversation when resume is
// empty, otherwise on the conversation it names.
func (a *agent) open(ctx context.Context, workspace string, opts map[string]string, servers []sdk.MCPServer, resume string) (sdk.SessionInfo, error) {
	cfg, err := parseOptions(opts)
	if err != nil {
		return sdk.SessionInfo{}, err
	}
	if cfg.mcpConfig, err = mcpConfig(servers); err != nil {
		return sdk.SessionInfo{}, err
	}
	env := withVars(withDefaults(cliEnv(os.Environ(), workspace, cfg.allowCredentials), planVars), cfg.env)
	bypass := bypassAllowed(env)
	if cfg.mode == modeBypass && !bypass {
		return sdk.SessionInfo{}, invalid(OptMode, "claude refuses bypassPermissions to root (unless the CLI's environment has IS_SANDBOX=1, e.g. the option env.IS_SANDBOX=1 in a sandbox)")
	}
	if err := checkWorkspace(workspace); err != nil {
		return sdk.SessionInfo{}, err
	}
	path, err := findCLI(cfg.cliPath)
	if err != nil {
		return sdk.SessionInfo{}, err
	}
	v, err := checkVersion(ctx, path, env)
	if err != nil {
		return sdk.SessionInfo{}, err
	}
	if !cfg.skipAuthCheck {
		if err := checkCredentials(cfg.allowCredentials); err != nil {
			return sdk.SessionInfo{}, err
		}
	}
	st := start{id: resume, resume: resume != ""}
	if !st.resume {
		st.id = cfg.sessionID
		if st.id == "" {
			st.id = newUUID()
		}
	}

	a.mu.Lock()
	if a.closed || a.opened {
		a.mu.Unlock()
		return sdk.SessionInfo{}, errors.New("claude: this agent is closed or already has a session")
	}
	a.cfg, a.workspace, a.path, a.env, a.version, a.handle, a.bypass = cfg, workspace, path, env, v.String(), st.id, bypass
	a.mu.Unlock()
	a.log.Info("opening claude session", "path", path, "version", v.String(), "session_id", st.id, "resume", st.resume)

	c, err := a.launch(ctx, st)
	if err != nil {
		return sdk.SessionInfo{}, err
	}
	a.mu.Lock()
	closed := a.closed
	if !closed {
		a.proc, a.opened = c, true
		// A resumed conversation has a transcript already.
		a.persisted = st.resume
	}
	info := sdk.SessionInfo{Handle: st.id, Options: maps.Clone(a.cfg.raw),
		Modes:         &sdk.ModeState{CurrentModeID: orDefault(a.cfg.mode, "default"), Available: modesFor(a.bypass)},
		ConfigOptions: a.configOptionsLocked()}
	a.mu.Unlock()
	if closed {
		stopRetired(c)
		return sdk.SessionInfo{}, errors.New("claude: the agent was closed while the session opened")
	}
	a.rep.Commands(c.commands)
	return info, nil
}

// withVars returns env with the NAME=VALUE pairs of extra set, replacing
// a variable env had.
func withVars(env, extra []string) []string {
	out := slices.Clone(env)
	for _, kv := range extra {
		name, _, _ := strings.Cut(kv, "=")
		out = slices.DeleteFunc(out, func(e string) bool { return strings.HasPrefix(e, name+"=") })
		out = append(out, kv)
	}
	return out
}

func checkWorkspace(dir string) error {
	if dir == "" || !filepath.IsAbs(dir) {
		return fmt.Errorf("claude: the session's workspace must be an absolute directory, got %q", dir)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("claude: the session's workspace %s cannot be used: %v", dir, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("claude: the session's workspace %s is not a directory", dir)
	}
	return nil
}

// launch starts a CLI for st and completes the initialize handshake.
func (a *agent) launch(ctx context.Context, st start) (*cli, error) {
	a.mu.Lock()
	cfg, path, env, dir, bypass := a.cfg, a.path, a.env, a.workspace, a.bypass
	a.mu.Unlock()
	c, err := startCLI(ctx, a.log.Named("claude"), path, cfg.cliArgs(st, bypass), env, dir, st, cfg.maxLineBytes, cfg.grace())
	if err != nil {
		return nil, fmt.Errorf("claude: could not start %s: %v", path, err)
	}
	info, err := c.initialize(ctx)
	if err != nil {
		stopRetired(c)
		return nil, err
	}
	c.commands = info.commands()
	if len(info.Models) > 0 {
		a.mu.Lock()
		a.models = info.Models
		a.mu.Unlock()
	}
	return c, nil
}

// current returns the running CLI, replacing one that has exited (or was
// given up on) by a new CLI on the same conversation.
func (a *agent) current(ctx context.Context) (*cli, error) {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil, errors.New("claude: the session is closed")
	}
	c, handle, persisted := a.proc, a.handle, a.persisted
	a.mu.Unlock()
	if c != nil && !c.hasExited() {
		return c, nil
	}
	why := "it was stopped after the previous turn failed"
	if c != nil {
		why = "it exited after the previous turn (" + c.exitNote() + ")"
		a.retire(c)
	}
	// A CLI that died inside its first turn may have written the
	// transcript before reporting the session.
	persisted = persisted || transcriptExists(handle)
	a.log.Info("restarting claude", "why", why, "session_id", handle, "resume", persisted)
	n, err := a.launch(ctx, start{id: handle, resume: persisted})
	if err != nil {
		return nil, fmt.Errorf("claude is not running (%s) and could not be restarted: %w", why, err)
	}
	a.mu.Lock()
	closed := a.closed
	if !closed {
		a.proc = n
	}
	a.mu.Unlock()
	if closed {
		stopRetired(n)
		return nil, errors.New("claude: the session is closed")
	}
	return n, nil
}

// retire stops c in the background and forgets it as the running CLI.
// Close waits for it.
func (a *agent) retire(c *cli) {
	a.mu.Lock()
	if a.proc == c {
		a.proc = nil
	}
	a.retired = slices.DeleteFunc(a.retired, (*cli).isStopped)
	a.retired = append(a.retired, c)
	a.mu.Unlock()
	go stopRetired(c)
}

// stopRetired stops a CLI the plugin gave up on, within retireTimeout.
func stopRetired(c *cli) {
	ctx, cancel := context.WithTimeout(context.Background(), retireTimeout)
	defer cancel()
	c.stop(ctx)
}

// noteSession records the session id the CLI reports (system/init,
// result). A new id is reported to the host as a handle change: older CLIs
// mint one on every resume.
func (a *agent) noteSession(id string, turn *sdk.Turn, resumed bool, origin string) {
	if id == "" {
		return
	}
	a.mu.Lock()
	a.persisted = true
	changed := id != a.handle
	old := a.handle
	a.handle = id
	a.mu.Unlock()
	if changed {
		if origin == "" {
			origin = "created"
			if resumed {
				origin = "resumed"
			}
		}
		a.log.Info("claude reports a new session id", "old", old, "new", id, "origin", origin)
		turn.HandleChanged(id, origin)
	}
}

// Prompt sends the prompt as a user message and reports the CLI's output
// until the turn's result line.
func (a *agent) Prompt(ctx context.Context, req sdk.PromptRequest, turn *sdk.Turn) (sdk.StopReason, error) {
	if ctx.Err() != nil {
		return sdk.StopCancelled, nil
	}
	content, err := promptContent(req.Prompt)
	if err != nil {
		return "", err
	}
	a.mu.Lock()
	idle := a.proc
	a.mu.Unlock()
	if idle != nil {
		a.drainIdle(idle)
	}
	line := userLine{Type: "user", Message: userMessage{Role: "user", Content: content}, SessionID: "default"}
	// A CLI can die between turns unseen: the plugin learns of it only
	// when it is reaped, which can come after the next prompt was written.
	// A CLI that ended without taking the prompt (it printed nothing of
	// the turn, not even the system/init that opens every turn) is
	// replaced and given the prompt once more.
	for attempt := 1; ; attempt++ {
		c, err := a.current(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return sdk.StopCancelled, nil
			}
			return "", err
		}
		r := &turnRun{a: a, c: c, turn: turn, log: a.log.With("turn", turn.ID()),
			perms: map[string]*pendingPerm{}, answers: make(chan permAnswer)}
		var stop sdk.StopReason
		if err = c.write(line); err != nil {
			a.retire(c)
			err = &notTakenError{why: "claude did not take the prompt", err: err}
		} else {
			stop, err = r.run(ctx)
		}
		var nt *notTakenError
		if !errors.As(err, &nt) || attempt == 2 || ctx.Err() != nil {
			return stop, err
		}
		a.log.Warn("claude ended before it took the prompt; starting it again", "why", nt)
	}
}

// notTakenError fails a turn whose prompt never reached the CLI: it was
// gone before it read it. err, when set, is why the prompt could not be
// written.
type notTakenError struct {
	why string
	err error
}

func (e *notTakenError) Error() string {
	if e.err == nil {
		return e.why
	}
	return e.why + ": " + e.err.Error()
}

func (e *notTakenError) Unwrap() error { return e.err }

// Close stops the CLI (stdin EOF, grace, SIGTERM, grace, SIGKILL, the
// waits sharing ctx's deadline) and waits for CLIs being stopped in the
// background. Every CLI is reaped before it returns, at the latest by
// SIGKILL when ctx ends.
func (a *agent) Close(ctx context.Context) error {
	a.mu.Lock()
	a.closed = true
	c, retired := a.proc, a.retired
	a.proc, a.retired = nil, nil
	a.mu.Unlock()
	if c != nil {
		a.log.Info("closing claude", "pid", c.pid())
		c.stop(ctx)
	}
	for _, r := range retired {
		r.stop(ctx)
	}
	return nil
}

// transcriptExists reports whether the CLI keeps a transcript of session
// id: ${CLAUDE_CONFIG_DIR:-~/.claude}/projects/<project>/<id>.jsonl.
func transcriptExists(id string) bool {
	dir := configDir()
	if dir == "" || id == "" {
		return false
	}
	m, _ := filepath.Glob(filepath.Join(dir, "projects", "*", id+".jsonl"))
	return len(m) > 0
}

// newUUID returns a random (version 4) UUID, the form Claude Code takes
// for --session-id.
func newUUID() string { return uuid.NewString() }
