package codex

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/agenthost/agenthost/plugin/sdk"
)

// This file is the session's settings and how they change: the approval
// preset (the ACP mode), the model and its reasoning effort (config
// options), the MCP servers, the slash commands and the title.
//
// Codex takes the model, effort, approval policy and sandbox on every
// turn/start, each becoming the thread's default from that turn on. The
// plugin therefore keeps the session's current settings and sends them
// with each turn: SetMode and SetConfigOption change them at once, and a
// change made while a turn runs applies from the next turn (codex has no
// way to change a running turn's).

// settings are the session's model, effort and approval preset as they
// are now. An empty field is codex's own default, not sent.
type settings struct {
	model  string
	effort string
	// mode is the preset id; custom when approval and sandbox are the
	// options approval_policy and sandbox matching no preset.
	mode              string
	approval, sandbox string
}

// customMode is the mode of a session whose approval_policy and sandbox
// options match none of codex's presets. It is reported so a client sees
// the truth; choosing it returns to those options, and a resume given it
// (as a host that stored the reported mode does) defers to them.
const customMode = "custom"

// newSettings are the settings of a thread codex opened with o.
func newSettings(o options, res threadResult) settings {
	st := settings{model: res.Model, effort: o.effort}
	if st.model == "" {
		st.model = o.model
	}
	if st.effort == "" && res.ReasoningEffort != nil {
		st.effort = *res.ReasoningEffort
	}
	st.approval, st.sandbox = o.policy()
	// What codex chose when the options left it to its configuration.
	if st.approval == "" {
		_ = json.Unmarshal(res.ApprovalPolicy, &st.approval)
	}
	if st.sandbox == "" {
		st.sandbox = sandboxMode(res.Sandbox)
	}
	st.mode = customMode
	if p := presetFor(st.approval, st.sandbox); p != nil {
		st.mode = p.ID
	}
	return st
}

// sandboxMode is a thread's SandboxPolicy ({"type":"readOnly",…}) as a
// sandbox mode ("read-only").
func sandboxMode(raw json.RawMessage) string {
	var p struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(raw, &p)
	return map[string]string{"readOnly": "read-only", "workspaceWrite": "workspace-write", "dangerFullAccess": "danger-full-access"}[p.Type]
}

// sandboxPolicy is turn/start's sandboxPolicy for a sandbox mode.
func sandboxPolicy(mode string, addDirs []string) any {
	switch mode {
	case "read-only":
		return map[string]any{"type": "readOnly"}
	case "workspace-write":
		roots := addDirs
		if roots == nil {
			roots = []string{}
		}
		return map[string]any{"type": "workspaceWrite", "writableRoots": roots}
	case "danger-full-access":
		return map[string]any{"type": "dangerFullAccess"}
	}
	return nil
}

// turnStart is turn/start's parameters under these settings.
func (st settings) turnStart(threadID string, input []userInput, addDirs []string) turnStartParams {
	return turnStartParams{
		ThreadID: threadID, Input: input, Model: st.model, Effort: st.effort,
		ApprovalPolicy: st.approval, SandboxPolicy: sandboxPolicy(st.sandbox, addDirs),
	}
}

// modelInfo is one model of model/list.
type modelInfo struct {
	ID                        string `json:"id"`
	Model                     string `json:"model"`
	DisplayName               string `json:"displayName"`
	Description               string `json:"description"`
	Hidden                    bool   `json:"hidden"`
	DefaultReasoningEffort    string `json:"defaultReasoningEffort"`
	SupportedReasoningEfforts []struct {
		ReasoningEffort string `json:"reasoningEffort"`
		Description     string `json:"description"`
	} `json:"supportedReasoningEfforts"`
}

// listModels asks codex for the models it offers (a few pages at most).
func listModels(ctx context.Context, c *conn) ([]modelInfo, error) {
	var out []modelInfo
	cursor := ""
	for range 5 {
		params := map[string]any{}
		if cursor != "" {
			params["cursor"] = cursor
		}
		var res struct {
			Data       []modelInfo `json:"data"`
			NextCursor *string     `json:"nextCursor"`
		}
		if err := c.call(ctx, "model/list", params, &res); err != nil {
			return out, err
		}
		out = append(out, res.Data...)
		if res.NextCursor == nil || *res.NextCursor == "" {
			break
		}
		cursor = *res.NextCursor
	}
	return out, nil
}

