// Package cli is the agenthost command line: the host's two servers
// (`agenthost serve` on a unix socket, `agenthost acp` on stdio), the
// client commands that talk to a running host over its socket (run,
// sessions, journal, status), the plugin conformance kit (conformance), and
// the hidden subcommand that serves the built-in plugins, so the binary
// is the only file a desktop app ships. Command agenthost wires it up with
// its built-in plugins; its tests run the real binary.
package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/mattn/go-isatty"
	"github.com/spf13/cobra"

	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/internal/privdir"
	"github.com/agenthost/agenthost/plugin/sdk"
)

// Environment variables that provide flag defaults.
const (
	EnvStateDir = "AGENTHOST_STATE_DIR"
	EnvLogLevel = "AGENTHOST_LOG_LEVEL"
)

// App is the command line of one agenthost binary.
type App struct {
	// Builtins are the plugins this binary serves itself, by agent name
	// (agenthost __plugin NAME).
	Builtins map[string]sdk.Factory
	// BuiltinOptions are the Serve options of built-in plugins, by agent
	// name: what each declares (sdk.WithCapabilities) before any session.
	BuiltinOptions map[string][]sdk.ServeOption
	// Credentials are the built-in agents' credential policies, by agent
	// name: the variables stripped from a plugin's environment unless its
	// session allows credentials, or passed from the host's own when the
	// operator opts the agent in (agenthost.json "credentials": "inherit").
	// The binary fills them from its built-in plugins, which know their
	// providers; the host knows none.
	Credentials map[string]host.CredentialPolicy
	// Version is reported by agenthost version and the local API; empty
	// means the module version recorded by the go command, or "devel".
	Version string

	Stdin          io.Reader
	Stdout, Stderr io.Writer

	stateDir string
	logLevel string
}

// exitError carries an exit code; usage errors exit 2.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return &exitError{code: 2, err: fmt.Errorf(format, args...)}
}

// exitCode ends the process with code without a further message: the
// command already said what happened.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// Main runs the command line args and returns the process's exit code: 0
// on success, 1 on failure, 2 for a usage error.
func (a *App) Main(args []string) int {
	if a.Stdin == nil {
		a.Stdin = os.Stdin
	}
	if a.Stdout == nil {
		a.Stdout = os.Stdout
	}
	if a.Stderr == nil {
		a.Stderr = os.Stderr
	}
	cobra.EnableCommandSorting = false
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetIn(a.Stdin)
	root.SetOut(a.Stdout)
	root.SetErr(a.Stderr)
	err := root.ExecuteContext(context.Background())
	if err == nil {
		return 0
	}
	var code exitCode
	if errors.As(err, &code) {
		return int(code)
	}
	msg := err.Error()
	var ee *exitError
	switch {
	case errors.As(err, &ee) && ee.code == 2:
		fmt.Fprintf(a.Stderr, "agenthost: %s\nRun 'agenthost help' for usage.\n", msg)
		return 2
	case errors.As(err, &ee):
		fmt.Fprintf(a.Stderr, "agenthost: %s\n", msg)
		return ee.code
	case strings.HasPrefix(msg, "unknown command") || strings.HasPrefix(msg, "unknown flag") ||
		strings.HasPrefix(msg, "unknown shorthand flag") || strings.HasPrefix(msg, "required flag"):
		fmt.Fprintf(a.Stderr, "agenthost: %s\nRun 'agenthost help' for usage.\n", strings.TrimSpace(msg))
		return 2
	}
	fmt.Fprintf(a.Stderr, "agenthost: %s\n", msg)
	return 1
}

