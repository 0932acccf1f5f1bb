// Package realcli runs the real, pinned claude and codex CLIs offline, for
// the end-to-end tests, `make demo-real` and `make bench`: it finds the
// copies `make clis` installs with npm into .cache/clis (never globally),
// and writes the environment that points each CLI at a scripted model
// server (plugin/sdk/modelserver) on loopback with a throwaway key, in a
// home directory of its own, so no login of the machine is read and
// nothing is written outside that directory.
//
// # Hazards
//
//   - The versions are pinned in the Makefile (CLAUDE_CLI_VERSION,
//     CODEX_CLI_VERSION); a CLI found through AGENTHOST_REAL_CLAUDE or
//     AGENTHOST_REAL_CODEX may be another one, and its version is the
//     caller's to report.
//   - claude retries a failed model call up to ten times with backoff
//     (0.5 s to 32 s). ClaudeEnv bounds that with CLAUDE_CODE_MAX_RETRIES,
//     so a failure scripted for every attempt ends the turn in seconds.
//   - codex's tools depend on its model: ModelCodexFunctions is a model
//     name codex has no metadata for, for which it offers exec_command as
//     a plain function tool; its default model offers only the code-mode
//     custom tool "exec" instead.
package realcli

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agenthost/agenthost/internal/agentconfig"
	"github.com/agenthost/agenthost/plugins/claude"
	"github.com/agenthost/agenthost/plugins/codex"
)

// The variables that name a CLI to use instead of the installed copy.
const (
	EnvClaude = "AGENTHOST_REAL_CLAUDE"
	EnvCodex  = "AGENTHOST_REAL_CODEX"
)

// CacheDir is where `make clis` installs the pinned CLIs, relative to the
// module root.
const CacheDir = ".cache/clis"

// APIKey is the throwaway key the CLIs send the model server.
const APIKey = "sk-agenthost-modelserver"

// ModelCodexFunctions is a model name codex knows no metadata for: it
// offers its commands as the exec_command function tool, which a
// scripted reply can call (see the package doc).
const ModelCodexFunctions = "modelserver-functions"

// ErrNotInstalled is returned when a CLI is neither installed nor named by
// its variable.
var ErrNotInstalled = errors.New("not installed")

// Claude returns the path of the claude CLI: $AGENTHOST_REAL_CLAUDE, else
// the copy in .cache/clis.
func Claude() (string, error) { return find(EnvClaude, "claude") }

// Codex returns the path of the codex CLI: $AGENTHOST_REAL_CODEX, else the
// copy in .cache/clis.
func Codex() (string, error) { return find(EnvCodex, "codex") }

func find(env, name string) (string, error) {
	if p := os.Getenv(env); p != "" {
		abs, err := filepath.Abs(p)
		if err != nil {
			return "", fmt.Errorf("%s=%s: %w", env, p, err)
		}
		if _, err := os.Stat(abs); err != nil {
			return "", fmt.Errorf("%s names %s, which cannot be used: %w", env, p, err)
		}
		return abs, nil
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	p := filepath.Join(root, CacheDir, "node_modules", ".bin", name)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("the %s CLI is %w in %s: run `make clis` (it needs npm) or set %s", name, ErrNotInstalled, filepath.Join(root, CacheDir), env)
	}
	return p, nil
}

// moduleRoot is the nearest directory above the working directory whose
// go.mod is agenthost's.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find the agenthost module: %w", err)
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(b), "module github.com/agenthost/agenthost\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("the agenthost module was not found above the working directory: run from inside it, or set %s and %s", EnvClaude, EnvCodex)
		}
		dir = parent
	}
}

// A Setup is what points one CLI at a model server: the variables of
// its credentials, which agenthost's own environment holds and the agent
// inherits (its agenthost.json entry says "credentials": "inherit"), and
// the CLI's other settings, which the entry's env carries.
type Setup struct {
	// Agent is the built-in agent's name.
	Agent string
	// Credentials go into agenthost's environment.
	Credentials []string
	// Env goes into the agent's entry, with the variable naming the CLI.
	Env []string
}

// Bare is the environment of the CLI run by itself, without agenthost:
// environ with the setup's variables added.
func (s Setup) Bare(environ []string) []string {
	return append(append(slices.Clone(environ), s.Credentials...), s.Env...)
}

// Entry is the agent's agenthost.json entry.
func (s Setup) Entry() agentconfig.Agent {
	return agentconfig.Agent{Env: slices.Clone(s.Env), Credentials: agentconfig.CredentialsInherit}
}

// Config is an agenthost.json configuring the setups' agents.
func Config(setups ...Setup) ([]byte, error) {
	f := agentconfig.File{Agents: map[string]agentconfig.Agent{}}
	for _, s := range setups {
		f.Agents[s.Agent] = s.Entry()
	}
	return json.MarshalIndent(f, "", "  ")
}

// ClaudeSetup points the claude CLI at path at a model server whose
// Messages API is at baseURL, with its config directory inside home.
// maxRetries bounds claude's own retries of a failed model call (zero
// means 1).
func ClaudeSetup(path, home, baseURL string, maxRetries int) Setup {
	if maxRetries <= 0 {
		maxRetries = 1
	}
	return Setup{
		Agent: "claude",
		Credentials: []string{
			"ANTHROPIC_BASE_URL=" + baseURL,
			"ANTHROPIC_API_KEY=" + APIKey,
		},
		Env: []string{
			claude.EnvCLIPath + "=" + path,
			"CLAUDE_CONFIG_DIR=" + filepath.Join(home, ".claude"),
			"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
			"DISABLE_AUTOUPDATER=1",
			"DISABLE_TELEMETRY=1",
			"DISABLE_ERROR_REPORTING=1",
			fmt.Sprintf("CLAUDE_CODE_MAX_RETRIES=%d", maxRetries),
		},
	}
}

// CodexSetup writes $CODEX_HOME/config.toml inside home, naming the model
// server whose Responses API is at baseURL as codex's model provider
// (its key read from OPENAI_API_KEY), and points the codex CLI at path at
// it. retries bounds codex's request and stream retries.
func CodexSetup(path, home, baseURL string, retries int) (Setup, error) {
	codexHome := filepath.Join(home, ".codex")
	if err := os.MkdirAll(codexHome, 0o700); err != nil {
		return Setup{}, fmt.Errorf("codex's home: %w", err)
	}
	config := fmt.Sprintf(`model_provider = "modelserver"

[model_providers.modelserver]
name = "modelserver"
base_url = %q
wire_api = "responses"
env_key = "OPENAI_API_KEY"
request_max_retries = %d
stream_max_retries = %d
`, baseURL, retries, retries)
	if err := os.WriteFile(filepath.Join(codexHome, "config.toml"), []byte(config), 0o600); err != nil {
		return Setup{}, fmt.Errorf("codex's config: %w", err)
	}
	return Setup{
		Agent:       "codex",
		Credentials: []string{"OPENAI_API_KEY=" + APIKey},
		Env:         []string{codex.EnvCodexPath + "=" + path, "CODEX_HOME=" + codexHome},
	}, nil
}
