package codex

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agenthost/agenthost/plugin/sdk"
)

// Session options the plugin reads. An option it does not know, or a
// malformed value, fails the session's opening with an
// *sdk.InvalidOptionError naming the option and what it accepts. The
// names shared with the other reference plugins (model, mode, effort,
// system_prompt, append_system_prompt, add_dirs, env.NAME) mean the same
// there.
const (
	// OptCLIPath is the codex binary to run. It wins over EnvCodexPath,
	// PATH and the usual install locations; an npm launcher is replaced by
	// the native binary beside it.
	OptCLIPath = "cli_path"
	// OptModel is the thread's model (thread/start, thread/resume, and
	// turn/start once changed with the config option "model"); the
	// session reports the model codex chose.
	OptModel = "model"
	// OptMode is the approval preset, the ACP mode: "read-only", "auto"
	// or "full-access" (Presets). It wins over OptApprovalPolicy and
	// OptSandbox; "custom" (what a session whose approval_policy and
	// sandbox match no preset reports) defers to them. Unset: codex's
	// configured default (read-only when nothing is configured).
	OptMode = "mode"
	// OptEffort is the reasoning effort of the model's turns ("low",
	// "medium", "high", … as the model supports them).
	OptEffort = "effort"
	// OptSystemPrompt replaces codex's base instructions
	// (baseInstructions).
	OptSystemPrompt = "system_prompt"
	// OptAppendSystemPrompt is added to them as developer instructions
	// (developerInstructions): a developer message at the head of the
	// conversation.
	OptAppendSystemPrompt = "append_system_prompt"
	// OptAddDirs are more directories codex may write in a
	// workspace-write sandbox, absolute and separated by ":"
	// (sandbox_workspace_write.writable_roots).
	OptAddDirs = "add_dirs"
	// OptEnvPrefix starts an option naming one more environment variable
	// for the app-server: env.NAME=VALUE.
	OptEnvPrefix = "env."
	// OptApprovalPolicy is when codex asks before acting: "untrusted",
	// "on-request" or "never"; OptMode, when set, wins over it.
	OptApprovalPolicy = "approval_policy"
	// OptSandbox is codex's sandbox: "read-only", "workspace-write" or
	// "danger-full-access"; OptMode, when set, wins over it.
	OptSandbox = "sandbox"
	// OptConfig is a JSON object of config.toml overrides passed to the
	// thread, e.g. {"model_verbosity":"low"}, over the plugin's own
	// (tools.update_plan.enabled=true unless it decides update_plan).
	OptConfig = "config"
	// OptEphemeral, when "true", opens a thread codex never saves: it
	// cannot be resumed, so its handle is never reported as resumable.
	OptEphemeral = "ephemeral"
	// OptAllowCredentials, when "true", passes the provider credential
	// variables of the plugin's environment (CredentialVariables and the
	// env_key of configured model providers) on to codex. By default they
	// are removed.
	OptAllowCredentials = "allow_credentials"
	// OptSkipAuthCheck, when "true", skips the readiness check that looks
	// for auth.json or a key variable, for a codex configured another way.
	OptSkipAuthCheck = "skip_auth_check"
	// OptMaxMessageBytes caps one line the app-server writes (a whole
	// number of bytes, at least 1024; default DefaultMaxMessageBytes). A
	// longer line ends the session's app-server with an error saying so.
	OptMaxMessageBytes = "max_message_bytes"
	// OptModelRetryTimeout is how long a turn may make no progress while
	// codex retries its model (a Go duration). Default 0: as long as codex
	// retries, which offline is forever.
	OptModelRetryTimeout = "model_retry_timeout"
)

