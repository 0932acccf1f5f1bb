package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/internal/apiclient"
)

// agentsOf asks the host on sock for _agenthost/agents.
func agentsOf(t *testing.T, c *apiclient.Client) api.AgentsResult {
	t.Helper()
	var res api.AgentsResult
	if err := c.Call(ctxFor(t), api.MethodAgents, nil, &res); err != nil {
		t.Fatal(err)
	}
	return res
}

// waitAgents waits until the host's answer to _agenthost/agents satisfies
// ok: the watch rescans after the change settles, on its own time.
func waitAgents(t *testing.T, c *apiclient.Client, what string, ok func(api.AgentsResult) bool) api.AgentsResult {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		res := agentsOf(t, c)
		if ok(res) {
			return res
		}
		if time.Now().After(deadline) {
			t.Fatalf("the host never came to %s: it answers %+v (reload %+v)", what, res, res.Reload)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// copyExecutable copies src to dst as cp would: written in place, mode 0755.
func copyExecutable(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// A plugin copied into a running host's plugins directory runs a turn at
// once, without a restart: the request that names it rescans.
func TestPluginCopiedIntoARunningHostRunsWithoutARestart(t *testing.T) {
	t.Parallel()
	dir := stateDir(t)
	s := serve(t, dir)
	if slices.Contains(s.ready.Agents, "mine") {
		t.Fatalf("the host serves mine before it is installed: %v", s.ready.Agents)
	}
	// The plugins directory does not exist when serve starts.
	if err := os.Mkdir(filepath.Join(dir, "plugins"), 0o700); err != nil {
		t.Fatal(err)
	}
	copyExecutable(t, bins.scripted, filepath.Join(dir, "plugins", "mine"))
	// Its mtime in the future, as a copy still writing it keeps it fresh:
	// the watch waits for it to settle (up to 5 s), so the run finds it by
	// the rescan its unknown agent asks for.
	soon := time.Now().Add(time.Minute)
	if err := os.Chtimes(filepath.Join(dir, "plugins", "mine"), soon, soon); err != nil {
		t.Fatal(err)
	}
	if r := mustAH(t, "--state-dir", dir, "run", "--agent", "mine", "--session", "m1", "count 2"); r.stdout != "12\n" {
		t.Errorf("run --agent mine right after the copy: %s", r)
	}
	c := dialAPI(t, s.ready.Socket, &collector{})
	res := agentsOf(t, c)
	i := slices.IndexFunc(res.Served, func(a api.AgentInfo) bool { return a.Name == "mine" })
	if i < 0 || res.Served[i].Source != "plugins directory" || res.Served[i].Path != filepath.Join(dir, "plugins", "mine") ||
		!slices.Contains(res.Agents, "mine") || res.Reload == nil || res.Reload.Error != "" {
		t.Errorf("_agenthost/agents after the install: %+v (reload %+v)", res, res.Reload)
	}
	if r := mustAH(t, "--state-dir", dir, "agents"); !regexpMatch(`(?m)^mine\s+plugins directory\s+\S+/plugins/mine\s+-\s+.*\s+serves it$`, r.stdout) {
		t.Errorf("agents with the host running:\n%s", r.stdout)
	}
}

// The watch finds agenthost.json's changes and the plugins directory's
// removals with no request asking; a malformed agenthost.json is reported
// (logged, and in _agenthost/agents and `agenthost agents`) while the host
// keeps serving the agents it had; a removed agent takes no new session,
// while its running session goes on.
func TestAgentsChangedWhileServing(t *testing.T) {
	t.Parallel()
	dir := stateDir(t)
	if err := os.Mkdir(filepath.Join(dir, "plugins"), 0o700); err != nil {
		t.Fatal(err)
	}
	copyExecutable(t, bins.scripted, filepath.Join(dir, "plugins", "mine"))
	s := serve(t, dir)
	c := dialAPI(t, s.ready.Socket, &collector{})
	if r := mustAH(t, "--state-dir", dir, "run", "--agent", "mine", "--session", "m1", "count 1"); r.stdout != "1\n" {
		t.Fatalf("run --agent mine: %s", r)
	}

	config := filepath.Join(dir, "agenthost.json")
	// Written as an editor does: a temporary file renamed over the name.
	writeConfig := func(text string) {
		t.Helper()
		tmp := config + ".tmp"
		if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, config); err != nil {
			t.Fatal(err)
		}
	}
	writeConfig(`{"agents": {"other": {"path": "` + bins.scripted + `"}}}`)
	waitAgents(t, c, "serve other", func(r api.AgentsResult) bool { return slices.Contains(r.Agents, "other") })

	writeConfig(`{"agents": {"other": {"path": "` + bins.scripted + `"}, "broken": {"path": "relative/plugin"}}}`)
	res := waitAgents(t, c, "refuse the malformed agenthost.json", func(r api.AgentsResult) bool { return r.Reload != nil && r.Reload.Error != "" })
	if !strings.Contains(res.Reload.Error, `agent "broken": "path" must be absolute`) || !slices.Contains(res.Agents, "other") ||
		!slices.Contains(res.Agents, "mine") || slices.Contains(res.Agents, "broken") {
		t.Errorf("_agenthost/agents with a malformed agenthost.json: %+v (reload %+v)", res, res.Reload)
	}
	if r := mustAH(t, "--state-dir", dir, "run", "--agent", "other", "count 1"); r.stdout != "1\n" {
		t.Errorf("run --agent other, with the configuration on disk refused: %s", r)
	}
	r := ah(t, "--state-dir", dir, "agents")
	if r.code != 1 || !strings.Contains(r.stdout, "The running host refused the configuration on disk") ||
		!regexpMatch(`The running host serves claude, codex, mine, other, scripted\.`, r.stdout) ||
		!strings.Contains(r.stderr, `the configuration on disk is refused (the running host keeps the agents it had)`) ||
		!strings.Contains(r.stderr, `"path" must be absolute`) {
		t.Errorf("agents with a malformed agenthost.json and the host running: %s", r)
	}
	var listed struct {
		Host  api.AgentsResult `json:"host"`
		Error string           `json:"error"`
	}
	r = ah(t, "--state-dir", dir, "agents", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &listed); err != nil || r.code != 1 || listed.Host.Reload == nil ||
		listed.Host.Reload.Error == "" || !strings.Contains(listed.Error, "must be absolute") {
		t.Errorf("agents --json with a malformed agenthost.json: %s (%v)", r, err)
	}
	if !strings.Contains(s.stderrText(), "the agents' configuration on disk is refused") {
		t.Errorf("serve did not log the refusal:\n%s", s.stderrText())
	}

	// Mended, and both third-party agents removed: mine's session goes on.
	writeConfig(`{"agents": {}}`)
	if err := os.Remove(filepath.Join(dir, "plugins", "mine")); err != nil {
		t.Fatal(err)
	}
	res = waitAgents(t, c, "drop mine and other", func(r api.AgentsResult) bool {
		return !slices.Contains(r.Agents, "mine") && !slices.Contains(r.Agents, "other")
	})
	if res.Reload == nil || res.Reload.Error != "" {
		t.Errorf("the mended configuration is still refused: %+v", res.Reload)
	}
	r = ah(t, "--state-dir", dir, "run", "--agent", "mine", "count 1")
	if r.code != 1 || !strings.Contains(r.stderr, `unknown agent "mine"`) {
		t.Errorf("run --agent mine once it is removed: %s", r)
	}
	if r := mustAH(t, "--state-dir", dir, "run", "--session", "m1", "count 3"); r.stdout != "123\n" {
		t.Errorf("the running session of the removed agent: %s", r)
	}
	r = mustAH(t, "--state-dir", dir, "agents")
	if !regexpMatch(`(?m)^scripted\s+built-in\s+.*serves it$`, r.stdout) || strings.Contains(r.stdout, "mine") {
		t.Errorf("agents after the removal:\n%s", r.stdout)
	}
}
