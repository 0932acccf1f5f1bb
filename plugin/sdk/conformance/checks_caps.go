package conformance

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/agenthost/agenthost/internal/pluginclient"
	"github.com/agenthost/agenthost/journal"
)

// The capability checks: each checks one optional capability the plugin
// declares in Identify (sdk.Capabilities), and is skipped when the plugin
// declares none of it. A declared capability that does not work fails: a
// host offers its clients exactly what the plugin declares.

// skipped is the error a capability check returns when the plugin does
// not declare the capability; runCheck turns it into Result.Skipped.
type skipped string

func (s skipped) Error() string { return "skipped: " + string(s) }

// Names the kit uses for what no agent offers.
const (
	bogusMode   = "conformance-no-such-mode"
	bogusValue  = "conformance-no-such-value"
	bogusOption = "conformance_no_such_option"
)

// setMode: a plugin that declares set_mode offers modes in NewSession
// (the current one among them); SetMode to another offered mode is
// acknowledged and reported as a current_mode update naming it; an unknown
// mode is refused as an invalid setting (INVALID_ARGUMENT, reason
// INVALID_SETTING).
func setMode(e *env) error {
	p, err := e.setupStart()
	if err != nil {
		return err
	}
	if !p.caps.SetMode {
		return skipped("the plugin declares no modes (capabilities.set_mode is false)")
	}
	att, info, err := e.setupNewSession(p)
	if err != nil {
		return err
	}
	m := info.Modes
	if m == nil || len(m.Available) == 0 {
		return errors.New("the plugin declares set_mode, but NewSession returned no modes; expected the modes a client may choose from")
	}
	ids := make([]string, len(m.Available))
	for i, x := range m.Available {
		ids[i] = x.ID
	}
	if !slices.Contains(ids, m.CurrentModeID) {
		return fmt.Errorf("NewSession returned current mode %q, which is not among the modes it offers %v", m.CurrentModeID, ids)
	}
	target := m.CurrentModeID
	for _, id := range ids {
		if id != m.CurrentModeID {
			target = id
			break
		}
	}
	f, err := e.follow(p, att, 1)
	if err != nil {
		return err
	}
	if err := att.SetMode(e.ctx, target); err != nil {
		return p.rpcErr(fmt.Sprintf("SetMode(%q), a mode NewSession offered,", target), err)
	}
	if err := f.await(e, fmt.Sprintf("a current_mode update naming mode %q", target), func(u *pluginclient.Update) bool {
		m, ok := u.SessionUpdate().(*journal.CurrentMode)
		return ok && m.ModeID == target
	}); err != nil {
		return fmt.Errorf("after SetMode(%q) succeeded: %w", target, err)
	}
	return expectInvalid(p, att.SetMode(e.ctx, bogusMode), fmt.Sprintf("SetMode(%q), a mode NewSession did not offer,", bogusMode))
}

