// Command agenthost-plugin-surface is a test agent of the host's tests
// (not an example): it declares the whole ACP session surface (rich
// prompt blocks, MCP transports, auth methods, options, modes, config
// options) and records what it receives, one JSON line per event, in the
// file $SURFACE_LOG, so a test asserts what reached the plugin.
//
// Session options it takes: "model" (m1 or m2; anything else is refused),
// "mode" (default or plan), "env." names. Prompts are commands:
//
//	ask SCOPE   a permission request for an edit with a diff and a
//	            location, the always-scope SCOPE, four options; the answer
//	            is reported as "answered OPTION" (or "cancelled")
//	title T     reports the session's title T between turns
//	commands    reports two slash commands
//	handle H    reports a new provider handle H, as after a command that starts a new conversation
//	plan        switches to mode plan itself, as an agent leaving plan mode on its own does
//	auth        fails the turn for want of credentials
//	sleep D     waits D (or until cancelled)
//
// Any other prompt is answered with the types of its blocks, "text image".
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/agenthost/agenthost/plugin/sdk"
)

type agent struct {
	env sdk.Environment

	mu      sync.Mutex
	mode    string
	model   string
	options map[string]string
}

var modes = []sdk.Mode{{ID: "default", Name: "Default"}, {ID: "plan", Name: "Plan"}}

func (a *agent) log(event string, v any) {
	path := os.Getenv("SURFACE_LOG")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	b, _ := json.Marshal(map[string]any{"event": event, "data": v})
	_, _ = f.Write(append(b, '\n'))
}

func (a *agent) open(options map[string]string, servers []sdk.MCPServer, event string) (sdk.SessionInfo, error) {
	a.log(event, map[string]any{"options": options, "mcpServers": servers})
	if options["fail"] == "auth" {
		return sdk.SessionInfo{}, fmt.Errorf("no credentials: %w", sdk.ErrAuthRequired)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.mode, a.model = "default", "m1"
	ack := map[string]string{}
	for k, v := range options {
		switch {
		case k == "model":
			if v != "m1" && v != "m2" {
				return sdk.SessionInfo{}, &sdk.InvalidOptionError{Option: "model", Reason: fmt.Sprintf("%q is not m1 or m2", v)}
			}
			a.model = v
		case k == "mode":
			if v != "default" && v != "plan" {
				return sdk.SessionInfo{}, &sdk.InvalidOptionError{Option: "mode", Reason: fmt.Sprintf("no mode %q", v)}
			}
			a.mode = v
		case k == "allow_credentials", k == "fail", strings.HasPrefix(k, "env."):
		default:
			return sdk.SessionInfo{}, &sdk.InvalidOptionError{Option: k, Reason: "unknown option"}
		}
		if k != "allow_credentials" {
			ack[k] = v
		}
	}
	a.options = ack
	return sdk.SessionInfo{Handle: "surface-handle", Options: ack, Modes: &sdk.ModeState{CurrentModeID: a.mode, Available: modes},
		ConfigOptions: a.configLocked()}, nil
}

func (a *agent) configLocked() []sdk.ConfigOption {
	return []sdk.ConfigOption{
		{ID: "model", Name: "Model", Category: sdk.CategoryModel, CurrentValue: a.model,
			Values: []sdk.ConfigValue{{Value: "m1", Name: "Model one"}, {Value: "m2", Name: "Model two"}}},
		{ID: "mode", Name: "Mode", Category: sdk.CategoryMode, CurrentValue: a.mode,
			Values: []sdk.ConfigValue{{Value: "default", Name: "Default"}, {Value: "plan", Name: "Plan"}}},
	}
}

func (a *agent) NewSession(ctx context.Context, req sdk.NewSessionRequest) (sdk.SessionInfo, error) {
	return a.open(req.Options, req.MCPServers, "new")
}

func (a *agent) ResumeSession(ctx context.Context, req sdk.ResumeSessionRequest) (sdk.SessionInfo, error) {
	return a.open(req.Options, req.MCPServers, "resume")
}

func (a *agent) SetMode(ctx context.Context, modeID string) error {
	if modeID != "default" && modeID != "plan" {
		return &sdk.InvalidOptionError{Option: "mode", Reason: fmt.Sprintf("no mode %q", modeID)}
	}
	a.mu.Lock()
	a.mode = modeID
	a.mu.Unlock()
	a.log("set_mode", modeID)
	return nil
}

func (a *agent) SetConfigOption(ctx context.Context, id, value string) ([]sdk.ConfigOption, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case id == "model" && (value == "m1" || value == "m2"):
		a.model = value
	case id == "mode" && (value == "default" || value == "plan"):
		a.mode = value
	default:
		return nil, &sdk.InvalidOptionError{Option: id, Reason: fmt.Sprintf("no value %q", value)}
	}
	a.log("set_config_option", map[string]string{id: value})
	return a.configLocked(), nil
}

