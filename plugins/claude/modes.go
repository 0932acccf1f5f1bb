package claude

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/agenthost/agenthost/plugin/sdk"
)

// This file is the session's modes and config options: Claude Code's
// permission modes, and the model and effort the CLI says it supports.
//
// The modes are the permission modes of 2.1.332 a desktop offers (the
// CLI also has auto, which asks a classifier model about every
// permission, and dontAsk). bypassPermissions is offered only where the
// CLI allows it: it refuses --dangerously-skip-permissions (and the
// switch to bypassPermissions, unless launched with
// --allow-dangerously-skip-permissions) to root, unless IS_SANDBOX=1.
//
// The models are what the CLI reports in its initialize response (value,
// display name, the effort levels each supports); a session opened with a
// model id the list lacks gets it as one more value.

// allModes are the modes the plugin knows; modesFor says which a session
// offers.
var allModes = []sdk.Mode{
	{ID: "default", Name: "Default", Description: "Asks before edits and commands"},
	{ID: "acceptEdits", Name: "Accept Edits", Description: "Edits files without asking; asks before other commands"},
	{ID: "plan", Name: "Plan", Description: "Plans without changing anything until the plan is accepted"},
	{ID: "bypassPermissions", Name: "Bypass Permissions", Description: "Runs every tool without asking"},
}

const modeBypass = "bypassPermissions"

func modeIDs(ms []sdk.Mode) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.ID)
	}
	return out
}

// bypassAllowed reports whether the CLI, run with environment env, lets a
// session use bypassPermissions.
func bypassAllowed(env []string) bool {
	return os.Geteuid() != 0 || slices.Contains(env, "IS_SANDBOX=1")
}

// modesFor are the modes a session offers.
func modesFor(bypass bool) []sdk.Mode {
	if bypass {
		return slices.Clone(allModes)
	}
	return slices.DeleteFunc(slices.Clone(allModes), func(m sdk.Mode) bool { return m.ID == modeBypass })
}

// cliModel is one entry of the initialize response's models.
type cliModel struct {
	Value                 string   `json:"value"`
	ResolvedModel         string   `json:"resolvedModel"`
	DisplayName           string   `json:"displayName"`
	Description           string   `json:"description"`
	SupportsEffort        bool     `json:"supportsEffort"`
	SupportedEffortLevels []string `json:"supportedEffortLevels"`
}

// initInfo is what the plugin reads of the initialize response.
type initInfo struct {
	Commands []struct {
		Name         string          `json:"name"`
		Description  string          `json:"description"`
		ArgumentHint json.RawMessage `json:"argumentHint"`
	} `json:"commands"`
	Models                []cliModel `json:"models"`
	CurrentPermissionMode string     `json:"current_permission_mode"`
}

// unsupportedCommands are slash commands a client of the plugin cannot
// use: they need Claude Code's terminal UI or change its login.
var unsupportedCommands = []string{"login", "logout", "cost", "keybindings-help", "release-notes", "todos", "color", "focus", "heapdump", "doctor", "reload-plugins"}

// commands are the CLI's slash commands a client can send as a prompt.
func (in initInfo) commands() []sdk.Command {
	var out []sdk.Command
	for _, c := range in.Commands {
		if c.Name == "" || strings.HasPrefix(c.Name, "__") || slices.Contains(unsupportedCommands, c.Name) {
			continue
		}
		out = append(out, sdk.Command{Name: c.Name, Description: c.Description, InputHint: hintText(c.ArgumentHint)})
	}
	return out
}

// hintText reads an argumentHint: a string, or an array of strings.
func hintText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []string
	_ = json.Unmarshal(raw, &parts)
	return strings.Join(parts, " ")
}

// findModel returns the model whose value or resolved id is name.
func findModel(models []cliModel, name string) (cliModel, bool) {
	for _, m := range models {
		if m.Value == name || (m.ResolvedModel != "" && m.ResolvedModel == name) {
			return m, true
		}
	}
	return cliModel{}, false
}

// defaultModel is the value the CLI's list uses for its default model.
const defaultModel = "default"

// effortDefault is the effort config option's value for the model's own
// default (no --effort).
const effortDefault = "default"

