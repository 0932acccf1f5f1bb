package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agenthost/agenthost/host"
)

// Files in the state directory.
const (
	// SocketName is the local API's unix socket in the state directory.
	SocketName = "agenthost.sock"
	// ConfigName is the optional configuration file in the state
	// directory, naming third-party plugins.
	ConfigName = "agenthost.json"
	// PluginsDirName is the directory whose executables are plugins.
	PluginsDirName = "plugins"
	// PluginCommand is the hidden subcommand that serves a built-in plugin.
	PluginCommand = "__plugin"
)

// configFile is the shape of agenthost.json.
type configFile struct {
	Agents map[string]configAgent `json:"agents"`

	path string // where it was read from, for errors
}

// configAgent is one entry of agenthost.json. An entry with a path is a
// third-party plugin; one without configures the built-in of its name
// (its env and credentials; a built-in names its own credential
// variables).
type configAgent struct {
	Path   string   `json:"path"`
	Args   []string `json:"args"`
	Env    []string `json:"env"`
	SHA256 string   `json:"sha256"`
	// Credentials is the operator's choice for the agent's provider
	// credentials: CredentialsStrip (the default) or CredentialsInherit.
	Credentials string `json:"credentials"`
	// CredentialVariables name a third-party agent's credential
	// variables: stripped by default, passed from the host's own
	// environment when Credentials is CredentialsInherit.
	CredentialVariables []string `json:"credentialVariables"`
}

// The values of an agent entry's "credentials".
const (
	// CredentialsStrip keeps the agent's credential variables from its
	// plugin (the default).
	CredentialsStrip = "strip"
	// CredentialsInherit passes the agent's credential variables from the
	// host's own environment to its plugin, and allows credentials in
	// every session, so the plugin passes them on to its CLI.
	CredentialsInherit = "inherit"
)

// Sources of agents.
const (
	sourceBuiltin    = "built-in"
	sourcePluginsDir = "plugins directory"
	// sourceConfiguredBuiltin is a built-in an agenthost.json entry
	// without a path configures.
	sourceConfiguredBuiltin = sourceBuiltin + ", " + ConfigName
)

// agentEntry is one configured agent and where it was found.
type agentEntry struct {
	Name        string
	Plugin      host.AgentPlugin
	Credentials host.CredentialPolicy
	Source      string // a source* constant or ConfigName
}

// builtin reports whether this binary serves the entry's plugin.
func (e agentEntry) builtin() bool { return strings.HasPrefix(e.Source, sourceBuiltin) }

// loadAgents returns the agents of the App's host on stateDir (see
// loadAgents).
func (a *App) loadAgents(stateDir, exe string) ([]agentEntry, error) {
	return loadAgents(stateDir, exe, a.builtinNames(), a.Credentials)
}

// loadAgents returns the agents a host on stateDir runs: the built-ins
// (served by exe re-executing itself, with the credential policies
// policies names for them), every executable in the plugins directory,
// and those agenthost.json names, later sources overriding earlier ones
// of the same name; an agenthost.json entry without a path configures the
// built-in of its name. A malformed configuration is an error; a missing
// one is not.
func loadAgents(stateDir, exe string, builtins []string, policies map[string]host.CredentialPolicy) ([]agentEntry, error) {
	byName := map[string]agentEntry{}
	builtin := func(name string) agentEntry {
		return agentEntry{Name: name, Source: sourceBuiltin, Credentials: policies[name],
			Plugin: host.AgentPlugin{Path: exe, Args: []string{PluginCommand, name}}}
	}
	for _, name := range builtins {
		byName[name] = builtin(name)
	}
	dir := filepath.Join(stateDir, PluginsDirName)
	ents, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("read the plugins directory: %w", err)
	}
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		path := filepath.Join(dir, name)
		fi, err := os.Stat(path) // follows symlinks
		if err != nil || !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
			continue
		}
		byName[name] = agentEntry{Name: name, Source: sourcePluginsDir, Plugin: host.AgentPlugin{Path: path}}
	}
	cfg, err := readConfig(filepath.Join(stateDir, ConfigName))
	if err != nil {
		return nil, err
	}
	for name, a := range cfg.Agents {
		inherit := a.Credentials == CredentialsInherit
		if a.Path == "" {
			if !slices.Contains(builtins, name) {
				return nil, fmt.Errorf(`%s: agent %q: "path" is required: no built-in is named %q (the built-ins are %s)`,
					cfg.path, name, name, strings.Join(builtins, ", "))
			}
			e := builtin(name)
			e.Source = sourceConfiguredBuiltin
			e.Plugin.Env = a.Env
			e.Credentials.Inherit = inherit
			byName[name] = e
			continue
		}
		byName[name] = agentEntry{Name: name, Source: ConfigName,
			Plugin:      host.AgentPlugin{Path: a.Path, Args: a.Args, Env: a.Env, SHA256: a.SHA256},
			Credentials: host.CredentialPolicy{Variables: a.CredentialVariables, Inherit: inherit}}
	}
	out := make([]agentEntry, 0, len(byName))
	for _, e := range byName {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b agentEntry) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// readConfig reads and validates agenthost.json; a missing file is an