func (a *agent) Prompt(ctx context.Context, req sdk.PromptRequest, turn *sdk.Turn) (sdk.StopReason, error) {
	var types []string
	for _, b := range req.Prompt {
		types = append(types, b.Type)
	}
	a.log("prompt", req.Prompt)
	cmd, arg, _ := strings.Cut(strings.TrimSpace(req.Text()), " ")
	switch cmd {
	case "ask":
		old := "old\n"
		tc := sdk.ToolCall{ToolCallID: "call-" + turn.ID(), Title: "Edit /w/f.txt", Kind: "edit", Status: "pending",
			RawInputJSON: `{"file_path":"/w/f.txt"}`, Content: []sdk.ToolCallContent{sdk.DiffContent("/w/f.txt", &old, "new\n")},
			Locations: []sdk.Location{{Path: "/w/f.txt", Line: 3}}}
		turn.ToolCall(tc)
		out, err := turn.RequestPermission(ctx, sdk.PermissionRequest{ToolCall: tc, AlwaysScope: arg, Options: []sdk.PermissionOption{
			{OptionID: "once", Name: "Allow", Kind: "allow_once"}, {OptionID: "always", Name: "Always allow", Kind: "allow_always"},
			{OptionID: "no", Name: "Reject", Kind: "reject_once"}, {OptionID: "never", Name: "Never", Kind: "reject_always"}}})
		if err != nil {
			if ctx.Err() != nil {
				return sdk.StopCancelled, nil
			}
			return sdk.StopFailed, err
		}
		if out.Cancelled() {
			return sdk.StopEndTurn, turn.Message("cancelled")
		}
		return sdk.StopEndTurn, turn.Message("answered " + out.OptionID)
	case "title":
		a.env.Reporter.Title(arg)
		return sdk.StopEndTurn, turn.Message("titled")
	case "commands":
		a.env.Reporter.Commands([]sdk.Command{{Name: "review", Description: "review the change"}, {Name: "init", InputHint: "a directory"}})
		return sdk.StopEndTurn, turn.Message("listed")
	case "handle":
		a.env.Reporter.HandleChanged(arg, "created")
		return sdk.StopEndTurn, turn.Message("rotated")
	case "plan":
		a.mu.Lock()
		a.mode = "plan"
		a.mu.Unlock()
		a.env.Reporter.CurrentMode("plan")
		return sdk.StopEndTurn, turn.Message("planning")
	case "auth":
		return sdk.StopFailed, fmt.Errorf("the provider refused the key: %w", sdk.ErrAuthRequired)
	case "sleep":
		d, err := time.ParseDuration(arg)
		if err != nil {
			return sdk.StopFailed, err
		}
		select {
		case <-time.After(d):
			return sdk.StopEndTurn, turn.Message("slept")
		case <-ctx.Done():
			return sdk.StopCancelled, nil
		}
	}
	return sdk.StopEndTurn, turn.Message(strings.Join(types, " "))
}

func main() {
	caps := sdk.Capabilities{
		Image: true, EmbeddedContext: true, ResourceLink: true, MCPStdio: true, MCPHTTP: true,
		AuthMethods: []sdk.AuthMethod{
			{ID: "login", Name: "Log in", Description: "log in in a terminal", TerminalCommand: []string{"surface", "login"}},
			{ID: "key", Name: "API key", EnvVars: []string{"SURFACE_API_KEY"}},
		},
		Options: []sdk.OptionSpec{{Name: "model"}, {Name: "mode"}, {Name: "env."}, {Name: "fail"}},
	}
	err := sdk.Serve("surface", func(ctx context.Context, env sdk.Environment) (sdk.Agent, error) {
		return &agent{env: env}, nil
	}, sdk.WithCapabilities(caps))
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "surface:", err)
		os.Exit(1)
	}
}