// configOptions are the session's config options: mode, model and, when
// the current model supports it, effort.
func configOptions(modes []sdk.Mode, models []cliModel, mode, model, effort string) []sdk.ConfigOption {
	modeOpt := sdk.ConfigOption{ID: OptMode, Name: "Mode", Description: "The permission mode", Category: sdk.CategoryMode,
		CurrentValue: orDefault(mode, "default")}
	for _, m := range modes {
		modeOpt.Values = append(modeOpt.Values, sdk.ConfigValue{Value: m.ID, Name: m.Name, Description: m.Description})
	}
	modelOpt := sdk.ConfigOption{ID: OptModel, Name: "Model", Description: "The model", Category: sdk.CategoryModel,
		CurrentValue: orDefault(model, defaultModel)}
	for _, m := range models {
		modelOpt.Values = append(modelOpt.Values, sdk.ConfigValue{Value: m.Value, Name: orDefault(m.DisplayName, m.Value), Description: m.Description})
	}
	cur, known := findModel(models, modelOpt.CurrentValue)
	if !known {
		modelOpt.Values = append(modelOpt.Values, sdk.ConfigValue{Value: modelOpt.CurrentValue, Name: modelOpt.CurrentValue})
	} else {
		modelOpt.CurrentValue = cur.Value
	}
	out := []sdk.ConfigOption{modeOpt, modelOpt}
	levels := effortLevels
	if known {
		if !cur.SupportsEffort {
			return out
		}
		if len(cur.SupportedEffortLevels) > 0 {
			levels = cur.SupportedEffortLevels
		}
	}
	effortOpt := sdk.ConfigOption{ID: OptEffort, Name: "Effort", Description: "How much the model reasons", Category: sdk.CategoryThoughtLevel,
		CurrentValue: orDefault(effort, effortDefault),
		Values:       []sdk.ConfigValue{{Value: effortDefault, Name: "Default", Description: "The model's own default"}}}
	for _, l := range levels {
		effortOpt.Values = append(effortOpt.Values, sdk.ConfigValue{Value: l, Name: strings.ToUpper(l[:1]) + l[1:]})
	}
	return append(out, effortOpt)
}

// modes are the session's modes.
func (a *agent) modes() []sdk.Mode {
	a.mu.Lock()
	defer a.mu.Unlock()
	return modesFor(a.bypass)
}

// configOptionsLocked are the session's config options now; a.mu held.
func (a *agent) configOptionsLocked() []sdk.ConfigOption {
	return configOptions(modesFor(a.bypass), a.models, a.cfg.mode, a.cfg.model, a.cfg.effort)
}

// planExitOptions are the answers to the agent's request to leave plan
// mode: each mode to go on in (allowing it), or to keep planning (as
// Zed's adapter offers them; its "auto" mode is not one of the plugin's).
func (a *agent) planExitOptions() []sdk.PermissionOption {
	var out []sdk.PermissionOption
	if slices.ContainsFunc(a.modes(), func(m sdk.Mode) bool { return m.ID == modeBypass }) {
		out = append(out, sdk.PermissionOption{OptionID: modeBypass, Name: "Yes, and bypass permissions", Kind: "allow_always"})
	}
	return append(out,
		sdk.PermissionOption{OptionID: "acceptEdits", Name: "Yes, and auto-accept edits", Kind: "allow_always"},
		sdk.PermissionOption{OptionID: "default", Name: "Yes, and manually approve edits", Kind: "allow_once"},
		sdk.PermissionOption{OptionID: "plan", Name: "No, keep planning", Kind: "reject_once"},
	)
}

// rejectAlways remembers a scope the user rejected always, for the
// plugin's life.
func (a *agent) rejectAlways(scope string) {
	if scope == "" {
		return
	}
	a.mu.Lock()
	a.rejected[scope] = true
	a.mu.Unlock()
}

// roots are the session's workspace and add_dirs, the directories an
// "edit" scope covers.
func (a *agent) roots() (string, []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.workspace, slices.Clone(a.cfg.addDirs)
}

func (a *agent) rejectedAlways(scope string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.rejected[scope]
}

// setModeLocked records mode as the session's; a.mu held.
func (a *agent) setModeLocked(mode string) {
	a.cfg.mode = mode
	a.cfg.raw[OptMode] = mode
}

// noteMode records the mode the CLI reports (system/init, and the
// system/status it prints when the mode changes). A mode the plugin did
// not set, such as the one the agent goes on in after leaving plan mode,
// is reported with emit, a turn's or the Reporter's: the current mode
// and the config options.
func (a *agent) noteMode(mode string, emit func(sdk.Update) error) {
	a.mu.Lock()
	if mode == "" || mode == orDefault(a.cfg.mode, "default") || !slices.ContainsFunc(modesFor(a.bypass), func(m sdk.Mode) bool { return m.ID == mode }) {
		a.mu.Unlock()
		return
	}
	a.setModeLocked(mode)
	opts := a.configOptionsLocked()
	a.mu.Unlock()
	a.log.Info("claude switched mode", "mode", mode)
	for _, u := range []sdk.Update{{CurrentMode: &mode}, {ConfigOptions: opts}} {
		if err := emit(u); err != nil {
			a.log.Warn("could not report the mode claude switched to", "mode", mode, "error", err)
		}
	}
}

