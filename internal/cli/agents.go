package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/internal/agentconfig"
)

// Files in the state directory.
const (
	// SocketName is the local API's unix socket in the state directory.
	SocketName = "agenthost.sock"
	// ConfigName is the optional configuration file in the state
	// directory (package agentconfig owns its shape).
	ConfigName = agentconfig.Name
	// PluginsDirName is the directory whose executables are plugins.
	PluginsDirName = "plugins"
	// PluginCommand is the hidden subcommand that serves a built-in plugin.
	PluginCommand = "__plugin"
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
// one is not. It is the one place that decides: serve calls it at open and
// on every rescan of a running host (agentsreload.go), `agenthost agents`
// to show the files.
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
		byName[name] = agentEntry{Name: name, Source: sourcePluginsDir, Plugin: host.AgentPlugin{Path: path, Revision: fileRevision(fi)}}
	}
	cfg, err := agentconfig.Read(filepath.Join(stateDir, ConfigName))
	if err != nil {
		return nil, err
	}
	for name, a := range cfg.Agents {
		inherit := a.Credentials == agentconfig.CredentialsInherit
		if a.Path == "" {
			if !slices.Contains(builtins, name) {
				return nil, fmt.Errorf(`%s: agent %q: "path" is required: no built-in is named %q (the built-ins are %s)`,
					cfg.Path(), name, name, strings.Join(builtins, ", "))
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

// fileRevision names the version of a plugin file: its size, mtime and
// inode. A plugin upgraded by copying over the same name changes at least
// its mtime (or, renamed into place, its inode), so a rescan sees a change
// and the host drops the old plugin's capabilities (host.AgentPlugin's
// Revision).
func fileRevision(fi os.FileInfo) string {
	rev := fmt.Sprintf("%d/%d", fi.Size(), fi.ModTime().UnixNano())
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		rev += fmt.Sprintf("/%d:%d", st.Dev, st.Ino)
	}
	return rev
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
