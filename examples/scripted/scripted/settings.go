package scripted

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/agenthost/agenthost/plugin/sdk"
)

// The session options the scripted agent takes. Config options carry the
// same names (the host stores a config option's value as the session
// option of its id), so every value SetMode and SetConfigOption accept is
// one NewSession and ResumeSession accept too.
const (
	OptModel  = "model"
	OptMode   = "mode"
	OptEffort = "effort"
	// OptRequireModel "true" makes a session without a model fail to
	// open, as an agent without a configured model does.
	OptRequireModel = "require_model"
	// OptRequireAuth "true" makes the session fail to open as one whose
	// provider refused the credentials (sdk.ErrAuthRequired).
	OptRequireAuth = "require_auth"
	// OptReportCommands "true" reports the slash commands when the
	// session opens. Off by default, so that the journals of the many
	// host tests driving this agent hold only what their turns did.
	OptReportCommands = "report_commands"
	// OptAllowCredentials is the host's own, set for an agent that
	// inherits credentials; the scripted agent has none to pass on.
	OptAllowCredentials = "allow_credentials"
)

// The modes, named after claude's permission modes so a client written for
// one runs against the other: edits are asked for, made without asking, or
// not made at all.
const (
	ModeDefault     = "default"
	ModeAcceptEdits = "acceptEdits"
	ModePlan        = "plan"
)

var modes = []sdk.Mode{
	{ID: ModeDefault, Name: "Default", Description: "Ask before each edit"},
	{ID: ModeAcceptEdits, Name: "Accept edits", Description: "Make edits without asking"},
	{ID: ModePlan, Name: "Plan", Description: "Make no edits; exitplan leaves this mode"},
}

// The models the model config option offers. Any other model is accepted
// as a session option (a host may configure one by name) and then offered
// beside these.
var models = []sdk.ConfigValue{
	{Value: "default", Name: "Default"},
	{Value: "fast", Name: "Fast", Description: "A small scripted model"},
	{Value: "smart", Name: "Smart", Description: "A large scripted model"},
}

var efforts = []sdk.ConfigValue{
	{Value: "low", Name: "Low"},
	{Value: "medium", Name: "Medium"},
	{Value: "high", Name: "High"},
}

func optionSpecs() []sdk.OptionSpec {
	return []sdk.OptionSpec{
		{Name: OptModel, Description: "the model: default, fast, smart or any other name"},
		{Name: OptMode, Description: "the mode: default, acceptEdits or plan"},
		{Name: OptEffort, Description: "the reasoning effort: low, medium or high"},
		{Name: OptRequireModel, Description: `"true": refuse to open without a model`},
		{Name: OptRequireAuth, Description: `"true": fail to open as if the provider refused the credentials`},
		{Name: OptReportCommands, Description: `"true": report the slash commands when the session opens`},
		{Name: OptAllowCredentials, Description: "accepted and ignored: the scripted agent has no provider"},
	}
}

// settings are a session's mode, model and effort.
type settings struct {
	mode, model, effort string
	// commands: report the slash commands as the session opens.
	commands bool
}

func (s settings) String() string {
	return fmt.Sprintf("mode %s, model %s, effort %s", s.mode, s.model, s.effort)
}

// parseSettings reads and checks a session's options: an unknown option
// or a bad value is an *sdk.InvalidOptionError naming it, the readiness
// checks the errors of their own.
func parseSettings(opts map[string]string) (settings, error) {
	s := settings{mode: ModeDefault, model: "default", effort: "medium"}
	for name, v := range opts {
		switch name {
		case OptModel:
			if v != "" {
				s.model = v
			}
		case OptMode, OptEffort:
			var err error
			if s, err = s.set(name, v); err != nil {
				return settings{}, err
			}
		case OptReportCommands:
			s.commands = v == "true"
		case OptRequireModel, OptRequireAuth, OptAllowCredentials:
		default:
			return settings{}, &sdk.InvalidOptionError{Option: name,
				Reason: "the scripted agent has no such option; it takes " + optionNames()}
		}
	}
	if opts[OptRequireAuth] == "true" {
		return settings{}, fmt.Errorf("scripted: the provider refused the credentials (session option %s): %w", OptRequireAuth, sdk.ErrAuthRequired)
	}
	if opts[OptRequireModel] == "true" && opts[OptModel] == "" {
		return settings{}, errNoModel
	}
	return s, nil
}

func optionNames() string {
	var names []string
	for _, o := range optionSpecs() {
		names = append(names, o.Name)
	}
	return strings.Join(names, ", ")
}

func validMode(id string) bool {
	return slices.ContainsFunc(modes, func(m sdk.Mode) bool { return m.ID == id })
}

func hasValue(values []sdk.ConfigValue, v string) bool {
	return slices.ContainsFunc(values, func(c sdk.ConfigValue) bool { return c.Value == v })
}

