package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
)

// args is what the fake reads of its argv.
type args struct {
	version, print, verbose, fork, cont bool
	partial                             bool // --include-partial-messages
	allowBypass                         bool // --allow-dangerously-skip-permissions
	effort, mcpConfig                   string
	outputFormat, inputFormat           string
	permPromptTool, permMode            string
	sessionID, model                    string
	resume                              *string
}

// valueFlags are the flags that take a value; the fake keeps some.
var valueFlags = []string{
	"output-format", "input-format", "permission-prompt-tool", "permission-mode", "session-id", "model",
	"fallback-model", "allowedTools", "allowed-tools", "disallowedTools", "disallowed-tools", "max-turns",
	"system-prompt", "append-system-prompt", "add-dir", "settings", "setting-sources", "mcp-config",
	"max-budget-usd", "max-thinking-tokens", "thinking", "effort", "json-schema", "plugin-dir", "tools",
	"permission-prompts",
}

// boolFlags are the flags without a value; the fake keeps some.
var boolFlags = []string{
	"print", "verbose", "fork-session", "continue", "include-partial-messages", "include-hook-events",
	"replay-user-messages", "no-session-persistence", "strict-mcp-config", "dangerously-skip-permissions",
	"bare", "version", "debug", "allow-dangerously-skip-permissions",
}

var permModes = []string{"acceptEdits", "auto", "bypassPermissions", "manual", "dontAsk", "plan", "default"}

func fatal(code int, msg string) {
	fmt.Fprintln(os.Stderr, msg)
	os.Exit(code)
}

// parseArgs reads argv as the real CLI does, failing with its messages.
func parseArgs(argv []string) args {
	var a args
	values := map[string]*string{
		"output-format": &a.outputFormat, "input-format": &a.inputFormat, "permission-prompt-tool": &a.permPromptTool,
		"permission-mode": &a.permMode, "session-id": &a.sessionID, "model": &a.model,
		"effort": &a.effort, "mcp-config": &a.mcpConfig,
	}
	bools := map[string]*bool{"print": &a.print, "verbose": &a.verbose, "fork-session": &a.fork, "continue": &a.cont, "version": &a.version,
		"include-partial-messages": &a.partial, "allow-dangerously-skip-permissions": &a.allowBypass}
	shorts := map[string]string{"-p": "print", "-c": "continue", "-v": "version", "-r": "resume"}
	for i := 0; i < len(argv); i++ {
		arg := argv[i]
		name, value, hasValue := "", "", false
		switch {
		case shorts[arg] != "":
			name = shorts[arg]
		case strings.HasPrefix(arg, "--"):
			name, value, hasValue = strings.Cut(arg[2:], "=")
		case strings.HasPrefix(arg, "-"):
			fatal(1, fmt.Sprintf("error: unknown option '%s'", arg))
		default:
			continue // a prompt argument; stream-json input ignores it
		}
		switch {
		case name == "resume":
			if !hasValue && i+1 < len(argv) && !strings.HasPrefix(argv[i+1], "-") {
				i++
				value = argv[i]
			}
			a.resume = &value
		case slices.Contains(valueFlags, name):
			if !hasValue {
				if i+1 >= len(argv) {
					fatal(1, fmt.Sprintf("error: option '--%s <value>' argument missing", name))
				}
				i++
				value = argv[i]
			}
			if name == "permission-mode" && !slices.Contains(permModes, value) {
				fatal(1, fmt.Sprintf("error: option '--permission-mode <mode>' argument '%s' is invalid. Allowed choices are acceptEdits, auto, bypassPermissions, manual, dontAsk, plan.", value))
			}
			if p := values[name]; p != nil {
				*p = value
			}
		case slices.Contains(boolFlags, name):
			if hasValue {
				fatal(1, fmt.Sprintf("error: option '--%s' does not take an argument", name))
			}
			if p := bools[name]; p != nil {
				*p = true
			}
		default:
			fatal(1, fmt.Sprintf("error: unknown option '--%s'", name))
		}
	}
	return a
}