// OptionSpecs are the session options the plugin declares to the host.
func OptionSpecs() []sdk.OptionSpec {
	return []sdk.OptionSpec{
		{Name: OptModel, Description: "the model codex uses (see the config option model for those it lists)"},
		{Name: OptMode, Description: `approval preset: "read-only", "auto" or "full-access"`},
		{Name: OptEffort, Description: "reasoning effort, as the model supports it (low, medium, high, …)"},
		{Name: OptSystemPrompt, Description: "replaces codex's base instructions"},
		{Name: OptAppendSystemPrompt, Description: "developer instructions added to codex's own"},
		{Name: OptAddDirs, Description: `more writable directories, absolute, separated by ":"`},
		{Name: OptEnvPrefix, Description: "env.NAME=VALUE sets one environment variable for codex"},
		{Name: OptApprovalPolicy, Description: `"untrusted", "on-request" or "never" (mode wins over it)`},
		{Name: OptSandbox, Description: `"read-only", "workspace-write" or "danger-full-access" (mode wins over it)`},
		{Name: OptConfig, Description: "a JSON object of codex config.toml overrides"},
		{Name: OptEphemeral, Description: `"true": a thread codex never saves (it cannot be resumed)`},
		{Name: OptAllowCredentials, Description: `"true": pass provider key variables on to codex`},
		{Name: OptSkipAuthCheck, Description: `"true": skip the readiness check for a credential`},
		{Name: OptMaxMessageBytes, Description: "the longest line codex may write, in bytes (at least 1024)"},
		{Name: OptModelRetryTimeout, Description: "how long a turn may only retry its model (a Go duration)"},
		{Name: OptCLIPath, Description: "the codex binary to run"},
	}
}

// options are the parsed session options.
type options struct {
	cliPath            string
	model              string
	mode               string // a preset id, or empty
	effort             string
	systemPrompt       string
	appendSystemPrompt string
	addDirs            []string
	env                []string // NAME=VALUE
	approvalPolicy     string
	sandbox            string
	config             map[string]any
	ephemeral          bool
	allowCredentials   bool
	skipAuthCheck      bool
	maxMessageBytes    int
	modelRetryTimeout  time.Duration
	// given are the options as the host passed them, which the session
	// acknowledges (so every resume gets them back).
	given map[string]string
}

// invalid is the error refusing option name.
func invalid(name, reason string) error {
	return &sdk.InvalidOptionError{Option: name, Reason: reason}
}

// parseOptions validates the session options, saying which one is wrong
// and what it accepts. Every error is an *sdk.InvalidOptionError.
func parseOptions(in map[string]string) (options, error) {
	o := options{maxMessageBytes: DefaultMaxMessageBytes, given: map[string]string{}}
	var errs []error
	bad := func(name, value, want string) {
		errs = append(errs, invalid(name, fmt.Sprintf("%q is invalid: expected %s", value, want)))
	}
	// Sorted, so the first error reported does not depend on map order.
	keys := make([]string, 0, len(in))
	for k := range in {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := in[k]
		o.given[k] = v
		switch k {
		case OptCLIPath:
			o.cliPath = v
		case OptModel:
			o.model = v
		case OptMode:
			// "custom" is the mode a session reports when approval_policy
			// and sandbox match no preset: it defers to them.
			if v != "" && v != customMode && presetByID(v) == nil {
				bad(k, v, presetList())
			}
			o.mode = v
		case OptEffort:
			if v != "" && !slices.Contains(knownEfforts, v) {
				bad(k, v, `a reasoning effort: `+strings.Join(knownEfforts, ", "))
			}
			o.effort = v
		case OptSystemPrompt:
			o.systemPrompt = v
		case OptAppendSystemPrompt:
			o.appendSystemPrompt = v
		case OptAddDirs:
			for _, d := range strings.Split(v, ":") {
				if d == "" {
					continue
				}
				if !filepath.IsAbs(d) {
					bad(k, v, `absolute directories separated by ":"`)
					break
				}
				o.addDirs = append(o.addDirs, filepath.Clean(d))
			}
		case OptApprovalPolicy:
			if v != "" && !slices.Contains([]string{"untrusted", "on-request", "never"}, v) {
				bad(k, v, `"untrusted", "on-request" or "never"`)
			}
			o.approvalPolicy = v
		case OptSandbox:
			if v != "" && !slices.Contains([]string{"read-only", "workspace-write", "danger-full-access"}, v) {
				bad(k, v, `"read-only", "workspace-write" or "danger-full-access"`)
			}
			o.sandbox = v
		case OptConfig:
			if v != "" {
				if err := json.Unmarshal([]byte(v), &o.config); err != nil || o.config == nil {
					bad(k, v, `a JSON object of codex config overrides, e.g. {"model_verbosity":"low"}`)
				}
			}
		case OptEphemeral, OptAllowCredentials, OptSkipAuthCheck:
			if v == "" {
				continue
			}
			x, err := strconv.ParseBool(v)
			if err != nil {
				bad(k, v, `"true" or "false"`)
			}
			switch k {
			case OptEphemeral:
				o.ephemeral = x
			case OptAllowCredentials:
				o.allowCredentials = x
			default:
				o.skipAuthCheck = x
			}
		case OptMaxMessageBytes:
			if v != "" {
				n, err := strconv.Atoi(v)
				if err != nil || n < 1024 {
					bad(k, v, "a whole number of bytes, at least 1024")
				}
				o.maxMessageBytes = n
			}
		case OptModelRetryTimeout:
			if v != "" {
				d, err := time.ParseDuration(v)
				if err != nil || d < 0 {
					bad(k, v, `a Go duration such as "2m" (0 waits as long as codex retries)`)
				}
				o.modelRetryTimeout = d
			}
		default:
			name, ok := strings.CutPrefix(k, OptEnvPrefix)
			if !ok {
				errs = append(errs, invalid(k, "the codex plugin has no such option; it takes "+optionNames()))
				continue
			}
			if name == "" || strings.ContainsAny(name, "=\x00") {
				errs = append(errs, invalid(k, "expected env.NAME with a variable name after the dot"))
				continue
			}
			o.env = append(o.env, name+"="+v)
		}
	}
	return o, errors.Join(errs...)
}

