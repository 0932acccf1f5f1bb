package claude

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agenthost/agenthost/plugin/sdk"
)

// Session options the plugin understands (agenthost's shared names where
// there is one). An option the plugin does not know, a renamed one, or a
// malformed value fails the session's opening with an
// *sdk.InvalidOptionError naming it. Every option accepted is acknowledged
// in SessionInfo.Options, so the host passes it again on every resume.
const (
	// OptCLIPath is the claude binary to run (a path, or a name looked up
	// on PATH). It wins over AGENTHOST_CLAUDE_PATH and discovery.
	OptCLIPath = "cli_path"
	// OptModel is passed as --model (an alias such as "sonnet", or a model
	// id); it is also the config option "model".
	OptModel = "model"
	// OptMode is the permission mode, passed as --permission-mode: one of
	// the session's modes (default, acceptEdits, plan, and
	// bypassPermissions where the CLI allows it); it is also the config
	// option "mode".
	OptMode = "mode"
	// OptEffort is passed as --effort (low, medium, high, xhigh, max); it
	// is also the config option "effort".
	OptEffort = "effort"
	// OptAllowedTools and OptDisallowedTools are passed as --allowedTools
	// and --disallowedTools (comma separated, e.g. "Read,Bash(git log:*)").
	OptAllowedTools    = "allowed_tools"
	OptDisallowedTools = "disallowed_tools"
	// OptAddDirs are more directories the agent may work in, separated by
	// ":", each passed as --add-dir. Each must be an absolute directory.
	OptAddDirs = "add_dirs"
	// OptEnvPrefix prefixes an option that sets one variable of the CLI's
	// environment: env.NAME=VALUE, over the plugin's environment and its
	// defaults (planVars). Provider credentials cannot be set so (see
	// CredentialVariables).
	OptEnvPrefix = "env."
	// OptMaxTurns is passed as --max-turns.
	OptMaxTurns = "max_turns"
	// OptSystemPrompt replaces Claude Code's system prompt (--system-prompt);
	// OptAppendSystemPrompt appends to it (--append-system-prompt).
	OptSystemPrompt       = "system_prompt"
	OptAppendSystemPrompt = "append_system_prompt"
	// OptSessionID pre-assigns the Claude session id of a new session (a
	// UUID); by default the plugin generates one.
	OptSessionID = "session_id"
	// OptAllowCredentials, when "true", passes the provider credential
	// variables of the plugin's environment (ANTHROPIC_API_KEY and the
	// rest, see credentialVars) on to the CLI. By default they are removed.
	OptAllowCredentials = "allow_credentials"
	// OptSkipAuthCheck, when "true", skips the readiness check that looks
	// for a credential configuration. Logins kept in the macOS keychain are
	// invisible to that check.
	OptSkipAuthCheck = "skip_auth_check"
	// OptStopGrace is the longest Close waits after closing the CLI's
	// stdin, and again after SIGTERM, before the next step (a Go duration;
	// default 5s; 0 does not wait). The Close deadline shortens both:
	// cliproc's rule gives each at most an even share of the time left.
	OptStopGrace = "stop_grace"
	// OptMaxLineBytes caps one stdout line of the CLI (default 64 MiB); a
	// longer line fails the turn.
	OptMaxLineBytes = "max_line_bytes"
)

// renamedOptions are option names of earlier releases: refused with the
// new name rather than accepted silently under two names.
var renamedOptions = map[string]string{"permission_mode": OptMode}

// Defaults.
const (
	defaultStopGrace    = 5 * time.Second
	defaultMaxLineBytes = 64 << 20
)

// optionSpecs declares every option: the plugin's Capabilities list them
// so the host refuses others before it starts the plugin.
var optionSpecs = []sdk.OptionSpec{
	{Name: OptModel, Description: "the model (--model): an alias such as sonnet or opus, or a model id"},
	{Name: OptMode, Description: "the permission mode (--permission-mode): default, acceptEdits, plan, or bypassPermissions where allowed"},
	{Name: OptEffort, Description: "the reasoning effort (--effort): low, medium, high, xhigh or max"},
	{Name: OptAllowedTools, Description: "tools allowed without asking, comma separated (--allowedTools), e.g. Read,Bash(git log:*)"},
	{Name: OptDisallowedTools, Description: "tools the agent may not use, comma separated (--disallowedTools)"},
	{Name: OptAddDirs, Description: "more directories the agent may work in, separated by \":\" (--add-dir)"},
	{Name: OptEnvPrefix, Description: "env.NAME=VALUE sets one variable of the CLI's environment (not a provider credential)"},
	{Name: OptSystemPrompt, Description: "replaces Claude Code's system prompt (--system-prompt)"},
	{Name: OptAppendSystemPrompt, Description: "appended to Claude Code's system prompt (--append-system-prompt)"},
	{Name: OptMaxTurns, Description: "the most model turns one prompt may take (--max-turns)"},
	{Name: OptCLIPath, Description: "the claude binary to run; wins over " + EnvCLIPath + " and discovery"},
	{Name: OptSessionID, Description: "the Claude session id (a UUID) of a new session"},
	{Name: OptAllowCredentials, Description: "true passes the plugin's provider credential variables on to the CLI"},
	{Name: OptSkipAuthCheck, Description: "true skips the readiness check for a credential configuration"},
	{Name: OptStopGrace, Description: "the longest a stop waits after stdin EOF and after SIGTERM (a Go duration, default 5s)"},
	{Name: OptMaxLineBytes, Description: "the cap of one stdout line of the CLI in bytes (default 64 MiB)"},
}

