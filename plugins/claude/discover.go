package claude

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/agenthost/agenthost/plugin/sdk/cliproc"
)

// EnvCLIPath names the environment variable that gives the claude binary
// when the session option cli_path does not.
const EnvCLIPath = "AGENTHOST_CLAUDE_PATH"

// minVersion is the oldest Claude Code the plugin drives: the official
// Agent SDKs' minimum. Older 1.x releases mint a new session id on every
// print-mode resume and lack parts of the control protocol. The plugin is
// tested against TestedVersion.
var minVersion = cliproc.Version{Major: 2}

// TestedVersion is the Claude Code release whose protocol the plugin and its
// fake CLI mirror.
const TestedVersion = "2.1.332"

// installCmd installs Claude Code; installHint says so. Neither names a
// registry.
const (
	installCmd  = "npm install -g @anthropic-ai/claude-code"
	installHint = "install Claude Code (" + installCmd + ")"
)

// fallbackPaths are the usual install locations, relative to the home
// directory when not absolute, searched after PATH (as the official SDKs do).
var fallbackPaths = []string{
	".claude/local/claude",
	".local/bin/claude",
	".npm-global/bin/claude",
	"node_modules/.bin/claude",
	".yarn/bin/claude",
	"/usr/local/bin/claude",
	"/opt/homebrew/bin/claude",
}

// findCLI returns the claude binary to run: the explicit path (session
// option, then environment variable) if one is given, otherwise claude on
// PATH, otherwise the first usual install location that holds an
// executable. An explicit path that does not work is an error: the user
// asked for it, so there is no falling back.
func findCLI(explicit string) (string, error) {
	path, err := cliproc.Lookup{
		Name: "claude",
		Overrides: []cliproc.Override{
			{Path: explicit, From: "the session option " + OptCLIPath},
			{Path: os.Getenv(EnvCLIPath), From: EnvCLIPath},
		},
		Fallbacks: fallbackPaths,
	}.Find()
	var unusable *cliproc.UnusableError
	var notFound *cliproc.NotFoundError
	switch {
	case errors.As(err, &unusable):
		p, from := unusable.Path, unusable.From
		switch e := unusable.Err; {
		case errors.Is(e, cliproc.ErrNotOnPATH):
			return "", fmt.Errorf("claude CLI %q (from %s) is not on PATH (%s): %s, or set %s to its full path",
				p, from, orNone(os.Getenv("PATH")), installHint, from)
		case errors.Is(e, fs.ErrNotExist):
			return "", fmt.Errorf("claude CLI not found at %s (from %s): %s, or fix %s", p, from, installHint, from)
		case errors.Is(e, cliproc.ErrIsDirectory), errors.Is(e, cliproc.ErrNotExecutable):
			return "", fmt.Errorf("claude CLI at %s (from %s) is not an executable file; point %s at the claude binary", p, from, from)
		}
		return "", fmt.Errorf("claude CLI at %s (from %s) cannot be used: %v", p, from, unusable.Err)
	case errors.As(err, &notFound):
		return "", fmt.Errorf("claude CLI not found: it is not on PATH (%s) nor in %s; %s, or set the session option %s or %s to the claude binary",
			orNone(notFound.PATH), strings.Join(notFound.Looked, ", "), installHint, OptCLIPath, EnvCLIPath)
	}
	return path, err
}

func orNone(s string) string {
	if s == "" {
		return "empty"
	}
	return s
}

// checkVersion runs claude --version ("2.1.332 (Claude Code)") and checks
// it against minVersion.
func checkVersion(ctx context.Context, path string, env []string) (cliproc.Version, error) {
	v, err := cliproc.QueryVersion(ctx, path, cliproc.VersionQuery{Env: env})
	var ve *cliproc.VersionError
	switch {
	case errors.Is(err, cliproc.ErrNoVersion) && errors.As(err, &ve):
		return v, fmt.Errorf("claude CLI at %s printed an unexpected version %q (expected e.g. \"%s (Claude Code)\"); is it Claude Code?", path, ve.Stdout, TestedVersion)
	case errors.As(err, &ve):
		return v, fmt.Errorf("claude CLI at %s does not run (`claude --version`: %v%s); reinstall Claude Code (%s) or point %s or the session option %s at a working binary",
			path, ve.Err, quoted(strings.TrimSpace(ve.Stderr+"\n"+ve.Stdout)), installCmd, EnvCLIPath, OptCLIPath)
	case err != nil:
		return v, err
	case v.Less(minVersion):
		return v, fmt.Errorf("claude CLI at %s is version %s, too old: agenthost needs Claude Code %s or later (tested with %s); update it (claude update, or "+installCmd+"@latest)",
			path, v, minVersion, TestedVersion)
	}
	return v, nil
}

func quoted(s string) string {
	if s == "" {
		return ""
	}
	return fmt.Sprintf(", output %q", s)
}
