package codex

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/agenthost/agenthost/plugin/sdk/cliproc"
)

// MinVersion is the oldest codex CLI this plugin drives: the version whose
// app-server protocol it mirrors and was checked against (0.171.0). Older
// releases differ in method and field names (v1 had no thread/turn API).
const MinVersion = "0.171.0"

// EnvCodexPath names the environment variable that may hold the path of the
// codex CLI; the session option cli_path takes precedence.
const EnvCodexPath = "AGENTHOST_CODEX_PATH"

// installHint is what a user does about a missing or old CLI.
const installHint = "install it with `npm install -g @openai/codex` (" + MinVersion + " or later), " +
	"or set the session option cli_path or the environment variable " + EnvCodexPath + " to its path"

// minVersion is MinVersion as a number.
var minVersion = cliproc.Version{Minor: 171}

// fallbackPaths are where codex is usually installed, tried after PATH;
// relative ones are in the home directory.
var fallbackPaths = []string{".local/bin/codex", ".npm-global/bin/codex", "/usr/local/bin/codex", "/opt/homebrew/bin/codex"}

// findCLI locates the codex CLI: the explicit path (session option, then
// environment), then PATH, then the usual install locations.
func findCLI(explicit, fromEnv, pathVar, home string) (string, error) {
	path, err := cliproc.Lookup{
		Name: "codex",
		Overrides: []cliproc.Override{
			{Path: explicit, From: "session option " + OptCLIPath},
			{Path: fromEnv, From: EnvCodexPath},
		},
		PATH: pathVar, Home: home, Fallbacks: fallbackPaths,
	}.Find()
	var unusable *cliproc.UnusableError
	var notFound *cliproc.NotFoundError
	switch {
	case errors.As(err, &unusable):
		return "", fmt.Errorf("codex CLI not usable at %s (from %s): %v; %s", unusable.Path, unusable.From, unusable.Err, installHint)
	case errors.As(err, &notFound):
		return "", fmt.Errorf("codex CLI not found (looked in %s): %s", strings.Join(append([]string{"PATH"}, notFound.Looked...), ", "), installHint)
	}
	return path, err
}

// nativeCLI returns the native codex binary behind the npm launcher
// (bin/codex.js, a Node script that spawns it), and the package root, or
// path itself when it is not the launcher or no native binary is found.
// Running the native binary directly means signals and Pdeathsig reach the
// process that does the work.
func nativeCLI(path string) (native, pkgRoot string) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil || filepath.Base(real) != "codex.js" || filepath.Base(filepath.Dir(real)) != "bin" {
		return path, ""
	}
	root := filepath.Dir(filepath.Dir(real))
	plat, triple := npmPlatform()
	if plat == "" {
		return path, ""
	}
	for _, c := range []string{
		filepath.Join(filepath.Dir(root), "codex-"+plat, "vendor", triple, "bin", "codex"),
		filepath.Join(root, "node_modules", "@openai", "codex-"+plat, "vendor", triple, "bin", "codex"),
		filepath.Join(root, "vendor", triple, "bin", "codex"),
		filepath.Join(root, "vendor", triple, "codex", "codex"),
	} {
		if cliproc.CheckExecutable(c) == nil {
			return c, root
		}
	}
	return path, ""
}

// npmPlatform names the platform package and target triple of the npm
// distribution for this machine.
func npmPlatform() (plat, triple string) {
	switch runtime.GOOS + "/" + runtime.GOARCH {
	case "linux/amd64":
		return "linux-x64", "x86_64-unknown-linux-musl"
	case "linux/arm64":
		return "linux-arm64", "aarch64-unknown-linux-musl"
	case "darwin/amd64":
		return "darwin-x64", "x86_64-apple-darwin"
	case "darwin/arm64":
		return "darwin-arm64", "aarch64-apple-darwin"
	}
	return "", ""
}

// checkVersion runs `codex --version` ("codex-cli 0.171.0") and checks it
// against MinVersion, returning the version.
func checkVersion(ctx context.Context, path string, env []string) (string, error) {
	v, err := cliproc.QueryVersion(ctx, path, cliproc.VersionQuery{Env: env, Prefix: "codex-cli"})
	var ve *cliproc.VersionError
	switch {
	case errors.Is(err, cliproc.ErrNoVersion) && errors.As(err, &ve):
		return "", fmt.Errorf("`%s --version` printed %q, not a codex-cli version: is this the OpenAI codex CLI? %s", path, cliproc.Clip(ve.Stdout, 200), installHint)
	case errors.As(err, &ve):
		return "", fmt.Errorf("`%s --version` failed (%v): %s; %s", path, ve.Err, ve.Stderr, installHint)
	case err != nil:
		return "", err
	case v.Less(minVersion):
		return v.String(), fmt.Errorf("codex-cli %s at %s is older than %s, the oldest version this plugin supports: upgrade it with `npm install -g @openai/codex@latest`, or point the session option cli_path or %s at a newer codex", v, path, MinVersion, EnvCodexPath)
	}
	return v.String(), nil
}
