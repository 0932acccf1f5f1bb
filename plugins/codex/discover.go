package codex

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// MinVersion is the oldest codex CLI this plugin drives: the version whose
// app-server protocol it mirrors and was checked against (0.171.0). Older
// releases differ in method and field names (v1 had no thread/turn API).
const MinVersion = "0.171.0"

// EnvCodexPath names the environment variable that may hold the path of the
// codex CLI; the session option cli_path takes precedence.
const EnvCodexPath = "AGENTHOST_CODEX_PATH"

// installHint is what a user does about a missing or old CLI.
const installHint = "install it with `npm install -g @openai/codex` (" + MinVersion + " or later), " +
	"or set the session option cli_path or the environment variable " + EnvCodexPath + " to its path"

// Session options the plugin reads; others are ignored.
const (
	optCLIPath           = "cli_path"
	optModel             = "model"
	optApprovalPolicy    = "approval_policy"
	optSandbox           = "sandbox"
	optConfig            = "config"
	optEphemeral         = "ephemeral"
	optAllowCredentials  = "allow_credentials"
	optSkipAuthCheck     = "skip_auth_check"
	optMaxMessageBytes   = "max_message_bytes"
	optModelRetryTimeout = "model_retry_timeout"
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
		cliPath: in[optCLIPath], model: in[optModel],
		approvalPolicy: in[optApprovalPolicy], sandbox: in[optSandbox],
		maxMessageBytes: DefaultMaxMessageBytes,
	}
	var errs []error
	bad := func(name, value, want string) {
		errs = append(errs, fmt.Errorf("session option %s=%q is invalid: expected %s", name, value, want))
	}
	if v := o.approvalPolicy; v != "" && !slices.Contains([]string{"untrusted", "on-request", "never"}, v) {
		bad(optApprovalPolicy, v, `"untrusted", "on-request" or "never"`)
	}
	if v := o.sandbox; v != "" && !slices.Contains([]string{"read-only", "workspace-write", "danger-full-access"}, v) {
		bad(optSandbox, v, `"read-only", "workspace-write" or "danger-full-access"`)
	}
	if v := in[optConfig]; v != "" {
		if err := json.Unmarshal([]byte(v), &o.config); err != nil || o.config == nil {
			bad(optConfig, v, `a JSON object of codex config overrides, e.g. {"model_reasoning_effort":"high"}`)
		}
	}
	for _, b := range []struct {
		name string
		dst  *bool
	}{{optEphemeral, &o.ephemeral}, {optAllowCredentials, &o.allowCredentials}, {optSkipAuthCheck, &o.skipAuthCheck}} {
		if v := in[b.name]; v != "" {
			x, err := strconv.ParseBool(v)
			if err != nil {
				bad(b.name, v, `"true" or "false"`)
			}
			*b.dst = x
		}
	}
	if v := in[optMaxMessageBytes]; v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1024 {
			bad(optMaxMessageBytes, v, "a whole number of bytes, at least 1024")
		}
		o.maxMessageBytes = n
	}
	if v := in[optModelRetryTimeout]; v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			bad(optModelRetryTimeout, v, `a Go duration such as "2m" (0 waits as long as codex retries)`)
		}
		o.modelRetryTimeout = d
	}
	return o, errors.Join(errs...)
}

// credentialVars are the provider credential variables stripped from the
// CLI's environment unless the session allows credentials (agent-clis.md
// §2.7); the env_key of every model provider in config.toml is added.
var credentialVars = []string{
	"OPENAI_API_KEY", "CODEX_API_KEY", "CODEX_ACCESS_TOKEN", "OPENAI_BASE_URL", "OPENAI_ORGANIZATION", "AZURE_OPENAI_API_KEY",
}

// authVars are the variables codex accepts as a credential.
var authVars = []string{"OPENAI_API_KEY", "CODEX_API_KEY", "CODEX_ACCESS_TOKEN"}

// fallbackPaths are where codex is usually installed, tried after PATH.
func fallbackPaths(home string) []string {
	var out []string
	if home != "" {
		out = append(out, filepath.Join(home, ".local/bin/codex"), filepath.Join(home, ".npm-global/bin/codex"))
	}
	return append(out, "/usr/local/bin/codex", "/opt/homebrew/bin/codex")
}

// findCLI locates the codex CLI: the explicit path (session option, then
// environment), then PATH, then the usual install locations.
func findCLI(explicit, fromEnv, pathVar, home string) (string, error) {
	for _, c := range []struct{ path, from string }{{explicit, "session option " + optCLIPath}, {fromEnv, EnvCodexPath}} {
		if c.path == "" {
			continue
		}
		if err := isExecutable(c.path); err != nil {
			return "", fmt.Errorf("codex CLI not usable at %s (from %s): %v; %s", c.path, c.from, err, installHint)
		}
		return c.path, nil
	}
	tried := []string{"PATH"}
	for _, dir := range filepath.SplitList(pathVar) {
		if dir == "" {
			continue
		}
		if p := filepath.Join(dir, "codex"); isExecutable(p) == nil {
			return p, nil
		}
	}
	for _, p := range fallbackPaths(home) {
		if isExecutable(p) == nil {
			return p, nil
		}
		tried = append(tried, p)
	}
	return "", fmt.Errorf("codex CLI not found (looked in %s): %s", strings.Join(tried, ", "), installHint)
}

func isExecutable(path string) error {
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return err
	case fi.IsDir():
		return errors.New("is a directory")
	case fi.Mode()&0o111 == 0:
		return errors.New("is not executable")
	}
	return nil
}

