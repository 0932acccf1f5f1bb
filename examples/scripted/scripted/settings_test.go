package scripted

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/plugin/sdk"
)

func TestParseSettings(t *testing.T) {
	for _, tt := range []struct {
		opts map[string]string
		want settings
	}{
		{nil, settings{mode: "default", model: "default", effort: "medium"}},
		{map[string]string{"model": "smart", "mode": "plan", "effort": "high", "report_commands": "true"}, settings{mode: "plan", model: "smart", effort: "high", commands: true}},
		// A model of the host's own naming is taken as it is.
		{map[string]string{"model": "m1", "require_model": "true", "allow_credentials": "true"}, settings{mode: "default", model: "m1", effort: "medium"}},
	} {
		got, err := parseSettings(tt.opts)
		if err != nil || got != tt.want {
			t.Errorf("parseSettings(%v) = %+v, %v; want %+v", tt.opts, got, err, tt.want)
		}
	}
}

func TestParseSettingsRefusesNamingTheOption(t *testing.T) {
	for _, tt := range []struct {
		opts         map[string]string
		option, want string
	}{
		{map[string]string{"mode": "yolo"}, "mode", `no mode "yolo": the modes are default, acceptEdits, plan`},
		{map[string]string{"effort": "max"}, "effort", `no value "max": the values are low, medium, high`},
		{map[string]string{"temperature": "1"}, "temperature", "no such option; it takes model, mode, effort"},
	} {
		_, err := parseSettings(tt.opts)
		var bad *sdk.InvalidOptionError
		if !errors.As(err, &bad) || bad.Option != tt.option || !strings.Contains(bad.Reason, tt.want) {
			t.Errorf("parseSettings(%v) = %v, want an InvalidOptionError on %s saying %q", tt.opts, err, tt.option, tt.want)
		}
	}
	if _, err := parseSettings(map[string]string{"require_model": "true"}); !errors.Is(err, errNoModel) {
		t.Errorf("require_model without a model: %v", err)
	}
	if _, err := parseSettings(map[string]string{"require_auth": "true"}); !errors.Is(err, sdk.ErrAuthRequired) {
		t.Errorf("require_auth: %v, want ErrAuthRequired", err)
	}
}

// Every value a config option offers is one parseSettings takes back as
// the session option of the same name, as a resume passes it.
func TestConfigOptionsRoundTripAsSessionOptions(t *testing.T) {
	s, _ := parseSettings(map[string]string{"model": "m1"})
	for _, o := range s.configOptions() {
		if len(o.Values) < 2 {
			t.Errorf("config option %s offers %d values", o.ID, len(o.Values))
		}
		found := false
		for _, v := range o.Values {
			found = found || v.Value == o.CurrentValue
			set, err := s.set(o.ID, v.Value)
			if err != nil {
				t.Errorf("set %s=%s: %v", o.ID, v.Value, err)
				continue
			}
			back, err := parseSettings(map[string]string{o.ID: v.Value, "model": set.model})
			if err != nil || back != set {
				t.Errorf("session option %s=%s read back as %+v, %v; want %+v", o.ID, v.Value, back, err, set)
			}
		}
		if !found {
			t.Errorf("config option %s: current value %q is not among its values", o.ID, o.CurrentValue)
		}
	}
	if _, err := s.set("model", "gpt-9"); err == nil {
		t.Error("set model to a value the option does not offer: no error")
	}
	var bad *sdk.InvalidOptionError
	if _, err := s.set("speed", "1"); !errors.As(err, &bad) || bad.Option != "speed" {
		t.Errorf("set of an unknown config option: %v", err)
	}
}

// The modes and the "mode" config option agree.
func TestModesMirrorTheModeConfigOption(t *testing.T) {
	s, _ := parseSettings(map[string]string{"mode": "acceptEdits"})
	ms := s.modeState()
	opt := s.configOptions()[0]
	if opt.ID != "mode" || opt.Category != sdk.CategoryMode || opt.CurrentValue != ms.CurrentModeID || len(opt.Values) != len(ms.Available) {
		t.Fatalf("mode option %+v, modes %+v", opt, ms)
	}
	for i, m := range ms.Available {
		if opt.Values[i].Value != m.ID {
			t.Errorf("mode %d: %s, option value %s", i, m.ID, opt.Values[i].Value)
		}
	}
}

func TestWorkspacePath(t *testing.T) {
	ws := t.TempDir()
	for path, want := range map[string]string{
		"notes.txt":                      filepath.Join(ws, "notes.txt"),
		"a/../b.txt":                     filepath.Join(ws, "b.txt"),
		filepath.Join(ws, "sub", "c.go"): filepath.Join(ws, "sub", "c.go"),
	} {
		if got, err := workspacePath(ws, path); err != nil || got != want {
			t.Errorf("workspacePath(%q) = %q, %v; want %q", path, got, err, want)
		}
	}
	for _, path := range []string{"../x", "/etc/passwd", "a/../../x", ""} {
		if got, err := workspacePath(ws, path); err == nil {
			t.Errorf("workspacePath(%q) = %q, want it refused", path, got)
		}
	}
}
