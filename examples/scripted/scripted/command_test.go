package scripted

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for _, tt := range []struct {
		text string
		want command
	}{
		{"count 3", command{op: opCount, n: 3}},
		{"  count 3 100ms \n", command{op: opCount, n: 3, d: 100 * time.Millisecond}},
		{"count\t2\t1s", command{op: opCount, n: 2, d: time.Second}},
		{"count 0", command{op: opCount}},
		{"sleep 2s", command{op: opSleep, d: 2 * time.Second}},
		{"sleep 0s", command{op: opSleep}},
		{"fail out of tokens", command{op: opFail, text: "out of tokens"}},
		{"fail  two  blanks ", command{op: opFail, text: "two  blanks"}},
		{"tool", command{op: opTool}},
		{"ask", command{op: opAsk}},
		{"usage 53000 200000", command{op: opUsage, used: 53000, size: 200000}},
		{"usage 0 0", command{op: opUsage}},
		{"auth", command{op: opAuth}},
		{"mcp", command{op: opMCP}},
		{"settings", command{op: opSettings}},
		{"exitplan", command{op: opExitPlan}},
		{"wait", command{op: opWait}},
		{"edit notes.txt hello", command{op: opEdit, path: "notes.txt", text: "hello"}},
		{"edit  a/b.go  two  words ", command{op: opEdit, path: "a/b.go", text: "two  words"}},
		{"title Fix the flaky test", command{op: opTitle, text: "Fix the flaky test"}},
		// Slash commands, as a client offers them.
		{"/count 2", command{op: opCount, n: 2}},
		{"/exitplan", command{op: opExitPlan}},
		{"/unknown x", command{op: opEcho, text: "/unknown x"}},
		{"//count 2", command{op: opEcho, text: "//count 2"}},
		{"hello", command{op: opEcho, text: "hello"}},
		{"  hello world  ", command{op: opEcho, text: "hello world"}},
		{"", command{op: opEcho}},
		// Keywords are whole, lower-case words.
		{"counting sheep", command{op: opEcho, text: "counting sheep"}},
		{"Count 3", command{op: opEcho, text: "Count 3"}},
		{"tools", command{op: opEcho, text: "tools"}},
	} {
		got, err := parse(tt.text)
		if err != nil {
			t.Errorf("parse(%q): %v", tt.text, err)
			continue
		}
		if got != tt.want {
			t.Errorf("parse(%q) = %+v, want %+v", tt.text, got, tt.want)
		}
	}
}

func TestParseMalformed(t *testing.T) {
	for _, tt := range []struct {
		text, usage string
	}{
		{"count", "count N [INTERVAL]"},
		{"count x", "count N [INTERVAL]"},
		{"count -1", "count N [INTERVAL]"},
		{"count 1.5", "count N [INTERVAL]"},
		{"count 3 soon", "count N [INTERVAL]"},
		{"count 3 -1s", "count N [INTERVAL]"},
		{"count 3 1s extra", "count N [INTERVAL]"},
		{"count 99999999999999999999", "count N [INTERVAL]"},
		{"sleep", "sleep DURATION"},
		{"sleep 5", "sleep DURATION"},
		{"sleep -1s", "sleep DURATION"},
		{"sleep 1s 2s", "sleep DURATION"},
		{"fail", "fail MESSAGE"},
		{"fail   ", "fail MESSAGE"},
		{"tool ls", "tool, with no arguments"},
		{"ask now", "ask, with no arguments"},
		{"auth now", "auth, with no arguments"},
		{"mcp list", "mcp, with no arguments"},
		{"settings all", "settings, with no arguments"},
		{"exitplan now", "exitplan, with no arguments"},
		{"wait 5s", "wait, with no arguments"},
		{"/tool x", "tool, with no arguments"},
		{"edit", "edit PATH TEXT"},
		{"edit notes.txt", "edit PATH TEXT"},
		{"title", "title TEXT"},
		{"/count x", "count N [INTERVAL]"},
		{"usage", "usage USED SIZE"},
		{"usage 5", "usage USED SIZE"},
		{"usage 5 x", "usage USED SIZE"},
		{"usage -1 10", "usage USED SIZE"},
		{"usage 1 2 3", "usage USED SIZE"},
	} {
		_, err := parse(tt.text)
		if err == nil {
			t.Errorf("parse(%q) succeeded, want an error", tt.text)
			continue
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, "scripted: ") || !strings.Contains(msg, "expected "+tt.usage) {
			t.Errorf("parse(%q) error = %q, want it to give the syntax %q", tt.text, msg, tt.usage)
		}
	}
}

// Any prompt text parses to a well-formed command or to an error that
// names the agent and gives the syntax.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"count 3 100ms", "sleep 2s", "fail x", "edit a.txt b c", "/title T", "usage 1 2", "exitplan", "", "//x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		c, err := parse(text)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "scripted: cannot run ") || !strings.Contains(err.Error(), "expected ") {
				t.Fatalf("parse(%q) error %q does not give the syntax", text, err)
			}
			return
		}
		if c.op == opEdit && (c.path == "" || c.text == "") {
			t.Fatalf("parse(%q) = an edit without a path or text: %+v", text, c)
		}
		if c.n < 0 || c.d < 0 {
			t.Fatalf("parse(%q) = %+v: negative", text, c)
		}
	})
}

// workspacePath never resolves outside the workspace.
func FuzzWorkspacePath(f *testing.F) {
	for _, s := range []string{"a.txt", "../x", "/w/a", "a/../../b", "./.", "/w/../w2/x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, path string) {
		const ws = "/w"
		got, err := workspacePath(ws, path)
		if err != nil {
			return
		}
		if rel, rerr := filepath.Rel(ws, got); rerr != nil || !filepath.IsLocal(rel) {
			t.Fatalf("workspacePath(%q) = %q, outside %s", path, got, ws)
		}
	})
}
