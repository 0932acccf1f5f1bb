package sdktest

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/agenthost/agenthost/plugin/sdk/conformance"
)

// SpawnTokenVar is the environment variable that carries the spawn token of
// every plugin process the kit starts; AGENTHOST_SPAWN_TOKEN_VAR names it.
const SpawnTokenVar = conformance.SpawnTokenVar

// SessionID is the session id the kit attaches with. It holds a NUL byte
// and a slash, as session ids may.
const SessionID = conformance.SessionID

// ErrNotRun is wrapped by the Err of a check that did not run, because the
// handshake check failed or the context ended first.
var ErrNotRun = conformance.ErrNotRun

// Result is the outcome of one check.
type Result = conformance.Result

// Prompts are the prompts the checks send; see conformance.Prompts.
type Prompts = conformance.Prompts

// Option configures Run and Check.
type Option = conformance.Option

// DefaultPrompts returns the prompts used unless WithPrompts overrides them:
// the scripted example plugin's language.
func DefaultPrompts() Prompts { return conformance.DefaultPrompts() }

// WithLogger sets the logger of the go-plugin clients the kit creates
// (default: none).
func WithLogger(l hclog.Logger) Option { return conformance.WithLogger(l) }

// WithTimeout bounds each check, cleanup excluded (default 20s).
func WithTimeout(d time.Duration) Option { return conformance.WithTimeout(d) }

// WithStartTimeout bounds the go-plugin handshake of each plugin start
// (default 10s).
func WithStartTimeout(d time.Duration) Option { return conformance.WithStartTimeout(d) }

// WithEnv adds environment variables (KEY=VALUE) to every plugin the kit
// starts, for example the path of the CLI a plugin drives.
func WithEnv(env ...string) Option { return conformance.WithEnv(env...) }

// WithArgs sets the arguments every plugin process is started with.
func WithArgs(args ...string) Option { return conformance.WithArgs(args...) }

// WithSessionOptions sets the options of every session the kit opens.
func WithSessionOptions(options map[string]string) Option {
	return conformance.WithSessionOptions(options)
}

// WithPrompts replaces the prompts the checks send; empty fields keep
// their defaults.
func WithPrompts(p Prompts) Option { return conformance.WithPrompts(p) }

// Run runs every check against the plugin binary at binaryPath, each as a
// subtest named after the check, each against plugin processes of its own.
// If the handshake check fails, the others are skipped.
func Run(t *testing.T, binaryPath string, opts ...Option) {
	t.Helper()
	var handshakeFailed bool
	for _, name := range conformance.Names() {
		t.Run(name, func(t *testing.T) {
			if handshakeFailed {
				t.Skip("not run: the handshake check failed")
			}
			r := conformance.RunCheck(t.Context(), binaryPath, name, opts...)
			if r.Err != nil {
				if conformance.IsHandshake(name) {
					handshakeFailed = true
				}
				t.Fatal(r.Err)
			}
			if r.Skipped != "" {
				t.Skip(r.Skipped)
			}
		})
	}
}

// Check runs every check against the plugin binary at binaryPath, in
// order, and returns one Result per check, without the testing package;
// it is conformance.Check.
func Check(ctx context.Context, binaryPath string, opts ...Option) []Result {
	return conformance.Check(ctx, binaryPath, opts...)
}
