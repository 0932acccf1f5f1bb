package realcli

import (
	"slices"
	"strings"
)

// IsolatedEnv is environ without anything that would let the machine's
// own setup reach a CLI run offline: agenthost's variables, the
// providers' credentials and endpoints (ANTHROPIC_*, OPENAI_*), the CLIs'
// settings (CLAUDE*, CODEX_*), and HOME, which becomes home. A Setup's
// variables go on top: its Credentials for agenthost serve, Bare for the
// CLI run by itself.
func IsolatedEnv(environ []string, home string) []string {
	out := slices.DeleteFunc(slices.Clone(environ), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return k == "HOME" || strings.HasPrefix(k, "CLAUDE") ||
			slices.ContainsFunc([]string{"AGENTHOST_", "ANTHROPIC_", "OPENAI_", "CODEX_"}, func(p string) bool { return strings.HasPrefix(k, p) })
	})
	return append(out, "HOME="+home)
}