// effortLevels are what --effort takes (claude --help of 2.1.332).
var effortLevels = []string{"low", "medium", "high", "xhigh", "max"}

// config is a session's parsed options. model, mode and effort change
// with SetMode and SetConfigOption (and the mode also when the agent
// leaves plan mode itself); raw is what the plugin acknowledges, kept in
// step with them.
type config struct {
	raw              map[string]string
	cliPath          string
	model            string
	mode             string
	effort           string
	allowedTools     string
	disallowedTools  string
	addDirs          []string
	env              []string // NAME=VALUE from env.NAME options
	maxTurns         int
	systemPrompt     *string
	appendPrompt     string
	sessionID        string
	allowCredentials bool
	skipAuthCheck    bool
	stopGrace        time.Duration
	maxLineBytes     int
	mcpConfig        string // the --mcp-config JSON; "" without servers
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// invalid is the error refusing option name.
func invalid(name, format string, args ...any) error {
	return &sdk.InvalidOptionError{Option: name, Reason: fmt.Sprintf(format, args...)}
}

// parseOptions reads the session options. Anything the plugin does not
// accept is an *sdk.InvalidOptionError naming the option.
func parseOptions(opts map[string]string) (config, error) {
	c := config{raw: map[string]string{}, stopGrace: defaultStopGrace, maxLineBytes: defaultMaxLineBytes}
	for _, k := range slices.Sorted(maps.Keys(opts)) {
		v := opts[k]
		if to, ok := renamedOptions[k]; ok {
			return config{}, invalid(k, "the option is now called %q", to)
		}
		var err error
		switch {
		case k == OptCLIPath:
			c.cliPath = strings.TrimSpace(v)
		case k == OptModel:
			if c.model = strings.TrimSpace(v); c.model == "" {
				err = fmt.Errorf("must name a model, e.g. sonnet")
			}
		case k == OptMode:
			c.mode = v
			if !slices.ContainsFunc(allModes, func(m sdk.Mode) bool { return m.ID == v }) {
				err = fmt.Errorf("want one of %s", strings.Join(modeIDs(allModes), ", "))
			}
		case k == OptEffort:
			// "default" (the config option's value for no --effort)
			// leaves the model's own.
			if c.effort = v; v == effortDefault {
				c.effort = ""
			} else if !slices.Contains(effortLevels, v) {
				err = fmt.Errorf("want one of %s, or %s", strings.Join(effortLevels, ", "), effortDefault)
			}
		case k == OptAllowedTools:
			c.allowedTools = v
		case k == OptDisallowedTools:
			c.disallowedTools = v
		case k == OptAddDirs:
			c.addDirs, err = parseDirs(v)
		case strings.HasPrefix(k, OptEnvPrefix):
			name := strings.TrimPrefix(k, OptEnvPrefix)
			switch {
			case !envNameRE.MatchString(name):
				err = fmt.Errorf("%q is not an environment variable name", name)
			case slices.Contains(credentialVars, name):
				err = fmt.Errorf("%s carries a provider credential: set it in agenthost's environment and give the agent \"credentials\": \"inherit\" in agenthost.json", name)
			case slices.Contains(droppedVars, name):
				err = fmt.Errorf("%s is the plugin's own and never reaches the CLI", name)
			}
			c.env = append(c.env, name+"="+v)
		case k == OptMaxTurns:
			if c.maxTurns, err = strconv.Atoi(v); err == nil && c.maxTurns <= 0 {
				err = fmt.Errorf("must be positive")
			}
		case k == OptSystemPrompt:
			c.systemPrompt = &v
		case k == OptAppendSystemPrompt:
			c.appendPrompt = v
		case k == OptSessionID:
			c.sessionID = v
		case k == OptAllowCredentials:
			c.allowCredentials, err = parseBool(v)
		case k == OptSkipAuthCheck:
			c.skipAuthCheck, err = parseBool(v)
		case k == OptStopGrace:
			if c.stopGrace, err = time.ParseDuration(v); err == nil && c.stopGrace < 0 {
				err = fmt.Errorf("must not be negative")
			}
		case k == OptMaxLineBytes:
			if c.maxLineBytes, err = strconv.Atoi(v); err == nil && c.maxLineBytes < 1024 {
				err = fmt.Errorf("must be at least 1024")
			}
		default:
			return config{}, invalid(k, "the claude agent has no such option (it takes %s)", strings.Join(optionNames(), ", "))
		}
		if err != nil {
			return config{}, invalid(k, "%q is invalid: %v", v, err)
		}
		c.raw[k] = v
	}
	return c, nil
}

// optionNames are the declared options' names, for an error message.
func optionNames() []string {
	var out []string
	for _, o := range optionSpecs {
		n := o.Name
		if strings.HasSuffix(n, ".") {
			n += "NAME"
		}
		out = append(out, n)
	}
	return out
}

// parseDirs splits add_dirs: absolute directories separated by ":".
func parseDirs(v string) ([]string, error) {
	var out []string
	for _, d := range strings.Split(v, ":") {
		if d == "" {
			continue
		}
		if !strings.HasPrefix(d, "/") {
			return nil, fmt.Errorf("%q is not an absolute path", d)
		}
		st, err := os.Stat(d)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			return nil, fmt.Errorf("%s is not a directory", d)
		}
		out = append(out, d)
	}
	return out, nil
}

