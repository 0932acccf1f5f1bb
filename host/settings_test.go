package host

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/internal/pluginclient"
)

func TestCheckSettings(t *testing.T) {
	caps := pluginclient.Capabilities{MCPStdio: true, MCPHTTP: true,
		Options: []pluginclient.OptionSpec{{Name: "model"}, {Name: "env."}}}
	cases := []struct {
		name    string
		caps    pluginclient.Capabilities
		options map[string]string
		servers []pluginclient.MCPServer
		refused string // the setting named; "" allowed
	}{
		{"declared", caps, map[string]string{"model": "x", "env.FOO": "1"}, []pluginclient.MCPServer{{Name: "a", Transport: "stdio"}, {Name: "b", Transport: "http"}}, ""},
		{"allow_credentials is the host's", caps, map[string]string{optAllowCredentials: "true"}, nil, ""},
		{"undeclared option", caps, map[string]string{"model": "x", "colour": "red"}, nil, "colour"},
		{"a prefix alone", caps, map[string]string{"env.": "1"}, nil, "env."},
		{"undeclared transport", caps, nil, []pluginclient.MCPServer{{Name: "s", Transport: "sse"}}, "mcpServers.s"},
		{"no options declared passes any", pluginclient.Capabilities{}, map[string]string{"anything": "x"}, nil, ""},
		{"no transports declared", pluginclient.Capabilities{}, nil, []pluginclient.MCPServer{{Name: "a", Transport: "stdio"}}, "mcpServers.a"},
	}
	for _, tc := range cases {
		err := CheckSettings(tc.caps, tc.options, tc.servers)
		var inv *pluginclient.InvalidOptionError
		switch {
		case tc.refused == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.refused != "" && (!errors.As(err, &inv) || inv.Option != tc.refused):
			t.Errorf("%s: error %v, want one naming %q", tc.name, err, tc.refused)
		}
	}
}

func TestTitleOf(t *testing.T) {
	long := strings.Repeat("é", 100)
	for in, want := range map[string]string{
		"fix the tests":              "fix the tests",
		"\n\n  first line  \nsecond": "first line",
		long:                         strings.Repeat("é", TitleLength-1) + "…",
	} {
		if got := titleOf(in); got != want {
			t.Errorf("titleOf(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestAgentStateRoundTrip(t *testing.T) {
	modes := &pluginclient.ModeState{CurrentModeID: "plan", Available: []pluginclient.Mode{{ID: "default", Name: "Default"}, {ID: "plan", Name: "Plan", Description: "read only"}}}
	opts := []pluginclient.ConfigOption{{ID: "model", Name: "Model", Category: "model", CurrentValue: "m2",
		Values: []pluginclient.ConfigValue{{Value: "m1", Name: "One"}, {Value: "m2", Name: "Two", Description: "bigger"}}}}
	gotModes, gotOpts := decodeAgentState(encodeAgentState(modes, opts))
	if !reflect.DeepEqual(gotModes, modes) || !reflect.DeepEqual(gotOpts, opts) {
		t.Errorf("round trip: %+v %+v", gotModes, gotOpts)
	}
	if m, o := decodeAgentState([]byte("not json")); m != nil || o != nil {
		t.Errorf("an unreadable state decodes as %+v %+v", m, o)
	}
}
