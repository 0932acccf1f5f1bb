package archtest

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// providerName matches the names of the providers and CLIs the reference
// plugins drive. The host supervises any plugin through the protocol; a
// provider's name in it means knowledge that belongs to that provider's
// plugin (its credentials, its quirks) has leaked into the host, where a
// third-party plugin cannot get the same treatment.
var providerName = regexp.MustCompile(`(?i)claude|codex|anthropic|openai`)

// TestHostNamesNoProvider requires the host's production code (host/ and
// the packages below it), comments included, to name no provider.
func TestHostNamesNoProvider(t *testing.T) {
	for _, p := range modulePackages(t, goList(t, "./host/...")) {
		for _, name := range slices.Concat(p.GoFiles, p.CgoFiles, p.IgnoredGoFiles) {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			path := filepath.Join(p.Dir, name)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			for i, line := range strings.Split(string(b), "\n") {
				if m := providerName.FindString(line); m != "" {
					t.Errorf("%s:%d names the provider %q; provider knowledge belongs in its plugin (plugins/…), reached through the protocol or the binary's wiring", path, i+1, m)
				}
			}
		}
	}
}

func TestProviderNamePattern(t *testing.T) {
	for line, want := range map[string]bool{
		`"ANTHROPIC_API_KEY"`:      true, // a credential variable counts
		`// the Claude Code CLI`:   true,
		`agent "codex" failed`:     true,
		`OpenAI's endpoint`:        true,
		`scripted agent`:           false,
		`CLAUDE_CODE_USE_BEDROCK`:  true,
		`x := "OPENAI"`:            true,
		`runs claude-agent-acp ok`: true,
	} {
		if got := providerName.MatchString(line); got != want {
			t.Errorf("%q: matched %v, want %v", line, got, want)
		}
	}
}
