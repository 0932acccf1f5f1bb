package sdktest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/plugin/sdk"
)

// surfaceAgent uses the whole optional surface of the SDK: modes, config
// options, the reporter, diffs, locations, output deltas, always-scopes.
type surfaceAgent struct {
	env sdk.Environment

	mu   sync.Mutex
	mcp  []sdk.MCPServer
	mode string
	opts []sdk.ConfigOption
	// failOpen, when set, is NewSession's error.
	failOpen error
}

var surfaceModes = []sdk.Mode{{ID: "default", Name: "Default"}, {ID: "plan", Name: "Plan", Description: "think first"}}

func newSurfaceAgent(failOpen error) (*surfaceAgent, sdk.Factory) {
	a := &surfaceAgent{mode: "default", failOpen: failOpen, opts: []sdk.ConfigOption{{ID: "model", Name: "Model", Category: sdk.CategoryModel,
		CurrentValue: "small", Values: []sdk.ConfigValue{{Value: "small", Name: "Small"}, {Value: "large", Name: "Large"}}}}}
	return a, func(_ context.Context, env sdk.Environment) (sdk.Agent, error) { a.env = env; return a, nil }
}

func (a *surfaceAgent) info(handle string) sdk.SessionInfo {
	a.mu.Lock()
	defer a.mu.Unlock()
	return sdk.SessionInfo{Handle: handle, Modes: &sdk.ModeState{CurrentModeID: a.mode, Available: surfaceModes},
		ConfigOptions: slices.Clone(a.opts)}
}

func (a *surfaceAgent) NewSession(_ context.Context, req sdk.NewSessionRequest) (sdk.SessionInfo, error) {
	if a.failOpen != nil {
		return sdk.SessionInfo{}, a.failOpen
	}
	a.mu.Lock()
	a.mcp = req.MCPServers
	a.mu.Unlock()
	a.env.Reporter.Commands([]sdk.Command{{Name: "review", Description: "Review", InputHint: "a commit"}})
	return a.info("h-1"), nil
}

func (a *surfaceAgent) ResumeSession(_ context.Context, req sdk.ResumeSessionRequest) (sdk.SessionInfo, error) {
	return a.info(req.Handle), nil
}

func (a *surfaceAgent) SetMode(_ context.Context, id string) error {
	if !slices.ContainsFunc(surfaceModes, func(m sdk.Mode) bool { return m.ID == id }) {
		return &sdk.InvalidOptionError{Option: "mode", Reason: fmt.Sprintf("no mode %q", id)}
	}
	a.mu.Lock()
	a.mode = id
	a.mu.Unlock()
	return nil
}

func (a *surfaceAgent) SetConfigOption(_ context.Context, id, value string) ([]sdk.ConfigOption, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, o := range a.opts {
		if o.ID != id {
			continue
		}
		if !slices.ContainsFunc(o.Values, func(v sdk.ConfigValue) bool { return v.Value == value }) {
			return nil, &sdk.InvalidOptionError{Option: id, Reason: "no such value " + value}
		}
		a.opts[i].CurrentValue = value
		return slices.Clone(a.opts), nil
	}
	return nil, &sdk.InvalidOptionError{Option: id, Reason: "no such config option"}
}

