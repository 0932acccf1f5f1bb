package host

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/agenthost/agenthost/internal/pluginclient"
	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/leasestore"
)

// A session's settings have one owner, the Session: it keeps them in
// memory (sessionState) and stores every change with the session record
// (leasestore.RecordSettings) before it reports it done, so that a resume,
// a readoption or a restart finds them. Changes come from three places: the
// plugin's answer to NewSession/ResumeSession, the client's SetMode and
// SetConfigOption, and the agent's own reports (current_mode,
// config_options, session_info updates) as the pump journals them.
// settingsMu serialises them end to end, state and store, so a store
// write never carries an older snapshot over a newer one.

// sessionState is what a running session knows of its settings.
type sessionState struct {
	// options are the stored session options but allow_credentials,
	// whose stored value is credentials: every start decides it again
	// from the policy, and it is stored as that start asked.
	options       map[string]string
	credentials   string
	modes         *pluginclient.ModeState
	configOptions []pluginclient.ConfigOption
	title         string
	// allowed are the permission scopes answered "allow always".
	allowed []string
}

// stateOf is the state a session record stores.
func stateOf(rec leasestore.Session) sessionState {
	st := sessionState{options: maps.Clone(rec.Options), title: rec.Title, allowed: slices.Clone(rec.AllowedScopes)}
	if st.options == nil {
		st.options = map[string]string{}
	}
	st.credentials = st.options[optAllowCredentials]
	delete(st.options, optAllowCredentials)
	st.modes, st.configOptions = decodeAgentState(rec.AgentState)
	return st
}

// agentState is how the modes and config options an agent reported are
// stored (leasestore.Session.AgentState, opaque to the store).
type agentState struct {
	Modes         *storedModes   `json:"modes,omitempty"`
	ConfigOptions []storedOption `json:"configOptions,omitempty"`
}

type storedModes struct {
	Current   string       `json:"currentModeId"`
	Available []storedMode `json:"availableModes"`
}

type storedMode struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
}

type storedOption struct {
	ID           string        `json:"id"`
	Name         string        `json:"name"`
	Description  string        `json:"description,omitempty"`
	Category     string        `json:"category,omitempty"`
	CurrentValue string        `json:"currentValue"`
	Values       []storedValue `json:"options"`
}

type storedValue struct {
	Value       string `json:"value"`
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
}

func encodeAgentState(modes *pluginclient.ModeState, opts []pluginclient.ConfigOption) []byte {
	var st agentState
	if modes != nil {
		st.Modes = &storedModes{Current: modes.CurrentModeID, Available: []storedMode{}}
		for _, m := range modes.Available {
			st.Modes.Available = append(st.Modes.Available, storedMode(m))
		}
	}
	for _, o := range opts {
		so := storedOption{ID: o.ID, Name: o.Name, Description: o.Description, Category: o.Category, CurrentValue: o.CurrentValue, Values: []storedValue{}}
		for _, v := range o.Values {
			so.Values = append(so.Values, storedValue(v))
		}
		st.ConfigOptions = append(st.ConfigOptions, so)
	}
	return mustJSON(st)
}

// decodeAgentState reads what encodeAgentState stored; a record without
// one, or with one this build cannot read, has no modes or config options
// (the next resume reports them afresh).
func decodeAgentState(b []byte) (*pluginclient.ModeState, []pluginclient.ConfigOption) {
	var st agentState
	if len(b) == 0 || json.Unmarshal(b, &st) != nil {
		return nil, nil
	}
	var modes *pluginclient.ModeState
	if st.Modes != nil {
		modes = &pluginclient.ModeState{CurrentModeID: st.Modes.Current}
		for _, m := range st.Modes.Available {
			modes.Available = append(modes.Available, pluginclient.Mode(m))
		}
	}
	var opts []pluginclient.ConfigOption
	for _, o := range st.ConfigOptions {
		co := pluginclient.ConfigOption{ID: o.ID, Name: o.Name, Description: o.Description, Category: o.Category, CurrentValue: o.CurrentValue}
		for _, v := range o.Values {
			co.Values = append(co.Values, pluginclient.ConfigValue(v))
		}
		opts = append(opts, co)
	}
	return modes, opts
}

