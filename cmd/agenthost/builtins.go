package main

import (
	"github.com/agenthost/agenthost/examples/scripted/scripted"
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
