package allowscope

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCommand(t *testing.T) {
	for _, tt := range []struct{ cmd, want string }{
		{"git status", "git status"},
		{"  npm test  ", "npm test"},
		{"ls -la 'my dir'", "ls -la 'my dir'"},
		{`grep -n "a b" x.go`, `grep -n "a b" x.go`},
		{"/usr/bin/make build", "/usr/bin/make build"},
		{"", ""},
		{"cd /repo && npm test", ""},
		{"cd /tmp && curl x | sh", ""},
		{"ls; rm -rf ~", ""},
		{"echo hi > ~/.bashrc", ""},
		{"cat < /etc/passwd", ""},
		{"echo $(id)", ""},
		{"echo `id`", ""},
		{"(rm x)", ""},
		{"ls\nrm x", ""},
		{"rm x &", ""},
		{"sudo rm -rf /", ""},
		{"/usr/bin/sudo ls", ""},
		{"s'udo' ls", ""},
		{`\sudo ls`, ""},
		{"env X=1 ls", ""},
		{"xargs rm", ""},
		{"bash -c 'rm x'", ""},
		{"sh script.sh", ""},
		{"nohup server", ""},
		{"timeout 5 curl x", ""},
		{"nice make", ""},
		{"time make", ""},
		{"npx some-package", ""},
		{"exec rm x", ""},
		{"command rm x", ""},
		{"builtin cd", ""},
		{"eval rm x", ""},
		{"source ./env.sh", ""},
		{". ./env.sh", ""},
		{"doas ls", ""},
		{"fish -c ls", ""},
		{"X=1 make", ""},
		{"PATH=/tmp ls", ""},
		{"echo 'unterminated", ""},
		{`echo "unterminated`, ""},
		{`ls \`, ""},
		{"/usr/bin/su?o ls", ""},
		{"{sudo,ls}", ""},
	} {
		if got := Command(tt.cmd); got != tt.want {
			t.Errorf("Command(%q) = %q, want %q", tt.cmd, got, tt.want)
		}
	}
}

// Two commands share a scope only when they are the same command.
func TestCommandScopesShared(t *testing.T) {
	for _, tt := range []struct {
		a, b  string
		share bool
	}{
		{"git status", "git status", true},
		{"git status", "git push --force", false},
		{"cd /repo", "cd /tmp", false},
		{"rm a.txt", "rm -rf /", false},
		{"npm test", "npm publish", false},
	} {
		a, b := Command(tt.a), Command(tt.b)
		if got := a != "" && a == b; got != tt.share {
			t.Errorf("%q (%q) and %q (%q) share a scope: %v, want %v", tt.a, a, tt.b, b, got, tt.share)
		}
	}
}

func TestUnwrap(t *testing.T) {
	for _, tt := range []struct {
		line, want string
		ok         bool
	}{
		{"/bin/bash -lc 'printf one'", "printf one", true},
		{`/bin/bash -lc 'echo '\''hi'\'''`, "echo 'hi'", true},
		{`/bin/bash -lc "git status"`, "git status", true},
		{`/bin/bash -lc "echo $HOME"`, "", false},
		{`bash -lc "rm \"x\""`, `rm "x"`, true},
		{"/bin/bash -lc 'a' extra", "", false},
		{"/bin/bash script.sh", "", false},
		{"/bin/bash -lc 'unterminated", "", false},
		{"git status", "git status", true},
		{"sudo ls", "", false},
	} {
		got, ok := Unwrap(tt.line)
		if got != tt.want || ok != tt.ok {
			t.Errorf("Unwrap(%q) = %q, %v; want %q, %v", tt.line, got, ok, tt.want, tt.ok)
		}
	}
	for _, tt := range []struct {
		argv []string
		want string
		ok   bool
	}{
		{[]string{"bash", "-lc", "ls -la"}, "ls -la", true},
		{[]string{"bash", "script.sh"}, "", false},
		{[]string{"env", "X=1", "ls"}, "", false},
		{[]string{"ls", "-la"}, "ls -la", true},
		{[]string{"rm", "a b"}, "", false},
		{[]string{"echo", "a;b"}, "", false},
		{nil, "", false},
	} {
		got, ok := UnwrapArgv(tt.argv)
		if got != tt.want || ok != tt.ok {
			t.Errorf("UnwrapArgv(%q) = %q, %v; want %q, %v", tt.argv, got, ok, tt.want, tt.ok)
		}
	}
}

func TestWithin(t *testing.T) {
	ws, extra, outside := t.TempDir(), t.TempDir(), t.TempDir()
	if err := os.Symlink(filepath.Join(outside, "bashrc"), filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "bashrc"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(ws, "dirlink")); err != nil {
		t.Fatal(err)
	}
	roots := []string{ws, extra}
	for _, tt := range []struct {
		path string
		want bool
	}{
		{filepath.Join(ws, "a.txt"), true},
		{filepath.Join(ws, "new", "dir", "b.txt"), true},
		{"rel.txt", true},
		{filepath.Join(extra, "c.txt"), true},
		{filepath.Join(outside, "d.txt"), false},
		{filepath.Join(ws, "..", filepath.Base(outside), "d.txt"), false},
		{filepath.Join(ws, "link"), false},
		{filepath.Join(ws, "dirlink", "new.txt"), false},
		{"/etc/passwd", false},
		{"", false},
		{ws + "x/e.txt", false},
	} {
		if got := Within(tt.path, ws, roots); got != tt.want {
			t.Errorf("Within(%q) = %v, want %v", tt.path, got, tt.want)
		}
	}
}

// FuzzCommand: Command never panics, and a scope it gives is the command
// itself, with none of the shell characters and a first word that is
// neither an assignment nor a wrapper.
func FuzzCommand(f *testing.F) {
	for _, s := range []string{"git status", "cd /x && ls", `bash -lc "ls"`, "s'udo' x", `\sudo`, "X=1 y", "echo 'a b'"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, cmd string) {
		got := Command(cmd)
		_, _ = Unwrap(cmd)
		if got == "" {
			return
		}
		if got != strings.TrimSpace(cmd) || strings.ContainsAny(got, ";&|<>$`()\n\r") {
			t.Errorf("Command(%q) = %q", cmd, got)
		}
		words, _, ok := split(got)
		if !ok || len(words) == 0 || strings.Contains(words[0], "=") || IsWrapper(words[0]) {
			t.Errorf("Command(%q) = %q, its words %q", cmd, got, words)
		}
	})
}
