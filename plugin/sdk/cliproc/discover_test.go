package cliproc

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeExec(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestFind(t *testing.T) {
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	bin := filepath.Join(dir, "bin")
	onPath := filepath.Join(bin, "cli")
	local := filepath.Join(home, ".local", "bin", "cli")
	writeExec(t, onPath, "")
	writeExec(t, local, "")
	plain := filepath.Join(dir, "plain")
	os.WriteFile(plain, nil, 0o644)

	l := Lookup{Name: "cli", PATH: "/nonexistent:" + bin, Home: home, Fallbacks: []string{"/nonexistent/cli", ".local/bin/cli"}}
	find := func(overrides ...Override) (string, error) {
		l := l
		l.Overrides = overrides
		return l.Find()
	}
	for _, tt := range []struct {
		name      string
		overrides []Override
		want      string
		err       error
	}{
		{name: "PATH", want: onPath},
		{name: "first override set", overrides: []Override{{"", "option"}, {local, "env"}}, want: local},
		{name: "bare name on PATH", overrides: []Override{{"cli", "option"}}, want: onPath},
		{name: "bare name not on PATH", overrides: []Override{{"nope", "option"}}, err: ErrNotOnPATH},
		{name: "missing", overrides: []Override{{"/nope/cli", "option"}}, err: fs.ErrNotExist},
		{name: "directory", overrides: []Override{{dir, "option"}}, err: ErrIsDirectory},
		{name: "not executable", overrides: []Override{{plain, "env"}}, err: ErrNotExecutable},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := find(tt.overrides...)
			if tt.err != nil {
				var ue *UnusableError
				if !errors.Is(err, tt.err) || !errors.As(err, &ue) || ue.From != tt.overrides[len(tt.overrides)-1].From {
					t.Fatalf("err = %v, want an UnusableError for %v", err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Find = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
	l.PATH = "/nonexistent"
	if got, err := l.Find(); err != nil || got != local {
		t.Errorf("fallback: %q, %v", got, err)
	}
	l.Home = filepath.Join(dir, "nohome")
	_, err := l.Find()
	var nf *NotFoundError
	if !errors.As(err, &nf) || nf.PATH != "/nonexistent" || strings.Join(nf.Looked, ",") != "/nonexistent/cli,"+filepath.Join(dir, "nohome", ".local/bin/cli") {
		t.Errorf("nothing anywhere: %#v", err)
	}
}

func TestParseVersion(t *testing.T) {
	for _, tt := range []struct{ out, prefix, want string }{
		// claude --version
		{"2.1.332 (Claude Code)", "", "2.1.332"},
		{"v2.0.0\n", "", "2.0.0"},
		{"  10.20.30", "", "10.20.30"},
		{"1.0.128 (Claude Code)", "", "1.0.128"},
		{"Claude Code", "", ""},
		{"", "", ""},
		// codex --version
		{"codex-cli 0.171.0", "codex-cli", "0.171.0"},
		{"WARNING: proceeding\ncodex-cli v1.2.3\n", "codex-cli", "1.2.3"},
		{"2.1.332 (Claude Code)", "codex-cli", ""},
		{"codex-cli", "codex-cli", ""},
	} {
		v, ok := ParseVersion(tt.out, tt.prefix)
		if got := map[bool]string{true: v.String(), false: ""}[ok]; got != tt.want {
			t.Errorf("ParseVersion(%q, %q) = %q, want %q", tt.out, tt.prefix, got, tt.want)
		}
	}
}

func TestVersionCompare(t *testing.T) {
	for _, tt := range []struct {
		a, b Version
		want int
	}{
		{Version{0, 171, 0}, Version{0, 171, 0}, 0},
		{Version{0, 170, 9}, Version{0, 171, 0}, -1},
		{Version{0, 171, 1}, Version{0, 171, 0}, 1},
		{Version{1, 0, 0}, Version{0, 999, 999}, 1},
		{Version{2, 1, 9}, Version{2, 1, 10}, -1},
	} {
		if got := tt.a.Compare(tt.b); got != tt.want {
			t.Errorf("%s.Compare(%s) = %d", tt.a, tt.b, got)
		}
		if got := tt.a.Less(tt.b); got != (tt.want < 0) {
			t.Errorf("%s.Less(%s) = %v", tt.a, tt.b, got)
		}
	}
}

func TestQueryVersion(t *testing.T) {
	dir := t.TempDir()
	script := func(name, body string) string {
		p := filepath.Join(dir, name)
		writeExec(t, p, body)
		return p
	}
	ctx := t.Context()
	if v, err := QueryVersion(ctx, script("ok", "echo 'WARNING: proceeding' >&2; echo codex-cli 0.171.0"), VersionQuery{Prefix: "codex-cli"}); err != nil || v != (Version{0, 171, 0}) {
		t.Errorf("codex-cli: %v, %v", v, err)
	}
	if v, err := QueryVersion(ctx, script("args", `echo "$1 (Claude Code)"`), VersionQuery{Args: []string{"9.8.7"}}); err != nil || v != (Version{9, 8, 7}) {
		t.Errorf("args: %v, %v", v, err)
	}
	var ve *VersionError
	_, err := QueryVersion(ctx, script("fails", "echo out; echo boom >&2; exit 3"), VersionQuery{})
	if !errors.As(err, &ve) || ve.Err.Error() != "exit status 3" || ve.Stderr != "boom" || ve.Stdout != "out" {
		t.Errorf("fails: %#v", err)
	}
	_, err = QueryVersion(ctx, script("other", "echo banana"), VersionQuery{})
	if !errors.Is(err, ErrNoVersion) || !errors.As(err, &ve) || ve.Stdout != "banana" {
		t.Errorf("no version: %v", err)
	}
	start := time.Now()
	_, err = QueryVersion(ctx, script("hangs", "exec sleep 30"), VersionQuery{Timeout: 200 * time.Millisecond})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no answer within 200ms") {
		t.Errorf("hangs: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("a hanging CLI held QueryVersion for %s", d)
	}
	if _, err := QueryVersion(ctx, filepath.Join(dir, "missing"), VersionQuery{}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing: %v", err)
	}
}
