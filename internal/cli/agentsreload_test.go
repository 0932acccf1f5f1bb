package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/host"
)

func entryNames(es []agentEntry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Name)
	}
	return out
}

// newTestReloader is a reloader on dir whose applied configurations arrive
// on the channel.
func newTestReloader(t *testing.T, dir string) (*agentsReloader, <-chan []agentEntry) {
	t.Helper()
	load := func() ([]agentEntry, error) { return loadAgents(dir, "/bin/agenthost", []string{"scripted"}, nil) }
	initial, err := load()
	if err != nil {
		t.Fatal(err)
	}
	r := newAgentsReloader(dir, initial, load, hclog.NewNullLogger())
	applied := make(chan []agentEntry, 16)
	r.apply = func(es []agentEntry) { applied <- es }
	return r, applied
}

// A rescan applies a changed configuration, and keeps the one served when
// the configuration on disk is refused, saying why.
func TestAgentsReloadKeepsThePreviousOnAMalformedChange(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r, applied := newTestReloader(t, dir)
	r.reload("test")
	if len(applied) != 0 {
		t.Fatalf("an unchanged configuration was applied again")
	}
	write(t, filepath.Join(dir, PluginsDirName, "mine"), "#!/bin/sh\n", 0o755)
	r.reload("test")
	if got := entryNames(<-applied); !slices.Equal(got, []string{"mine", "scripted"}) {
		t.Errorf("applied %v", got)
	}
	write(t, filepath.Join(dir, ConfigName), `{"agents": {"x": {"path": "relative"}}}`, 0o600)
	r.reload("test")
	res := r.result()
	if len(applied) != 0 || !slices.Equal(res.Agents, []string{"mine", "scripted"}) || res.Reload == nil ||
		!strings.Contains(res.Reload.Error, `"path" must be absolute`) {
		t.Errorf("after a malformed change: %d applied, result %+v (reload %+v)", len(applied), res, res.Reload)
	}
	has := func(want api.AgentInfo) bool {
		return slices.ContainsFunc(res.Served, func(s api.AgentInfo) bool {
			return s.Fingerprint != "" && s.Name == want.Name && s.Source == want.Source && s.Path == want.Path
		})
	}
	if !has(api.AgentInfo{Name: "mine", Source: sourcePluginsDir, Path: filepath.Join(dir, PluginsDirName, "mine")}) ||
		!has(api.AgentInfo{Name: "scripted", Source: sourceBuiltin}) {
		t.Errorf("served %+v", res.Served)
	}
	write(t, filepath.Join(dir, ConfigName), `{"agents": {}}`, 0o600)
	if err := os.Remove(filepath.Join(dir, PluginsDirName, "mine")); err != nil {
		t.Fatal(err)
	}
	r.reload("test")
	if got := entryNames(<-applied); !slices.Equal(got, []string{"scripted"}) || r.result().Reload.Error != "" {
		t.Errorf("after mending and removing: applied %v, reload %+v", got, r.result().Reload)
	}
}

// The watch rescans on agenthost.json replaced by rename and on a plugin
// copied into a plugins directory made after it started, and waits for a
// plugin still being written.
func TestAgentsWatchRescansOnChanges(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r, applied := newTestReloader(t, dir)
	stop := r.watch(context.Background())
	defer stop()
	next := func(what string) []string {
		t.Helper()
		select {
		case es := <-applied:
			return entryNames(es)
		case <-time.After(30 * time.Second):
			t.Fatalf("no rescan applied %s", what)
			return nil
		}
	}
	tmp := filepath.Join(dir, "agenthost.json.tmp")
	write(t, tmp, `{"agents": {"other": {"path": "/opt/other"}}}`, 0o600)
	if err := os.Rename(tmp, filepath.Join(dir, ConfigName)); err != nil {
		t.Fatal(err)
	}
	if got := next("agenthost.json"); !slices.Equal(got, []string{"other", "scripted"}) {
		t.Errorf("after agenthost.json: %v", got)
	}
	plugin := filepath.Join(dir, PluginsDirName, "mine")
	write(t, plugin, "#!/bin/sh\n", 0o755)
	// Still being written, as far as its mtime says: no rescan until it
	// settles (or reloadMaxWait passes).
	soon := time.Now().Add(time.Hour)
	if err := os.Chtimes(plugin, soon, soon); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if got := next("the plugin"); !slices.Equal(got, []string{"mine", "other", "scripted"}) || time.Since(start) < reloadMaxWait-reloadQuiet {
		t.Errorf("after the plugin: %v, %v after it was written", got, time.Since(start))
	}
}