// empty configuration.
func readConfig(path string) (configFile, error) {
	cfg := configFile{path: path}
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return cfg, nil
	}
	if err != nil {
		return cfg, fmt.Errorf("read %s: %w", path, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return cfg, fmt.Errorf(`%s: %w; expected {"agents": {"NAME": {"path": "/abs/path", "args": [], "env": ["K=V"], "sha256": "hex", "credentials": "strip|inherit", "credentialVariables": ["KEY"]}}}`, path, err)
	}
	for name, a := range cfg.Agents {
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%s: agent %q: %s", path, name, fmt.Sprintf(format, args...))
		}
		switch {
		case name == "" || strings.ContainsAny(name, "/\x00") || strings.TrimSpace(name) != name:
			return cfg, fmt.Errorf("%s: %q is not a usable agent name", path, name)
		case a.Credentials != "" && a.Credentials != CredentialsStrip && a.Credentials != CredentialsInherit:
			return cfg, bad(`"credentials" must be %q (the default) or %q, got %q`, CredentialsStrip, CredentialsInherit, a.Credentials)
		case a.Path == "" && (len(a.Args) > 0 || a.SHA256 != ""):
			return cfg, bad(`"args" and "sha256" need a "path"; an entry without one configures a built-in's "env" and "credentials"`)
		case a.Path == "" && len(a.CredentialVariables) > 0:
			return cfg, bad(`"credentialVariables" need a "path": a built-in names its own credential variables`)
		case a.Path != "" && !filepath.IsAbs(a.Path):
			return cfg, bad(`"path" must be absolute, got %q`, a.Path)
		case a.SHA256 != "" && !isHexDigest(a.SHA256):
			return cfg, bad(`"sha256" must be 64 hex digits, got %q`, a.SHA256)
		}
		for _, kv := range a.Env {
			if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
				return cfg, bad(`"env" entries must be KEY=VALUE, got %q`, kv)
			}
		}
		for _, k := range a.CredentialVariables {
			if k == "" || strings.ContainsAny(k, "=\x00") {
				return cfg, bad(`"credentialVariables" entries must be variable names, got %q`, k)
			}
		}
	}
	return cfg, nil
}

func isHexDigest(s string) bool {
	return len(s) == 64 && strings.Trim(strings.ToLower(s), "0123456789abcdef") == ""
}

// hostCredentials turns entries into the host's credential policies.
func hostCredentials(entries []agentEntry) map[string]host.CredentialPolicy {
	m := map[string]host.CredentialPolicy{}
	for _, e := range entries {
		if len(e.Credentials.Variables) > 0 || e.Credentials.Inherit {
			m[e.Name] = e.Credentials
		}
	}
	return m
}

// hostAgents turns entries into the host's configuration.
func hostAgents(entries []agentEntry) map[string]host.AgentPlugin {
	m := make(map[string]host.AgentPlugin, len(entries))
	for _, e := range entries {
		m[e.Name] = e.Plugin
	}
	return m
}
