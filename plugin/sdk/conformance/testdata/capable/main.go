// Command capable is a plugin for the conformance kit's tests that
// declares every optional capability: modes, config options, declared
// session options, and image, audio, embedded-resource and resource-link
// prompts, and exports and imports its provider state. It speaks conforming's prompt language ("stream N", "hold") and
// reports session-level updates (its commands and a title) when a session
// opens, which every check must tolerate.
//
// With CAPABLE_BROKEN=1 it declares the same but keeps none of it: SetMode
// accepts any mode and changes nothing, SetConfigOption answers the
// options unchanged, unknown session options are accepted, a prompt
// with anything but text fails, and ExportState answers an empty state. Each capability check must then fail.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"

	"github.com/agenthost/agenthost/plugin/sdk"
	"github.com/agenthost/agenthost/plugin/sdk/conformance/testdata/streamlang"
)

var modes = []sdk.Mode{{ID: "ask", Name: "Ask"}, {ID: "code", Name: "Code", Description: "edits without asking"}}

type agent struct {
	env    sdk.Environment
	broken bool

	mu   sync.Mutex
	mode string
	opts []sdk.ConfigOption
}

func newAgent(env sdk.Environment, broken bool) *agent {
	return &agent{env: env, broken: broken, mode: "ask", opts: []sdk.ConfigOption{{
		ID: "model", Name: "Model", Category: sdk.CategoryModel, CurrentValue: "small",
		Values: []sdk.ConfigValue{{Value: "small", Name: "Small"}, {Value: "large", Name: "Large"}},
	}}}
}

func (a *agent) open(handle string, options map[string]string) (sdk.SessionInfo, error) {
	for name := range options {
		if name != "model" && !a.broken {
			return sdk.SessionInfo{}, &sdk.InvalidOptionError{Option: name, Reason: "capable knows only model"}
		}
	}
	a.env.Reporter.Commands([]sdk.Command{{Name: "stream", Description: "Stream N chunks", InputHint: "N"}})
	a.env.Reporter.Title("capable session")
	a.mu.Lock()
	defer a.mu.Unlock()
	return sdk.SessionInfo{Handle: handle, Options: options,
		Modes:         &sdk.ModeState{CurrentModeID: a.mode, Available: modes},
		ConfigOptions: slices.Clone(a.opts)}, nil
}

func (a *agent) NewSession(_ context.Context, req sdk.NewSessionRequest) (sdk.SessionInfo, error) {
	return a.open("capable-handle", req.Options)
}

func (a *agent) ResumeSession(_ context.Context, req sdk.ResumeSessionRequest) (sdk.SessionInfo, error) {
	return a.open(req.Handle, req.Options)
}

// ExportState makes capable a StateExporter: its state names the handle.
// Broken, it exports nothing.
func (a *agent) ExportState(_ context.Context, handle string) ([]byte, error) {
	if a.broken {
		return nil, nil
	}
	return []byte("capable state of " + handle), nil
}

// ImportState makes capable a StateImporter; it accepts only its own
// export of the handle resumed.
func (a *agent) ImportState(_ context.Context, handle string, state []byte) error {
	if string(state) != "capable state of "+handle {
		return fmt.Errorf("capable: the state %q is not capable's export of %q", state, handle)
	}
	return nil
}

func (a *agent) SetMode(_ context.Context, id string) error {
	if a.broken {
		return nil
	}
	if !slices.ContainsFunc(modes, func(m sdk.Mode) bool { return m.ID == id }) {
		return &sdk.InvalidOptionError{Option: "mode", Reason: fmt.Sprintf("no mode %q: ask or code", id)}
	}
	a.mu.Lock()
	a.mode = id
	a.mu.Unlock()
	return nil
}

func (a *agent) SetConfigOption(_ context.Context, id, value string) ([]sdk.ConfigOption, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.broken {
		return slices.Clone(a.opts), nil
	}
	i := slices.IndexFunc(a.opts, func(o sdk.ConfigOption) bool { return o.ID == id })
	if i < 0 {
		return nil, &sdk.InvalidOptionError{Option: id, Reason: "no such config option"}
	}
	if !slices.ContainsFunc(a.opts[i].Values, func(v sdk.ConfigValue) bool { return v.Value == value }) {
		return nil, &sdk.InvalidOptionError{Option: id, Reason: "no such value " + value}
	}
	a.opts[i].CurrentValue = value
	return slices.Clone(a.opts), nil
}

// accept decodes a prompt's block as an agent converting it for its CLI
// would.
func (a *agent) accept(b sdk.ContentBlock) error {
	if a.broken && b.Type != sdk.BlockText {
		return errors.New("capable (broken): only text, whatever it declares")
	}
	var err error
	switch b.Type {
	case sdk.BlockText:
	case sdk.BlockImage:
		_, err = b.Image()
	case sdk.BlockAudio:
		_, err = b.Audio()
	case sdk.BlockResource:
		_, err = b.Resource()
	case sdk.BlockResourceLink:
		_, err = b.ResourceLink()
	default:
		err = fmt.Errorf("capable: a %s block, which it does not declare", b.Type)
	}
	return err
}

func (a *agent) Prompt(ctx context.Context, req sdk.PromptRequest, turn *sdk.Turn) (sdk.StopReason, error) {
	for _, b := range req.Prompt {
		if err := a.accept(b); err != nil {
			return "", err
		}
	}
	return streamlang.Run(ctx, "capable", req.Text(), turn)
}

func main() {
	broken := os.Getenv("CAPABLE_BROKEN") == "1"
	err := sdk.Serve("capable", func(_ context.Context, env sdk.Environment) (sdk.Agent, error) { return newAgent(env, broken), nil },
		sdk.WithCapabilities(sdk.Capabilities{
			Image: true, Audio: true, EmbeddedContext: true, ResourceLink: true,
			Modes: true, ConfigOptions: true,
			Options: []sdk.OptionSpec{{Name: "model", Description: "the model"}},
		}))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