func badMode(id string) error {
	var ids []string
	for _, m := range modes {
		ids = append(ids, m.ID)
	}
	return &sdk.InvalidOptionError{Option: OptMode, Reason: fmt.Sprintf("no mode %q: the modes are %s", id, strings.Join(ids, ", "))}
}

func badValue(option, v string, values []sdk.ConfigValue) error {
	var vs []string
	for _, c := range values {
		vs = append(vs, c.Value)
	}
	return &sdk.InvalidOptionError{Option: option, Reason: fmt.Sprintf("no value %q: the values are %s", v, strings.Join(vs, ", "))}
}

func (s settings) modeState() *sdk.ModeState {
	return &sdk.ModeState{CurrentModeID: s.mode, Available: slices.Clone(modes)}
}

// modelValues are the models offered: the known ones and the session's own
// when it is another.
func (s settings) modelValues() []sdk.ConfigValue {
	vs := slices.Clone(models)
	if !hasValue(vs, s.model) {
		vs = append(vs, sdk.ConfigValue{Value: s.model, Name: s.model})
	}
	return vs
}

// configOptions are the session's config options with their current
// values: mode (mirroring the modes, for clients that show config options
// only), model and effort.
func (s settings) configOptions() []sdk.ConfigOption {
	var modeValues []sdk.ConfigValue
	for _, m := range modes {
		modeValues = append(modeValues, sdk.ConfigValue{Value: m.ID, Name: m.Name, Description: m.Description})
	}
	return []sdk.ConfigOption{
		{ID: OptMode, Name: "Mode", Category: sdk.CategoryMode, CurrentValue: s.mode, Values: modeValues},
		{ID: OptModel, Name: "Model", Category: sdk.CategoryModel, CurrentValue: s.model, Values: s.modelValues()},
		{ID: OptEffort, Name: "Effort", Description: "How hard the scripted model thinks (it does not)",
			Category: sdk.CategoryThoughtLevel, CurrentValue: s.effort, Values: slices.Clone(efforts)},
	}
}

// set returns s with config option id set to value, or the
// *sdk.InvalidOptionError refusing it.
func (s settings) set(id, value string) (settings, error) {
	switch id {
	case OptMode:
		if !validMode(value) {
			return s, badMode(value)
		}
		s.mode = value
	case OptModel:
		if !hasValue(s.modelValues(), value) {
			return s, badValue(OptModel, value, s.modelValues())
		}
		s.model = value
	case OptEffort:
		if !hasValue(efforts, value) {
			return s, badValue(OptEffort, value, efforts)
		}
		s.effort = value
	default:
		return s, &sdk.InvalidOptionError{Option: id, Reason: "no such config option: the scripted agent has mode, model and effort"}
	}
	return s, nil
}

// update sets config option id under the lock and returns the settings
// it made.
func (a *agent) update(id, value string) (settings, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s, err := a.s.set(id, value)
	if err == nil {
		a.s = s
	}
	return s, err
}

// SetMode implements sdk.ModeSetter. The SDK reports the new mode; the
// agent reports its config options, whose "mode" changed with it.
func (a *agent) SetMode(ctx context.Context, modeID string) error {
	s, err := a.update(OptMode, modeID)
	if err != nil {
		return err
	}
	a.report.ConfigOptions(s.configOptions())
	return nil
}

// SetConfigOption implements sdk.ConfigOptionSetter. The SDK reports the
// options it returns; setting "mode" is a mode change too, which the
// agent reports.
func (a *agent) SetConfigOption(ctx context.Context, id, value string) ([]sdk.ConfigOption, error) {
	s, err := a.update(id, value)
	if err != nil {
		return nil, err
	}
	if id == OptMode {
		a.report.CurrentMode(value)
	}
	return s.configOptions(), nil
}

// commands are the slash commands the agent offers: its command language.
func commands() []sdk.Command {
	return []sdk.Command{
		{Name: "count", Description: "Stream the numbers 1 to N", InputHint: "N [INTERVAL]"},
		{Name: "sleep", Description: "Hold the turn", InputHint: "DURATION"},
		{Name: "wait", Description: "Hold the turn until it is cancelled"},
		{Name: "fail", Description: "Fail the turn", InputHint: "MESSAGE"},
		{Name: "auth", Description: "Fail the turn as the provider refusing the credentials"},
		{Name: "tool", Description: "Report a tool call"},
		{Name: "ask", Description: "Ask for a permission"},
		{Name: "edit", Description: "Write a file of the workspace, showing the diff and asking first", InputHint: "PATH TEXT"},
		{Name: "usage", Description: "Report token usage", InputHint: "USED SIZE"},
		{Name: "mcp", Description: "List the MCP servers the session was given"},
		{Name: "settings", Description: "Show the mode, model and effort"},
		{Name: "title", Description: "Set the session's title", InputHint: "TEXT"},
		{Name: "exitplan", Description: "Leave plan mode"},
		{Name: "history", Description: "Show the conversation's earlier prompts"},
	}
}
