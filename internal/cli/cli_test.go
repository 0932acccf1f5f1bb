package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/host"
)

func write(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

func TestLoadAgents(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "plugins", "mine"), "#!/bin/sh\n", 0o755)
	write(t, filepath.Join(dir, "plugins", "scripted"), "#!/bin/sh\n", 0o755) // overrides the built-in
	write(t, filepath.Join(dir, "plugins", "readme.txt"), "no", 0o644)
	write(t, filepath.Join(dir, "plugins", ".hidden"), "#!/bin/sh\n", 0o755)
	if err := os.Mkdir(filepath.Join(dir, "plugins", "adir"), 0o755); err != nil {
		t.Fatal(err)
	}
	digest := strings.Repeat("a", 64)
	write(t, filepath.Join(dir, ConfigName), `{"agents": {"mine": {"path": "/opt/mine", "args": ["--x"], "env": ["A=B"], "sha256": "`+digest+`"}}}`, 0o600)
	agents, err := loadAgents(dir, "/bin/agenthost", []string{"claude", "scripted"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range agents {
		got = append(got, e.Name+"="+e.Source+":"+e.Plugin.Path+strings.Join(e.Plugin.Args, " "))
	}
	want := []string{
		"claude=built-in:/bin/agenthost__plugin claude",
		"mine=agenthost.json:/opt/mine--x",
		"scripted=plugins directory:" + filepath.Join(dir, "plugins", "scripted"),
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("agents:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	m := hostAgents(agents)
	if m["mine"].SHA256 != digest || strings.Join(m["mine"].Env, ",") != "A=B" {
		t.Errorf("mine: %+v", m["mine"])
	}
}

func TestConfigErrorsNameTheProblem(t *testing.T) {
	for _, tc := range []struct{ config, want string }{
		{`{"agents": {"x": {"path": "rel"}}}`, `agent "x": "path" must be absolute`},
		{`{"agents": {"x": {}}}`, `agent "x": "path" is required`},
		{`{"agents": {"x": {"path": "/p", "sha256": "abc"}}}`, `"sha256" must be 64 hex digits`},
		{`{"agents": {"x": {"path": "/p", "env": ["NOVALUE"]}}}`, `"env" entries must be KEY=VALUE`},
		{`{"agents": {"a/b": {"path": "/p"}}}`, `"a/b" is not a usable agent name`},
		{`{"agents": {"x": {"path": "/p", "sha": "1"}}}`, `unknown field "sha"`},
		{`{"agents": [}`, `expected {"agents"`},
		{`{"agents": {"x": {"path": "/p", "credentials": "yes"}}}`, `"credentials" must be "strip" (the default) or "inherit", got "yes"`},
		{`{"agents": {"x": {"credentials": "inherit"}}}`, `no built-in is named "x" (the built-ins are claude, scripted)`},
		{`{"agents": {"claude": {"credentialVariables": ["K"]}}}`, `"credentialVariables" need a "path"`},
		{`{"agents": {"claude": {"sha256": "` + strings.Repeat("a", 64) + `"}}}`, `"args" and "sha256" need a "path"`},
		{`{"agents": {"x": {"path": "/p", "credentialVariables": ["A=B"]}}}`, `"credentialVariables" entries must be variable names`},
	} {
		dir := t.TempDir()
		write(t, filepath.Join(dir, ConfigName), tc.config, 0o600)
		_, err := loadAgents(dir, "/x", []string{"claude", "scripted"}, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), filepath.Join(dir, ConfigName)) {
			t.Errorf("config %s: got %v, want an error naming the file and %q", tc.config, err, tc.want)
		}
	}
}

// An entry without a path configures the built-in of its name; an entry
// with one names its own credential variables. Only "inherit" opts in.
func TestAgentCredentials(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, ConfigName), `{"agents": {
		"claude": {"credentials": "inherit", "env": ["A=B"]},
		"scripted": {"credentials": "strip"},
		"mine": {"path": "/opt/mine", "credentials": "inherit", "credentialVariables": ["MY_PROVIDER_KEY"]},
		"bare": {"path": "/opt/bare", "credentials": "inherit"},
		"quiet": {"path": "/opt/quiet", "credentialVariables": ["QUIET_KEY"]}}}`, 0o600)
	policies := map[string]host.CredentialPolicy{"claude": {Variables: []string{"ANTHROPIC_API_KEY"}}, "codex": {Variables: []string{"OPENAI_API_KEY"}}}
	agents, err := loadAgents(dir, "/bin/agenthost", []string{"claude", "codex", "scripted"}, policies)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range agents {
		got = append(got, e.Name+"="+e.Source+":"+strings.Join(e.Plugin.Args, " ")+":"+strings.Join(e.Plugin.Env, ",")+":"+describeCredentials(e.Credentials))
	}
	want := []string{
		"bare=agenthost.json:::inherit (no variables named: nothing inherited)",
		"claude=built-in, agenthost.json:__plugin claude:A=B:inherit ANTHROPIC_API_KEY",
		"codex=built-in:__plugin codex::strip OPENAI_API_KEY",
		"mine=agenthost.json:::inherit MY_PROVIDER_KEY",
		"quiet=agenthost.json:::strip QUIET_KEY",
		"scripted=built-in, agenthost.json:__plugin scripted::strip (no variables named)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("agents:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	creds := hostCredentials(agents)
	if p := creds["claude"]; !p.Inherit || strings.Join(p.Variables, ",") != "ANTHROPIC_API_KEY" {
		t.Errorf("claude's policy: %+v", p)
	}
	if p := creds["codex"]; p.Inherit {
		t.Errorf("codex's policy, not configured: %+v", p)
	}
	if _, ok := creds["scripted"]; ok {
		t.Errorf("scripted has a policy: %+v", creds["scripted"])
	}
}

func TestRenderer(t *testing.T) {
	var out bytes.Buffer
	r := newRenderer(&out, startSpinner(&out))
	for _, u := range []string{
		`{"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"hi"}}`,
		`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Looking"}}`,
		`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":" around."}}`,
		`{"sessionUpdate":"tool_call","toolCallId":"t1","title":"list files","kind":"execute","status":"pending"}`,
		`{"sessionUpdate":"tool_call_update","toolCallId":"t1","status":"completed","content":[{"type":"content","content":{"type":"text","text":"a.go\nb.go"}}]}`,
		`{"sessionUpdate":"plan","entries":[{"content":"read","status":"completed"},{"content":"write","status":"pending"}]}`,
		`{"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"hidden off a terminal"}}`,
		`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Done"}}`,
		`not json`,
	} {
		r.update(json.RawMessage(u))
	}
	r.finish()
	want := "Looking around.\n⚙ list files [execute] pending\n  ↳ list files completed: a.go…\nPlan:\n  ● read\n  ○ write\nDone\n"
	if out.String() != want {
		t.Errorf("rendered:\n%q\nwant:\n%q", out.String(), want)
	}
}

func TestJournalSummaries(t *testing.T) {
	var out bytes.Buffer
	for _, e := range []api.JournalEntry{
		{Seq: 1, Kind: "lifecycle", Payload: json.RawMessage(`{"event":"owner-committed","fence":1,"claim":"reserved","stage":"proving","pid":42}`)},
		{Seq: 2, Kind: "prompt", Payload: json.RawMessage(`{"turnId":"t","prompt":[{"type":"text","text":"count 3\nmore"}]}`)},
		{Seq: 3, Kind: "update", Payload: json.RawMessage(`{"pluginSeq":1,"update":{"sessionUpdate":"tool_call","toolCallId":"t1","title":"ls","status":"pending"}}`)},
		{Seq: 4, Kind: "stop", Payload: json.RawMessage(`{"pluginSeq":2,"turnId":"t","stopReason":"failed","error":"out of tokens"}`)},
		{Seq: 5, Kind: "handle", Payload: json.RawMessage(`"raw"`)},
	} {
		e.Time = time.Date(2026, 1, 2, 3, 4, 5, 0, time.Local)
		printEntry(&out, style{}, e)
	}
	for _, want := range []string{
		"     1  03:04:05.000  lifecycle  owner-committed · fence 1, reserved/proving · pid 42\n",
		"     2  03:04:05.000  prompt     > count 3…\n",
		"     3  03:04:05.000  update     tool_call t1 \"ls\" pending  [plugin #1]\n",
		"     4  03:04:05.000  stop       failed: out of tokens  [plugin #2]\n",
		"     5  03:04:05.000  handle     \"raw\"\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("journal lines:\n%s\ndo not contain %q", out.String(), want)
		}
	}
}

func TestSmallHelpers(t *testing.T) {
	if displayID("abc-1") != "abc-1" || displayID("a\x00b") != `"a\x00b"` || displayID("") != `""` {
		t.Error("displayID")
	}
	if shellQuote("/tmp/a b") != `'/tmp/a b'` || shellQuote("/tmp/ab") != "/tmp/ab" || shellQuote("it's") != `'it'\''s'` {
		t.Error("shellQuote")
	}
	var b bytes.Buffer
	q := quietDetach{&b}
	_, _ = q.Write([]byte("x [ERROR] go-plugin: error encountered while scanning stdout: error=\"read |0: file already closed\"\n"))
	_, _ = q.Write([]byte("x [ERROR] go-plugin: error encountered while scanning stdout: error=\"something else\"\n"))
	if strings.Contains(b.String(), "already closed") || !strings.Contains(b.String(), "something else") {
		t.Errorf("quietDetach passed %q", b.String())
	}
	if firstLine("  one\ntwo", 10) != "one…" || firstLine("abcdef", 3) != "abc…" || firstLine("ok", 5) != "ok" {
		t.Error("firstLine")
	}
}
