package main

import (
	"github.com/agenthost/agenthost/examples/scripted/scripted"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/plugin/sdk"
	"github.com/agenthost/agenthost/plugins/claude"
	"github.com/agenthost/agenthost/plugins/codex"
)

// builtins are the plugins this binary serves itself: the host starts
// them as `agenthost __plugin NAME`. Adding one is one line.
var builtins = map[string]sdk.Factory{
	"claude":   claude.New,
	"codex":    codex.New,
	"scripted": scripted.New,
}

// builtinOptions are the built-in plugins' Serve options: the capabilities
// each declares to the host.
var builtinOptions = map[string][]sdk.ServeOption{
	"codex":    {sdk.WithCapabilities(codex.Capabilities())},
	"scripted": {sdk.WithCapabilities(scripted.Capabilities())},
	"claude":   {sdk.WithCapabilities(claude.Capabilities())},
}

// credentials are the host's credential policies for the built-in agents:
// each plugin names its provider's variables, which the host strips from
// the plugin's environment unless the session allows credentials.
var credentials = map[string]host.CredentialPolicy{
	"claude": {Variables: claude.CredentialVariables()},
	"codex":  {Variables: codex.CredentialVariables()},
}
