package codex

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/plugin/sdk"
	"github.com/agenthost/agenthost/plugins/internal/allowscope"
)

// The fileChange shapes are codex 0.171.0's, as the live app-server
// reported them: an update's hunks without file headers, an added file's
// text, a deleted file's old text.
func TestFileDiffs(t *testing.T) {
	dir := t.TempDir()
	upd := filepath.Join(dir, "a.txt")
	if err := os.WriteFile(upd, []byte("line1\nline2\nline3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	changes := []fileChange{
		{Path: upd, Kind: []byte(`{"type":"update","move_path":null}`), Diff: "@@ -1,2 +1,2 @@\n line1\n-line2\n+LINE2\n"},
		{Path: filepath.Join(dir, "new.txt"), Kind: []byte(`{"type":"add"}`), Diff: "hello\nworld\n"},
		{Path: filepath.Join(dir, "gone.txt"), Kind: []byte(`{"type":"delete"}`), Diff: "old\n"},
	}
	check := func(applied bool) {
		t.Helper()
		content, locs := fileDiffs(changes, applied)
		if len(content) != 3 || len(locs) != 3 {
			t.Fatalf("applied=%v: %d diffs, %d locations; want 3 each", applied, len(content), len(locs))
		}
		d := content[0].Diff
		if d == nil || d.Path != upd || d.OldText == nil || *d.OldText != "line1\nline2\nline3\n" || d.NewText != "line1\nLINE2\nline3\n" {
			t.Errorf("applied=%v: the update's diff %+v; want the whole file before and after", applied, d)
		}
		if locs[0] != (sdk.Location{Path: upd, Line: 1}) {
			t.Errorf("the update's location %+v", locs[0])
		}
		if d := content[1].Diff; d == nil || d.OldText != nil || d.NewText != "hello\nworld\n" {
			t.Errorf("the added file's diff %+v; want no old text", d)
		}
		if d := content[2].Diff; d == nil || d.OldText == nil || *d.OldText != "old\n" || d.NewText != "" {
			t.Errorf("the deleted file's diff %+v", d)
		}
	}
	// Before codex writes (item/started, the approval) the disk has the
	// old text; after (item/completed), the new.
	check(false)
	if err := os.WriteFile(upd, []byte("line1\nLINE2\nline3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	check(true)

	// A file that no longer matches the hunks: the hunks' own lines.
	if err := os.WriteFile(upd, []byte("something else\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	content, _ := fileDiffs(changes[:1], false)
	if d := content[0].Diff; d == nil || *d.OldText != "line1\nline2\n" || d.NewText != "line1\nLINE2\n" {
		t.Errorf("mismatch fallback %+v", d)
	}
}

func TestApplyHunks(t *testing.T) {
	for _, tt := range []struct {
		name, old, diff, want string
	}{
		{"middle", "a\nb\nc\nd\ne\n", "@@ -2,3 +2,3 @@\n b\n-c\n+C\n d\n", "a\nb\nC\nd\ne\n"},
		{"two hunks", "1\n2\n3\n4\n5\n6\n7\n8\n", "@@ -1,2 +1,2 @@\n-1\n+one\n 2\n@@ -7,2 +7,3 @@\n 7\n 8\n+nine\n", "one\n2\n3\n4\n5\n6\n7\n8\nnine\n"},
		{"insert at top", "x\n", "@@ -0,0 +1 @@\n+first\n", "first\nx\n"},
		{"no final newline", "a\nb", "@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+B\n\\ No newline at end of file\n", "a\nB"},
	} {
		hs, err := parseHunks(tt.diff)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		got, err := applyHunks(tt.old, hs, false)
		if err != nil || got != tt.want {
			t.Errorf("%s: %q, %v; want %q", tt.name, got, err, tt.want)
			continue
		}
		back, err := applyHunks(got, hs, true)
		if err != nil || back != tt.old {
			t.Errorf("%s reversed: %q, %v; want %q", tt.name, back, err, tt.old)
		}
	}
	hs, _ := parseHunks("@@ -1 +1 @@\n-a\n+b\n")
	if _, err := applyHunks("z\n", hs, false); !errors.Is(err, errDiffMismatch) {
		t.Errorf("a file that does not match: %v", err)
	}
	if _, err := parseHunks("@@ nonsense @@\n"); err == nil {
		t.Error("a bad hunk header parsed")
	}
}

// FuzzParseHunks feeds codex's diffs (outside input) to the hunk parser
// and applier: they never panic, and what applies reverses.
func FuzzParseHunks(f *testing.F) {
	f.Add("line1\nline2\n", "@@ -1,2 +1,2 @@\n line1\n-line2\n+LINE2\n")
	f.Add("", "@@ -0,0 +1,2 @@\n+hello\n+world\n")
	f.Add("a", "@@ -1 +1 @@\n-a\n\\ No newline at end of file\n+b\n")
	f.Fuzz(func(t *testing.T, old, diff string) {
		hs, err := parseHunks(diff)
		if err != nil {
			return
		}
		out, err := applyHunks(old, hs, false)
		if err != nil {
			return
		}
		back, err := applyHunks(out, hs, true)
		if err != nil || back != old {
			t.Errorf("applied to %q, the hunks give %q, and reversed %q (%v); want the old text back", old, out, back, err)
		}
	})
}

// testAgent is an agent with an open session as handshake leaves it,
// without an app-server: enough for the settings.
func testAgent(o options, res threadResult, models []modelInfo) *agent {
	a := &agent{conn: newConn(nil, nil), opts: o, models: models, ownNames: map[string]bool{}}
	a.settings = newSettings(o, res)
	return a
}

var testModels = []modelInfo{
	{ID: "m1", Model: "m1", DisplayName: "M1", DefaultReasoningEffort: "low", SupportedReasoningEfforts: []struct {
		ReasoningEffort string `json:"reasoningEffort"`
		Description     string `json:"description"`
	}{{ReasoningEffort: "low"}, {ReasoningEffort: "high"}}},
	{ID: "m2", Model: "m2", DisplayName: "M2", DefaultReasoningEffort: "medium", SupportedReasoningEfforts: []struct {
		ReasoningEffort string `json:"reasoningEffort"`
		Description     string `json:"description"`
	}{{ReasoningEffort: "medium"}}},
	{ID: "hidden", Model: "hidden", Hidden: true},
}

func TestSettings(t *testing.T) {
	// Nothing asked: codex's defaults (on-request, read-only) are the
	// read-only preset.
	o, _ := parseOptions(map[string]string{"env.X": "1"})
	res := threadResult{Model: "m1", ApprovalPolicy: []byte(`"on-request"`), Sandbox: []byte(`{"type":"readOnly","networkAccess":false}`)}
	a := testAgent(o, res, testModels)
	if a.settings.mode != "read-only" {
		t.Fatalf("mode %q; want read-only", a.settings.mode)
	}
	ack := a.acknowledged()
	if ack["mode"] != "read-only" || ack["model"] != "m1" || ack["env.X"] != "1" {
		t.Errorf("acknowledged %v", ack)
	}
	opts := a.configOptions()
	if len(opts) != 3 || opts[0].ID != "mode" || opts[1].ID != "model" || opts[2].ID != "effort" || opts[2].CurrentValue != "low" {
		t.Fatalf("config options %+v", opts)
	}
	var values []string
	for _, v := range opts[1].Values {
		values = append(values, v.Value)
	}
	if !slices.Equal(values, []string{"m1", "m2"}) {
		t.Errorf("model values %v; want the listed models without the hidden one", values)
	}

	// The model and effort change from the next turn on; a model without
	// the effort gets its default, sent (codex would keep the thread's).
	if _, err := a.SetConfigOption(t.Context(), "effort", "high"); err != nil {
		t.Fatal(err)
	}
	p := a.settings.turnStart("th", nil, nil)
	if p.Effort != "high" || p.Model != "m1" || p.ApprovalPolicy != "on-request" {
		t.Errorf("turn/start %+v", p)
	}
	opts, err := a.SetConfigOption(t.Context(), "model", "m2")
	if err != nil || a.settings.effort != "medium" || opts[2].CurrentValue != "medium" || a.settings.turnStart("th", nil, nil).Effort != "medium" {
		t.Errorf("after model m2: effort %q, options %+v, %v", a.settings.effort, opts, err)
	}
	var ioe *sdk.InvalidOptionError
	for _, bad := range [][2]string{{"model", "nope"}, {"effort", "high"}, {"mode", "yolo"}, {"colour", "red"}} {
		if _, err := a.SetConfigOption(t.Context(), bad[0], bad[1]); !errors.As(err, &ioe) || ioe.Option != bad[0] {
			t.Errorf("SetConfigOption(%s, %s): %v; want an InvalidOptionError naming it", bad[0], bad[1], err)
		}
	}

	// A mode is an approval policy and a sandbox policy on turn/start.
	if err := a.SetMode(t.Context(), "full-access"); err != nil {
		t.Fatal(err)
	}
	p = a.settings.turnStart("th", nil, nil)
	if p.ApprovalPolicy != "never" || marshal(p.SandboxPolicy) != `{"type":"dangerFullAccess"}` || a.acknowledged()["mode"] != "full-access" {
		t.Errorf("full-access turn/start %+v", p)
	}
	if err := a.SetMode(t.Context(), "auto"); err != nil {
		t.Fatal(err)
	}
	if p := a.settings.turnStart("th", nil, []string{"/data"}); marshal(p.SandboxPolicy) != `{"type":"workspaceWrite","writableRoots":["/data"]}` {
		t.Errorf("auto's sandbox policy %s", marshal(p.SandboxPolicy))
	}

	// approval_policy and sandbox matching no preset: a custom mode, not
	// acknowledged as a mode.
	o, _ = parseOptions(map[string]string{"approval_policy": "untrusted", "sandbox": "workspace-write"})
	a = testAgent(o, threadResult{Model: "m1"}, testModels)
	if a.settings.mode != customMode || a.modeState().CurrentModeID != customMode || len(a.modeState().Available) != 4 {
		t.Errorf("custom mode state %+v", a.modeState())
	}
	if _, ok := a.acknowledged()["mode"]; ok {
		t.Error("a custom mode was acknowledged as the session option mode")
	}
	// Chosen again after a preset, it returns to the options; given back
	// on a resume, it defers to them.
	if err := a.SetMode(t.Context(), "full-access"); err != nil {
		t.Fatal(err)
	}
	if err := a.SetMode(t.Context(), customMode); err != nil || a.settings.approval != "untrusted" || a.settings.sandbox != "workspace-write" {
		t.Errorf("back to custom: %v, %+v", err, a.settings)
	}
	o, err = parseOptions(map[string]string{"mode": "custom", "approval_policy": "untrusted", "sandbox": "workspace-write"})
	if ap, sb := o.policy(); err != nil || ap != "untrusted" || sb != "workspace-write" {
		t.Errorf("mode custom on a resume: %v, %s, %s", err, ap, sb)
	}
}

func TestMCPConfig(t *testing.T) {
	cfg, err := mcpConfig([]sdk.MCPServer{
		{Name: "tools", Transport: "stdio", Command: "/bin/mcp", Args: []string{"-v"}, Env: []sdk.NameValue{{Name: "K", Value: "V"}}},
		{Name: "web", Transport: "http", URL: "http://127.0.0.1:9/mcp", Headers: []sdk.NameValue{{Name: "Authorization", Value: "Bearer x"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"mcp_servers.tools":{"args":["-v"],"command":"/bin/mcp","env":{"K":"V"}},"mcp_servers.web":{"http_headers":{"Authorization":"Bearer x"},"url":"http://127.0.0.1:9/mcp"}}`
	if got := marshal(cfg); got != want {
		t.Errorf("config\n%s\nwant\n%s", got, want)
	}
	var ioe *sdk.InvalidOptionError
	for _, bad := range [][]sdk.MCPServer{
		{{Name: "sse", Transport: "sse", URL: "http://x"}},
		{{Name: "bad name", Transport: "stdio", Command: "x"}},
		{{Name: "a", Command: "x"}, {Name: "a", Command: "y"}},
	} {
		if _, err := mcpConfig(bad); !errors.As(err, &ioe) || ioe.Option != "mcpServers" {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}

func TestSlashCommandsAndScopes(t *testing.T) {
	for text, want := range map[string]string{"/new": "new", " /compact ": "compact", "/new please": "", "new": "", "/undo": "",
		"/review": "review", "/review  the tests only": "review the tests only"} {
		name, arg, ok := slashCommand([]sdk.ContentBlock{sdk.TextBlock(text)})
		if got := strings.TrimSpace(name + " " + arg); got != want || ok != (want != "") {
			t.Errorf("slashCommand(%q) = %q, %q, %v", text, name, arg, ok)
		}
	}
	if _, _, ok := slashCommand([]sdk.ContentBlock{sdk.TextBlock("/new"), sdk.TextBlock("more")}); ok {
		t.Error("a prompt of two blocks ran a command")
	}
}

// TestAlwaysScopes pins what an "allow always" covers (the package doc's
// "What an allow-always covers"): a command only as its exact inner
// command, nothing for a compound command, a wrapper, an assignment, a
// shell or a wrapper that does not unwrap; a patch only inside the
// workspace and add_dirs and without grantRoot.
func TestAlwaysScopes(t *testing.T) {
	for _, tt := range []struct{ line, want string }{
		{"/bin/bash -lc ls", "exec:ls"},
		{"/bin/bash -lc 'git status'", "exec:git status"},
		{`/bin/bash -lc "git status"`, "exec:git status"},
		{"git status", "exec:git status"},
		{"/bin/bash -lc 'printf made > x && echo done'", ""},
		{"/bin/bash -lc 'cd /repo && npm test'", ""},
		{`/bin/bash -lc "echo $HOME"`, ""},
		{`/bin/bash -lc "unterminated`, ""},
		{"/bin/bash -lc 'sudo ls'", ""},
		{"/bin/bash -lc 'env X=1 ls'", ""},
		{"/bin/bash -lc 'X=1 make'", ""},
		{"/bin/bash -lc 'bash -c ls'", ""},
		{"/bin/bash -lc 'xargs rm'", ""},
		{"/bin/bash -lc 'timeout 5 curl x'", ""},
		{"/bin/bash -lc 'npx pkg'", ""},
		{"/bin/bash script.sh", ""},
		{"/bin/bash", ""},
		{"", ""},
	} {
		if got := commandScope(tt.line); got != tt.want {
			t.Errorf("commandScope(%q) = %q, want %q", tt.line, got, tt.want)
		}
	}
	for _, tt := range []struct {
		argv []string
		want string
	}{
		{[]string{"bash", "-lc", "ls -la"}, "exec:ls -la"},
		{[]string{"bash", "-lc", "cd /tmp && curl x | sh"}, ""},
		{[]string{"bash", "script.sh"}, ""},
		{[]string{"git", "status"}, "exec:git status"},
		{[]string{"sudo", "ls"}, ""},
	} {
		got := ""
		if inner, ok := allowscope.UnwrapArgv(tt.argv); ok {
			got = execScope(inner)
		}
		if got != tt.want {
			t.Errorf("legacy %q scope %q, want %q", tt.argv, got, tt.want)
		}
	}
	// Commands that must and must not share a scope.
	for _, tt := range []struct {
		a, b  string
		share bool
	}{
		{"/bin/bash -lc 'git status'", "/bin/bash -lc \"git status\"", true},
		{"/bin/bash -lc 'cd /repo && npm test'", "/bin/bash -lc 'cd /tmp && curl x | sh'", false},
		{"/bin/bash -lc 'git status'", "/bin/bash -lc 'git push --force'", false},
		{"/bin/bash -lc 'printf one'", "/bin/bash -lc 'printf two'", false},
	} {
		a, b := commandScope(tt.a), commandScope(tt.b)
		if got := a != "" && a == b; got != tt.share {
			t.Errorf("%q (%q) and %q (%q) share a scope: %v, want %v", tt.a, a, tt.b, b, got, tt.share)
		}
	}

	ws, extra := t.TempDir(), t.TempDir()
	tr := &turnRun{workspace: ws, opts: options{addDirs: []string{extra}}}
	for _, tt := range []struct {
		paths     []string
		grantRoot string
		want      string
	}{
		{[]string{filepath.Join(ws, "a.txt"), "rel.txt"}, "", "patch"},
		{[]string{filepath.Join(extra, "b.txt")}, "", "patch"},
		{[]string{filepath.Join(ws, "a.txt")}, "/", ""},
		{[]string{filepath.Join(ws, "a.txt"), "/root/.bashrc"}, "", ""},
		{[]string{filepath.Join(ws, "..", "x")}, "", ""},
		{nil, "", ""},
	} {
		if got := tr.patchScope(tt.paths, tt.grantRoot); got != tt.want {
			t.Errorf("patchScope(%q, %q) = %q, want %q", tt.paths, tt.grantRoot, got, tt.want)
		}
	}
}

// Every thread gets update_plan (the ACP plan) unless the session's
// config option decides it; a session's own "tools" table keeps its
// entries and gains update_plan, and the session's map is left as given.
func TestUpdatePlanByDefault(t *testing.T) {
	for config, want := range map[string]string{
		``:                                    `{"tools.update_plan.enabled":true}`,
		`{"model_verbosity":"low"}`:           `{"model_verbosity":"low","tools.update_plan.enabled":true}`,
		`{"tools.update_plan.enabled":false}`: `{"tools.update_plan.enabled":false}`,
		`{"tools.update_plan":{"enabled":false}}`:     `{"tools.update_plan":{"enabled":false}}`,
		`{"tools":{"update_plan":{"enabled":false}}}`: `{"tools":{"update_plan":{"enabled":false}}}`,
		`{"tools":{"web_search":true}}`:               `{"tools":{"update_plan":{"enabled":true},"web_search":true}}`,
	} {
		opts := map[string]string{}
		if config != "" {
			opts[OptConfig] = config
		}
		o, err := parseOptions(opts)
		if err != nil {
			t.Fatalf("%s: %v", config, err)
		}
		p := (&agent{}).threadStartParams("/w", o, nil)
		if got := marshal(p.Config); got != want {
			t.Errorf("config option %s: the thread's config %s; want %s", config, got, want)
		}
		if config != "" {
			if got := marshal(o.config); got != config {
				t.Errorf("config option %s was changed to %s", config, got)
			}
		}
	}
}

// turn/start carries the settings on a thread's first turn and after a
// change, and not on turns that would repeat what the thread has: codex
// keeps a turn's overrides, and overriding them again costs it time
// before its first delta.
func TestTurnStartCarriesSettingsOnlyWhenChanged(t *testing.T) {
	o, _ := parseOptions(map[string]string{"model": "m1"})
	res := threadResult{Model: "m1", ApprovalPolicy: []byte(`"on-request"`), Sandbox: []byte(`{"type":"readOnly","networkAccess":false}`)}
	a := testAgent(o, res, testModels)
	a.threadID = "th"
	p, carried := a.nextTurnStart("th", a.settings, nil, nil)
	if !carried || p.Model != "m1" || p.ApprovalPolicy == "" {
		t.Fatalf("first turn: %+v carried=%v; want the settings", p, carried)
	}
	a.noteSent("th", a.settings)
	if p, carried := a.nextTurnStart("th", a.settings, nil, nil); carried || p.Model != "" || p.ApprovalPolicy != "" || p.SandboxPolicy != nil {
		t.Errorf("an unchanged turn: %+v carried=%v; want no overrides", p, carried)
	}
	if _, err := a.SetConfigOption(t.Context(), "model", "m2"); err != nil {
		t.Fatal(err)
	}
	if p, carried := a.nextTurnStart("th", a.settings, nil, nil); !carried || p.Model != "m2" {
		t.Errorf("after set_config_option model=m2: %+v carried=%v; want m2 carried", p, carried)
	}
	// A turn of a thread the session left records nothing.
	a.threadID = "other"
	a.noteSent("th", a.settings)
	if _, carried := a.nextTurnStart("other", a.settings, nil, nil); !carried {
		t.Error("a note for a thread the session left made the new thread's turn skip its settings")
	}
}