// nativeCLI returns the native codex binary behind the npm launcher
// (bin/codex.js, a Node script that spawns it), and the package root, or
// path itself when it is not the launcher or no native binary is found.
// Running the native binary directly means signals and Pdeathsig reach the
// process that does the work.
func nativeCLI(path string) (native, pkgRoot string) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil || filepath.Base(real) != "codex.js" || filepath.Base(filepath.Dir(real)) != "bin" {
		return path, ""
	}
	root := filepath.Dir(filepath.Dir(real))
	plat, triple := npmPlatform()
	if plat == "" {
		return path, ""
	}
	for _, c := range []string{
		filepath.Join(filepath.Dir(root), "codex-"+plat, "vendor", triple, "bin", "codex"),
		filepath.Join(root, "node_modules", "@openai", "codex-"+plat, "vendor", triple, "bin", "codex"),
		filepath.Join(root, "vendor", triple, "bin", "codex"),
		filepath.Join(root, "vendor", triple, "codex", "codex"),
	} {
		if isExecutable(c) == nil {
			return c, root
		}
	}
	return path, ""
}

// npmPlatform names the platform package and target triple of the npm
// distribution for this machine.
func npmPlatform() (plat, triple string) {
	switch runtime.GOOS + "/" + runtime.GOARCH {
	case "linux/amd64":
		return "linux-x64", "x86_64-unknown-linux-musl"
	case "linux/arm64":
		return "linux-arm64", "aarch64-unknown-linux-musl"
	case "darwin/amd64":
		return "darwin-x64", "x86_64-apple-darwin"
	case "darwin/arm64":
		return "darwin-arm64", "aarch64-apple-darwin"
	}
	return "", ""
}

var versionRE = regexp.MustCompile(`codex-cli\s+v?(\d+)\.(\d+)\.(\d+)`)

// checkVersion runs `codex --version` and checks it against MinVersion,
// returning the version ("0.171.0").
func checkVersion(ctx context.Context, path string, env []string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "--version")
	cmd.Env = env
	cmd.SysProcAttr = sysProcAttr()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("`%s --version` failed (%v): %s; %s", path, err, strings.TrimSpace(truncate(stripANSI(stderr.String()), 500)), installHint)
	}
	m := versionRE.FindSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("`%s --version` printed %q, not a codex-cli version: is this the OpenAI codex CLI? %s", path, truncate(strings.TrimSpace(string(out)), 200), installHint)
	}
	v := string(m[1]) + "." + string(m[2]) + "." + string(m[3])
	if compareVersions(v, MinVersion) < 0 {
		return v, fmt.Errorf("codex-cli %s at %s is older than %s, the oldest version this plugin supports: upgrade it with `npm install -g @openai/codex@latest`, or point the session option cli_path or %s at a newer codex", v, path, MinVersion, EnvCodexPath)
	}
	return v, nil
}

// compareVersions compares two dotted versions of whole numbers.
func compareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(as), len(bs)) {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}

// lookupEnv finds key in a KEY=VALUE list (the last one wins, as for exec).
func lookupEnv(env []string, key string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

// codexHome is $CODEX_HOME, else ~/.codex.
func codexHome(env []string) string {
	if v, ok := lookupEnv(env, "CODEX_HOME"); ok && v != "" {
		return v
	}
	if home, ok := lookupEnv(env, "HOME"); ok && home != "" {
		return filepath.Join(home, ".codex")
	}
	return ""
}

var envKeyRE = regexp.MustCompile(`(?m)^\s*env_key\s*=\s*["']([A-Za-z_][A-Za-z0-9_]*)["']`)

// providerEnvKeys lists the env_key variables of the model providers
// configured in $CODEX_HOME/config.toml (a line scan, not a TOML parse: it
// only widens what is stripped).
func providerEnvKeys(home string) []string {
	if home == "" {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(home, "config.toml"))
	if err != nil {
		return nil
	}
	var out []string
	for _, m := range envKeyRE.FindAllSubmatch(b, -1) {
		out = append(out, string(m[1]))
	}
	return out
}

// childEnv builds the CLI's environment from the plugin's: everything,
// less the credential variables unless allowed. It returns the variables
// it removed.
func childEnv(base []string, allowCredentials bool) (env, stripped []string) {
	strip := append(slices.Clone(credentialVars), providerEnvKeys(codexHome(base))...)
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if !allowCredentials && slices.Contains(strip, k) {
			if !slices.Contains(stripped, k) {
				stripped = append(stripped, k)
			}
			continue
		}
		env = append(env, kv)
	}
	return env, stripped
}

// checkAuth fails when codex would have no credential: no auth.json in its
// home and no key variable in the environment it gets. stripped names the
// variables the credential policy removed, so the message can say so.
func checkAuth(env, stripped []string) error {
	for _, k := range authVars {
		if v, ok := lookupEnv(env, k); ok && v != "" {
			return nil
		}
	}
	home := codexHome(env)
	if home != "" {
		if _, err := os.Stat(filepath.Join(home, "auth.json")); err == nil {
			return nil
		}
	}
	where := "no auth.json in CODEX_HOME"
	if home != "" {
		where = "no " + filepath.Join(home, "auth.json")
	}
	msg := fmt.Sprintf("codex has no credentials (%s, and none of %s is set): run `codex login` as the user agenthost runs as, or set OPENAI_API_KEY and the session option %s=true",
		where, strings.Join(authVars, ", "), optAllowCredentials)
	var held []string
	for _, k := range stripped {
		if slices.Contains(authVars, k) {
			held = append(held, k)
		}
	}
	if len(held) > 0 {
		msg += fmt.Sprintf("; %s is set but withheld from codex by the credential policy: set the session option %s=true to pass it", strings.Join(held, ", "), optAllowCredentials)
	}
	return errors.New(msg + fmt.Sprintf(" (or set %s=true if codex is configured another way)", optSkipAuthCheck))
}
