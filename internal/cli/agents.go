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
}

type configAgent struct {
	Path   string   `json:"path"`
	Args   []string `json:"args"`
	Env    []string `json:"env"`
	SHA256 string   `json:"sha256"`
}

// agentEntry is one configured agent and where it was found.
type agentEntry struct {
	Name   string
	Plugin host.AgentPlugin
	Source string // "built-in", "plugins directory", "agenthost.json"
}

// loadAgents returns the agents a host on stateDir runs: the built-ins
// (served by exe re-executing itself), every executable in the plugins
// directory, and those agenthost.json names, later sources overriding
// earlier ones of the same name. A malformed configuration is an error;
// a missing one is not.
func loadAgents(stateDir, exe string, builtins []string) ([]agentEntry, error) {
	byName := map[string]agentEntry{}
	for _, name := range builtins {
		byName[name] = agentEntry{Name: name, Source: "built-in",
			Plugin: host.AgentPlugin{Path: exe, Args: []string{PluginCommand, name}}}
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
		byName[name] = agentEntry{Name: name, Source: "plugins directory", Plugin: host.AgentPlugin{Path: path}}
	}
	cfg, err := readConfig(filepath.Join(stateDir, ConfigName))
	if err != nil {
		return nil, err
	}
	for name, a := range cfg.Agents {
		byName[name] = agentEntry{Name: name, Source: ConfigName,
			Plugin: host.AgentPlugin{Path: a.Path, Args: a.Args, Env: a.Env, SHA256: a.SHA256}}
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
	var cfg configFile
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
		return cfg, fmt.Errorf(`%s: %w; expected {"agents": {"NAME": {"path": "/abs/path", "args": [], "env": ["K=V"], "sha256": "hex"}}}`, path, err)
	}
	for name, a := range cfg.Agents {
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%s: agent %q: %s", path, name, fmt.Sprintf(format, args...))
		}
		switch {
		case name == "" || strings.ContainsAny(name, "/\x00") || strings.TrimSpace(name) != name:
			return cfg, fmt.Errorf("%s: %q is not a usable agent name", path, name)
		case a.Path == "":
			return cfg, bad(`"path" is required`)
		case !filepath.IsAbs(a.Path):
			return cfg, bad(`"path" must be absolute, got %q`, a.Path)
		case a.SHA256 != "" && !isHexDigest(a.SHA256):
			return cfg, bad(`"sha256" must be 64 hex digits, got %q`, a.SHA256)
		}
		for _, kv := range a.Env {
			if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
				return cfg, bad(`"env" entries must be KEY=VALUE, got %q`, kv)
			}
		}
	}
	return cfg, nil
}

func isHexDigest(s string) bool {
	return len(s) == 64 && strings.Trim(strings.ToLower(s), "0123456789abcdef") == ""
}

// hostAgents turns entries into the host's configuration.
func hostAgents(entries []agentEntry) map[string]host.AgentPlugin {
	m := make(map[string]host.AgentPlugin, len(entries))
	for _, e := range entries {
		m[e.Name] = e.Plugin
	}
	return m
}
