package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/plugin/sdk/conformance"
)

func TestConformanceCommand(t *testing.T) {
	t.Parallel()
	t.Run("scripted passes", func(t *testing.T) {
		t.Parallel()
		r := ah(t, "conformance", bins.scripted)
		if r.code != 0 || !strings.Contains(r.stdout, strconv.Itoa(len(conformance.Names()))+" passed, 0 failed, 0 not run") ||
			!regexpMatch(`(?m)^  handshake\s+PASS\s+\S+s$`, r.stdout) || !regexpMatch(`(?m)^  kill-on-ignored-shutdown\s+PASS`, r.stdout) {
			t.Errorf("conformance of the scripted plugin: %s", r)
		}
	})
	t.Run("the built-in scripted passes", func(t *testing.T) {
		t.Parallel()
		r := ah(t, "conformance", "scripted", "--json")
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if r.code != 0 || len(lines) != len(conformance.Names()) {
			t.Fatalf("conformance scripted --json: %s", r)
		}
		for _, l := range lines {
			var c struct {
				Check string `json:"check"`
				Pass  bool   `json:"pass"`
			}
			if err := json.Unmarshal([]byte(l), &c); err != nil || !c.Pass {
				t.Errorf("line %q: %v", l, err)
			}
		}
	})
	t.Run("a broken plugin fails", func(t *testing.T) {
		t.Parallel()
		r := ah(t, "conformance", bins.broken)
		if r.code != 1 || !regexpMatch(`(?m)^  identify\s+FAIL`, r.stdout) || !regexpMatch(`(?m)^  handshake\s+PASS`, r.stdout) ||
			!strings.Contains(r.stdout, "✗ identify:") || !strings.Contains(r.stdout, `spawn_token = "not-the-spawn-token"`) ||
			// The four capability checks pass, skipped: it declares none;
			// so does open-refuses-another-process: it speaks version 1;
			// export-state and self-fence fail in their setup (no Attach).
			!regexpMatch(`(?m)^7 passed, 10 failed, 0 not run$`, r.stdout) {
			t.Errorf("conformance of a broken plugin: %s", r)
		}
	})
	t.Run("no such binary", func(t *testing.T) {
		t.Parallel()
		if r := ah(t, "conformance", "/nonexistent/plugin"); r.code != 1 || !strings.Contains(r.stderr, "no plugin binary at /nonexistent/plugin") {
			t.Errorf("conformance of a missing binary: %s", r)
		}
		if r := ah(t, "conformance"); r.code != 2 {
			t.Errorf("conformance without a binary: %s", r)
		}
	})
}

