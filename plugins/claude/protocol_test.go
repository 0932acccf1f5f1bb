package claude

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/plugin/sdk"
	"github.com/agenthost/agenthost/plugin/sdk/cliproc"
	"github.com/agenthost/agenthost/plugins/internal/plugintest"
)

// sampleLines returns the stdout lines of the real CLI's transcripts in
// testdata/samples (copies of the reference samples): the .jsonl file
// whole, and the "<< " lines of the .txt transcripts, some of which were
// cut off mid-line.
func sampleLines(t testing.TB) [][]byte {
	t.Helper()
	return plugintest.SampleLines(t, func(name string, line []byte) ([]byte, bool) {
		if !strings.HasSuffix(name, ".txt") {
			return line, true
		}
		rest, ok := bytes.CutPrefix(line, []byte("<< "))
		return rest, ok && !bytes.HasPrefix(rest, []byte("STDERR:"))
	}, "claude_stream_noauth.jsonl", "claude_interrupt.txt", "claude_badresume.txt")
}

func TestDecodeSamples(t *testing.T) {
	var got []string
	for _, line := range sampleLines(t) {
		m, err := decodeLine(line)
		if err != nil {
			got = append(got, "error")
			continue
		}
		s := m.Type + "/" + m.Subtype
		if m.Type == "result" {
			s += "/" + strings.Join([]string{boolStr(m.IsError), m.TerminalReason, resultText(m)}, "/")
		}
		got = append(got, s)
	}
	want := []string{
		// noauth
		"system/init", "assistant/", "result/success/true/api_error/Not logged in · Please run /login",
		// interrupt: the initialize response and the init line were cut
		"error", "control_response/", "error", "user/",
		"result/error_during_execution/true/aborted_streaming/[ede_diagnostic] result_type=user last_content_type=n/a stop_reason=null",
		// unknown resume
		"result/error_during_execution/true//No conversation found with session ID: 11111111-2222-4333-8444-555555555555",
	}
	if !slices.Equal(got, want) {
		t.Errorf("decoded samples:\n got %q\nwant %q", got, want)
	}
	m, _ := decodeLine(sampleLines(t)[1])
	if m.Error != "authentication_failed" || !m.IsAPIErrorMessage || m.Message.blocks()[0].Text != "Not logged in · Please run /login" {
		t.Errorf("synthetic assistant message: %+v", m)
	}
	m, _ = decodeLine(sampleLines(t)[0])
	if m.SessionID != "7ae65b20-5758-4ff8-86b5-04a056ec858f" || m.ClaudeCodeVersion != "2.1.332" || m.APIKeySource != "none" {
		t.Errorf("init: %+v", m)
	}
}