// drainIdle handles what the CLI printed between turns, before the next
// prompt: a mode change and a title are reported through the Reporter, a stray control
// request refused; the rest (the replayed output of a set_model) is the
// CLI's bookkeeping. A closed stream is left for the turn to find.
func (a *agent) drainIdle(c *cli) {
	report := func(u sdk.Update) error { return a.rep.Emit(u) }
	for {
		select {
		case ev, ok := <-c.events:
			switch {
			case !ok:
				return
			case ev.err != nil:
				a.log.Warn("claude's stream broke between turns", "error", ev.err)
			case ev.msg.Type == "system" && (ev.msg.Subtype == "status" || ev.msg.Subtype == "init"):
				a.noteMode(ev.msg.PermissionMode, report)
			case ev.msg.Type == "system" && ev.msg.Subtype == "session_title_changed" && ev.msg.Title != "":
				a.rep.Title(ev.msg.Title)
			case ev.msg.Type == "control_request":
				_ = c.write(successResponse(ev.msg.RequestID, permissionDeny{Behavior: "deny", Message: "no turn is running"}))
			}
		default:
			return
		}
	}
}

// running is the CLI now running, or nil: a setting changed while none
// runs is applied by the next one's argv.
func (a *agent) running() *cli {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.proc == nil || a.proc.hasExited() {
		return nil
	}
	return a.proc
}

// SetMode implements sdk.ModeSetter with the control protocol's
// set_permission_mode, between turns or while one runs. The host journals
// the current mode; the "mode" config option changed with it, so the
// config options are reported too.
func (a *agent) SetMode(ctx context.Context, modeID string) error {
	if err := a.setMode(ctx, modeID); err != nil {
		return err
	}
	a.mu.Lock()
	opts := a.configOptionsLocked()
	a.mu.Unlock()
	if a.rep != nil {
		a.rep.ConfigOptions(opts)
	}
	return nil
}

// setMode is SetMode without its report.
func (a *agent) setMode(ctx context.Context, modeID string) error {
	if !slices.ContainsFunc(a.modes(), func(m sdk.Mode) bool { return m.ID == modeID }) {
		return invalid(OptMode, "%q is not one of this session's modes (%s)", modeID, strings.Join(modeIDs(a.modes()), ", "))
	}
	// Recorded first: the CLI prints the change (system/status) right
	// after its answer, and a running turn must see it as the mode the
	// plugin set, not one the agent switched to itself.
	a.mu.Lock()
	old := a.cfg.mode
	a.setModeLocked(modeID)
	a.mu.Unlock()
	if c := a.running(); c != nil {
		if _, err := c.call(ctx, "set_permission_mode", map[string]any{"mode": modeID}); err != nil {
			a.mu.Lock()
			a.cfg.mode, a.cfg.raw[OptMode] = old, old
			if old == "" {
				delete(a.cfg.raw, OptMode)
			}
			a.mu.Unlock()
			return fmt.Errorf("claude: set mode %s: %w", modeID, err)
		}
	}
	return nil
}

// SetConfigOption implements sdk.ConfigOptionSetter: mode as SetMode
// does, model with set_model (a value of the CLI's list), effort with
// apply_flag_settings' effortLevel (null for the model's default).
func (a *agent) SetConfigOption(ctx context.Context, id, value string) ([]sdk.ConfigOption, error) {
	a.mu.Lock()
	var opt *sdk.ConfigOption
	for _, o := range a.configOptionsLocked() {
		if o.ID == id {
			opt = &o
		}
	}
	a.mu.Unlock()
	if opt == nil {
		return nil, invalid(id, "the claude agent has no config option %q (it has mode, model and, where the model supports it, effort)", id)
	}
	if !slices.ContainsFunc(opt.Values, func(v sdk.ConfigValue) bool { return v.Value == value }) {
		var vs []string
		for _, v := range opt.Values {
			vs = append(vs, v.Value)
		}
		return nil, invalid(id, "%q is not one of its values (%s)", value, strings.Join(vs, ", "))
	}
	switch id {
	case OptMode:
		if err := a.setMode(ctx, value); err != nil {
			return nil, err
		}
		// The host journals the config options; the mode changed too,
		// and a client following modes must see it.
		if a.rep != nil {
			a.rep.CurrentMode(value)
		}
	case OptModel:
		if c := a.running(); c != nil {
			if _, err := c.call(ctx, "set_model", map[string]any{"model": value}); err != nil {
				return nil, fmt.Errorf("claude: set model %s: %w", value, err)
			}
		}
		a.mu.Lock()
		a.cfg.model, a.cfg.raw[OptModel] = value, value
		a.mu.Unlock()
	case OptEffort:
		var level any = value
		if value == effortDefault {
			level = nil
		}
		if c := a.running(); c != nil {
			if _, err := c.call(ctx, "apply_flag_settings", map[string]any{"settings": map[string]any{"effortLevel": level}}); err != nil {
				return nil, fmt.Errorf("claude: set effort %s: %w", value, err)
			}
		}
		a.mu.Lock()
		a.cfg.effort, a.cfg.raw[OptEffort] = "", value
		if value != effortDefault {
			a.cfg.effort = value
		}
		a.mu.Unlock()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.configOptionsLocked(), nil
}