func (a *surfaceAgent) Prompt(ctx context.Context, req sdk.PromptRequest, turn *sdk.Turn) (sdk.StopReason, error) {
	switch req.Text() {
	case "auth":
		return "", fmt.Errorf("the provider said 401: %w", sdk.ErrAuthRequired)
	case "clear":
		a.env.Reporter.HandleChanged("h-2", "created")
		a.env.Reporter.Title("A fresh start")
		return sdk.StopEndTurn, nil
	case "edit":
		old := "a\n"
		turn.ToolCall(sdk.ToolCall{ToolCallID: "t1", Title: "Edit f.txt", Kind: "edit", Status: "pending",
			Content:   []sdk.ToolCallContent{sdk.DiffContent("/w/f.txt", &old, "b\n"), sdk.DiffContent("/w/new.txt", nil, "n")},
			Locations: []sdk.Location{{Path: "/w/f.txt", Line: 1}}})
		out, err := turn.RequestPermission(ctx, sdk.PermissionRequest{ToolCall: sdk.ToolCall{ToolCallID: "t1", Title: "Edit f.txt"},
			Options:     []sdk.PermissionOption{{OptionID: "always", Name: "Always", Kind: "allow_always"}},
			AlwaysScope: "edit"})
		if err != nil || out.Cancelled() {
			return sdk.StopCancelled, nil
		}
		turn.ToolCallUpdate(sdk.ToolCallUpdate{ToolCallID: "t1", Status: "in_progress", OutputDelta: "step 1\n"})
		turn.ToolCallUpdate(sdk.ToolCallUpdate{ToolCallID: "t1", Status: "completed", Title: "Edited f.txt", Kind: "edit",
			ToolContent: []sdk.ToolCallContent{sdk.TextContent("done")}, Locations: []sdk.Location{{Path: "/w/f.txt"}}})
		return sdk.StopEndTurn, nil
	case "mode":
		// The agent moves itself, inside a turn; a session-level kind
		// emitted through the turn is still the session's.
		_ = a.SetMode(ctx, "default")
		a.env.Reporter.CurrentMode("default")
		return sdk.StopEndTurn, turn.Emit(sdk.Update{SessionInfo: &sdk.SessionInfoUpdate{Title: "moved"}})
	}
	var types []string
	for _, b := range req.Prompt {
		types = append(types, b.Type)
	}
	return sdk.StopEndTurn, turn.Message(fmt.Sprint(types))
}

var surfaceCaps = sdk.Capabilities{Image: true, EmbeddedContext: true, MCPStdio: true, MCPHTTP: true, Modes: true, ConfigOptions: true,
	AuthMethods: []sdk.AuthMethod{{ID: "login", Name: "Log in", TerminalCommand: []string{"surface", "login"}}},
	Options:     []sdk.OptionSpec{{Name: "model"}, {Name: "env."}}}

