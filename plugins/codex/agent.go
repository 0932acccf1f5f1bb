package codex

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/agenthost/agenthost/plugin/sdk"
	"github.com/agenthost/agenthost/plugin/sdk/cliproc"
)

// Version is the plugin's version, sent to codex as clientInfo.version.
const Version = "0.1.0"

// clientName is the clientInfo name; codex records it as the thread's
// originator.
const clientName = "agenthost"

// handshakeTimeout bounds starting the app-server and opening the thread,
// within the caller's own deadline.
const handshakeTimeout = 60 * time.Second

// stopGrace is the longest Close waits after closing the app-server's
// stdin, and again after SIGTERM, before the next step; the Close
// deadline shortens both (cliproc's rule).
const stopGrace = 2 * time.Second

// settleWait bounds the wait for an app-server that ended its stdout to be
// reaped and its stderr read, so an error can quote its last words.
const settleWait = 2 * time.Second

// optOut are notifications the plugin never uses, suppressed at initialize.
var optOut = []string{"remoteControl/status/changed", "account/rateLimits/updated"}

// agent drives one `codex app-server` process holding one thread.
type agent struct {
	log hclog.Logger
	env []string // the plugin's environment, which the CLI's derives from

	reporter *sdk.Reporter // session-level updates; nil in tests built by hand

	mu         sync.Mutex
	proc       *cliproc.Process
	conn       *conn
	readerDone chan struct{}
	threadID   string
	workspace  string
	mcp        map[string]any // the MCP servers as codex config, for /new
	version    string
	opts       options
	// resumable: the thread has been saved by codex (it was resumed, or a
	// turn of it has started), so its handle can be reported as such.
	resumable bool
	closed    bool
	// settings are the session's model, effort and approval preset as
	// they are now; turn/start carries them, so a change applies from
	// the next turn.
	settings settings
	// sent are the settings the thread carries since a turn/start that
	// carried them ran (codex keeps a turn's overrides for the next
	// turns). turn/start carries the settings only when they differ:
	// overriding them on every turn cost codex 0.171.0 about 7 ms before
	// its first delta (make bench, first-token row). Zero after an open
	// and after /new, so a thread's first turn always carries them.
	sent settings
	// models are what model/list answered at the session's opening.
	models []modelInfo
	// ownNames are thread names the plugin set itself (to save a thread
	// /new started), not titles to report.
	ownNames map[string]bool
	// endedTurn is the last turn of thread endedThread codex reported
	// completed: ExportState waits for the rollout to record its end,
	// since codex writes the rollout behind what it reports.
	endedThread, endedTurn string
}

