package main

import (
	"slices"
	"testing"
)

// The binary strips from each built-in agent's environment what its plugin
// names as credentials; the host itself knows no provider.
func TestCredentialPolicies(t *testing.T) {
	for agent, some := range map[string][]string{
		"claude": {"ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "CLAUDE_CODE_OAUTH_TOKEN", "AWS_SECRET_ACCESS_KEY", "GOOGLE_APPLICATION_CREDENTIALS"},
		"codex":  {"OPENAI_API_KEY", "CODEX_API_KEY", "CODEX_ACCESS_TOKEN", "OPENAI_BASE_URL", "OPENAI_ORGANIZATION", "AZURE_OPENAI_API_KEY"},
	} {
		if _, ok := builtins[agent]; !ok {
			t.Errorf("%s is not a built-in", agent)
		}
		for _, v := range some {
			if !slices.Contains(credentials[agent].Variables, v) {
				t.Errorf("the %s policy lacks %s: %q", agent, v, credentials[agent].Variables)
			}
		}
	}
	if n := len(credentials["claude"].Variables); n != 29 {
		t.Errorf("the claude policy has %d variables, want the 29 the host stripped before", n)
	}
	if n := len(credentials["codex"].Variables); n != 6 {
		t.Errorf("the codex policy has %d variables, want 6", n)
	}
	if _, ok := credentials["scripted"]; ok {
		t.Error("the scripted example agent has a credential policy")
	}
}
