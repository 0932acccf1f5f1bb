package claude

import (
	"slices"
	"strings"

	"github.com/agenthost/agenthost/plugin/sdk"
)

// credentialVars are the provider credential variables Claude Code 2.1.332
// reads (agent-clis.md §1.8): credentials proper, the cloud credentials used
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