// New is the plugin's sdk.Factory. It only records the environment: the
// CLI is found, checked and started when the session opens, so that its
// errors are the session's readiness failure.
func New(ctx context.Context, env sdk.Environment) (sdk.Agent, error) {
	return &agent{log: env.Log(), env: os.Environ(), reporter: env.Reporter, ownNames: map[string]bool{}}, nil
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

// Capabilities are what the plugin declares to the host: image,
// embedded-context and resource-link prompts, stdio and streamable-HTTP
// MCP servers (codex has no SSE transport), codex's two ways to
// authenticate, and its session options.
func Capabilities() sdk.Capabilities {
	return sdk.Capabilities{
		Image: true, EmbeddedContext: true, ResourceLink: true,
		MCPStdio: true, MCPHTTP: true, Modes: true, ConfigOptions: true,
		AuthMethods: []sdk.AuthMethod{
			{ID: "chatgpt", Name: "Log in with ChatGPT", TerminalCommand: []string{"codex", "login"},
				Description: "Run `codex login` as the user agenthost runs as; codex keeps the login in $CODEX_HOME/auth.json."},
			{ID: "api-key", Name: "OpenAI API key", EnvVars: []string{"OPENAI_API_KEY", "CODEX_API_KEY"},
				Description: "Set OPENAI_API_KEY (or CODEX_API_KEY) in agenthost's environment and opt codex into it with \"credentials\": \"inherit\" on its agenthost.json entry: agenthost withholds provider keys otherwise."},
		},
		Options: OptionSpecs(),
	}
}

// NewSession starts the app-server in the workspace and a thread in it.
// The thread id is the handle. Codex saves a thread only once its first
// turn starts; the plugin reports the handle again (HandleChanged, origin
// "created") at that moment, and until then a resume of it fails with a
// message saying the conversation was never saved.
func (a *agent) NewSession(ctx context.Context, req sdk.NewSessionRequest) (sdk.SessionInfo, error) {
	return a.open(ctx, req.Workspace, req.Options, req.MCPServers, "")
}

// ResumeSession starts the app-server and resumes the thread req.Handle
// with thread/resume; the reply must name that same thread.
func (a *agent) ResumeSession(ctx context.Context, req sdk.ResumeSessionRequest) (sdk.SessionInfo, error) {
	return a.open(ctx, req.Workspace, req.Options, req.MCPServers, req.Handle)
}

func (a *agent) open(ctx context.Context, workspace string, in map[string]string, servers []sdk.MCPServer, resume string) (sdk.SessionInfo, error) {
	a.mu.Lock()
	busy := a.conn != nil || a.closed
	a.mu.Unlock()
	if busy {
		return sdk.SessionInfo{}, errors.New("codex: this plugin process already has a session (or was closed)")
	}
	o, err := parseOptions(in)
	if err != nil {
		return sdk.SessionInfo{}, fmt.Errorf("codex: %w", err)
	}
	mcp, err := mcpConfig(servers)
	if err != nil {
		return sdk.SessionInfo{}, fmt.Errorf("codex: %w", err)
	}
	cliEnv, stripped := childEnv(a.env, o.allowCredentials)
	// The session's own variables come last, so they win.
	cliEnv = append(cliEnv, o.env...)
	fromEnv, _ := lookupEnv(a.env, EnvCodexPath)
	pathVar, _ := lookupEnv(a.env, "PATH")
	home, _ := lookupEnv(a.env, "HOME")
	path, err := findCLI(o.cliPath, fromEnv, pathVar, home)
	if err != nil {
		return sdk.SessionInfo{}, err
	}
	native, pkgRoot := nativeCLI(path)
	if pkgRoot != "" {
		// What the npm launcher would have set.
		cliEnv = append(cliEnv, "CODEX_MANAGED_PACKAGE_ROOT="+pkgRoot, "CODEX_MANAGED_BY_NPM=1")
	}
	version, err := checkVersion(ctx, native, cliEnv)
	if err != nil {
		return sdk.SessionInfo{}, err
	}
	if !o.skipAuthCheck {
		if err := checkAuth(cliEnv, stripped); err != nil {
			return sdk.SessionInfo{}, err
		}
	}
	if len(stripped) > 0 {
		a.log.Info("credential variables withheld from codex (session option allow_credentials=true passes them)", "variables", stripped)
	}

	p, err := cliproc.Start(ctx, cliproc.Config{
		Path: native, Args: []string{"app-server"}, Dir: workspace, Env: cliEnv,
		Logger: a.log.Named("codex"), Grace: stopGrace,
	})
	if err != nil {
		return sdk.SessionInfo{}, fmt.Errorf("codex: start `%s app-server` in %s: %w", native, workspace, err)
	}
	a.log.Info("codex app-server started", "pid", p.Pid(), "path", native, "version", version, "workspace", workspace)
	c := newConn(p, a.idle)
	readerDone := make(chan struct{})
	go a.read(p, c, o.maxMessageBytes, readerDone)

	hctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	defer cancel()
	info, threadID, err := a.handshake(hctx, c, p, workspace, o, mcp, resume)
	if err != nil {
		_ = p.Kill()
		<-readerDone
		return sdk.SessionInfo{}, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		_ = p.Kill()
		return sdk.SessionInfo{}, errors.New("codex: the session was closed while it opened")
	}
	a.proc, a.conn, a.readerDone = p, c, readerDone
	a.threadID, a.version, a.opts = threadID, version, o
	a.workspace, a.mcp = workspace, mcp
	a.resumable = resume != ""
	a.reportCommands()
	return info, nil
}

// handshake runs initialize, initialized, model/list and thread/start
// (or thread/resume), returning the session info and the thread id.
func (a *agent) handshake(ctx context.Context, c *conn, p *cliproc.Process, workspace string, o options, mcp map[string]any, resume string) (sdk.SessionInfo, string, error) {
	title := clientName
	var init initializeResult
	err := c.call(ctx, "initialize", initializeParams{
		ClientInfo:   clientInfo{Name: clientName, Title: &title, Version: Version},
		Capabilities: initializeCapabilities{OptOutNotificationMethods: optOut},
	}, &init)
	if err != nil {
		return sdk.SessionInfo{}, "", a.startupError("initialize", err, p)
	}
	if err := c.notify("initialized", nil); err != nil {
		return sdk.SessionInfo{}, "", a.startupError("initialized", err, p)
	}
	a.log.Debug("codex initialized", "user_agent", init.UserAgent, "codex_home", init.CodexHome)
	models, err := listModels(ctx, c)
	if err != nil {
		// The models only fill the config option's choices: a codex that
		// cannot list them still runs.
		a.log.Warn("codex could not list its models", "error", err)
	}

	var res threadResult
	if resume == "" {
		err = c.call(ctx, "thread/start", a.threadStartParams(workspace, o, mcp), &res)
		if err != nil {
			return sdk.SessionInfo{}, "", a.startupError("thread/start", err, p)
		}
		if res.Thread.ID == "" {
			return sdk.SessionInfo{}, "", errors.New("codex: thread/start answered without a thread id")
		}
	} else {
		sp := a.threadStartParams(workspace, o, mcp)
		err = c.call(ctx, "thread/resume", threadResumeParams{
			ThreadID: resume, Model: sp.Model, Cwd: workspace, ApprovalPolicy: sp.ApprovalPolicy, Sandbox: sp.Sandbox,
			Config: sp.Config, BaseInstructions: sp.BaseInstructions, DeveloperInstructions: sp.DeveloperInstructions, ExcludeTurns: true,
		}, &res)
		if err != nil {
			return sdk.SessionInfo{}, "", resumeError(resume, init.CodexHome, err, a.startupError("thread/resume", err, p))
		}
		if res.Thread.ID != resume {
			return sdk.SessionInfo{}, "", fmt.Errorf("codex: asked to resume thread %s, codex resumed thread %q instead; "+
				"refusing to continue a different conversation: start a new session, or resume with the handle of the thread you meant", resume, res.Thread.ID)
		}
	}
	a.log.Info("codex thread open", "thread", res.Thread.ID, "resumed", resume != "", "model", res.Model, "provider", res.ModelProvider)

	st := newSettings(o, res)
	a.mu.Lock()
	a.settings, a.models, a.opts, a.sent = st, models, o, settings{}
	info := sdk.SessionInfo{Handle: res.Thread.ID, Options: a.acknowledged(), Modes: a.modeState(), ConfigOptions: a.configOptions()}
	a.mu.Unlock()
	return info, res.Thread.ID, nil
}

// threadStartParams are thread/start's parameters for the session's
// options and MCP servers (thread/resume takes the same settings).
func (a *agent) threadStartParams(workspace string, o options, mcp map[string]any) threadStartParams {
	approval, sandbox := o.policy()
	cfg := map[string]any{}
	maps.Copy(cfg, o.config)
	enableUpdatePlan(cfg)
	if o.effort != "" {
		cfg["model_reasoning_effort"] = o.effort
	}
	if len(o.addDirs) > 0 {
		cfg["sandbox_workspace_write.writable_roots"] = o.addDirs
	}
	maps.Copy(cfg, mcp)
	return threadStartParams{
		Model: o.model, Cwd: workspace, ApprovalPolicy: approval, Sandbox: sandbox, Config: cfg, Ephemeral: o.ephemeral,
		BaseInstructions: o.systemPrompt, DeveloperInstructions: o.appendSystemPrompt,
	}
}

// updatePlanKey is the config override that gives the model codex's
// update_plan tool, whose calls codex reports as turn/plan/updated: the
// ACP plan. Codex 0.171.0 leaves the tool off by default, so a client
// would never see a plan.
const updatePlanKey = "tools.update_plan.enabled"

// enableUpdatePlan turns update_plan on in the thread's config overrides
// cfg unless the session's OptConfig decides it: the key itself, or
// "tools.update_plan", or a "tools" table naming update_plan. A "tools"
// table without it gets update_plan inside (a copy, never the session's
// own map), because codex would apply the table and the dotted key in no
// set order, and a table replaces what the key set.
func enableUpdatePlan(cfg map[string]any) {
	_, key := cfg[updatePlanKey]
	_, table := cfg["tools.update_plan"]
	if key || table {
		return
	}
	tools, ok := cfg["tools"]
	if !ok {
		cfg[updatePlanKey] = true
		return
	}
	t, ok := tools.(map[string]any)
	if !ok {
		return // not a table: codex judges it
	}
	if _, ok := t["update_plan"]; ok {
		return
	}
	t = maps.Clone(t)
	t["update_plan"] = map[string]any{"enabled": true}
	cfg["tools"] = t
}

// resumeError says why thread/resume failed in terms a user can act on.
func resumeError(id, home string, err, fallback error) error {
	var re *rpcError
	if !errors.As(err, &re) {
		return fallback
	}
	switch {
	case strings.Contains(re.Message, "no rollout found"):
		where := "CODEX_HOME"
		if home != "" {
			where = home + "/sessions"
		}
		return fmt.Errorf("codex has no saved conversation for thread %s (%s): codex saves a thread only once its first turn starts, "+
			"so a session closed before its first prompt, or whose %s was removed, cannot be resumed; start a new session", id, re.Message, where)
	case strings.Contains(re.Message, "invalid session id") || strings.Contains(re.Message, "invalid thread id"):
		return fmt.Errorf("codex: %q is not a codex thread id (codex says: %s); resume with the thread id of a codex session", id, re.Message)
	}
	return fallback
}

// startupError describes a failed handshake step, quoting the app-server's
// stderr when it died.
func (a *agent) startupError(step string, err error, p *cliproc.Process) error {
	var re *rpcError
	if errors.As(err, &re) {
		return fmt.Errorf("codex: %s failed: %s", step, re.Error())
	}
	if errors.Is(err, errProcessGone) {
		return fmt.Errorf("codex: %s failed: %w", step, err)
	}
	if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		// A failed write (broken pipe) usually means the app-server
		// exited at startup; its exit and stderr say why, not the pipe.
		settle(p)
		if !p.Running() {
			return fmt.Errorf("codex: %s failed: %w: it exited at startup (%s)%s", step, errProcessGone, p.Status(), stderrNote(p))
		}
	}
	return fmt.Errorf("codex: %s failed: %w%s", step, err, stderrNote(p))
}