// Third-party plugins: every executable in <state-dir>/plugins, and those
// agenthost.json names, with a sha256 verified before every start.
func TestThirdPartyPlugins(t *testing.T) {
	t.Parallel()
	dir := stateDir(t)
	b, err := os.ReadFile(bins.scripted)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	good := hex.EncodeToString(sum[:])
	wrong := strings.Repeat("ab", 32)
	if err := os.MkdirAll(filepath.Join(dir, "plugins"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "plugins", "mine"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "plugins", "notes.txt"), []byte("not a plugin"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := map[string]any{"agents": map[string]any{
		"pinned":   map[string]any{"path": bins.scripted, "sha256": good, "env": []string{"SOME_SETTING=1"}},
		"tampered": map[string]any{"path": bins.scripted, "sha256": wrong},
	}}
	cb, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "agenthost.json"), cb, 0o600); err != nil {
		t.Fatal(err)
	}
	r := mustAH(t, "--state-dir", dir, "agents")
	for _, want := range []string{
		`mine\s+plugins directory\s+` + filepath.Join(dir, "plugins", "mine"),
		`pinned\s+agenthost.json\s+` + bins.scripted + `\s+pinned ` + good[:12],
		`scripted\s+built-in\s+\(this binary\) __plugin scripted`,
	} {
		if !regexpMatch(want, r.stdout) {
			t.Errorf("agents does not match %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "notes.txt") {
		t.Errorf("a non-executable file counts as a plugin:\n%s", r.stdout)
	}

	s := serve(t, dir)
	if got := strings.Join(s.ready.Agents, ","); got != "claude,codex,mine,pinned,scripted,tampered" {
		t.Errorf("the host runs %s", got)
	}
	if r := mustAH(t, "--state-dir", dir, "run", "--agent", "mine", "count 2"); r.stdout != "12\n" {
		t.Errorf("run --agent mine: %s", r)
	}
	if r := mustAH(t, "--state-dir", dir, "run", "--agent", "pinned", "count 1"); r.stdout != "1\n" {
		t.Errorf("run --agent pinned: %s", r)
	}
	r = ah(t, "--state-dir", dir, "run", "--agent", "tampered", "--session", "t1", "count 1")
	if r.code != 1 || !strings.Contains(r.stderr, "has sha256 "+good+", expected "+wrong) || !strings.Contains(r.stderr, bins.scripted) {
		t.Errorf("run --agent tampered: %s", r)
	}
	if r := mustAH(t, "--state-dir", dir, "sessions", "show", "t1"); !strings.Contains(r.stdout, "released") || !strings.Contains(r.stdout, "pid-absent") {
		t.Errorf("the tampered plugin's session:\n%s", r.stdout)
	}

	// A malformed configuration stops the host from starting, with the
	// file and the problem named.
	bad := stateDir(t)
	_ = os.WriteFile(filepath.Join(bad, "agenthost.json"), []byte(`{"agents": {"x": {"path": "relative/plugin"}}}`), 0o600)
	if r := ah(t, "--state-dir", bad, "serve"); r.code != 1 || !strings.Contains(r.stderr, `agent "x": "path" must be absolute`) {
		t.Errorf("serve with a relative plugin path: %s", r)
	}
	_ = os.WriteFile(filepath.Join(bad, "agenthost.json"), []byte(`{"agents": {"x": {"path": "/bin/true", "sha": "1"}}}`), 0o600)
	if r := ah(t, "--state-dir", bad, "agents"); r.code != 1 || !strings.Contains(r.stderr, `unknown field "sha"`) {
		t.Errorf("agents with a misspelt field: %s", r)
	}
}

// Provider credentials reach a plugin only by the operator's opt-in: an
// agenthost.json entry with "credentials": "inherit" gets the variables it
// names from agenthost's own environment, and every session of it allows
// credentials; without it they are stripped. An entry without a path
// configures the built-in of its name.
func TestCredentialsInherit(t *testing.T) {
	t.Parallel()
	dir := stateDir(t)
	cfg := `{"agents": {
		"keyed":  {"path": "` + bins.scripted + `", "credentials": "inherit", "credentialVariables": ["MY_PROVIDER_KEY"]},
		"strict": {"path": "` + bins.scripted + `", "credentialVariables": ["MY_PROVIDER_KEY"]},
		"none":   {"path": "` + bins.scripted + `", "credentials": "inherit"},
		"claude": {"credentials": "inherit", "env": ["CLAUDE_SETTING=1"]}}}`
	if err := os.WriteFile(filepath.Join(dir, "agenthost.json"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	r := mustAH(t, "--state-dir", dir, "agents")
	for _, want := range []string{
		`AGENT\s+SOURCE\s+COMMAND\s+SHA256\s+CREDENTIALS`,
		`claude\s+built-in, agenthost.json\s+\(this binary\) __plugin claude\s+-\s+inherit \(29 variables\)`,
		`codex\s+built-in\s+\(this binary\) __plugin codex\s+-\s+strip \(6 variables\)`,
		`keyed\s+agenthost.json\s+` + bins.scripted + `\s+-\s+inherit MY_PROVIDER_KEY`,
		`none\s+agenthost.json\s+` + bins.scripted + `\s+-\s+inherit \(no variables named: nothing inherited\)`,
		`scripted\s+built-in\s+\(this binary\) __plugin scripted\s+-\s+strip \(no variables named\)`,
		`strict\s+agenthost.json\s+` + bins.scripted + `\s+-\s+strip MY_PROVIDER_KEY`,
	} {
		if !regexpMatch(want, r.stdout) {
			t.Errorf("agents does not match %q:\n%s", want, r.stdout)
		}
	}
	var listed struct {
		Agents []struct {
			Name                string   `json:"name"`
			Source              string   `json:"source"`
			Credentials         string   `json:"credentials"`
			CredentialVariables []string `json:"credentialVariables"`
		} `json:"agents"`
	}
	if err := json.Unmarshal([]byte(mustAH(t, "--state-dir", dir, "agents", "--json").stdout), &listed); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, a := range listed.Agents {
		got[a.Name] = a.Credentials + " " + strings.Join(a.CredentialVariables, ",")
		if a.Name == "claude" && (a.Source != "built-in, agenthost.json" || len(a.CredentialVariables) != 29 ||
			!slices.Contains(a.CredentialVariables, "ANTHROPIC_API_KEY")) {
			t.Errorf("agents --json: claude %+v", a)
		}
	}
	for name, want := range map[string]string{"keyed": "inherit MY_PROVIDER_KEY", "strict": "strip MY_PROVIDER_KEY", "none": "inherit ", "scripted": "strip "} {
		if got[name] != want {
			t.Errorf("agents --json: %s has %q, want %q", name, got[name], want)
		}
	}

	// The plugins' environments, read from the process table.
	serveCmd(t, dir, func(c *exec.Cmd) {
		c.Env = append(c.Env, "MY_PROVIDER_KEY=from-agenthosts-environment", "ANTHROPIC_API_KEY=not-for-scripted")
	})
	environ := func(agent string) (env []string, options map[string]string) {
		t.Helper()
		mustAH(t, "--state-dir", dir, "run", "--agent", agent, "--session", agent+"-1", "count 1")
		info := showSession(t, dir, agent+"-1")
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(info.Session.Lease.Owner.PID), "environ"))
		if err != nil {
			t.Fatal(err)
		}
		return strings.Split(string(b), "\x00"), info.Session.Options
	}
	has := func(env []string, key string) bool {
		return slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, key+"=") })
	}
	env, opts := environ("keyed")
	if !slices.Contains(env, "MY_PROVIDER_KEY=from-agenthosts-environment") || has(env, "ANTHROPIC_API_KEY") || opts["allow_credentials"] != "true" {
		t.Errorf("inheriting agent: environment %q, options %q", env, opts)
	}
	for _, agent := range []string{"strict", "none"} {
		if env, opts := environ(agent); has(env, "MY_PROVIDER_KEY") || has(env, "ANTHROPIC_API_KEY") || agent == "strict" && opts["allow_credentials"] != "" {
			t.Errorf("%s: environment %q, options %q", agent, env, opts)
		}
	}

	// Mistakes name the file, the agent and what is allowed.
	bad := stateDir(t)
	for config, want := range map[string]string{
		`{"agents": {"x": {"path": "/bin/true", "credentials": "yes"}}}`: `agent "x": "credentials" must be "strip" (the default) or "inherit", got "yes"`,
		`{"agents": {"x": {"credentials": "inherit"}}}`:                  `agent "x": "path" is required: no built-in is named "x" (the built-ins are claude, codex, scripted)`,
	} {
		_ = os.WriteFile(filepath.Join(bad, "agenthost.json"), []byte(config), 0o600)
		for _, cmd := range []string{"agents", "serve"} {
			if r := ah(t, "--state-dir", bad, cmd); r.code != 1 || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, filepath.Join(bad, "agenthost.json")) {
				t.Errorf("%s with %s: %s", cmd, config, r)
			}
		}
	}
}