// model is the listed model named id (its id or its model name).
func (a *agent) model(id string) *modelInfo {
	for i, m := range a.models {
		if m.ID == id || m.Model == id {
			return &a.models[i]
		}
	}
	return nil
}

// acknowledged are the session options as the session now stands: every
// option the host passed, with the model, effort and mode as they are
// (so a resume reapplies a change SetMode or SetConfigOption made).
// Called with a.mu held.
func (a *agent) acknowledged() map[string]string {
	out := maps.Clone(a.opts.given)
	if out == nil {
		out = map[string]string{}
	}
	if a.settings.model != "" {
		out[OptModel] = a.settings.model
	}
	if a.settings.effort != "" {
		out[OptEffort] = a.settings.effort
	}
	if a.settings.mode != customMode {
		out[OptMode] = a.settings.mode
	}
	return out
}

// modeState is the session's modes: codex's presets, and the custom
// policy when the session runs one. Called with a.mu held.
func (a *agent) modeState() *sdk.ModeState {
	ms := &sdk.ModeState{CurrentModeID: a.settings.mode}
	for _, p := range Presets() {
		ms.Available = append(ms.Available, sdk.Mode{ID: p.ID, Name: p.Name, Description: p.Description})
	}
	if a.settings.mode == customMode {
		ms.Available = append(ms.Available, sdk.Mode{ID: customMode, Name: "Custom",
			Description: fmt.Sprintf("approval policy %q, sandbox %q (the session options %s and %s)", a.settings.approval, a.settings.sandbox, OptApprovalPolicy, OptSandbox)})
	}
	return ms
}

// configOptions are the session's config options: the mode, the model
// (codex's listed models, and the current one if codex does not list
// it) and, when the model has a choice of them, its reasoning effort.
// Called with a.mu held.
func (a *agent) configOptions() []sdk.ConfigOption {
	ms := a.modeState()
	mode := sdk.ConfigOption{ID: OptMode, Name: "Approval preset", Category: sdk.CategoryMode, CurrentValue: ms.CurrentModeID,
		Description: "when codex asks before acting, and where it may write"}
	for _, m := range ms.Available {
		mode.Values = append(mode.Values, sdk.ConfigValue{Value: m.ID, Name: m.Name, Description: m.Description})
	}
	model := sdk.ConfigOption{ID: OptModel, Name: "Model", Category: sdk.CategoryModel, CurrentValue: a.settings.model,
		Description: "the model codex uses"}
	cur := a.model(a.settings.model)
	if cur == nil && a.settings.model != "" {
		model.Values = append(model.Values, sdk.ConfigValue{Value: a.settings.model, Name: a.settings.model})
	}
	for _, m := range a.models {
		if m.Hidden && m.Model != a.settings.model {
			continue
		}
		model.Values = append(model.Values, sdk.ConfigValue{Value: m.Model, Name: m.DisplayName, Description: m.Description})
	}
	out := []sdk.ConfigOption{mode, model}
	if cur != nil && len(cur.SupportedReasoningEfforts) > 0 {
		effort := sdk.ConfigOption{ID: OptEffort, Name: "Reasoning effort", Category: sdk.CategoryThoughtLevel,
			CurrentValue: a.settings.effort, Description: "how hard the model thinks"}
		if effort.CurrentValue == "" {
			effort.CurrentValue = cur.DefaultReasoningEffort
		}
		for _, e := range cur.SupportedReasoningEfforts {
			effort.Values = append(effort.Values, sdk.ConfigValue{Value: e.ReasoningEffort, Name: e.ReasoningEffort, Description: e.Description})
		}
		out = append(out, effort)
	}
	return out
}

// SetMode switches the approval preset from the next turn on.
func (a *agent) SetMode(ctx context.Context, modeID string) error {
	a.mu.Lock()
	err := a.setMode(modeID)
	opts := a.configOptions()
	a.mu.Unlock()
	if err == nil && a.reporter != nil {
		a.reporter.ConfigOptions(opts)
	}
	return err
}

// setMode is SetMode with a.mu held.
func (a *agent) setMode(modeID string) error {
	if a.conn == nil {
		return errors.New("codex: no session is open")
	}
	if modeID == customMode && (a.opts.approvalPolicy != "" || a.opts.sandbox != "") {
		// Back to what the session options approval_policy and sandbox
		// asked for.
		a.settings.mode, a.settings.approval, a.settings.sandbox = customMode, a.opts.approvalPolicy, a.opts.sandbox
		return nil
	}
	p := presetByID(modeID)
	if p == nil {
		return invalid(OptMode, fmt.Sprintf("%q is not a mode of codex: expected %s", modeID, presetList()))
	}
	a.settings.mode, a.settings.approval, a.settings.sandbox = p.ID, p.ApprovalPolicy, p.Sandbox
	return nil
}