func boolStr(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

func TestDecodeLenient(t *testing.T) {
	for _, tt := range []struct {
		line string
		want string // type, or "skip" for a line that is not a JSON object, "error" for a syntax error
	}{
		{"", "skip"},
		{"   ", "skip"},
		{"[SandboxDebug] something", "skip"},
		{"null", "skip"},
		{`{"type":"assistant"`, "error"},
		{`{"type":"future","whatever":{"deep":[1,2]}}`, "future"},
		// A field whose type changed is dropped, not fatal.
		{`{"type":"result","is_error":"yes","result":"ok","usage":[1]}`, "result"},
		{`{"type":"assistant","message":{"content":{"not":"an array"}}}`, "assistant"},
		{`{"type":"user","parent_tool_use_id":null,"message":{"content":"text"}}`, "user"},
	} {
		m, err := decodeLine([]byte(tt.line))
		got := ""
		switch {
		case errors.Is(err, cliproc.ErrNotJSONObject):
			got = "skip"
		case err != nil:
			got = "error"
		default:
			got = m.Type
		}
		if got != tt.want {
			t.Errorf("decodeLine(%q) = %q (%v), want %q", tt.line, got, err, tt.want)
		}
	}
	m, _ := decodeLine([]byte(`{"type":"result","is_error":"yes","result":"ok"}`))
	if m.Result != "ok" || m.IsError {
		t.Errorf("lenient result: %+v", m)
	}
}

func FuzzDecodeLine(f *testing.F) {
	for _, line := range sampleLines(f) {
		f.Add(line)
	}
	f.Add([]byte(`{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"x"}],"is_error":true}]}}`))
	f.Add([]byte(`{"type":"control_request","request_id":"r","request":{"subtype":"can_use_tool","tool_name":"Bash","input":{"command":"ls"}}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		m, err := decodeLine(line)
		if err != nil {
			if m != nil {
				t.Fatal("message and error")
			}
			return
		}
		// Everything the turn loop touches must be safe on any message.
		for _, b := range m.Message.blocks() {
			_ = b.resultText()
			_ = toolTitle(b.Name, b.Input)
			_, _ = todoPlan(b.Name, b.Input)
			_ = toolInfoOf(b.Name, b.Input)
			_ = alwaysScope(b.Name, b.Input, "/w", nil)
			for _, name := range []string{"Edit", "MultiEdit", "Write"} {
				_, _ = toolResultUpdate(name, m.ToolUseResult)
			}
		}
		_ = resultText(m)
		var req controlRequest
		_ = json.Unmarshal(m.Request, &req)
		_ = alwaysRules(req.PermissionSuggestions)
		_ = toolInfoOf(req.ToolName, req.Input)
		if m.Response != nil {
			var info initInfo
			_ = json.Unmarshal(m.Response.Response, &info)
			_ = info.commands()
			_ = configOptions(modesFor(true), info.Models, "", "", "")
		}
		// A line that decodes is a JSON object whose "type" we read.
		var probe struct {
			Type json.RawMessage `json:"type"`
		}
		if err := json.Unmarshal(bytes.TrimSpace(line), &probe); err != nil && !isTypeError(err) {
			t.Fatalf("decodeLine accepted invalid JSON %q", line)
		}
	})
}

// TestMinVersion: claude 2.0.0 is the oldest the plugin drives (the
// parsing and ordering are cliproc's, tested there).
func TestMinVersion(t *testing.T) {
	if !(cliproc.Version{Major: 1, Minor: 9, Patch: 99}).Less(minVersion) || (cliproc.Version{Major: 2}).Less(minVersion) {
		t.Errorf("minVersion %s", minVersion)
	}
}

func TestCLIEnv(t *testing.T) {
	in := []string{"PATH=/bin", "ANTHROPIC_API_KEY=k", "CLAUDECODE=1", "AWS_PROFILE=p", "PWD=/elsewhere", "ANTHROPIC_BASE_URL=u", "X=1"}
	if got, want := cliEnv(in, "/w", false), []string{"PATH=/bin", "X=1", "PWD=/w"}; !slices.Equal(got, want) {
		t.Errorf("stripped: %q, want %q", got, want)
	}
	if got, want := cliEnv(in, "/w", true), []string{"PATH=/bin", "ANTHROPIC_API_KEY=k", "AWS_PROFILE=p", "ANTHROPIC_BASE_URL=u", "X=1", "PWD=/w"}; !slices.Equal(got, want) {
		t.Errorf("allowed: %q, want %q", got, want)
	}
}

func TestCLIArgs(t *testing.T) {
	c, err := parseOptions(map[string]string{OptSystemPrompt: "", OptMaxTurns: "3", OptDisallowedTools: "Bash"})
	if err != nil {
		t.Fatal(err)
	}
	if c.mcpConfig, err = mcpConfig([]sdk.MCPServer{{Name: "e", Transport: "stdio", Command: "/bin/e"}}); err != nil {
		t.Fatal(err)
	}
	got := c.cliArgs(start{id: "-x", resume: true}, true)
	want := []string{"-p", "--output-format", "stream-json", "--input-format", "stream-json", "--verbose",
		"--include-partial-messages", "--permission-prompt-tool", "stdio", "--allow-dangerously-skip-permissions",
		"--disallowedTools=Bash", `--mcp-config={"mcpServers":{"e":{"args":[],"command":"/bin/e","env":{},"type":"stdio"}}}`,
		"--max-turns=3", "--system-prompt=", "--resume=-x"}
	if !slices.Equal(got, want) {
		t.Errorf("argv %q, want %q", got, want)
	}
}

func TestPromptContent(t *testing.T) {
	got, err := promptContent([]sdk.ContentBlock{sdk.TextBlock("a"), sdk.TextBlock("b")})
	if err != nil || got != "ab" {
		t.Errorf("text prompt: %v %v", got, err)
	}
	got, err = promptContent([]sdk.ContentBlock{
		sdk.TextBlock("look"),
		{Type: "image", JSON: `{"type":"image","data":"aGk=","mimeType":"image/png"}`},
		{Type: "resource", JSON: `{"type":"resource","resource":{"uri":"file:///a.go","text":"package a"}}`},
		{Type: "resource_link", JSON: `{"type":"resource_link","uri":"file:///b.go","name":"b.go"}`},
	})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(got)
	want := `[{"text":"look","type":"text"},{"source":{"data":"aGk=","media_type":"image/png","type":"base64"},"type":"image"},` +
		`{"text":"\u003ccontext ref=\"file:///a.go\"\u003e\npackage a\n\u003c/context\u003e","type":"text"},{"text":"[@b.go](file:///b.go)","type":"text"}]`
	if string(b) != want {
		t.Errorf("content:\n got %s\nwant %s", b, want)
	}
	if _, err := promptContent([]sdk.ContentBlock{{Type: "audio", JSON: `{}`}}); err == nil || !strings.Contains(err.Error(), `type "audio"`) {
		t.Errorf("audio: %v", err)
	}
}

func TestToolTitle(t *testing.T) {
	for _, tt := range []struct{ name, input, want string }{
		{"Bash", `{"command":"ls  -la\n"}`, "Bash ls -la"},
		{"Read", `{"file_path":"/etc/hosts"}`, "Read /etc/hosts"},
		{"mcp__x__y", `{"a":1}`, "mcp__x__y"},
		{"Grep", `not json`, "Grep"},
		{"", ``, "tool"},
	} {
		if got := toolTitle(tt.name, json.RawMessage(tt.input)); got != tt.want {
			t.Errorf("toolTitle(%s, %s) = %q, want %q", tt.name, tt.input, got, tt.want)
		}
	}
}

func TestNewUUID(t *testing.T) {
	u := newUUID()
	if len(u) != 36 || u[14] != '4' || !strings.ContainsRune("89ab", rune(u[19])) {
		t.Errorf("newUUID() = %s", u)
	}
}

func TestUsageWithDelta(t *testing.T) {
	start := &usage{InputTokens: 12, CacheCreationInputTokens: 3, CacheReadInputTokens: 100, OutputTokens: 1}
	for _, tt := range []struct {
		name         string
		start, delta *usage
		want         usage
	}{
		{"output only", start, &usage{OutputTokens: 5}, usage{InputTokens: 12, CacheCreationInputTokens: 3, CacheReadInputTokens: 100, OutputTokens: 5}},
		{"all counts", start, &usage{InputTokens: 14, CacheCreationInputTokens: 3, CacheReadInputTokens: 90, OutputTokens: 7},
			usage{InputTokens: 14, CacheCreationInputTokens: 3, CacheReadInputTokens: 90, OutputTokens: 7}},
		{"no message_start", nil, &usage{OutputTokens: 5}, usage{OutputTokens: 5}},
	} {
		got := tt.start.withDelta(tt.delta)
		if *got != tt.want {
			t.Errorf("%s: %+v, want %+v", tt.name, *got, tt.want)
		}
	}
	if start.OutputTokens != 1 {
		t.Errorf("withDelta changed message_start's usage: %+v", *start)
	}
}

// TestNotTakenError: the write error of a prompt the CLI did not take
// stays visible to errors.Is and errors.As.
func TestNotTakenError(t *testing.T) {
	err := error(&notTakenError{why: "claude did not take the prompt", err: fmt.Errorf("writing: %w", os.ErrClosed)})
	var nt *notTakenError
	if !errors.Is(err, os.ErrClosed) || !errors.As(err, &nt) {
		t.Errorf("%v: errors.Is(os.ErrClosed) %v, errors.As(*notTakenError) %v; want both", err, errors.Is(err, os.ErrClosed), errors.As(err, &nt))
	}
	if got, want := err.Error(), "claude did not take the prompt: writing: "+os.ErrClosed.Error(); got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if got := (&notTakenError{why: "claude exited"}).Error(); got != "claude exited" {
		t.Errorf("Error() without a cause = %q", got)
	}
}