const rootLong = `agenthost runs coding-agent backends (Claude Code, Codex, third-party agents)
as plugin processes and keeps every session durable: the host can crash,
update or restart while its agents keep working, and a client that
reconnects misses nothing.

Start a host, then talk to it from another terminal:

  agenthost serve                                   # the host, on <state-dir>/agenthost.sock
  agenthost run --agent scripted "count 5 200ms"    # start a session and stream a turn
  agenthost sessions list                           # every session the host knows
  agenthost journal SESSION --follow                # a session's durable journal, live

Editors that speak the Agent Client Protocol run 'agenthost acp --agent NAME'
as their agent. Plugin authors check their plugin with 'agenthost conformance'.

Every command works on one state directory (--state-dir, or $AGENTHOST_STATE_DIR);
the host serving it listens on the socket inside it, so client commands find
the host by the same flag.`

func (a *App) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "agenthost",
		Short:         "Run coding agents as durable, restartable plugin sessions",
		Long:          rootLong,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       a.version(),
	}
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		_, err := a.logger("agenthost")
		return err
	}
	root.SetVersionTemplate("agenthost {{.Version}} (" + runtime.Version() + ")\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageErrorf("%v", err) })
	pf := root.PersistentFlags()
	pf.StringVar(&a.stateDir, "state-dir", defaultStateDir(), "the state directory: sessions, journals, plugins/ and the socket live here (env "+EnvStateDir+")")
	pf.StringVar(&a.logLevel, "log-level", envOr(EnvLogLevel, "warn"), "log level on stderr: trace, debug, info, warn, error or off (env "+EnvLogLevel+")")
	_ = root.RegisterFlagCompletionFunc("log-level", cobra.FixedCompletions(
		[]string{"trace", "debug", "info", "warn", "error", "off"}, cobra.ShellCompDirectiveNoFileComp))
	_ = root.MarkPersistentFlagDirname("state-dir")
	root.AddGroup(&cobra.Group{ID: "host", Title: "Host:"}, &cobra.Group{ID: "client", Title: "Sessions (clients of a running host):"},
		&cobra.Group{ID: "plugins", Title: "Plugins:"})
	root.SetHelpCommandGroupID("")
	root.SetCompletionCommandGroupID("")
	for _, c := range []*cobra.Command{a.serveCommand(), a.acpCommand(), a.statusCommand()} {
		c.GroupID = "host"
		root.AddCommand(c)
	}
	for _, c := range []*cobra.Command{a.runCommand(), a.sessionsCommand(), a.journalCommand()} {
		c.GroupID = "client"
		root.AddCommand(c)
	}
	for _, c := range []*cobra.Command{a.conformanceCommand(), a.agentsCommand()} {
		c.GroupID = "plugins"
		root.AddCommand(c)
	}
	root.AddCommand(a.versionCommand(), a.pluginCommand())
	return root
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// defaultStateDir is $AGENTHOST_STATE_DIR, else agenthost under the user's
// state directory: $XDG_STATE_HOME or ~/.local/state (on macOS
// ~/Library/Application Support).
func defaultStateDir() string {
	if v := os.Getenv(EnvStateDir); v != "" {
		return v
	}
	if v := os.Getenv("XDG_STATE_HOME"); v != "" && filepath.IsAbs(v) {
		return filepath.Join(v, "agenthost")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return homelessStateDir()
	}
	if runtime.GOOS == "darwin" {
		return filepath.Join(home, "Library", "Application Support", "agenthost")
	}
	return filepath.Join(home, ".local", "state", "agenthost")
}

// homelessStateDir is the state directory of a user without a home
// directory: agenthost-<uid> in the temporary directory. That is a name
// anyone can predict in a directory anyone can write, so resolveStateDir
// takes it only as this user's private directory (privdir).
func homelessStateDir() string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("agenthost-%d", os.Getuid()))
}

// resolveStateDir returns the absolute state directory. The temporary
// fallback is created, or accepted, only as a private directory of this
// user: another user who made it first would read and move everything the
// host keeps there.
func (a *App) resolveStateDir() (string, error) {
	dir := a.stateDir
	if dir == "" {
		dir = defaultStateDir()
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("state directory %q: %w", dir, err)
	}
	if abs == homelessStateDir() {
		if err := privdir.Ensure(abs); err != nil {
			return "", fmt.Errorf("state directory (the fallback without a home directory): %w; set %s or --state-dir to a directory of yours", err, EnvStateDir)
		}
	}
	return abs, nil
}