// setConfigOption: a plugin that declares set_config_option offers config
// options in NewSession; SetConfigOption to one of an option's values
// answers every option with the new value current, and a config_options
// update says so too; an unknown value and an unknown option are refused
// as invalid settings.
func setConfigOption(e *env) error {
	p, err := e.setupStart()
	if err != nil {
		return err
	}
	if !p.caps.SetConfigOption {
		return skipped("the plugin declares no config options (capabilities.set_config_option is false)")
	}
	att, info, err := e.setupNewSession(p)
	if err != nil {
		return err
	}
	if len(info.ConfigOptions) == 0 {
		return errors.New("the plugin declares set_config_option, but NewSession returned no config options")
	}
	// Prefer an option with a value to change to.
	opt, value := info.ConfigOptions[0], info.ConfigOptions[0].CurrentValue
	for _, o := range info.ConfigOptions {
		if i := slices.IndexFunc(o.Values, func(v pluginclient.ConfigValue) bool { return v.Value != o.CurrentValue }); i >= 0 {
			opt, value = o, o.Values[i].Value
			break
		}
	}
	f, err := e.follow(p, att, 1)
	if err != nil {
		return err
	}
	what := fmt.Sprintf("SetConfigOption(%q, %q)", opt.ID, value)
	opts, err := att.SetConfigOption(e.ctx, opt.ID, value)
	if err != nil {
		return p.rpcErr(what+", a value NewSession offered,", err)
	}
	if got := currentValue(opts, opt.ID); got != value {
		return fmt.Errorf("%s answered option %q with current value %q, expected %q (the value set)", what, opt.ID, got, value)
	}
	if err := f.await(e, fmt.Sprintf("a config_options update with option %q at %q", opt.ID, value), func(u *pluginclient.Update) bool {
		c, ok := u.SessionUpdate().(*journal.ConfigOptions)
		return ok && slices.ContainsFunc(c.Options, func(o journal.ConfigOption) bool { return o.ID == opt.ID && o.CurrentValue == value })
	}); err != nil {
		return fmt.Errorf("after %s succeeded: %w", what, err)
	}
	_, err = att.SetConfigOption(e.ctx, opt.ID, bogusValue)
	if err := expectInvalid(p, err, fmt.Sprintf("SetConfigOption(%q, %q), a value the option does not offer,", opt.ID, bogusValue)); err != nil {
		return err
	}
	_, err = att.SetConfigOption(e.ctx, bogusOption, value)
	return expectInvalid(p, err, fmt.Sprintf("SetConfigOption(%q, …), an option NewSession did not offer,", bogusOption))
}

// unknownOptionRefused: a plugin that declares its session options refuses
// one it did not declare, naming it, as an invalid setting.
func unknownOptionRefused(e *env) error {
	p, err := e.setupStart()
	if err != nil {
		return err
	}
	if len(p.caps.Options) == 0 {
		return skipped("the plugin declares no session options (capabilities.options is empty)")
	}
	name := bogusOption
	for declaredOption(p.caps.Options, name) {
		name += "_"
	}
	att, _, err := p.agent.Attach(e.ctx, SessionID, 1)
	if err != nil {
		return p.setupErr("Attach(fence 1)", err)
	}
	options := maps.Clone(e.cfg.options)
	if options == nil {
		options = map[string]string{}
	}
	options[name] = "x"
	_, err = att.NewSession(e.ctx, pluginclient.NewSessionRequest{Workspace: e.workspace(), Options: options})
	what := fmt.Sprintf("NewSession with option %q, which the plugin does not declare,", name)
	if err := expectInvalid(p, err, what); err != nil {
		return err
	}
	var invalid *pluginclient.InvalidOptionError
	if errors.As(err, &invalid) && invalid.Option != name {
		return fmt.Errorf("%s was refused naming option %q, expected %q", what, invalid.Option, name)
	}
	return nil
}

// declaredOption reports whether name is one of specs (a name ending in
// "." declares a prefix).
func declaredOption(specs []pluginclient.OptionSpec, name string) bool {
	return slices.ContainsFunc(specs, func(s pluginclient.OptionSpec) bool {
		return s.Name == name || (strings.HasSuffix(s.Name, ".") && strings.HasPrefix(name, s.Name))
	})
}

// The blocks promptCapabilities sends, one per capability: a 1x1 PNG, a
// short WAV, an embedded text resource and a link to a file.
const (
	pngBlock  = `{"type":"image","mimeType":"image/png","data":"iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="}`
	wavBlock  = `{"type":"audio","mimeType":"audio/wav","data":"UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQAAAAA="}`
	resBlock  = `{"type":"resource","resource":{"uri":"file:///conformance/notes.txt","mimeType":"text/plain","text":"conformance notes\n"}}`
	linkBlock = `{"type":"resource_link","uri":"file:///conformance/notes.txt","name":"notes.txt","mimeType":"text/plain"}`
)