// agents marks how the running host serves each agent on disk.
func TestServedStateMarksTheDifferences(t *testing.T) {
	t.Parallel()
	mine := agentEntry{Name: "mine", Source: sourcePluginsDir, Plugin: host.AgentPlugin{Path: "/s/plugins/mine"}}
	builtin := agentEntry{Name: "scripted", Source: sourceBuiltin, Plugin: host.AgentPlugin{Path: "/bin/agenthost", Args: []string{PluginCommand, "scripted"}}}
	served := []api.AgentInfo{
		{Name: "mine", Source: ConfigName, Path: "/opt/mine"},
		servedInfo([]agentEntry{builtin})[0],
	}
	for _, c := range []struct {
		e    agentEntry
		want string
	}{
		{mine, "serves it from agenthost.json /opt/mine"},
		{builtin, "serves it"},
		{agentEntry{Name: "new", Source: sourcePluginsDir, Plugin: host.AgentPlugin{Path: "/s/plugins/new"}}, "not served yet (from its next rescan)"},
	} {
		if got := servedState(c.e, served); got != c.want {
			t.Errorf("%s: %q, want %q", c.e.Name, got, c.want)
		}
	}
	added, removed, changed := diffAgents([]agentEntry{mine, builtin}, []agentEntry{builtin, {Name: "mine", Source: ConfigName, Plugin: host.AgentPlugin{Path: "/opt/mine"}}, {Name: "new"}})
	if !slices.Equal(added, []string{"new"}) || len(removed) != 0 || !slices.Equal(changed, []string{"mine"}) {
		t.Errorf("diffAgents: added %v, removed %v, changed %v", added, removed, changed)
	}
}

// A served agent whose settings changed on disk but not its name, source or
// path (here its sha256 pin, arguments, environment or credential policy)
// is not "serves it": the host runs it the way it read last. The
// fingerprint says so without showing an environment value.
func TestServedStateSeesAChangeOfSettingsAtTheSamePath(t *testing.T) {
	t.Parallel()
	base := agentEntry{Name: "mine", Source: ConfigName, Plugin: host.AgentPlugin{Path: "/opt/mine", Env: []string{"TOKEN=s3cret"}}}
	served := servedInfo([]agentEntry{base})
	if strings.Contains(mustJSON(t, served), "s3cret") {
		t.Errorf("the fingerprint shows an environment value: %s", mustJSON(t, served))
	}
	if got := servedState(base, served); got != "serves it" {
		t.Errorf("unchanged: %q", got)
	}
	for what, change := range map[string]func(*agentEntry){
		"sha256":      func(e *agentEntry) { e.Plugin.SHA256 = strings.Repeat("a", 64) },
		"args":        func(e *agentEntry) { e.Plugin.Args = []string{"--fast"} },
		"env":         func(e *agentEntry) { e.Plugin.Env = []string{"TOKEN=other"} },
		"credentials": func(e *agentEntry) { e.Credentials.Inherit = true },
		"variables":   func(e *agentEntry) { e.Credentials.Variables = []string{"TOKEN"} },
	} {
		e := base
		e.Plugin.Args, e.Plugin.Env = slices.Clone(base.Plugin.Args), slices.Clone(base.Plugin.Env)
		change(&e)
		if got := servedState(e, served); got != "serves it with its previous settings (until its next rescan)" {
			t.Errorf("%s changed: %q", what, got)
		}
		if _, _, changed := diffAgents([]agentEntry{base}, []agentEntry{e}); !slices.Equal(changed, []string{"mine"}) {
			t.Errorf("%s changed: diffAgents says changed %v", what, changed)
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A plugin upgraded by copying over the same name, its size unchanged, is
// a change: the rescan applies it (so the host drops the old plugin's
// capabilities: host.AgentPlugin.Revision differs).
func TestAPluginCopiedOverTheSameNameIsAChange(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	plugin := filepath.Join(dir, PluginsDirName, "mine")
	write(t, plugin, "#!/bin/sh\necho 1\n", 0o755)
	r, applied := newTestReloader(t, dir)
	before := r.result().Served
	// Rewritten in place (same inode, same size), with an mtime a copy
	// would give it.
	if err := os.WriteFile(plugin, []byte("#!/bin/sh\necho 2\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(-time.Minute)
	if err := os.Chtimes(plugin, later, later); err != nil {
		t.Fatal(err)
	}
	r.reload("test")
	select {
	case es := <-applied:
		i := slices.IndexFunc(es, func(e agentEntry) bool { return e.Name == "mine" })
		if i < 0 || es[i].Plugin.Revision == "" {
			t.Errorf("applied %+v, want mine with a revision", es)
		}
	default:
		t.Fatalf("a plugin copied over the same name was not applied")
	}
	if after := r.result().Served; slices.Equal(before, after) {
		t.Errorf("served %+v before and after: the fingerprint did not change", after)
	}
}

// A steady stream of changes (each within reloadQuiet of the last) does not
// postpone the rescan past reloadMaxWait after the first: it is applied
// while the writes go on.
func TestAgentsWatchRescansDuringASteadyStreamOfWrites(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r, applied := newTestReloader(t, dir)
	stop := r.watch(context.Background())
	defer stop()
	config := filepath.Join(dir, ConfigName)
	start := time.Now()
	tick := time.NewTicker(reloadQuiet / 4)
	defer tick.Stop()
	deadline := time.After(4 * reloadMaxWait)
	for {
		write(t, config, `{"agents": {"other": {"path": "/opt/other"}}}`, 0o600)
		select {
		case es := <-applied:
			if got := entryNames(es); !slices.Equal(got, []string{"other", "scripted"}) {
				t.Errorf("applied %v", got)
			}
			t.Logf("applied %v after the first write, the writes still going on", time.Since(start))
			return
		case <-deadline:
			t.Fatalf("no rescan in %v of writes every %v: each write postpones it", 4*reloadMaxWait, reloadQuiet/4)
		case <-tick.C:
		}
	}
}
