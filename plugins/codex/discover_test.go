package codex

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/plugin/sdk"
)

func writeExec(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("#!/bin/sh\necho codex-cli 0.171.0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestFindCLI(t *testing.T) {
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	onPath := filepath.Join(dir, "bin", "codex")
	local := filepath.Join(home, ".local", "bin", "codex")
	writeExec(t, onPath)
	writeExec(t, local)
	notExec := filepath.Join(dir, "plain")
	os.WriteFile(notExec, nil, 0o644)

	for _, tt := range []struct {
		name, explicit, env, path, home, want, err string
	}{
		{name: "explicit wins", explicit: local, env: onPath, path: filepath.Dir(onPath), want: local},
		{name: "env next", env: local, path: filepath.Dir(onPath), want: local},
		{name: "PATH", path: "/nonexistent:" + filepath.Dir(onPath), home: home, want: onPath},
		{name: "fallback", path: "/nonexistent", home: home, want: local},
		{name: "explicit missing", explicit: "/nope/codex", err: "codex CLI not usable at /nope/codex (from session option cli_path)"},
		{name: "env not executable", env: notExec, err: "is not executable"},
		{name: "explicit is a dir", explicit: dir, err: "is a directory"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := findCLI(tt.explicit, tt.env, tt.path, tt.home)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), "npm install -g @openai/codex") {
					t.Fatalf("err = %v, want %q and the install hint", err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("findCLI = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
	// Nothing anywhere (the fixed fallbacks may exist on a developer's
	// machine: only check the message when they do not).
	if _, err := findCLI("", "", "/nonexistent", filepath.Join(dir, "nohome")); err != nil {
		if !strings.Contains(err.Error(), "codex CLI not found (looked in PATH, ") || !strings.Contains(err.Error(), "/opt/homebrew/bin/codex") {
			t.Errorf("err = %v", err)
		}
	}
}

// The npm launcher (bin/codex.js, linked from node_modules/.bin) is
// replaced by the native binary of the platform package beside it.
func TestNativeCLI(t *testing.T) {
	plat, triple := npmPlatform()
	if plat == "" {
		t.Skip("no npm platform package for " + runtime.GOOS + "/" + runtime.GOARCH)
	}
	nm := filepath.Join(t.TempDir(), "node_modules")
	launcher := filepath.Join(nm, "@openai", "codex", "bin", "codex.js")
	writeExec(t, launcher)
	link := filepath.Join(nm, ".bin", "codex")
	os.MkdirAll(filepath.Dir(link), 0o755)
	if err := os.Symlink("../@openai/codex/bin/codex.js", link); err != nil {
		t.Fatal(err)
	}
	if got, root := nativeCLI(link); got != link || root != "" {
		t.Errorf("without a platform package: %q, %q", got, root)
	}
	native := filepath.Join(nm, "@openai", "codex-"+plat, "vendor", triple, "bin", "codex")
	writeExec(t, native)
	got, root := nativeCLI(link)
	if got != native || root != filepath.Join(nm, "@openai", "codex") {
		t.Errorf("nativeCLI = %q, %q; want %q", got, root, native)
	}
	other := filepath.Join(t.TempDir(), "codex")
	writeExec(t, other)
	if got, _ := nativeCLI(other); got != other {
		t.Errorf("a native binary is kept: %q", got)
	}
}

func TestCheckVersion(t *testing.T) {
	dir := t.TempDir()
	script := func(name, body string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755)
		return p
	}
	ctx := t.Context()
	if v, err := checkVersion(ctx, script("ok", "echo 'WARNING: proceeding' >&2; echo codex-cli 0.171.0"), nil); err != nil || v != "0.171.0" {
		t.Errorf("0.171.0: %q, %v", v, err)
	}
	if v, err := checkVersion(ctx, script("newer", "echo codex-cli 1.2.3"), nil); err != nil || v != "1.2.3" {
		t.Errorf("1.2.3: %q, %v", v, err)
	}
	for _, tt := range []struct{ name, body, want string }{
		{"old", "echo codex-cli 0.99.0", "older than 0.171.0"},
		{"other", "echo 2.1.332 '(Claude Code)'", "not a codex-cli version"},
		{"fails", "echo boom >&2; exit 3", "boom"},
	} {
		if _, err := checkVersion(ctx, script(tt.name, tt.body), nil); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
	}
	// The ordering itself is cliproc's, tested there.
	if minVersion.String() != MinVersion {
		t.Errorf("minVersion %s, MinVersion %s", minVersion, MinVersion)
	}
}

func TestChildEnvAndAuth(t *testing.T) {
	home := t.TempDir()
	ch := filepath.Join(home, ".codex")
	os.MkdirAll(ch, 0o700)
	os.WriteFile(filepath.Join(ch, "config.toml"), []byte("model_provider = \"az\"\n[model_providers.az]\n  env_key = 'AZ_KEY'\n"), 0o600)
	base := []string{"HOME=" + home, "PATH=/bin", "OPENAI_API_KEY=sk", "OPENAI_BASE_URL=http://x", "AZ_KEY=k", "OTHER=1"}

	env, stripped := childEnv(base, false)
	if !slices.Equal(env, []string{"HOME=" + home, "PATH=/bin", "OTHER=1"}) {
		t.Errorf("env %q", env)
	}
	if !slices.Equal(stripped, []string{"OPENAI_API_KEY", "OPENAI_BASE_URL", "AZ_KEY"}) {
		t.Errorf("stripped %q", stripped)
	}
	err := checkAuth(env, stripped)
	if err == nil || !strings.Contains(err.Error(), "OPENAI_API_KEY, AZ_KEY are set but withheld") || !strings.Contains(err.Error(), filepath.Join(ch, "auth.json")) {
		t.Errorf("checkAuth: %v", err)
	}
	if env, _ := childEnv(base, true); len(env) != len(base) {
		t.Errorf("allowed: %q", env)
	} else if err := checkAuth(env, nil); err != nil {
		t.Errorf("a key allowed through: %v", err)
	}
	os.WriteFile(filepath.Join(ch, "auth.json"), []byte("{}"), 0o600)
	if err := checkAuth(env, stripped); err != nil {
		t.Errorf("with auth.json: %v", err)
	}
	// CODEX_HOME wins over HOME.
	if got := codexHome([]string{"HOME=/h", "CODEX_HOME=/c"}); got != "/c" {
		t.Errorf("codexHome = %q", got)
	}
}

func TestParseOptions(t *testing.T) {
	o, err := parseOptions(map[string]string{
		"approval_policy": "untrusted", "sandbox": "read-only", "config": `{"model_verbosity":"low"}`,
		"ephemeral": "true", "allow_credentials": "1", "max_message_bytes": "4096", "model_retry_timeout": "2m",
		"mode": "auto", "effort": "high", "system_prompt": "be brief", "append_system_prompt": "and kind",
		"add_dirs": "/data:/srv/x/", "env.FOO": "bar",
	})
	if err != nil {
		t.Fatal(err)
	}
	if o.approvalPolicy != "untrusted" || o.sandbox != "read-only" || o.config["model_verbosity"] != "low" || !o.ephemeral ||
		!o.allowCredentials || o.skipAuthCheck || o.maxMessageBytes != 4096 || o.modelRetryTimeout != 2*time.Minute ||
		o.effort != "high" || o.systemPrompt != "be brief" || o.appendSystemPrompt != "and kind" ||
		!slices.Equal(o.addDirs, []string{"/data", "/srv/x"}) || !slices.Equal(o.env, []string{"FOO=bar"}) {
		t.Errorf("options %+v", o)
	}
	// The mode wins over approval_policy and sandbox.
	if a, s := o.policy(); a != "on-request" || s != "workspace-write" {
		t.Errorf("policy %s, %s; want auto's", a, s)
	}
	if o, _ := parseOptions(nil); o.maxMessageBytes != DefaultMaxMessageBytes {
		t.Errorf("default cap %d", o.maxMessageBytes)
	}
	_, err = parseOptions(map[string]string{"sandbox": "workspaceWrite", "config": "[1]", "ephemeral": "yes please", "max_message_bytes": "10",
		"model_retry_timeout": "soon", "mode": "yolo", "effort": "extreme", "add_dirs": "rel/dir", "env.": "x", "unknown": "x"})
	for _, w := range []string{`sandbox: "workspaceWrite"`, "config: ", "ephemeral: ", "max_message_bytes: ", "model_retry_timeout: ",
		`mode: "yolo"`, `effort: "extreme"`, "add_dirs: ", "env.: ", "unknown: the codex plugin has no such option"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error %v lacks %q", err, w)
		}
	}
	// Each is an InvalidOptionError naming its option; the first in name
	// order is what errors.As finds.
	var ioe *sdk.InvalidOptionError
	if !errors.As(err, &ioe) || ioe.Option != "add_dirs" {
		t.Errorf("errors.As: %+v", ioe)
	}
}

func TestToInput(t *testing.T) {
	in, err := toInput([]sdk.ContentBlock{
		sdk.TextBlock("look"),
		{Type: "image", JSON: `{"type":"image","data":"AAA","mimeType":"image/png"}`},
		{Type: "image", JSON: `{"type":"image","uri":"file:///tmp/a.png"}`},
		{Type: "resource_link", JSON: `{"type":"resource_link","uri":"file:///w/main.go","name":"main.go"}`},
		{Type: "resource", JSON: `{"type":"resource","resource":{"uri":"file:///w/notes.md","text":"RESOURCE TEXT"}}`},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := marshal(in)
	want := `[{"text":"look","text_elements":[],"type":"text"},{"type":"image","url":"data:image/png;base64,AAA"},{"path":"/tmp/a.png","type":"localImage"},{"text":"[@main.go](file:///w/main.go)","text_elements":[],"type":"text"},{"text":"\u003cresource uri=\"file:///w/notes.md\"\u003e\nRESOURCE TEXT\n\u003c/resource\u003e","text_elements":[],"type":"text"}]`
	if got != want {
		t.Errorf("input\n%s\nwant\n%s", got, want)
	}
	if _, err := toInput([]sdk.ContentBlock{{Type: "audio", JSON: "{}"}}); err == nil || !strings.Contains(err.Error(), `type "audio"`) {
		t.Errorf("audio: %v", err)
	}
	if _, err := toInput(nil); err == nil {
		t.Error("an empty prompt was accepted")
	}
}