// read runs the connection's reader and, when it ends, says why.
func (a *agent) read(p *cliproc.Process, c *conn, max int, done chan<- struct{}) {
	defer close(done)
	tooLong := false
	c.readLoop(p.Stdout(), max, func(err error) error {
		var long *cliproc.LineTooLongError
		if errors.As(err, &long) {
			tooLong = true
			return fmt.Errorf("%w: it wrote a line too long for the plugin (%d bytes), over the limit of %d bytes (session option %s); the plugin stopped it, resume the session to continue",
				errProcessGone, long.Len, max, OptMaxMessageBytes)
		}
		settle(p)
		a.mu.Lock()
		closed := a.closed
		a.mu.Unlock()
		if closed {
			return fmt.Errorf("%w: the session was closed", errProcessGone)
		}
		return fmt.Errorf("%w: it exited unexpectedly (%s)%s; close the session and resume it to start a new one", errProcessGone, p.Status(), stderrNote(p))
	})
	if tooLong {
		_ = p.Kill()
	}
	// Read stdout to its end, which tells p its reader is done.
	_, _ = io.Copy(io.Discard, p.Stdout())
}

// settle waits up to settleWait for the app-server to be reaped and its
// stderr read to the end.
func settle(p *cliproc.Process) {
	select {
	case <-p.Done():
	case <-time.After(settleWait):
	}
}