func TestCapabilitiesAreIdentifiedBeforeASession(t *testing.T) {
	_, f := newSurfaceAgent(nil)
	h := NewHarness(t, f, WithCapabilities(surfaceCaps))
	id, err := h.Identify(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	c := id.Capabilities
	if !c.Image || c.Audio || !c.EmbeddedContext || c.ResourceLink || !c.MCPStdio || !c.MCPHTTP || c.MCPSSE ||
		!c.SetMode || !c.SetConfigOption || len(c.AuthMethods) != 1 || !reflect.DeepEqual(c.AuthMethods[0].TerminalCommand, []string{"surface", "login"}) ||
		len(c.Options) != 2 || c.Options[1].Name != "env." {
		t.Errorf("capabilities %+v", c)
	}
	// An agent that declares nothing but implements the setters reports
	// them once its session is open.
	_, f = newSurfaceAgent(nil)
	h = NewHarness(t, f)
	if id, _ := h.Identify(t.Context()); id.Capabilities.SetMode || id.Capabilities.Image {
		t.Errorf("undeclared capabilities before a session: %+v", id.Capabilities)
	}
	if _, err := h.NewSession(t.Context(), sdk.NewSessionRequest{Workspace: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	if id, _ := h.Identify(t.Context()); !id.Capabilities.SetMode || !id.Capabilities.SetConfigOption {
		t.Errorf("capabilities of the open session's agent: %+v", id.Capabilities)
	}
}

func TestModesAndConfigOptions(t *testing.T) {
	a, f := newSurfaceAgent(nil)
	h := NewHarness(t, f, WithCapabilities(surfaceCaps))
	ctx := t.Context()
	mcp := []sdk.MCPServer{
		{Name: "files", Transport: "stdio", Command: "mcp-files", Args: []string{"--root", "/w"}, Env: []sdk.NameValue{{Name: "K", Value: "v"}}},
		{Name: "web", Transport: "http", URL: "http://127.0.0.1:9/mcp", Headers: []sdk.NameValue{{Name: "Authorization", Value: "x"}}},
		{Name: "events", Transport: "sse", URL: "http://127.0.0.1:9/sse"},
	}
	info, err := h.NewSession(ctx, sdk.NewSessionRequest{Workspace: t.TempDir(), MCPServers: mcp})
	if err != nil {
		t.Fatal(err)
	}
	if a.mu.Lock(); !reflect.DeepEqual(a.mcp, mcp) {
		t.Errorf("the agent got MCP servers %+v, want %+v", a.mcp, mcp)
	}
	a.mu.Unlock()
	if info.Modes == nil || info.Modes.CurrentModeID != "default" || !reflect.DeepEqual(info.Modes.Available, surfaceModes) ||
		len(info.ConfigOptions) != 1 || info.ConfigOptions[0].CurrentValue != "small" || len(info.ConfigOptions[0].Values) != 2 {
		t.Errorf("session info %+v", info)
	}
	// The commands the agent reported while opening are session-level.
	ups := h.Until(wait, "available commands", func(u Update) bool { return u.Kind == "available_commands" })
	if u := ups[len(ups)-1]; u.TurnID != "" || !reflect.DeepEqual(as[*journal.AvailableCommands](t, u).Commands,
		[]journal.Command{{Name: "review", Description: "Review", InputHint: "a commit"}}) {
		t.Errorf("commands %+v", u)
	}

	if err := h.SetMode(ctx, "plan"); err != nil {
		t.Fatal(err)
	}
	ups = h.Until(wait, "current mode", func(u Update) bool { return u.Kind == "current_mode" })
	if u := ups[len(ups)-1]; u.TurnID != "" || as[*journal.CurrentMode](t, u).ModeID != "plan" {
		t.Errorf("current mode update %+v", u)
	}
	var invalid *InvalidOptionError
	if err := h.SetMode(ctx, "yolo"); !errors.As(err, &invalid) || invalid.Option != "mode" || invalid.Reason != `no mode "yolo"` {
		t.Errorf("unknown mode: %v (%+v)", err, invalid)
	}

	opts, err := h.SetConfigOption(ctx, "model", "large")
	if err != nil || len(opts) != 1 || opts[0].CurrentValue != "large" {
		t.Fatalf("SetConfigOption: %+v, %v", opts, err)
	}
	ups = h.Until(wait, "config options", func(u Update) bool { return u.Kind == "config_options" })
	if o := as[*journal.ConfigOptions](t, ups[len(ups)-1]).Options; len(o) != 1 || o[0].CurrentValue != "large" || o[0].Category != "model" {
		t.Errorf("config options update %+v", o)
	}
	if _, err := h.SetConfigOption(ctx, "model", "huge"); !errors.As(err, &invalid) || invalid.Option != "model" {
		t.Errorf("unknown value: %v", err)
	}
	if _, err := h.SetConfigOption(ctx, "speed", "x"); !errors.As(err, &invalid) || invalid.Option != "speed" {
		t.Errorf("unknown option: %v", err)
	}

	// A mode the agent moved to itself arrives too.
	ups, stop := h.Run("mode", wait)
	if stop.StopReason != "end_turn" || kinds(ups) != "current_mode,session_info,turn_stopped" || ups[0].TurnID != "" || ups[1].TurnID != "" {
		t.Errorf("agent-made mode change: %s", Describe(ups))
	}
}

func TestAnAgentWithoutSettersAnswersNotImplemented(t *testing.T) {
	h := NewHarness(t, func(context.Context, sdk.Environment) (sdk.Agent, error) { return plainAgent{}, nil })
	ctx := t.Context()
	if _, err := h.NewSession(ctx, sdk.NewSessionRequest{Workspace: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	if err := h.SetMode(ctx, "plan"); !errors.Is(err, ErrNotImplemented) {
		t.Errorf("SetMode: %v", err)
	}
	if _, err := h.SetConfigOption(ctx, "model", "x"); !errors.Is(err, ErrNotImplemented) {
		t.Errorf("SetConfigOption: %v", err)
	}
	if id, _ := h.Identify(ctx); id.Capabilities.SetMode || id.Capabilities.SetConfigOption {
		t.Errorf("capabilities %+v", id.Capabilities)
	}
}

// A plugin that declares modes its agent cannot set fails at once.
func TestDeclaredButUnimplementedModesFailTheOpen(t *testing.T) {
	h := NewHarness(t, func(context.Context, sdk.Environment) (sdk.Agent, error) { return plainAgent{}, nil },
		WithCapabilities(sdk.Capabilities{Modes: true}))
	if _, err := h.NewSession(t.Context(), sdk.NewSessionRequest{Workspace: t.TempDir()}); err == nil {
		t.Fatal("an agent without ModeSetter opened a session while its plugin declares modes")
	}
}

type plainAgent struct{ sdk.UnimplementedAgent }

func (plainAgent) NewSession(context.Context, sdk.NewSessionRequest) (sdk.SessionInfo, error) {
	return sdk.SessionInfo{Handle: "plain"}, nil
}

func TestOpenErrorsKeepTheirMeaning(t *testing.T) {
	for _, tt := range []struct {
		err   error
		check func(error) bool
	}{
		{fmt.Errorf("not logged in: %w", sdk.ErrAuthRequired), func(err error) bool { return errors.Is(err, ErrAuthRequired) }},
		{fmt.Errorf("bad: %w", &sdk.InvalidOptionError{Option: "effort", Reason: "use low or high"}), func(err error) bool {
			var invalid *InvalidOptionError
			return errors.As(err, &invalid) && invalid.Option == "effort" && invalid.Reason == "use low or high"
		}},
		{errors.New("no CLI"), func(err error) bool { return errors.Is(err, ErrAgent) && !errors.Is(err, ErrAuthRequired) }},
	} {
		_, f := newSurfaceAgent(tt.err)
		h := NewHarness(t, f)
		if _, err := h.NewSession(t.Context(), sdk.NewSessionRequest{Workspace: t.TempDir()}); !tt.check(err) {
			t.Errorf("NewSession failing with %v: %v", tt.err, err)
		}
	}
}

func TestTurnsCarryTheSurface(t *testing.T) {
	_, f := newSurfaceAgent(nil)
	h := NewHarness(t, f, WithCapabilities(surfaceCaps))
	ctx := t.Context()
	if _, err := h.NewSession(ctx, sdk.NewSessionRequest{Workspace: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	h.Until(wait, "available commands", func(u Update) bool { return u.Kind == "available_commands" })

	_, stop := h.Run("auth", wait)
	if stop.StopReason != "failed" || !stop.AuthRequired {
		t.Errorf("auth failure: %+v", stop)
	}

	turn, err := h.Prompt(ctx, "edit")
	if err != nil {
		t.Fatal(err)
	}
	ups := h.Until(wait, "permission request", func(u Update) bool { return u.Kind == "permission_request" })
	call := as[*journal.ToolCall](t, ups[0])
	if len(call.Content) != 2 || call.Content[0].Diff == nil || *call.Content[0].Diff.OldText != "a\n" || call.Content[0].Diff.NewText != "b\n" ||
		call.Content[1].Diff.OldText != nil || !reflect.DeepEqual(call.Locations, []journal.Location{{Path: "/w/f.txt", Line: 1}}) {
		t.Errorf("tool call %+v", call)
	}
	req := as[*journal.PermissionRequest](t, ups[len(ups)-1])
	if req.AlwaysScope != "edit" {
		t.Errorf("permission request %+v", req)
	}
	if err := h.AnswerPermission(ctx, req.RequestID, "always"); err != nil {
		t.Fatal(err)
	}
	ups, _ = h.Turn(turn, wait)
	if kinds(ups) != "permission_resolved,tool_call_update,tool_call_update,turn_stopped" {
		t.Fatalf("after the answer: %s", Describe(ups))
	}
	if d := as[*journal.ToolCallUpdate](t, ups[1]); d.OutputDelta != "step 1\n" || d.Status != "in_progress" {
		t.Errorf("output delta %+v", d)
	}
	if d := as[*journal.ToolCallUpdate](t, ups[2]); d.Title != "Edited f.txt" || d.Kind != "edit" || len(d.Content) != 1 ||
		d.Content[0].Text() != "done" || len(d.Locations) != 1 {
		t.Errorf("final update %+v", d)
	}

	// Rich blocks reach the agent as they were sent.
	turn, err = h.PromptBlocks(ctx, sdk.TextBlock("look"),
		sdk.ContentBlock{Type: sdk.BlockImage, JSON: `{"type":"image","mimeType":"image/png","data":"AA=="}`})
	if err != nil {
		t.Fatal(err)
	}
	if ups, _ := h.Turn(turn, wait); Messages(ups) != "[text image]" {
		t.Errorf("rich prompt: %s", Describe(ups))
	}

	// A handle change reported between turns moves the handle a host
	// resumes from.
	ups, stop = h.Run("clear", wait)
	if stop.StopReason != "end_turn" || kinds(ups) != "handle_changed,session_info,turn_stopped" || ups[0].TurnID != "" || ups[1].TurnID != "" ||
		as[*journal.HandleChanged](t, ups[0]).Handle != "h-2" || as[*journal.SessionInfo](t, ups[1]).Title != "A fresh start" {
		t.Errorf("clear: %s", Describe(ups))
	}
	if id, _ := h.Identify(ctx); id.Handle != "h-2" {
		t.Errorf("handle after a session-level change: %q", id.Handle)
	}
}
