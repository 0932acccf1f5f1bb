package realcli_test

import (
	"slices"
	"testing"

	"github.com/agenthost/agenthost/internal/realcli"
)

// IsolatedEnv keeps the machine's ordinary variables and drops every one
// that would point a CLI at the machine's own login, provider or host.
func TestIsolatedEnv(t *testing.T) {
	got := realcli.IsolatedEnv([]string{
		"PATH=/usr/bin", "LANG=C.UTF-8", "HOME=/root",
		"ANTHROPIC_API_KEY=real", "ANTHROPIC_BASE_URL=https://example.invalid", "OPENAI_API_KEY=real",
		"CLAUDE_CONFIG_DIR=/root/.claude", "CLAUDECODE=1", "CODEX_HOME=/root/.codex",
		"AGENTHOST_STATE_DIR=/var/lib/agenthost", "MY_ANTHROPIC_NOTE=kept",
	}, "/tmp/home")
	want := []string{"PATH=/usr/bin", "LANG=C.UTF-8", "MY_ANTHROPIC_NOTE=kept", "HOME=/tmp/home"}
	if !slices.Equal(got, want) {
		t.Errorf("IsolatedEnv = %q; want %q", got, want)
	}
}
