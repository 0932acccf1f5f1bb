package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/hashicorp/go-hclog"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/host"
)

// How a running host finds a plugin installed (or an agenthost.json
// changed) while it runs: two triggers, one decider (loadAgents).
//
//   - A request that names an agent the host does not serve rescans at once
//     (host.Config.OnUnknownAgent). The request comes after the copy that
//     installed the plugin, so the file is complete: `cp plugin
//     <state-dir>/plugins/mine && agenthost run --agent mine` works with no
//     wait and no race.
//   - A watch on the state directory (for agenthost.json, which editors
//     replace by rename, so the directory is watched and not the file) and
//     on the plugins directory rescans after the changes settle: no event
//     for reloadQuiet, and no file of the plugins directory modified within
//     it (a copy in progress keeps its file's mtime fresh), waiting at most
//     reloadMaxWait. This catches what no request asks for: an agent
//     removed, or one whose configuration changed.
//
// A plugin half copied when a rescan runs anyway (a copy that stalls) is
// served but harmless: nothing starts it but a request, and Linux refuses
// to execute a file open for writing (ETXTBSY), so such a start fails with
// that error instead of running half a plugin (and a failed capabilities
// probe is not kept). Install by copy to a dot-file (never a plugin) and
// rename to be safe everywhere.
//
// A configuration loadAgents refuses (agenthost.json mid-write, a relative
// path, a misspelt field) is logged at warn, reported by _agenthost/agents
// (api.AgentsReload.Error), and the agents served before are kept; the next
// change rescans again.
const (
	reloadQuiet   = 200 * time.Millisecond
	reloadMaxWait = 5 * time.Second
)

// agentsReloader keeps a running host's agents in step with the state
// directory's plugins directory and agenthost.json.
type agentsReloader struct {
	stateDir string
	load     func() ([]agentEntry, error)
	apply    func([]agentEntry)
	log      hclog.Logger

	// mu serialises rescans (a slow one never overwrites a newer one) and
	// guards what follows.
	mu     sync.Mutex
	served []agentEntry
	at     time.Time
	err    error
}

// newAgentsReloader returns a reloader serving agents (loaded at open) that
// applies a new configuration to h.
func newAgentsReloader(stateDir string, agents []agentEntry, load func() ([]agentEntry, error), log hclog.Logger) *agentsReloader {
	return &agentsReloader{stateDir: stateDir, load: load, log: log, served: agents, at: time.Now()}
}

// attach makes r apply new configurations to h.
func (r *agentsReloader) attach(h *host.Host) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.apply = func(entries []agentEntry) { h.SetAgents(hostAgents(entries), hostCredentials(entries)) }
}

// onUnknownAgent is the host's Config.OnUnknownAgent.
func (r *agentsReloader) onUnknownAgent(_ context.Context, agent string) {
	r.reload("a request named agent " + agent + ", which the host does not serve")
}

// reload rescans the configuration and applies it, or keeps the one served
// when it is refused.
func (r *agentsReloader) reload(why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	entries, err := r.load()
	r.at = time.Now()
	if err != nil {
		if r.err == nil || r.err.Error() != err.Error() {
			r.log.Warn("the agents' configuration on disk is refused; serving the agents as before", "error", err, "why", why)
		}
		r.err = err
		return
	}
	if r.err != nil {
		r.log.Info("the agents' configuration on disk is accepted again")
	}
	r.err = nil
	added, removed, changed := diffAgents(r.served, entries)
	if len(added)+len(removed)+len(changed) == 0 {
		return
	}
	r.log.Info("agents changed", "added", added, "removed", removed, "changed", changed, "why", why)
	if r.apply != nil {
		r.apply(entries)
	}
	r.served = entries
}

// result is the answer to _agenthost/agents.
func (r *agentsReloader) result() api.AgentsResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := api.AgentsResult{Agents: []string{}, Served: servedInfo(r.served), Reload: &api.AgentsReload{At: r.at}}
	for _, e := range r.served {
		out.Agents = append(out.Agents, e.Name)
	}
	if r.err != nil {
		out.Reload.Error = r.err.Error()
	}
	return out
}

// servedInfo describes entries as the API does.
func servedInfo(entries []agentEntry) []api.AgentInfo {
	out := make([]api.AgentInfo, 0, len(entries))
	for _, e := range entries {
		info := api.AgentInfo{Name: e.Name, Source: e.Source, Fingerprint: e.fingerprint()}
		if !e.builtin() {
			info.Path = e.Plugin.Path
		}
		out = append(out, info)
	}
	return out
}

