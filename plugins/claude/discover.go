package claude

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// EnvCLIPath names the environment variable that gives the claude binary
// when the session option cli_path does not.
const EnvCLIPath = "AGENTHOST_CLAUDE_PATH"

// minVersion is the oldest Claude Code the plugin drives: the official
// Agent SDKs' minimum. Older 1.x releases mint a new session id on every
// print-mode resume and lack parts of the control protocol. The plugin is
// tested against TestedVersion.
var minVersion = version{2, 0, 0}

// TestedVersion is the Claude Code release whose protocol the plugin and its
// fake CLI mirror.
const TestedVersion = "2.1.332"

// installCmd installs Claude Code; installHint says so. Neither names a
// registry.
const (
	installCmd  = "npm install -g @anthropic-ai/claude-code"
	installHint = "install Claude Code (" + installCmd + ")"
)

// fallbackPaths are the usual install locations, relative to the home
// directory when not absolute, searched after PATH (as the official SDKs do).
var fallbackPaths = []string{
	".claude/local/claude",
	".local/bin/claude",
	".npm-global/bin/claude",
	"node_modules/.bin/claude",
	".yarn/bin/claude",
	"/usr/local/bin/claude",
	"/opt/homebrew/bin/claude",
}

// findCLI returns the claude binary to run: the explicit path (session
// option, then environment variable) if one is given, otherwise claude on
// PATH, otherwise the first usual install location that holds an
// executable. An explicit path that does not work is an error: the user
// asked for it, so there is no falling back.
func findCLI(explicit string) (string, error) {
	if explicit != "" {
		return explicitCLI(explicit, "the session option "+OptCLIPath)
	}
	if p := os.Getenv(EnvCLIPath); p != "" {
		return explicitCLI(p, EnvCLIPath)
	}
	if p, err := exec.LookPath("claude"); err == nil {
		return filepath.Abs(p)
	}
	home, _ := os.UserHomeDir()
	var looked []string
	for _, p := range fallbackPaths {
		if !filepath.IsAbs(p) {
			if home == "" {
				continue
			}
			p = filepath.Join(home, p)
		}
		looked = append(looked, p)
		if isExecutable(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("claude CLI not found: it is not on PATH (%s) nor in %s; %s, or set the session option %s or %s to the claude binary",
		orNone(os.Getenv("PATH")), strings.Join(looked, ", "), installHint, OptCLIPath, EnvCLIPath)
}

func explicitCLI(p, from string) (string, error) {
	if !strings.ContainsRune(p, filepath.Separator) {
		lp, err := exec.LookPath(p)
		if err != nil {
			return "", fmt.Errorf("claude CLI %q (from %s) is not on PATH (%s): %s, or set %s to its full path",
				p, from, orNone(os.Getenv("PATH")), installHint, from)
		}
		p = lp
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("claude CLI path %q (from %s): %v", p, from, err)
	}
	st, err := os.Stat(abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("claude CLI not found at %s (from %s): %s, or fix %s", abs, from, installHint, from)
	case err != nil:
		return "", fmt.Errorf("claude CLI at %s (from %s) cannot be used: %v", abs, from, err)
	case st.IsDir() || st.Mode()&0o111 == 0:
		return "", fmt.Errorf("claude CLI at %s (from %s) is not an executable file; point %s at the claude binary", abs, from, from)
	}
	return abs, nil
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

func orNone(s string) string {
	if s == "" {
		return "empty"
	}
	return s
}

// version is a Claude Code release number.
type version [3]int

func (v version) String() string { return fmt.Sprintf("%d.%d.%d", v[0], v[1], v[2]) }

func (v version) less(w version) bool {
	for i := range v {
		if v[i] != w[i] {
			return v[i] < w[i]
		}
	}
	return false
}

var versionRE = regexp.MustCompile(`^\s*v?([0-9]+)\.([0-9]+)\.([0-9]+)`)

// parseVersion reads the output of claude --version, "2.1.332 (Claude
// Code)".
func parseVersion(out string) (version, bool) {
	m := versionRE.FindStringSubmatch(out)
	if m == nil {
		return version{}, false
	}
	var v version
	for i := range v {
		n, err := strconv.Atoi(m[i+1])
		if err != nil {
			return version{}, false
		}
		v[i] = n
	}
	return v, true
}

// versionTimeout bounds claude --version (the official SDK allows 2 s; a
// cold 400 MB binary on a slow disk needs more).
const versionTimeout = 15 * time.Second

// probeVersion runs path --version and checks it against minVersion.
func probeVersion(ctx context.Context, path string, env []string) (version, error) {
	ctx, cancel := context.WithTimeout(ctx, versionTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "--version")
	cmd.Env = env
	cmd.SysProcAttr = sysProcAttr()
	cmd.WaitDelay = time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	text := strings.TrimSpace(out.String())
	if len(text) > 500 {
		text = text[:500] + "…"
	}
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("no answer within %s", versionTimeout)
		}
		return version{}, fmt.Errorf("claude CLI at %s does not run (`claude --version`: %v%s); reinstall Claude Code (%s) or point %s or the session option %s at a working binary",
			path, err, quoted(text), installCmd, EnvCLIPath, OptCLIPath)
	}
	v, ok := parseVersion(text)
	if !ok {
		return version{}, fmt.Errorf("claude CLI at %s printed an unexpected version %q (expected e.g. \"%s (Claude Code)\"); is it Claude Code?", path, text, TestedVersion)
	}
	if v.less(minVersion) {
		return v, fmt.Errorf("claude CLI at %s is version %s, too old: agenthost needs Claude Code %s or later (tested with %s); update it (claude update, or "+installCmd+"@latest)",
			path, v, minVersion, TestedVersion)
	}
	return v, nil
}

func quoted(s string) string {
	if s == "" {
		return ""
	}
	return fmt.Sprintf(", output %q", s)
}

// configDir is Claude Code's configuration directory: $CLAUDE_CONFIG_DIR,
// or ~/.claude.
func configDir() string {
	if d := os.Getenv("CLAUDE_CONFIG_DIR"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".claude")
}

// loginVars are the variables that hold a credential on their own.
var loginVars = []string{"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"}

// providerVars select a cloud provider whose credentials the CLI finds
// elsewhere (AWS, Google Cloud, Azure).
var providerVars = []string{"CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX", "CLAUDE_CODE_USE_FOUNDRY"}

// checkCredentials is the readiness check for a credential configuration:
// a login variable the session passes on (allow_credentials), a cloud
// provider selection it passes on, a credentials file in the config
// directory, or an apiKeyHelper in its settings. It cannot see logins kept
// in the macOS keychain, hence skip_auth_check.
func checkCredentials(allow bool) error {
	dir := configDir()
	var present []string
	for _, k := range append(append([]string{}, loginVars...), providerVars...) {
		if os.Getenv(k) != "" {
			present = append(present, k)
		}
	}
	if allow && len(present) > 0 {
		return nil
	}
	if dir != "" {
		if st, err := os.Stat(filepath.Join(dir, ".credentials.json")); err == nil && st.Mode().IsRegular() {
			return nil
		}
		if b, err := os.ReadFile(filepath.Join(dir, "settings.json")); err == nil {
			var s struct {
				APIKeyHelper string `json:"apiKeyHelper"`
			}
			if json.Unmarshal(b, &s) == nil && s.APIKeyHelper != "" {
				return nil
			}
		}
	}
	msg := fmt.Sprintf("claude has no credentials: log in with `claude auth login` (it keeps the login in %s), or set ANTHROPIC_API_KEY and the session option %s=true",
		filepath.Join(orDefault(dir, "~/.claude"), ".credentials.json"), OptAllowCredentials)
	if len(present) > 0 {
		msg += fmt.Sprintf("; %s is set, but provider credentials are removed from claude's environment unless the session option %s=true",
			strings.Join(present, ", "), OptAllowCredentials)
	}
	return errors.New(msg + fmt.Sprintf(" (a login kept in the macOS keychain is invisible to this check: set %s=true)", OptSkipAuthCheck))
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