// stateDirFlag is the --state-dir argument that names dir, for messages
// that suggest a command; empty when dir is the default.
func stateDirFlag(dir string) string {
	if def, err := filepath.Abs(defaultStateDir()); err == nil && def == dir {
		return ""
	}
	return " --state-dir " + shellQuote(dir)
}

func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=@+,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// logger returns an hclog logger on stderr at the --log-level.
func (a *App) logger(name string) (hclog.Logger, error) {
	level := hclog.LevelFromString(a.logLevel)
	if level == hclog.NoLevel {
		return nil, usageErrorf("--log-level %q: expected trace, debug, info, warn, error or off", a.logLevel)
	}
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: level, Output: quietDetach{a.Stderr}, Color: hclog.ColorOff}), nil
}

// quietDetach drops log lines the host emits when it closes, which are
// expected there and not failures: go-plugin's stdout scanner reporting,
// at error level, the handshake pipe the host closes on every detach; the
// session's update pump warning about the stream its own closing
// connection ended; and the orphan reaper's first pass reporting, at error
// level, that the close cancelled it. (hclog writes each entry with one
// Write.)
type quietDetach struct{ w io.Writer }

var detachNoise = [][2]string{
	{"error encountered while scanning stdout", "file already closed"},
	{"update stream interrupted", "the client connection is closing"},
	{"orphan-reaper failed", "context canceled"},
}

func (q quietDetach) Write(p []byte) (int, error) {
	for _, n := range detachNoise {
		if bytes.Contains(p, []byte(n[0])) && bytes.Contains(p, []byte(n[1])) {
			return len(p), nil
		}
	}
	return q.w.Write(p)
}

// version is the module's version as the go command recorded it, or
// "devel" for a build from a work tree.
func (a *App) version() string {
	if a.Version != "" {
		return a.Version
	}
	if info, ok := debug.ReadBuildInfo(); ok {
		if v := info.Main.Version; v != "" && v != "(devel)" {
			return v
		}
	}
	return "devel"
}

func (a *App) builtinNames() []string {
	names := make([]string, 0, len(a.Builtins))
	for n := range a.Builtins {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// isTerminal reports whether w is a terminal.
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

// noArgs is cobra.NoArgs with a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErrorf("%s takes no arguments, got %q", cmd.CommandPath(), args)
	}
	return nil
}

// exactArgs is cobra.ExactArgs with a usage error that names the
// arguments.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != len(names) {
			return usageErrorf("%s expects %s, got %d argument(s)", cmd.CommandPath(), strings.Join(names, " "), len(args))
		}
		return nil
	}
}

func (a *App) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the agenthost version and the Go version it was built with",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(cmd.OutOrStdout(), "agenthost %s (%s)\n", a.version(), runtime.Version())
			return nil
		},
	}
}

// pluginCommand serves a built-in plugin: the host starts this binary as
// `agenthost __plugin NAME`. Hidden: nobody runs it by hand.
func (a *App) pluginCommand() *cobra.Command {
	return &cobra.Command{
		Use:    PluginCommand + " NAME",
		Short:  "Serve a built-in plugin (the host runs this)",
		Hidden: true,
		Args:   exactArgs("NAME"),
		RunE: func(_ *cobra.Command, args []string) error {
			factory, ok := a.Builtins[args[0]]
			if !ok {
				return fmt.Errorf("no built-in plugin %q; the built-ins are %s", args[0], strings.Join(a.builtinNames(), ", "))
			}
			return sdk.Serve(args[0], factory, a.BuiltinOptions[args[0]]...)
		},
	}
}