func optionNames() string {
	var names []string
	for _, s := range OptionSpecs() {
		n := s.Name
		if strings.HasSuffix(n, ".") {
			n += "NAME"
		}
		names = append(names, n)
	}
	return strings.Join(names, ", ")
}

// knownEfforts are the reasoning efforts codex 0.171.0 knows
// (ReasoningEffort in its protocol); the model decides which it supports.
var knownEfforts = []string{"none", "minimal", "low", "medium", "high", "xhigh", "max", "ultra"}

// A Preset is one of codex's approval presets, the session's modes: an
// approval policy and a sandbox, as codex's own /approvals offers them
// (ids as Zed's codex-acp names them).
type Preset struct {
	ID, Name, Description string
	ApprovalPolicy        string // thread/start's approvalPolicy
	Sandbox               string // thread/start's sandbox
}

// Presets are codex's approval presets.
func Presets() []Preset {
	return []Preset{
		{ID: "read-only", Name: "Read Only", Description: "Codex reads files; editing files or running commands that write needs approval.",
			ApprovalPolicy: "on-request", Sandbox: "read-only"},
		{ID: "auto", Name: "Auto", Description: "Codex reads and edits files in the workspace and runs commands there; going beyond it needs approval.",
			ApprovalPolicy: "on-request", Sandbox: "workspace-write"},
		{ID: "full-access", Name: "Full Access", Description: "Codex edits files and runs commands anywhere, with network access, without asking.",
			ApprovalPolicy: "never", Sandbox: "danger-full-access"},
	}
}

func presetByID(id string) *Preset {
	for _, p := range Presets() {
		if p.ID == id {
			return &p
		}
	}
	return nil
}

// presetFor is the preset of an approval policy and sandbox, if one has
// them.
func presetFor(approval, sandbox string) *Preset {
	for _, p := range Presets() {
		if p.ApprovalPolicy == approval && p.Sandbox == sandbox {
			return &p
		}
	}
	return nil
}

func presetList() string {
	var ids []string
	for _, p := range Presets() {
		ids = append(ids, strconv.Quote(p.ID))
	}
	return "an approval preset: " + strings.Join(ids, ", ")
}

// policy is the approval policy and sandbox the options ask for: the
// mode's when it is set, else approval_policy and sandbox (either may be
// empty: codex's configured default).
func (o options) policy() (approval, sandbox string) {
	if p := presetByID(o.mode); p != nil {
		return p.ApprovalPolicy, p.Sandbox
	}
	return o.approvalPolicy, o.sandbox
}