// SetConfigOption sets the mode, the model or the reasoning effort from
// the next turn on. A model whose efforts do not include the current one
// gets its default effort.
func (a *agent) SetConfigOption(ctx context.Context, id, value string) ([]sdk.ConfigOption, error) {
	opts, err := a.setConfigOption(id, value)
	if err == nil && id == OptMode && a.reporter != nil {
		// The mode is a mode too: a client following modes sees it.
		a.reporter.CurrentMode(value)
	}
	return opts, err
}

// setConfigOption is SetConfigOption's change, under a.mu.
func (a *agent) setConfigOption(id, value string) ([]sdk.ConfigOption, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.conn == nil {
		return nil, errors.New("codex: no session is open")
	}
	switch id {
	case OptMode:
		if err := a.setMode(value); err != nil {
			return nil, err
		}
	case OptModel:
		m := a.model(value)
		if m == nil && value != a.settings.model {
			return nil, invalid(OptModel, fmt.Sprintf("codex lists no model %q; it lists %s", value, a.modelNames()))
		}
		a.settings.model = value
		if m != nil && a.settings.effort != "" && !m.supports(a.settings.effort) {
			// Sent explicitly: codex would keep the thread's effort.
			a.settings.effort = m.DefaultReasoningEffort
		}
	case OptEffort:
		m := a.model(a.settings.model)
		if m == nil || !m.supports(value) {
			return nil, invalid(OptEffort, fmt.Sprintf("model %q has no reasoning effort %q", a.settings.model, value))
		}
		a.settings.effort = value
	default:
		return nil, invalid(id, "codex's config options are mode, model and effort")
	}
	return a.configOptions(), nil
}

func (m *modelInfo) supports(effort string) bool {
	return slices.ContainsFunc(m.SupportedReasoningEfforts, func(e struct {
		ReasoningEffort string `json:"reasoningEffort"`
		Description     string `json:"description"`
	}) bool {
		return e.ReasoningEffort == effort
	})
}