func stderrNote(p *cliproc.Process) string {
	if t := p.Stderr().Last(8); len(t) > 0 {
		return "; the last lines of its stderr:\n" + strings.Join(t, "\n")
	}
	return ""
}

// idle logs what the app-server says while no turn runs.
func (a *agent) idle(m *message) {
	switch {
	case m.Method == methodUndecodable:
		a.log.Warn("skipped an undecodable line from codex", "error", m.Error.Message)
	case m.Error != nil:
		a.log.Warn("codex reported an error", "error", m.Error.Error())
	case m.Method == "thread/name/updated":
		a.nameUpdated(m)
	case m.Method == "configWarning" || m.Method == "warning" || m.Method == "deprecationNotice":
		a.log.Warn("codex "+m.Method, "params", cliproc.Clip(string(m.Params), 1000))
	default:
		a.log.Debug("codex message outside a turn", "method", m.Method)
	}
}

// Prompt runs one turn: turn/start, then the turn's notifications mapped
// to updates until turn/completed. Cancelling ctx sends turn/interrupt.
func (a *agent) Prompt(ctx context.Context, req sdk.PromptRequest, turn *sdk.Turn) (sdk.StopReason, error) {
	a.mu.Lock()
	c, threadID, opts, st, workspace := a.conn, a.threadID, a.opts, a.settings, a.workspace
	a.mu.Unlock()
	if c == nil {
		return "", errors.New("codex: no session is open")
	}
	if err := c.Err(); err != nil {
		return "", fmt.Errorf("codex: cannot start the turn: %w", err)
	}
	t := &turnRun{
		a: a, c: c, turn: turn, threadID: threadID, opts: opts, workspace: workspace,
		streamed: map[string]bool{}, started: map[string]threadItem{}, diffs: map[string]itemDiff{},
		approvals: map[string]context.CancelCauseFunc{},
	}
	if cmd, arg, ok := slashCommand(req.Prompt); ok {
		return a.runCommand(ctx, t, cmd, arg)
	}
	input, err := toInput(req.Prompt)
	if err != nil {
		return "", err
	}
	params, carried := a.nextTurnStart(threadID, st, input, opts.addDirs)
	reason, err := t.run(ctx, "turn/start", params)
	if err == nil && carried {
		a.noteSent(threadID, st)
	}
	return reason, err
}

