package claude

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/plugin/sdk"
)

// Unit tests of the ACP surface's mapping: options, MCP servers, modes
// and config options, tool calls, permissions and rich prompts. The
// shapes are the live CLI's (claude 2.1.332), as the plugin's fake
// prints them.

func TestOptionsRefusedByName(t *testing.T) {
	for opt, want := range map[string]string{
		"permission_mode":   `the option is now called "mode"`,
		"nope":              "has no such option",
		"env.BAD-NAME":      "is not an environment variable name",
		"env.CLAUDECODE":    "is the plugin's own",
		OptMode:             "want one of",
		OptModel:            "must name a model",
		OptAddDirs:          "no such file or directory",
		OptEffort:           "want one of low",
		"env.AWS_PROFILE":   "carries a provider credential",
		OptMaxTurns:         "must be positive",
		OptAllowCredentials: `want "true" or "false"`,
	} {
		v := map[string]string{OptMode: "sometimes", OptModel: " ", OptAddDirs: "/nonexistent-dir", OptEffort: "lots", OptMaxTurns: "0", OptAllowCredentials: "maybe"}[opt]
		_, err := parseOptions(map[string]string{opt: v})
		var inv *sdk.InvalidOptionError
		if !errors.As(err, &inv) || inv.Option != opt || !strings.Contains(inv.Reason, want) {
			t.Errorf("%s=%q: %v, want an InvalidOptionError naming it, saying %q", opt, v, err, want)
		}
	}
	c, err := parseOptions(map[string]string{OptMode: "plan", OptEffort: "default", "env.FOO": "bar", OptModel: "sonnet"})
	if err != nil {
		t.Fatal(err)
	}
	// Every accepted option is acknowledged as given.
	if want := map[string]string{OptMode: "plan", OptEffort: "default", "env.FOO": "bar", OptModel: "sonnet"}; !mapsEqual(c.raw, want) {
		t.Errorf("acknowledged %v, want %v", c.raw, want)
	}
	if c.effort != "" || !slices.Equal(c.env, []string{"FOO=bar"}) {
		t.Errorf("effort %q env %v: default effort passes no --effort, env.FOO sets FOO", c.effort, c.env)
	}
	// Every option the plugin declares parses (the declared list is the
	// accepted one).
	for _, o := range Capabilities().Options {
		name := o.Name
		if strings.HasSuffix(name, ".") {
			name += "X"
		}
		if _, err := parseOptions(map[string]string{name: map[string]string{OptMode: "default", OptEffort: "low", OptMaxTurns: "1", OptStopGrace: "1s", OptMaxLineBytes: "4096", OptModel: "opus"}[name]}); err != nil {
			t.Errorf("declared option %s: %v", name, err)
		}
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestMCPConfig(t *testing.T) {
	got, err := mcpConfig([]sdk.MCPServer{
		{Name: "s", Transport: "stdio", Command: "/bin/s", Args: []string{"-v"}, Env: []sdk.NameValue{{Name: "K", Value: "V"}}},
		{Name: "h", Transport: "http", URL: "http://127.0.0.1:1/mcp", Headers: []sdk.NameValue{{Name: "Authorization", Value: "Bearer x"}}},
		{Name: "e", Transport: "sse", URL: "http://127.0.0.1:1/sse"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"mcpServers":{"e":{"headers":{},"type":"sse","url":"http://127.0.0.1:1/sse"},` +
		`"h":{"headers":{"Authorization":"Bearer x"},"type":"http","url":"http://127.0.0.1:1/mcp"},` +
		`"s":{"args":["-v"],"command":"/bin/s","env":{"K":"V"},"type":"stdio"}}}`
	if got != want {
		t.Errorf("mcp config\n got %s\nwant %s", got, want)
	}
	for _, bad := range [][]sdk.MCPServer{
		{{Name: "", Transport: "stdio", Command: "x"}},
		{{Name: "a", Transport: "stdio", Command: "x"}, {Name: "a", Transport: "stdio", Command: "y"}},
		{{Name: "a", Transport: "websocket", URL: "ws://x"}},
		{{Name: "a", Transport: "http"}},
	} {
		var inv *sdk.InvalidOptionError
		if _, err := mcpConfig(bad); !errors.As(err, &inv) || inv.Option != "mcpServers" {
			t.Errorf("%+v: %v, want an InvalidOptionError for mcpServers", bad, err)
		}
	}
}

// liveModels is the models list of 2.1.332's initialize response, cut
// short.
const liveModels = `{"commands":[{"name":"clear","description":"Start a new session with empty context","argumentHint":"[name]"},
 {"name":"login","description":"Log in","argumentHint":""},{"name":"__remote-workflow","description":"x"},
 {"name":"code-review","description":"Review","argumentHint":["[low|high]","[--fix]"]}],
 "models":[{"value":"default","resolvedModel":"claude-opus-5-5","displayName":"Default (recommended)","supportsEffort":true,"supportedEffortLevels":["low","medium","high","xhigh","max"]},
 {"value":"sonnet","resolvedModel":"claude-sonnet-5-5","displayName":"Sonnet","supportsEffort":true,"supportedEffortLevels":["low","high"]},
 {"value":"haiku","resolvedModel":"claude-haiku-5","displayName":"Haiku","supportsEffort":false}],
 "current_permission_mode":"default"}`

func TestConfigOptionsFromInitialize(t *testing.T) {
	var info initInfo
	if err := json.Unmarshal([]byte(liveModels), &info); err != nil {
		t.Fatal(err)
	}
	var cmds []string
	for _, c := range info.commands() {
		cmds = append(cmds, c.Name+"|"+c.InputHint)
	}
	if want := []string{"clear|[name]", "code-review|[low|high] [--fix]"}; !slices.Equal(cmds, want) {
		t.Errorf("commands %q, want %q (login and internal ones left out)", cmds, want)
	}
	describe := func(opts []sdk.ConfigOption) string {
		var parts []string
		for _, o := range opts {
			var vs []string
			for _, v := range o.Values {
				vs = append(vs, v.Value)
			}
			parts = append(parts, o.ID+"/"+o.Category+"="+o.CurrentValue+"["+strings.Join(vs, ",")+"]")
		}
		return strings.Join(parts, " ")
	}
	modes := modesFor(false)
	for _, tt := range []struct{ mode, model, effort, want string }{
		{"", "", "", "mode/mode=default[default,acceptEdits,plan] model/model=default[default,sonnet,haiku] effort/thought_level=default[default,low,medium,high,xhigh,max]"},
		// A resolved model id is its list value; its own effort levels.
		{"plan", "claude-sonnet-5-5", "high", "mode/mode=plan[default,acceptEdits,plan] model/model=sonnet[default,sonnet,haiku] effort/thought_level=high[default,low,high]"},
		// A model without effort has no effort option.
		{"", "haiku", "", "mode/mode=default[default,acceptEdits,plan] model/model=haiku[default,sonnet,haiku]"},
		// A model the list lacks is one more value.
		{"", "claude-x-1", "", "mode/mode=default[default,acceptEdits,plan] model/model=claude-x-1[default,sonnet,haiku,claude-x-1] effort/thought_level=default[default,low,medium,high,xhigh,max]"},
	} {
		if got := describe(configOptions(modes, info.Models, tt.mode, tt.model, tt.effort)); got != tt.want {
			t.Errorf("%s/%s/%s:\n got %s\nwant %s", tt.mode, tt.model, tt.effort, got, tt.want)
		}
	}
	if ids := modeIDs(modesFor(true)); !slices.Equal(ids, []string{"default", "acceptEdits", "plan", "bypassPermissions"}) {
		t.Errorf("modes with bypass: %v", ids)
	}
}

func TestToolInfo(t *testing.T) {
	describe := func(i toolInfo) string {
		s := i.title + "/" + i.kind
		for _, l := range i.locations {
			s += " @" + l.Path
			if l.Line > 0 {
				s += ":" + string(rune('0'+l.Line))
			}
		}
		for _, c := range i.content {
			switch {
			case c.Diff != nil && c.Diff.OldText == nil:
				s += " diff(" + c.Diff.Path + ": new " + c.Diff.NewText + ")"
			case c.Diff != nil:
				s += " diff(" + c.Diff.Path + ": " + *c.Diff.OldText + " -> " + c.Diff.NewText + ")"
			case c.Block != nil:
				s += " text(" + c.Block.Text + ")"
			}
		}
		return s
	}
	for _, tt := range []struct{ name, input, want string }{
		{"Edit", `{"file_path":"/w/a.txt","old_string":"old","new_string":"new","replace_all":false}`, "Edit /w/a.txt/edit @/w/a.txt diff(/w/a.txt: old -> new)"},
		{"MultiEdit", `{"file_path":"/w/a.txt","edits":[{"old_string":"a","new_string":"b"},{"old_string":"c","new_string":"d"}]}`,
			"MultiEdit /w/a.txt/edit @/w/a.txt diff(/w/a.txt: a -> b) diff(/w/a.txt: c -> d)"},
		{"Write", `{"file_path":"/w/n.txt","content":"fresh\n"}`, "Write /w/n.txt/edit @/w/n.txt diff(/w/n.txt: new fresh\n)"},
		{"Read", `{"file_path":"/w/a.txt","offset":7}`, "Read /w/a.txt/read @/w/a.txt:7"},
		{"Grep", `{"pattern":"x","path":"/w"}`, "Grep x/search @/w"},
		{"ExitPlanMode", `{"plan":"1. do it"}`, "Ready to code?/switch_mode text(1. do it)"},
		{"Bash", `{"command":"ls"}`, "Bash ls/execute"},
		{"mcp__echosrv__echo", `{"text":"hi"}`, "mcp__echosrv__echo/other"},
	} {
		if got := describe(toolInfoOf(tt.name, json.RawMessage(tt.input))); got != tt.want {
			t.Errorf("%s:\n got %q\nwant %q", tt.name, got, tt.want)
		}
	}
}

func TestToolResultDiffs(t *testing.T) {
	// 2.1.332's tool_use_result of an Edit and of a Write creating a file.
	edit := `{"filePath":"/w/hello.txt","oldString":"old","newString":"new","originalFile":"line one\nhello old world\nline three\n",` +
		`"structuredPatch":[{"oldStart":1,"oldLines":3,"newStart":1,"newLines":3,"lines":[" line one","-hello old world","+hello new world"," line three"]}],"userModified":false,"replaceAll":false}`
	content, locs := toolResultUpdate("Edit", json.RawMessage(edit))
	if len(content) != 1 || content[0].Diff == nil || content[0].Diff.OldText == nil ||
		*content[0].Diff.OldText != "line one\nhello old world\nline three" || content[0].Diff.NewText != "line one\nhello new world\nline three" ||
		len(locs) != 1 || locs[0] != (sdk.Location{Path: "/w/hello.txt", Line: 1}) {
		t.Errorf("Edit result: %+v %+v", content, locs)
	}
	create := `{"type":"create","filePath":"/w/new.txt","content":"fresh\n","structuredPatch":[],"originalFile":null,"userModified":false}`
	content, _ = toolResultUpdate("Write", json.RawMessage(create))
	if len(content) != 1 || content[0].Diff == nil || content[0].Diff.OldText != nil || content[0].Diff.NewText != "fresh\n" {
		t.Errorf("Write create result: %+v", content)
	}
	if c, l := toolResultUpdate("Bash", json.RawMessage(`{"stdout":"x"}`)); c != nil || l != nil {
		t.Errorf("Bash result: %+v %+v, want none", c, l)
	}
	if c, _ := toolResultUpdate("Edit", json.RawMessage(`"Error: no"`)); c != nil {
		t.Errorf("malformed Edit result: %+v", c)
	}
}

// TestAlwaysScope pins what an "allow always" covers (the package doc's
// "What an allow-always covers"): a Bash command only as its exact text,
// and nothing for a compound command, a wrapper, an assignment or a
// shell; an edit only inside the workspace and add_dirs.
func TestAlwaysScope(t *testing.T) {
	ws, extra := t.TempDir(), t.TempDir()
	dirs := []string{extra}
	file := func(key, path string) string { return `{"` + key + `":` + strconvQuote(path) + `}` }
	for _, tt := range []struct{ name, input, want string }{
		{"Edit", file("file_path", filepath.Join(ws, "a.go")), "edit"},
		{"Write", file("file_path", filepath.Join(ws, "new", "b.go")), "edit"},
		{"MultiEdit", file("file_path", filepath.Join(extra, "c.go")), "edit"},
		{"NotebookEdit", file("notebook_path", filepath.Join(ws, "n.ipynb")), "edit"},
		{"Write", file("file_path", "/root/.bashrc"), ""},
		{"Edit", file("file_path", "/home/u/.ssh/authorized_keys"), ""},
		{"Edit", file("file_path", filepath.Join(ws, "..", "escape.go")), ""},
		{"NotebookEdit", file("file_path", filepath.Join(ws, "n.ipynb")), ""},
		{"Edit", `{}`, ""},
		{"Bash", `{"command":"  git log -1"}`, "Bash(git log -1)"},
		{"Bash", `{"command":"cd /repo && npm test"}`, ""},
		{"Bash", `{"command":"sudo ls"}`, ""},
		{"Bash", `{"command":"env X=1 ls"}`, ""},
		{"Bash", `{"command":"X=1 make"}`, ""},
		{"Bash", `{"command":"bash -c 'ls'"}`, ""},
		{"Bash", `{"command":"xargs rm"}`, ""},
		{"Bash", `{"command":"npx pkg"}`, ""},
		{"Bash", `{"command":"echo 'open"}`, ""},
		{"Bash", `{}`, ""},
		{"WebFetch", `{"url":"x"}`, "WebFetch"}, {"mcp__s__echo", `{}`, "mcp__s__echo"},
	} {
		if got := alwaysScope(tt.name, json.RawMessage(tt.input), ws, dirs); got != tt.want {
			t.Errorf("alwaysScope(%s, %s) = %q, want %q", tt.name, tt.input, got, tt.want)
		}
	}
	// Commands that must and must not share a scope.
	bash := func(c string) string {
		return alwaysScope("Bash", json.RawMessage(`{"command":`+strconvQuote(c)+`}`), ws, nil)
	}
	for _, tt := range []struct {
		a, b  string
		share bool
	}{
		{"git status", "git status", true},
		{"npm test", "npm test", true},
		{"cd /repo && npm test", "cd /tmp && curl x | sh", false},
		{"cd /repo", "cd /tmp", false},
		{"git status", "git push --force", false},
		{"npm test", "npm publish", false},
		{"sudo ls", "sudo rm -rf /", false},
	} {
		a, b := bash(tt.a), bash(tt.b)
		if got := a != "" && a == b; got != tt.share {
			t.Errorf("%q (%q) and %q (%q) share a scope: %v, want %v", tt.a, a, tt.b, b, got, tt.share)
		}
	}
	// An edit's "allow always" passes back the CLI's rules, never its
	// suggestion to switch mode.
	if got := alwaysRules(json.RawMessage(`[{"type":"setMode","mode":"acceptEdits","destination":"session"}]`)); got != nil {
		t.Errorf("setMode suggestion passed back: %s", got)
	}
	rules := `[{"type":"addRules","rules":[{"toolName":"Bash","ruleContent":"ls"}],"behavior":"allow","destination":"localSettings"}]`
	if got := alwaysRules(json.RawMessage(rules)); string(got) != rules {
		t.Errorf("addRules suggestion: %s", got)
	}
}

func TestRichPrompt(t *testing.T) {
	got, err := promptContent([]sdk.ContentBlock{
		sdk.TextBlock("read"),
		{Type: sdk.BlockResource, JSON: `{"type":"resource","resource":{"uri":"file:///d.pdf","mimeType":"application/pdf","blob":"JVBERg=="}}`},
		{Type: sdk.BlockResource, JSON: `{"type":"resource","resource":{"uri":"file:///i.png","mimeType":"image/png","blob":"aGk="}}`},
		{Type: sdk.BlockImage, JSON: `{"type":"image","mimeType":"image/png","uri":"https://example.test/i.png"}`},
	})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(got)
	want := `[{"text":"read","type":"text"},{"source":{"data":"JVBERg==","media_type":"application/pdf","type":"base64"},"type":"document"},` +
		`{"source":{"data":"aGk=","media_type":"image/png","type":"base64"},"type":"image"},{"source":{"type":"url","url":"https://example.test/i.png"},"type":"image"}]`
	if string(b) != want {
		t.Errorf("content\n got %s\nwant %s", b, want)
	}
	for _, bad := range []sdk.ContentBlock{
		{Type: sdk.BlockResource, JSON: `{"type":"resource","resource":{"uri":"file:///z.zip","mimeType":"application/zip","blob":"UEs="}}`},
		{Type: sdk.BlockImage, JSON: `{"type":"image","mimeType":"image/png","uri":"file:///i.png"}`},
		{Type: sdk.BlockAudio, JSON: `{"type":"audio","mimeType":"audio/wav","data":"UklG"}`},
	} {
		if _, err := promptContent([]sdk.ContentBlock{bad}); err == nil {
			t.Errorf("%s accepted; the CLI cannot take it", bad.JSON)
		}
	}
}

func TestAuthFailuresAreAuthRequired(t *testing.T) {
	for _, err := range []error{authError("Invalid API key", "ANTHROPIC_API_KEY"), authError("Not logged in", "none"), checkCredentials(false)} {
		if err == nil {
			continue // a login on this machine
		}
		if !errors.Is(err, sdk.ErrAuthRequired) || strings.Contains(err.Error(), sdk.ErrAuthRequired.Error()) {
			t.Errorf("%v: want it to wrap sdk.ErrAuthRequired, in its own words", err)
		}
	}
}

func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