func (a *agent) modelNames() string {
	var names []string
	for _, m := range a.models {
		names = append(names, m.Model)
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// mcpNameRE is what codex accepts as an MCP server's name (a config key).
var mcpNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// mcpConfig is the MCP servers as the thread's config overrides
// (mcp_servers.NAME): a stdio server's command, args and env, an http
// server's url and http_headers.
func mcpConfig(servers []sdk.MCPServer) (map[string]any, error) {
	if len(servers) == 0 {
		return nil, nil
	}
	out := map[string]any{}
	for _, s := range servers {
		if !mcpNameRE.MatchString(s.Name) {
			return nil, invalid("mcpServers", fmt.Sprintf("codex needs an MCP server's name made of letters, digits, '-' and '_'; %q is not", s.Name))
		}
		key := "mcp_servers." + s.Name
		if _, dup := out[key]; dup {
			return nil, invalid("mcpServers", fmt.Sprintf("two MCP servers are named %q", s.Name))
		}
		switch s.Transport {
		case "stdio", "":
			env := map[string]string{}
			for _, nv := range s.Env {
				env[nv.Name] = nv.Value
			}
			args := s.Args
			if args == nil {
				args = []string{}
			}
			out[key] = map[string]any{"command": s.Command, "args": args, "env": env}
		case "http":
			headers := map[string]string{}
			for _, nv := range s.Headers {
				headers[nv.Name] = nv.Value
			}
			out[key] = map[string]any{"url": s.URL, "http_headers": headers}
		default:
			return nil, invalid("mcpServers", fmt.Sprintf("codex cannot reach MCP server %q over %s: it takes stdio and http servers", s.Name, s.Transport))
		}
	}
	return out, nil
}

// Commands are the slash commands the plugin implements for codex: a
// prompt that is one of them (and nothing else) runs it instead of a
// turn of the model.
func Commands() []sdk.Command {
	return []sdk.Command{
		{Name: "new", Description: "start a new codex conversation in this session (the old one is left as it is)"},
		{Name: "compact", Description: "summarize the conversation to free context"},
		{Name: "review", Description: "have codex review the workspace's uncommitted changes, or what the instructions say",
			InputHint: "optional review instructions"},
	}
}

// reportCommands reports the slash commands as the session opens.
func (a *agent) reportCommands() {
	if a.reporter != nil {
		a.reporter.Commands(Commands())
	}
}

// slashCommand is the command a prompt runs, if it is one: a single text
// block "/NAME", or "/NAME ARGUMENT" for a command that takes one.
func slashCommand(prompt []sdk.ContentBlock) (name, arg string, ok bool) {
	if len(prompt) != 1 || (prompt[0].Type != "" && prompt[0].Type != sdk.BlockText) {
		return "", "", false
	}
	text, ok := strings.CutPrefix(strings.TrimSpace(prompt[0].Text), "/")
	if !ok {
		return "", "", false
	}
	name, arg, _ = strings.Cut(text, " ")
	arg = strings.TrimSpace(arg)
	for _, c := range Commands() {
		if c.Name == name && (arg == "" || c.InputHint != "") {
			return name, arg, true
		}
	}
	return "", "", false
}

// runCommand runs a slash command as the turn.
func (a *agent) runCommand(ctx context.Context, t *turnRun, cmd, arg string) (sdk.StopReason, error) {
	switch cmd {
	case "new":
		return a.newThread(ctx, t.turn)
	case "compact":
		return t.run(ctx, "thread/compact/start", map[string]string{"threadId": t.threadID})
	case "review":
		target := map[string]string{"type": "uncommittedChanges"}
		if arg != "" {
			target = map[string]string{"type": "custom", "instructions": arg}
		}
		return t.run(ctx, "review/start", map[string]any{"threadId": t.threadID, "target": target})
	}
	return "", fmt.Errorf("codex: unknown command /%s", cmd)
}

// newThread starts a fresh thread with the session's settings and makes
// it the session's. Codex saves a thread only once something happens in
// it; naming it (thread/name/set) is such a thing, so the new handle is
// resumable at once and a restart continues the new conversation, not
// the old one.
func (a *agent) newThread(ctx context.Context, turn *sdk.Turn) (sdk.StopReason, error) {
	a.mu.Lock()
	c, o, ws, mcp, st := a.conn, a.opts, a.workspace, a.mcp, a.settings
	a.mu.Unlock()
	p := a.threadStartParams(ws, o, mcp)
	p.Model, p.ApprovalPolicy, p.Sandbox = st.model, st.approval, st.sandbox
	if st.effort != "" {
		if p.Config == nil {
			p.Config = map[string]any{}
		}
		p.Config["model_reasoning_effort"] = st.effort
	}
	var res threadResult
	if err := c.call(ctx, "thread/start", p, &res); err != nil {
		return "", fmt.Errorf("codex: /new: thread/start: %w", err)
	}
	if res.Thread.ID == "" {
		return "", errors.New("codex: /new: thread/start answered without a thread id")
	}
	name := "new conversation (agenthost /new)"
	a.mu.Lock()
	a.ownNames[name] = true
	a.mu.Unlock()
	if !o.ephemeral {
		if err := c.call(ctx, "thread/name/set", map[string]string{"threadId": res.Thread.ID, "name": name}, nil); err != nil {
			return "", fmt.Errorf("codex: /new: saving the new thread (thread/name/set): %w", err)
		}
	}
	a.mu.Lock()
	old := a.threadID
	a.threadID = res.Thread.ID
	a.resumable = !o.ephemeral
	a.sent = settings{} // a new thread: its first turn carries them
	a.mu.Unlock()
	a.log.Info("codex /new: a new thread", "old", old, "thread", res.Thread.ID)
	if !o.ephemeral {
		turn.HandleChanged(res.Thread.ID, "created")
	}
	_ = turn.Message("Started a new codex conversation.")
	return sdk.StopEndTurn, nil
}

// nameUpdated reports a thread name codex set as the session's title.
func (a *agent) nameUpdated(m *message) {
	var n struct {
		ThreadID   string  `json:"threadId"`
		ThreadName *string `json:"threadName"`
	}
	if json.Unmarshal(m.Params, &n) != nil || n.ThreadName == nil || *n.ThreadName == "" {
		return
	}
	a.mu.Lock()
	mine := n.ThreadID == a.threadID && !a.ownNames[*n.ThreadName]
	a.mu.Unlock()
	if mine && a.reporter != nil {
		a.reporter.Title(*n.ThreadName)
	}
}
