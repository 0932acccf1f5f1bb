package sdktest

import (
	"github.com/agenthost/agenthost/internal/pluginclient"
	"github.com/agenthost/agenthost/plugin/sdk"
)

// The harness speaks the SDK's types; the host's client has its own
// mirror of them. These convert between the two.

func nameValues(nv []sdk.NameValue) []pluginclient.NameValue {
	var out []pluginclient.NameValue
	for _, x := range nv {
		out = append(out, pluginclient.NameValue{Name: x.Name, Value: x.Value})
	}
	return out
}

func mcpServers(ss []sdk.MCPServer) []pluginclient.MCPServer {
	var out []pluginclient.MCPServer
	for _, s := range ss {
		out = append(out, pluginclient.MCPServer{Name: s.Name, Transport: s.Transport, Command: s.Command, Args: s.Args,
			Env: nameValues(s.Env), URL: s.URL, Headers: nameValues(s.Headers)})
	}
	return out
}

func sessionInfo(info pluginclient.SessionInfo) sdk.SessionInfo {
	out := sdk.SessionInfo{Handle: info.Handle, Options: info.Options, ConfigOptions: configOptions(info.ConfigOptions)}
	if m := info.Modes; m != nil {
		out.Modes = &sdk.ModeState{CurrentModeID: m.CurrentModeID}
		for _, x := range m.Available {
			out.Modes.Available = append(out.Modes.Available, sdk.Mode{ID: x.ID, Name: x.Name, Description: x.Description})
		}
	}
	return out
}

func configOptions(opts []pluginclient.ConfigOption) []sdk.ConfigOption {
	var out []sdk.ConfigOption
	for _, o := range opts {
		c := sdk.ConfigOption{ID: o.ID, Name: o.Name, Description: o.Description, Category: o.Category, CurrentValue: o.CurrentValue}
		for _, v := range o.Values {
			c.Values = append(c.Values, sdk.ConfigValue{Value: v.Value, Name: v.Name, Description: v.Description})
		}
		out = append(out, c)
	}
	return out
}
