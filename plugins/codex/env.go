package codex

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/agenthost/agenthost/plugin/sdk"
)

// credentialVars are the provider credential variables stripped from the
// CLI's environment unless the session allows credentials; the env_key of
// every model provider in config.toml is added.
var credentialVars = []string{
	"OPENAI_API_KEY", "CODEX_API_KEY", "CODEX_ACCESS_TOKEN", "OPENAI_BASE_URL", "OPENAI_ORGANIZATION", "AZURE_OPENAI_API_KEY",
}

// CredentialVariables are the environment variables that carry codex's
// provider credentials or route them (credentialVars). The agenthost
// binary strips them from the environment it hands a codex plugin unless
// the session allows credentials; the plugin strips them, and the env_key
// of every model provider configured in config.toml, from the CLI's.
func CredentialVariables() []string { return slices.Clone(credentialVars) }

// authVars are the variables codex accepts as a credential.
var authVars = []string{"OPENAI_API_KEY", "CODEX_API_KEY", "CODEX_ACCESS_TOKEN"}

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
	home := codexHome(env)
	// A model provider's env_key is a credential too: a key set there is
	// what codex sends that provider.
	keys := slices.Clone(authVars)
	for _, k := range providerEnvKeys(home) {
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		if v, ok := lookupEnv(env, k); ok && v != "" {
			return nil
		}
	}
	if home != "" {
		if _, err := os.Stat(filepath.Join(home, "auth.json")); err == nil {
			return nil
		}
	}
	where := "no auth.json in CODEX_HOME"
	if home != "" {
		where = "no " + filepath.Join(home, "auth.json")
	}
	msg := fmt.Sprintf("codex has no credentials (%s, and none of %s is set): run `codex login` as the user agenthost runs as, "+
		"or set OPENAI_API_KEY (or the env_key of your model provider) in agenthost's environment and opt codex into it with \"credentials\": \"inherit\" on the codex entry of agenthost.json "+
		"(a plugin run by itself: the session option %s=true)",
		where, strings.Join(keys, ", "), OptAllowCredentials)
	var held []string
	for _, k := range stripped {
		if slices.Contains(keys, k) {
			held = append(held, k)
		}
	}
	if len(held) > 0 {
		verb := "is"
		if len(held) > 1 {
			verb = "are"
		}
		msg += fmt.Sprintf("; %s %s set but withheld from codex by the credential policy: set the session option %s=true to pass it", strings.Join(held, ", "), verb, OptAllowCredentials)
	}
	return fmt.Errorf("%s (or set %s=true if codex is configured another way): %w", msg, OptSkipAuthCheck, sdk.ErrAuthRequired)
}