// fingerprint is e's api.AgentInfo.Fingerprint, and what sameEntry
// compares: a SHA-256 over every setting of the entry, each
// length-prefixed so no two settings run into each other.
func (e agentEntry) fingerprint() string {
	h := sha256.New()
	field := func(s string) { fmt.Fprintf(h, "%d:%s;", len(s), s) }
	list := func(l []string) {
		fmt.Fprintf(h, "%d[", len(l))
		for _, s := range l {
			field(s)
		}
	}
	field(e.Source)
	field(e.Plugin.Path)
	field(e.Plugin.SHA256)
	field(e.Plugin.Revision)
	list(e.Plugin.Args)
	list(e.Plugin.Env)
	field(strconv.FormatBool(e.Credentials.Inherit))
	list(e.Credentials.Variables)
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// diffAgents names the agents of after that before lacks, those of before
// that after lacks, and those whose plugin or credential policy differs.
func diffAgents(before, after []agentEntry) (added, removed, changed []string) {
	find := func(es []agentEntry, name string) (agentEntry, bool) {
		i := slices.IndexFunc(es, func(e agentEntry) bool { return e.Name == name })
		if i < 0 {
			return agentEntry{}, false
		}
		return es[i], true
	}
	for _, a := range after {
		b, ok := find(before, a.Name)
		switch {
		case !ok:
			added = append(added, a.Name)
		case !sameEntry(a, b):
			changed = append(changed, a.Name)
		}
	}
	for _, b := range before {
		if _, ok := find(after, b.Name); !ok {
			removed = append(removed, b.Name)
		}
	}
	return added, removed, changed
}

// sameEntry reports whether a and b configure the same plugin the same way.
func sameEntry(a, b agentEntry) bool { return a.fingerprint() == b.fingerprint() }

// watch rescans on changes to agenthost.json and the plugins directory
// until ctx ends; the returned function ends the watch and waits for it. A
// watch that cannot start is logged, and the host then finds new agents
// only by the unknown-agent rescan.
func (r *agentsReloader) watch(ctx context.Context) (stop func()) {
	w, err := fsnotify.NewWatcher()
	if err == nil {
		err = w.Add(r.stateDir)
		if err != nil {
			_ = w.Close()
		}
	}
	if err != nil {
		r.log.Warn("not watching the plugins directory and agenthost.json: new agents are found when a request names them", "error", err)
		return func() {}
	}
	plugins := filepath.Join(r.stateDir, PluginsDirName)
	if err := w.Add(plugins); err != nil && !errors.Is(err, os.ErrNotExist) {
		r.log.Warn("not watching the plugins directory", "dir", plugins, "error", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer w.Close()
		r.watchLoop(ctx, w, plugins)
	}()
	return func() {
		cancel()
		<-done
	}
}

// watchLoop turns w's events into settled rescans.
func (r *agentsReloader) watchLoop(ctx context.Context, w *fsnotify.Watcher, plugins string) {
	config := filepath.Join(r.stateDir, ConfigName)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var first time.Time // the first event of the changes not rescanned yet
	for {
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			// An overflow loses events: rescan to be sure.
			r.log.Warn("watching the agents' configuration", "error", err)
			if first.IsZero() {
				first = time.Now()
			}
			timer.Reset(quietFor(first))
		case ev, ok := <-w.Events:
			if !ok {
				return
			}
			switch {
			case ev.Name == plugins:
				if ev.Has(fsnotify.Create) {
					// Made after serve started: watch it too (an error
					// leaves the unknown-agent rescan).
					if err := w.Add(plugins); err != nil {
						r.log.Warn("not watching the plugins directory", "dir", plugins, "error", err)
					}
				}
			case ev.Name == config, filepath.Dir(ev.Name) == plugins:
			default:
				continue // the state directory's other files
			}
			if first.IsZero() {
				first = time.Now()
			}
			timer.Reset(quietFor(first))
		case <-timer.C:
			if time.Since(first) < reloadMaxWait && !settled(plugins, reloadQuiet) {
				timer.Reset(quietFor(first))
				continue
			}
			first = time.Time{}
			r.reload("the plugins directory or " + ConfigName + " changed")
		}
	}
}

// quietFor is how long to wait for quiet before the rescan of changes
// first seen at first: reloadQuiet, but never past reloadMaxWait after
// first, so a steady stream of events (each would otherwise restart the
// wait) cannot postpone the rescan indefinitely.
func quietFor(first time.Time) time.Duration {
	return max(0, min(reloadQuiet, reloadMaxWait-time.Since(first)))
}

// settled reports whether no file in dir was modified within quiet.
func settled(dir string, quiet time.Duration) bool {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return true
	}
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) < quiet {
			return false
		}
	}
	return true
}
