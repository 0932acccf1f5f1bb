package codex

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// Session options the plugin reads; others are ignored. Malformed values
// fail the session's opening with the option's name and what it accepts.
const (
	// OptCLIPath is the codex binary to run. It wins over EnvCodexPath,
	// PATH and the usual install locations; an npm launcher is replaced by
	// the native binary beside it.
	OptCLIPath = "cli_path"
	// OptModel is thread/start's (and thread/resume's) model; the session
	// reports the model codex chose.
	OptModel = "model"
	// OptApprovalPolicy is when codex asks before acting: "untrusted",
	// "on-request" or "never". Unset: codex's configured default.
	OptApprovalPolicy = "approval_policy"
	// OptSandbox is codex's sandbox: "read-only", "workspace-write" or
	// "danger-full-access". Unset: codex's configured default.
	OptSandbox = "sandbox"
	// OptConfig is a JSON object of config.toml overrides passed to the
	// thread, e.g. {"model_reasoning_effort":"high"}.
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

// options are the parsed session options.
type options struct {
	cliPath           string
	model             string
	approvalPolicy    string
	sandbox           string
	config            map[string]any
	ephemeral         bool
	allowCredentials  bool
	skipAuthCheck     bool
	maxMessageBytes   int
	modelRetryTimeout time.Duration
}

// parseOptions validates the session options, saying which one is wrong
// and what it accepts.
func parseOptions(in map[string]string) (options, error) {
	o := options{
		cliPath: in[OptCLIPath], model: in[OptModel],
		approvalPolicy: in[OptApprovalPolicy], sandbox: in[OptSandbox],
		maxMessageBytes: DefaultMaxMessageBytes,
	}
	var errs []error
	bad := func(name, value, want string) {
		errs = append(errs, fmt.Errorf("session option %s=%q is invalid: expected %s", name, value, want))
	}
	if v := o.approvalPolicy; v != "" && !slices.Contains([]string{"untrusted", "on-request", "never"}, v) {
		bad(OptApprovalPolicy, v, `"untrusted", "on-request" or "never"`)
	}
	if v := o.sandbox; v != "" && !slices.Contains([]string{"read-only", "workspace-write", "danger-full-access"}, v) {
		bad(OptSandbox, v, `"read-only", "workspace-write" or "danger-full-access"`)
	}
	if v := in[OptConfig]; v != "" {
		if err := json.Unmarshal([]byte(v), &o.config); err != nil || o.config == nil {
			bad(OptConfig, v, `a JSON object of codex config overrides, e.g. {"model_reasoning_effort":"high"}`)
		}
	}
	for _, b := range []struct {
		name string
		dst  *bool
	}{{OptEphemeral, &o.ephemeral}, {OptAllowCredentials, &o.allowCredentials}, {OptSkipAuthCheck, &o.skipAuthCheck}} {
		if v := in[b.name]; v != "" {
			x, err := strconv.ParseBool(v)
			if err != nil {
				bad(b.name, v, `"true" or "false"`)
			}
			*b.dst = x
		}
	}
	if v := in[OptMaxMessageBytes]; v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1024 {
			bad(OptMaxMessageBytes, v, "a whole number of bytes, at least 1024")
		}
		o.maxMessageBytes = n
	}
	if v := in[OptModelRetryTimeout]; v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			bad(OptModelRetryTimeout, v, `a Go duration such as "2m" (0 waits as long as codex retries)`)
		}
		o.modelRetryTimeout = d
	}
	return o, errors.Join(errs...)
}

// optionValue is the value of option k the session reports back.
func optionValue(o options, k string) string {
	switch k {
	case OptModel:
		return o.model
	case OptApprovalPolicy:
		return o.approvalPolicy
	case OptSandbox:
		return o.sandbox
	case OptEphemeral:
		if o.ephemeral {
			return "true"
		}
	}
	return ""
}
