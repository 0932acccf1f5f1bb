package claude

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agenthost/agenthost/plugin/sdk"
)

// credentialVars are the provider credential variables Claude Code 2.1.332
// reads: credentials proper, the cloud credentials used
// when Bedrock or Vertex is selected, and the provider selection and routing
// variables that decide where credentials are sent. They are removed from
// the CLI's environment unless the session option allow_credentials is
// "true". The host strips its own list from what it hands the plugin; this
// is the second line of defence, for variables that reach the plugin anyway
// (a host configured to pass them, a plugin started by hand).
var credentialVars = []string{
	// Credentials.
	"ANTHROPIC_API_KEY",
	"ANTHROPIC_AUTH_TOKEN",
	"CLAUDE_CODE_OAUTH_TOKEN",
	"CLAUDE_CODE_OAUTH_REFRESH_TOKEN",
	"CLAUDE_CODE_SESSION_ACCESS_TOKEN",
	"CLAUDE_CODE_API_KEY_FILE_DESCRIPTOR",
	"ANTHROPIC_IDENTITY_TOKEN",
	"ANTHROPIC_IDENTITY_TOKEN_FILE",
	"ANTHROPIC_FOUNDRY_API_KEY",
	"ANTHROPIC_FOUNDRY_AUTH_TOKEN",
	"ANTHROPIC_AWS_API_KEY",
	"AWS_BEARER_TOKEN_BEDROCK",
	// Cloud credentials for Bedrock and Vertex.
	"AWS_ACCESS_KEY_ID",
	"AWS_SECRET_ACCESS_KEY",
	"AWS_SESSION_TOKEN",
	"AWS_PROFILE",
	"GOOGLE_APPLICATION_CREDENTIALS",
	// Provider selection and routing.
	"CLAUDE_CODE_USE_BEDROCK",
	"CLAUDE_CODE_USE_VERTEX",
	"CLAUDE_CODE_USE_FOUNDRY",
	"CLAUDE_CODE_USE_GATEWAY",
	"CLAUDE_CODE_USE_MANTLE",
	"ANTHROPIC_BASE_URL",
	"ANTHROPIC_BEDROCK_BASE_URL",
	"ANTHROPIC_VERTEX_BASE_URL",
	"ANTHROPIC_VERTEX_PROJECT_ID",
	"ANTHROPIC_CUSTOM_HEADERS",
	"ANTHROPIC_ORGANIZATION_ID",
	"ANTHROPIC_WORKSPACE_ID",
}

// CredentialVariables are the environment variables that carry Claude Code
// credentials or decide where they are sent (credentialVars). The
// agenthost binary strips them from the environment it hands a claude
// plugin unless the session allows credentials, and the plugin strips them
// from the CLI's environment again.
func CredentialVariables() []string { return slices.Clone(credentialVars) }

// droppedVars never reach the CLI: CLAUDECODE makes it believe it runs
// nested inside another Claude Code (the official SDKs drop it too), and
// the rest are the plugin's own (go-plugin's handshake, agenthost's plugin
// settings), which would confuse an agenthost the agent runs. The spawn
// token stays.
var droppedVars = []string{
	"CLAUDECODE",
	sdk.Handshake().MagicCookieKey,
	"AGENTHOST_PLUGIN_DEBUG", "AGENTHOST_PLUGIN_LOG_LEVEL", "AGENTHOST_SESSION_DIR",
	"PLUGIN_MIN_PORT", "PLUGIN_MAX_PORT", "PLUGIN_PROTOCOL_VERSIONS", "PLUGIN_CLIENT_CERT",
	"PLUGIN_UNIX_SOCKET_DIR", "PLUGIN_UNIX_SOCKET_GROUP", "PLUGIN_MULTIPLEX_GRPC",
}

// cliEnv builds the CLI's environment from the plugin's: everything but
// droppedVars and, unless allowCredentials, credentialVars; PWD is the
// workspace. The spawn token the host set stays, so the host can recognise
// an orphaned CLI as its own.
func cliEnv(environ []string, workspace string, allowCredentials bool) []string {
	out := make([]string, 0, len(environ)+1)
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if k == "PWD" || slices.Contains(droppedVars, k) || (!allowCredentials && slices.Contains(credentialVars, k)) {
			continue
		}
		out = append(out, kv)
	}
	if workspace != "" {
		out = append(out, "PWD="+workspace)
	}
	return out
}

// planVars turn Claude Code's TodoWrite tool on, which the CLI's newer
// models lack by default: 2.1.332 offers TodoWrite only with its task
// tools off (CLAUDE_CODE_ENABLE_TASKS=false) and, for those models, with
// CLAUDE_CODE_ENABLE_TODO_TOOLS=true; otherwise it offers the task tools
// (TaskCreate, TaskGet, TaskList, TaskUpdate, TaskStop) or neither.
// TodoWrite's todos are what the plugin reports as the ACP plan; the task
// tools have no plan form (each call touches one task, never the list), so
// with them a client would see no plan. Each is a default only: a session's
// env.NAME option wins, then the plugin's environment (the operator's).
var planVars = []string{"CLAUDE_CODE_ENABLE_TASKS=false", "CLAUDE_CODE_ENABLE_TODO_TOOLS=true"}

// withDefaults is env plus each NAME=VALUE of defaults whose NAME env
// does not set.
func withDefaults(env, defaults []string) []string {
	out := slices.Clone(env)
	for _, kv := range defaults {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.ContainsFunc(env, func(e string) bool { return strings.HasPrefix(e, name+"=") }) {
			out = append(out, kv)
		}
	}
	return out
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
	msg := fmt.Sprintf("claude has no credentials: log in with `claude auth login` (it keeps the login in %s), "+
		"or set ANTHROPIC_API_KEY and pass it to the agent with \"credentials\": \"inherit\" in its agenthost.json entry (or the session option %s=true)",
		filepath.Join(orDefault(dir, "~/.claude"), ".credentials.json"), OptAllowCredentials)
	if len(present) > 0 {
		msg += fmt.Sprintf("; %s is set, but provider credentials are removed from claude's environment unless the session option %s=true",
			strings.Join(present, ", "), OptAllowCredentials)
	}
	return authRequired(fmt.Errorf("%s (a login kept in the macOS keychain is invisible to this check: set %s=true)", msg, OptSkipAuthCheck))
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