// nextTurnStart is the turn/start of thread threadID for settings st: it
// carries them only when they differ from those the thread has (see
// agent.sent); carried says whether it does.
func (a *agent) nextTurnStart(threadID string, st settings, input []userInput, addDirs []string) (p turnStartParams, carried bool) {
	a.mu.Lock()
	same := a.sent == st
	a.mu.Unlock()
	if same {
		return turnStartParams{ThreadID: threadID, Input: input}, false
	}
	return st.turnStart(threadID, input, addDirs), true
}

// noteSent records that thread threadID carries settings st, once a
// turn/start that carried them ran; nothing if the session moved to
// another thread meanwhile.
func (a *agent) noteSent(threadID string, st settings) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.threadID == threadID {
		a.sent = st
	}
}

// Close stops the app-server under cliproc's rule: stdin EOF, then
// SIGTERM, then SIGKILL, the waits sharing ctx's deadline. It always reaps
// the process.
func (a *agent) Close(ctx context.Context) error {
	a.mu.Lock()
	a.closed = true
	p, done := a.proc, a.readerDone
	a.mu.Unlock()
	if p == nil {
		return nil
	}
	err := p.Stop(ctx)
	<-done
	a.log.Info("codex app-server stopped", "pid", p.Pid(), "status", p.Status())
	return err
}

// AgentVersion reports the codex CLI's version once a session is open.
func (a *agent) AgentVersion() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.version
}