// promptCapabilities: for each kind of prompt content the plugin declares
// (image, audio, embedded context, resource links), a prompt of the Stream
// prompt's text and one such block is accepted and its turn ends by itself,
// not failed.
func promptCapabilities(e *env) error {
	p, err := e.setupStart()
	if err != nil {
		return err
	}
	var blocks []pluginclient.ContentBlock
	for _, b := range []struct {
		declared bool
		typ, js  string
	}{
		{p.caps.Image, "image", pngBlock}, {p.caps.Audio, "audio", wavBlock},
		{p.caps.EmbeddedContext, "resource", resBlock}, {p.caps.ResourceLink, "resource_link", linkBlock},
	} {
		if b.declared {
			blocks = append(blocks, pluginclient.ContentBlock{Type: b.typ, JSON: b.js})
		}
	}
	if len(blocks) == 0 {
		return skipped("the plugin declares no prompt content beyond text")
	}
	att, _, err := e.setupNewSession(p)
	if err != nil {
		return err
	}
	f, err := e.follow(p, att, 1)
	if err != nil {
		return err
	}
	for _, b := range blocks {
		prompt := []pluginclient.ContentBlock{{Type: "text", Text: e.cfg.prompts.Stream}, b}
		what := fmt.Sprintf("a prompt of %q and an %s block (declared)", e.cfg.prompts.Stream, b.Type)
		turn, err := att.Prompt(e.ctx, pluginclient.PromptRequest{Prompt: prompt})
		if err != nil {
			return p.rpcErr("Prompt with "+what, err)
		}
		_, stop, err := f.readTurn(turn, e.remaining())
		if err != nil {
			return fmt.Errorf("the turn of %s: %w", what, err)
		}
		if stop.reason == "failed" || stop.reason == "" {
			return fmt.Errorf("the turn of %s stopped with %s, expected it to end by itself (the plugin declares %s content)",
				what, stopString(stop), b.Type)
		}
	}
	return nil
}

// setupNewSession attaches at fence 1 and opens a session.
func (e *env) setupNewSession(p *proc) (*pluginclient.Attachment, pluginclient.SessionInfo, error) {
	att, _, err := p.agent.Attach(e.ctx, SessionID, 1)
	if err != nil {
		return nil, pluginclient.SessionInfo{}, p.setupErr("Attach(fence 1)", err)
	}
	info, err := att.NewSession(e.ctx, pluginclient.NewSessionRequest{Workspace: e.workspace(), Options: e.cfg.options})
	if err != nil {
		return nil, info, p.setupErr("NewSession(fence 1)", err)
	}
	p.att, p.handle = att, info.Handle
	return att, info, nil
}

// expectInvalid checks that err refuses what as an invalid setting.
func expectInvalid(p *proc, err error, what string) error {
	var invalid *pluginclient.InvalidOptionError
	switch {
	case err == nil:
		return fmt.Errorf("%s succeeded, expected it to be refused as an invalid setting (INVALID_ARGUMENT, reason INVALID_SETTING; sdk.InvalidOptionError)", what)
	case errors.As(err, &invalid):
		return nil
	case errors.Is(err, pluginclient.ErrUnavailable):
		return p.rpcErr(what, err)
	}
	return fmt.Errorf("%s was refused with %v, expected INVALID_ARGUMENT with reason INVALID_SETTING naming the setting (sdk.InvalidOptionError)", what, err)
}

func currentValue(opts []pluginclient.ConfigOption, id string) string {
	for _, o := range opts {
		if o.ID == id {
			return o.CurrentValue
		}
	}
	return "<no such option>"
}

// await reads updates until one satisfies pred, within the check's time.
func (f *follower) await(e *env, what string, pred func(*pluginclient.Update) bool) error {
	var seen []*pluginclient.Update
	for {
		u, err := f.next(e.remaining())
		if err != nil {
			return fmt.Errorf("expected %s, got %s, then: %w", what, describe(seen), err)
		}
		if pred(u) {
			return nil
		}
		seen = append(seen, u)
	}
}