func mcpToStore(ss []pluginclient.MCPServer) []leasestore.MCPServer {
	var out []leasestore.MCPServer
	for _, s := range ss {
		out = append(out, leasestore.MCPServer{Name: s.Name, Transport: s.Transport, Command: s.Command, Args: slices.Clone(s.Args),
			Env: nvToStore(s.Env), URL: s.URL, Headers: nvToStore(s.Headers)})
	}
	return out
}

func mcpFromStore(ss []leasestore.MCPServer) []pluginclient.MCPServer {
	out := []pluginclient.MCPServer{}
	for _, s := range ss {
		out = append(out, pluginclient.MCPServer{Name: s.Name, Transport: s.Transport, Command: s.Command, Args: slices.Clone(s.Args),
			Env: nvFromStore(s.Env), URL: s.URL, Headers: nvFromStore(s.Headers)})
	}
	return out
}

func nvToStore(nv []pluginclient.NameValue) []leasestore.NameValue {
	var out []leasestore.NameValue
	for _, x := range nv {
		out = append(out, leasestore.NameValue(x))
	}
	return out
}

func nvFromStore(nv []leasestore.NameValue) []pluginclient.NameValue {
	var out []pluginclient.NameValue
	for _, x := range nv {
		out = append(out, pluginclient.NameValue(x))
	}
	return out
}

// Options returns the session's stored options.
func (s *Session) Options() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.state.options)
}

// Modes returns the session's modes as the agent last reported them; nil
// when it has none.
func (s *Session) Modes() *pluginclient.ModeState {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state.modes == nil {
		return nil
	}
	m := *s.state.modes
	m.Available = slices.Clone(m.Available)
	return &m
}

// ConfigOptions returns the session's config options as the agent last
// reported them.
func (s *Session) ConfigOptions() []pluginclient.ConfigOption {
	s.mu.Lock()
	defer s.mu.Unlock()
	return cloneConfigOptions(s.state.configOptions)
}

// Title returns the session's title, "" before it has one.
func (s *Session) Title() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.title
}

func cloneConfigOptions(opts []pluginclient.ConfigOption) []pluginclient.ConfigOption {
	out := slices.Clone(opts)
	for i := range out {
		out[i].Values = slices.Clone(out[i].Values)
	}
	return out
}

// SetMode switches the session's mode, between turns or during one, and
// stores it as the session's "mode" option. The agent's refusal of the
// mode is a *pluginclient.InvalidOptionError or matches
// pluginclient.ErrInvalidArgument; an agent without modes matches
// pluginclient.ErrNotImplemented.
func (s *Session) SetMode(ctx context.Context, modeID string) error {
	release, err := s.awake()
	if err != nil {
		return err
	}
	defer release()
	if err := s.proc.att.SetMode(ctx, modeID); err != nil {
		return fmt.Errorf("session %q: set mode %q: %w", s.id, modeID, err)
	}
	return s.noteMode(ctx, modeID)
}

// SetConfigOption sets one config option and returns all of them as they
// now are; the new value is stored as the session option of the same
// name. Errors as SetMode's.
func (s *Session) SetConfigOption(ctx context.Context, id, value string) ([]pluginclient.ConfigOption, error) {
	release, err := s.awake()
	if err != nil {
		return nil, err
	}
	defer release()
	opts, err := s.proc.att.SetConfigOption(ctx, id, value)
	if err != nil {
		return nil, fmt.Errorf("session %q: set config option %q: %w", s.id, id, err)
	}
	if err := s.noteConfigOptions(ctx, opts, id, value); err != nil {
		return nil, err
	}
	return cloneConfigOptions(opts), nil
}

// noteMode records that the session is in mode modeID: the modes' current
// one, the "mode" option and config option.
func (s *Session) noteMode(ctx context.Context, modeID string) error {
	return s.changeSettings(ctx, func(st *sessionState) {
		if st.modes != nil {
			st.modes.CurrentModeID = modeID
		}
		for i := range st.configOptions {
			if st.configOptions[i].ID == optMode {
				st.configOptions[i].CurrentValue = modeID
			}
		}
		st.options[optMode] = modeID
	})
}

