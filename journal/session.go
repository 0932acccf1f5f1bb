package journal

import (
	"encoding/json"
	"fmt"
)

// The session-level update kinds: what an agent reports about the session
// rather than a turn (its mode, its config options, its slash commands,
// its title), journaled in ACP's shapes. They arrive inside turns and
// between them alike.

// CurrentMode reports the session's mode changed (ACP current_mode_update).
type CurrentMode struct {
	ModeID string
}

// ConfigOptions reports every config option of the session after a change
// (ACP config_option_update).
type ConfigOptions struct {
	Options []ConfigOption
}

// ConfigOption is one config option, journaled as ACP's
// SessionConfigOption of type "select".
type ConfigOption struct {
	ID          string
	Name        string
	Description string
	// Category: mode, model, thought_level, or "" (left out).
	Category     string
	CurrentValue string
	Values       []ConfigValue
}

// ConfigValue is one value of a ConfigOption (ACP SessionConfigSelectOption).
type ConfigValue struct {
	Value       string
	Name        string
	Description string
}

// AvailableCommands lists the agent's slash commands (ACP
// available_commands_update).
type AvailableCommands struct {
	Commands []Command
}

// Command is one slash command (ACP AvailableCommand).
type Command struct {
	// Name is the command without its slash.
	Name        string
	Description string
	// InputHint is journaled as ACP's unstructured input {"hint": …}; ""
	// leaves the input out (the command takes no argument).
	InputHint string
}

// SessionInfo is session metadata (ACP session_info_update).
type SessionInfo struct {
	Title string
}

// Wire forms, members in sorted order like every other kind's.

type currentModeWire struct {
	CurrentModeID string     `json:"currentModeId"`
	SessionUpdate UpdateKind `json:"sessionUpdate"`
}

type configOptionsWire struct {
	ConfigOptions []configOptionWire `json:"configOptions"`
	SessionUpdate UpdateKind         `json:"sessionUpdate"`
}

type configOptionWire struct {
	Category     string            `json:"category,omitempty"`
	CurrentValue string            `json:"currentValue"`
	Description  string            `json:"description,omitempty"`
	ID           string            `json:"id"`
	Name         string            `json:"name"`
	Options      []configValueWire `json:"options"`
	Type         string            `json:"type"`
}

// configSelect is the only SessionConfigOption type agenthost writes.
const configSelect = "select"

type configValueWire struct {
	Description string `json:"description,omitempty"`
	Name        string `json:"name"`
	Value       string `json:"value"`
}

type availableCommandsWire struct {
	AvailableCommands []commandWire `json:"availableCommands"`
	SessionUpdate     UpdateKind    `json:"sessionUpdate"`
}

type commandWire struct {
	Description string        `json:"description"`
	Input       *commandInput `json:"input,omitempty"`
	Name        string        `json:"name"`
}

type commandInput struct {
	Hint string `json:"hint"`
}

type sessionInfoWire struct {
	SessionUpdate UpdateKind `json:"sessionUpdate"`
	Title         string     `json:"title"`
}

func (u *CurrentMode) MarshalJSON() ([]byte, error) {
	return json.Marshal(currentModeWire{CurrentModeID: u.ModeID, SessionUpdate: KindCurrentModeUpdate})
}

func (u *CurrentMode) UnmarshalJSON(b []byte) error {
	var w currentModeWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*u = CurrentMode{ModeID: w.CurrentModeID}
	return nil
}

func (u *ConfigOptions) MarshalJSON() ([]byte, error) {
	w := configOptionsWire{ConfigOptions: []configOptionWire{}, SessionUpdate: KindConfigOptionUpdate}
	for _, o := range u.Options {
		ow := configOptionWire{Category: o.Category, CurrentValue: o.CurrentValue, Description: o.Description,
			ID: o.ID, Name: o.Name, Options: []configValueWire{}, Type: configSelect}
		for _, v := range o.Values {
			ow.Options = append(ow.Options, configValueWire{Description: v.Description, Name: v.Name, Value: v.Value})
		}
		w.ConfigOptions = append(w.ConfigOptions, ow)
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads select options; an option of another ACP type (a
// boolean) is refused, so a decode and re-encode never turns it into a
// select.
func (u *ConfigOptions) UnmarshalJSON(b []byte) error {
	var w configOptionsWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*u = ConfigOptions{}
	for i, o := range w.ConfigOptions {
		if o.Type != configSelect {
			return fmt.Errorf("config option %d has type %q; only %q is modelled", i, o.Type, configSelect)
		}
		c := ConfigOption{ID: o.ID, Name: o.Name, Description: o.Description, Category: o.Category, CurrentValue: o.CurrentValue}
		for _, v := range o.Options {
			c.Values = append(c.Values, ConfigValue{Value: v.Value, Name: v.Name, Description: v.Description})
		}
		u.Options = append(u.Options, c)
	}
	return nil
}

func (u *AvailableCommands) MarshalJSON() ([]byte, error) {
	w := availableCommandsWire{AvailableCommands: []commandWire{}, SessionUpdate: KindAvailableCommandsUpdate}
	for _, c := range u.Commands {
		cw := commandWire{Description: c.Description, Name: c.Name}
		if c.InputHint != "" {
			cw.Input = &commandInput{Hint: c.InputHint}
		}
		w.AvailableCommands = append(w.AvailableCommands, cw)
	}
	return json.Marshal(w)
}

func (u *AvailableCommands) UnmarshalJSON(b []byte) error {
	var w availableCommandsWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*u = AvailableCommands{}
	for i, c := range w.AvailableCommands {
		cmd := Command{Name: c.Name, Description: c.Description}
		if c.Input != nil {
			if c.Input.Hint == "" {
				// {"hint": ""} would encode again without its input.
				return fmt.Errorf("command %d has an input without a hint", i)
			}
			cmd.InputHint = c.Input.Hint
		}
		u.Commands = append(u.Commands, cmd)
	}
	return nil
}

func (u *SessionInfo) MarshalJSON() ([]byte, error) {
	return json.Marshal(sessionInfoWire{SessionUpdate: KindSessionInfoUpdate, Title: u.Title})
}

func (u *SessionInfo) UnmarshalJSON(b []byte) error {
	var w sessionInfoWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*u = SessionInfo{Title: w.Title}
	return nil
}