func parseBool(v string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "false", "0", "no":
		return false, nil
	case "true", "1", "yes":
		return true, nil
	}
	return false, fmt.Errorf(`want "true" or "false"`)
}

// mcpConfig is the --mcp-config JSON for the client's MCP servers: one
// entry per server under its name, of type stdio (command, args, env),
// http or sse (url, headers), as Claude Code's .mcp.json has them. A
// server without a name, of a transport the plugin does not declare, or
// named twice is refused.
func mcpConfig(servers []sdk.MCPServer) (string, error) {
	if len(servers) == 0 {
		return "", nil
	}
	pairs := func(nv []sdk.NameValue) map[string]string {
		m := map[string]string{}
		for _, p := range nv {
			m[p.Name] = p.Value
		}
		return m
	}
	out := map[string]any{}
	for _, s := range servers {
		if s.Name == "" {
			return "", invalid("mcpServers", "an MCP server has no name")
		}
		if _, dup := out[s.Name]; dup {
			return "", invalid("mcpServers", "two MCP servers are named %q", s.Name)
		}
		switch s.Transport {
		case "stdio", "":
			if s.Command == "" {
				return "", invalid("mcpServers", "the stdio MCP server %q has no command", s.Name)
			}
			args := s.Args
			if args == nil {
				args = []string{}
			}
			out[s.Name] = map[string]any{"type": "stdio", "command": s.Command, "args": args, "env": pairs(s.Env)}
		case "http", "sse":
			if s.URL == "" {
				return "", invalid("mcpServers", "the %s MCP server %q has no url", s.Transport, s.Name)
			}
			out[s.Name] = map[string]any{"type": s.Transport, "url": s.URL, "headers": pairs(s.Headers)}
		default:
			return "", invalid("mcpServers", "the MCP server %q has transport %q; claude takes stdio, http and sse", s.Name, s.Transport)
		}
	}
	b, err := json.Marshal(map[string]any{"mcpServers": out})
	return string(b), err
}

// cliArgs returns the claude argv (without the program name) for a session:
// the stream-json flags the official SDKs use, partial messages (the
// model's stream as it arrives), the permission prompts routed
// to the plugin over the control protocol, the session's options, and the
// session to start or resume. Values always use the --flag=value form, so a
// value that begins with "-" is never parsed as a flag.
func (c config) cliArgs(s start, bypass bool) []string {
	args := []string{
		"-p",
		"--output-format", "stream-json",
		"--input-format", "stream-json",
		"--verbose",
		"--include-partial-messages",
		"--permission-prompt-tool", "stdio",
	}
	if bypass {
		// Makes the bypassPermissions mode one the session can switch
		// to; it does not switch to it.
		args = append(args, "--allow-dangerously-skip-permissions")
	}
	if c.model != "" {
		args = append(args, "--model="+c.model)
	}
	if c.mode != "" {
		args = append(args, "--permission-mode="+c.mode)
	}
	if c.effort != "" {
		args = append(args, "--effort="+c.effort)
	}
	if c.allowedTools != "" {
		args = append(args, "--allowedTools="+c.allowedTools)
	}
	if c.disallowedTools != "" {
		args = append(args, "--disallowedTools="+c.disallowedTools)
	}
	for _, d := range c.addDirs {
		args = append(args, "--add-dir="+d)
	}
	if c.mcpConfig != "" {
		args = append(args, "--mcp-config="+c.mcpConfig)
	}
	if c.maxTurns > 0 {
		args = append(args, "--max-turns="+strconv.Itoa(c.maxTurns))
	}
	if c.systemPrompt != nil {
		args = append(args, "--system-prompt="+*c.systemPrompt)
	}
	if c.appendPrompt != "" {
		args = append(args, "--append-system-prompt="+c.appendPrompt)
	}
	if s.resume {
		args = append(args, "--resume="+s.id)
	} else {
		args = append(args, "--session-id="+s.id)
	}
	return args
}

// grace is the session's stop grace as cliproc takes it: zero means no
// wait there, not its default.
func (c config) grace() time.Duration {
	if c.stopGrace == 0 {
		return -1
	}
	return c.stopGrace
}

// start says which conversation a CLI process opens: a new one under id, or
// the existing one named id.
type start struct {
	id     string
	resume bool
}
