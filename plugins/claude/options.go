package claude

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Session options the plugin understands. Options it does not know are
// logged and ignored; a malformed value fails the session's opening with
// the option's name.
const (
	// OptCLIPath is the claude binary to run (a path, or a name looked up
	// on PATH). It wins over AGENTHOST_CLAUDE_PATH and discovery.
	OptCLIPath = "cli_path"
	// OptModel is passed as --model (an alias such as "sonnet", or a model
	// id).
	OptModel = "model"
	// OptPermissionMode is passed as --permission-mode (default, acceptEdits,
	// plan, bypassPermissions, dontAsk, auto).
	OptPermissionMode = "permission_mode"
	// OptAllowedTools and OptDisallowedTools are passed as --allowedTools
	// and --disallowedTools (comma separated, e.g. "Read,Bash(git log:*)").
	OptAllowedTools    = "allowed_tools"
	OptDisallowedTools = "disallowed_tools"
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

// Defaults.
const (
	defaultStopGrace    = 5 * time.Second
	defaultMaxLineBytes = 64 << 20
)

// knownOptions lists every option the plugin acknowledges.
var knownOptions = []string{
	OptCLIPath, OptModel, OptPermissionMode, OptAllowedTools, OptDisallowedTools, OptMaxTurns,
	OptSystemPrompt, OptAppendSystemPrompt, OptSessionID, OptAllowCredentials, OptSkipAuthCheck,
	OptStopGrace, OptMaxLineBytes,
}

// config is a session's parsed options.
type config struct {
	raw              map[string]string
	cliPath          string
	model            string
	permissionMode   string
	allowedTools     string
	disallowedTools  string
	maxTurns         int
	systemPrompt     *string
	appendPrompt     string
	sessionID        string
	allowCredentials bool
	skipAuthCheck    bool
	stopGrace        time.Duration
	maxLineBytes     int
}

// parseOptions reads the session options. Malformed values are readiness
// failures that name the option; unknown options are returned so the caller
// can log them.
func parseOptions(opts map[string]string) (config, []string, error) {
	c := config{raw: map[string]string{}, stopGrace: defaultStopGrace, maxLineBytes: defaultMaxLineBytes}
	var unknown []string
	for _, k := range slices.Sorted(maps.Keys(opts)) {
		v := opts[k]
		if !slices.Contains(knownOptions, k) {
			unknown = append(unknown, k)
			continue
		}
		c.raw[k] = v
		var err error
		switch k {
		case OptCLIPath:
			c.cliPath = strings.TrimSpace(v)
		case OptModel:
			c.model = v
		case OptPermissionMode:
			c.permissionMode = v
		case OptAllowedTools:
			c.allowedTools = v
		case OptDisallowedTools:
			c.disallowedTools = v
		case OptMaxTurns:
			if c.maxTurns, err = strconv.Atoi(v); err == nil && c.maxTurns <= 0 {
				err = fmt.Errorf("must be positive")
			}
		case OptSystemPrompt:
			c.systemPrompt = &v
		case OptAppendSystemPrompt:
			c.appendPrompt = v
		case OptSessionID:
			c.sessionID = v
		case OptAllowCredentials:
			c.allowCredentials, err = parseBool(v)
		case OptSkipAuthCheck:
			c.skipAuthCheck, err = parseBool(v)
		case OptStopGrace:
			if c.stopGrace, err = time.ParseDuration(v); err == nil && c.stopGrace < 0 {
				err = fmt.Errorf("must not be negative")
			}
		case OptMaxLineBytes:
			if c.maxLineBytes, err = strconv.Atoi(v); err == nil && c.maxLineBytes < 1024 {
				err = fmt.Errorf("must be at least 1024")
			}
		}
		if err != nil {
			return config{}, nil, fmt.Errorf("claude: session option %s=%q is invalid: %v", k, v, err)
		}
	}
	return c, unknown, nil
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

// cliArgs returns the claude argv (without the program name) for a session:
// the stream-json flags the official SDKs use, partial messages (the
// model's stream as it arrives), the permission prompts routed
// to the plugin over the control protocol, the session's options, and the
// session to start or resume. Values always use the --flag=value form, so a
// value that begins with "-" is never parsed as a flag.
func (c config) cliArgs(s start) []string {
	args := []string{
		"-p",
		"--output-format", "stream-json",
		"--input-format", "stream-json",
		"--verbose",
		"--include-partial-messages",
		"--permission-prompt-tool", "stdio",
	}
	if c.model != "" {
		args = append(args, "--model="+c.model)
	}
	if c.permissionMode != "" {
		args = append(args, "--permission-mode="+c.permissionMode)
	}
	if c.allowedTools != "" {
		args = append(args, "--allowedTools="+c.allowedTools)
	}
	if c.disallowedTools != "" {
		args = append(args, "--disallowedTools="+c.disallowedTools)
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