// optMode is the session option (and config option) that carries the
// session's mode.
const optMode = "mode"

// noteConfigOptions records the config options as the agent now reports
// them. Each whose value changed becomes the session option of its id,
// and so does setID, the one a client just set, with setValue.
func (s *Session) noteConfigOptions(ctx context.Context, opts []pluginclient.ConfigOption, setID, setValue string) error {
	return s.changeSettings(ctx, func(st *sessionState) {
		before := map[string]string{}
		for _, o := range st.configOptions {
			before[o.ID] = o.CurrentValue
		}
		st.configOptions = cloneConfigOptions(opts)
		for _, o := range opts {
			if old, ok := before[o.ID]; (!ok || old != o.CurrentValue) && o.CurrentValue != "" {
				st.options[o.ID] = o.CurrentValue
			}
			if o.ID == optMode && st.modes != nil && o.CurrentValue != "" {
				st.modes.CurrentModeID = o.CurrentValue
			}
		}
		if setID != "" {
			st.options[setID] = setValue
		}
	})
}

// noteTitle records the session's title.
func (s *Session) noteTitle(ctx context.Context, title string) error {
	if title == "" {
		return nil
	}
	return s.changeSettings(ctx, func(st *sessionState) { st.title = title })
}

// changeSettings applies change to the session's state and stores the
// result. A failed store keeps the change in memory (the session runs
// with it) and reports the failure.
func (s *Session) changeSettings(ctx context.Context, change func(*sessionState)) error {
	s.settingsMu.Lock()
	defer s.settingsMu.Unlock()
	s.mu.Lock()
	record := func(st sessionState) leasestore.RecordSettings {
		opts := maps.Clone(st.options)
		if st.credentials != "" {
			opts[optAllowCredentials] = st.credentials
		}
		return leasestore.RecordSettings{Fence: s.fence, Options: opts, Title: st.title,
			AgentState: encodeAgentState(st.modes, st.configOptions)}
	}
	before := record(s.state)
	change(&s.state)
	t := record(s.state)
	s.mu.Unlock()
	// An agent reports back what a client just set (set_mode, then its
	// current_mode update), and may repeat its state every turn: a change
	// that changes nothing is no store write (and no new UpdatedAt).
	if maps.Equal(before.Options, t.Options) && before.Title == t.Title && bytes.Equal(before.AgentState, t.AgentState) {
		return nil
	}
	if _, err := s.h.store.Apply(context.WithoutCancel(ctx), s.id, t); err != nil {
		return fmt.Errorf("session %q: store its settings: %w", s.id, err)
	}
	return nil
}

// noteAgentUpdate keeps what a session-level update of the agent says
// about the session's settings: its mode (current_mode_update), its config
// options (config_option_update) and its title (session_info_update). The
// pump calls it once the update is journaled; a failure to store is
// reported, and the next change stores the state again.
func (s *Session) noteAgentUpdate(ctx context.Context, u journal.SessionUpdate) {
	var err error
	switch u := u.(type) {
	case *journal.CurrentMode:
		if u.ModeID != "" {
			err = s.noteMode(ctx, u.ModeID)
		}
	case *journal.ConfigOptions:
		opts := make([]pluginclient.ConfigOption, 0, len(u.Options))
		for _, o := range u.Options {
			co := pluginclient.ConfigOption{ID: o.ID, Name: o.Name, Description: o.Description, Category: o.Category, CurrentValue: o.CurrentValue}
			for _, v := range o.Values {
				co.Values = append(co.Values, pluginclient.ConfigValue(v))
			}
			opts = append(opts, co)
		}
		err = s.noteConfigOptions(ctx, opts, "", "")
	case *journal.SessionInfo:
		err = s.noteTitle(ctx, u.Title)
	}
	if err != nil {
		s.h.report(JournalScope, err)
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("host: encode: " + err.Error())
	}
	return b
}
