package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/agenthost/agenthost/plugin/sdk/conformance"
)

const conformanceLong = `Run the plugin conformance kit against a plugin binary and print a pass/fail
table. The kit starts the plugin as the host does (go-plugin handshake, gRPC,
its own process group) and checks the protocol a host relies on: identity,
fenced attach, sessions, streamed and numbered updates, cancellation, stale
fences refused, the outbox replayed after a reattach, graceful and forced stops
leaving no process behind. Each check starts fresh plugin processes.

PLUGIN_BINARY is the plugin's executable; arguments after -- are passed to it.
The name of a built-in agent (scripted, claude, codex) checks the one this
binary serves.

The default prompts suit an agent that echoes its prompt word by word and
holds its turn on "wait" until cancelled (examples/minimal-plugin), and the
scripted agent; a plugin for a real agent passes its own: --prompt-stream (a
turn that streams text and ends by itself), --prompt-hold (a turn that runs
until cancelled) and --prompt-replay (a turn streaming at least four updates
over a few hundred milliseconds). A failure such a prompt could explain names
the flag to pass.

Exits with status 1 if any check fails or does not run.`

func (a *App) conformanceCommand() *cobra.Command {
	var env, options []string
	var prompts conformance.Prompts
	var timeout time.Duration
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "conformance PLUGIN_BINARY [-- ARGS...]",
		Short: "Check a plugin binary against the plugin protocol (pass/fail table)",
		Long:  conformanceLong,
		Example: `  agenthost conformance ./bin/my-plugin
  agenthost conformance ./bin/my-plugin --prompt-stream "say hello" --prompt-hold "wait for me" --prompt-replay "count slowly"
  agenthost conformance ./bin/my-plugin --env MY_CLI=/usr/local/bin/my-cli --option model=small
  agenthost conformance scripted`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErrorf("%s needs the PLUGIN_BINARY to check", cmd.CommandPath())
			}
			if n := cmd.ArgsLenAtDash(); n > 1 || (n < 0 && len(args) > 1) {
				return usageErrorf("%s checks one PLUGIN_BINARY; pass its arguments after --", cmd.CommandPath())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			opts := []conformance.Option{conformance.WithPrompts(prompts), conformance.WithTimeout(timeout)}
			if len(env) > 0 {
				opts = append(opts, conformance.WithEnv(env...))
			}
			if len(options) > 0 {
				m := map[string]string{}
				for _, kv := range options {
					k, v, ok := strings.Cut(kv, "=")
					if !ok {
						return usageErrorf("--option %q: expected KEY=VALUE", kv)
					}
					m[k] = v
				}
				opts = append(opts, conformance.WithSessionOptions(m))
			}
			for _, kv := range env {
				if !strings.Contains(kv, "=") {
					return usageErrorf("--env %q: expected KEY=VALUE", kv)
				}
			}
			bin, pluginArgs, err := a.pluginBinary(args[0], args[1:])
			if err != nil {
				return err
			}
			if len(pluginArgs) > 0 {
				opts = append(opts, conformance.WithArgs(pluginArgs...))
			}
			return a.conformance(cmd, bin, pluginArgs, asJSON, opts)
		},
		ValidArgsFunction: func(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveDefault
			}
			return a.builtinNames(), cobra.ShellCompDirectiveDefault
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&env, "env", nil, "extra environment for the plugin, KEY=VALUE (repeatable)")
	f.StringArrayVar(&options, "option", nil, "a session option, KEY=VALUE (repeatable)")
	def := conformance.DefaultPrompts()
	f.StringVar(&prompts.Stream, "prompt-stream", "", fmt.Sprintf("a prompt whose turn streams text and ends by itself (default %q)", def.Stream))
	f.StringVar(&prompts.Hold, "prompt-hold", "", fmt.Sprintf("a prompt whose turn runs until cancelled (default %q)", def.Hold))
	f.StringVar(&prompts.Replay, "prompt-replay", "", fmt.Sprintf("a prompt whose turn streams several updates over a few hundred ms (default %q)", def.Replay))
	f.DurationVar(&timeout, "timeout", 20*time.Second, "the time each check may take")
	f.BoolVar(&asJSON, "json", false, `print one JSON object per check: {"check","pass","notRun","error","seconds"}`)
	return cmd
}

// pluginBinary resolves the binary to check: a path, or the name of a
// built-in plugin this binary serves.
func (a *App) pluginBinary(arg string, args []string) (string, []string, error) {
	if _, ok := a.Builtins[arg]; ok && !strings.ContainsRune(arg, os.PathSeparator) {
		if _, err := os.Stat(arg); err != nil {
			exe, err := os.Executable()
			if err != nil {
				return "", nil, err
			}
			return exe, append([]string{PluginCommand, arg}, args...), nil
		}
	}
	abs, err := filepath.Abs(arg)
	if err != nil {
		return "", nil, err
	}
	fi, err := os.Stat(abs)
	switch {
	case err != nil:
		return "", nil, fmt.Errorf("no plugin binary at %s: %w", arg, err)
	case fi.IsDir() || fi.Mode()&0o111 == 0:
		return "", nil, fmt.Errorf("%s is not an executable file", arg)
	}
	return abs, args, nil
}

func (a *App) conformance(cmd *cobra.Command, bin string, args []string, asJSON bool, opts []conformance.Option) error {
	ctx, cancel := signalContext(cmd)
	defer cancel()
	st := styleFor(a.Stdout)
	names := conformance.Names()
	width := 0
	for _, n := range names {
		width = max(width, len(n))
	}
	if !asJSON {
		what := bin
		if len(args) > 0 {
			what += " " + strings.Join(args, " ")
		}
		fmt.Fprintf(a.Stdout, "Conformance of %s (%d checks)\n\n", what, len(names))
		fmt.Fprintf(a.Stdout, "  %-*s  %-7s  %s\n", width, "CHECK", "RESULT", "TIME")
	}
	var failed []conformance.Result
	passed, notRun := 0, 0
	progress := func(r conformance.Result) {
		result := st.green("PASS")
		switch {
		case errors.Is(r.Err, conformance.ErrNotRun):
			result = st.yellow("NOT RUN")
			notRun++
		case r.Err != nil:
			result = st.red("FAIL")
			failed = append(failed, r)
		default:
			passed++
		}
		if asJSON {
			line := map[string]any{"check": r.Name, "pass": r.Err == nil, "notRun": errors.Is(r.Err, conformance.ErrNotRun),
				"seconds": r.Duration.Seconds()}
			if r.Err != nil {
				line["error"] = r.Err.Error()
			}
			b, _ := json.Marshal(line)
			fmt.Fprintf(a.Stdout, "%s\n", b)
			return
		}
		// Pad by the plain word's width: colour codes are invisible.
		plain := map[bool]string{true: "PASS", false: "FAIL"}[r.Err == nil]
		if errors.Is(r.Err, conformance.ErrNotRun) {
			plain = "NOT RUN"
		}
		fmt.Fprintf(a.Stdout, "  %-*s  %s%s  %s\n", width, r.Name, result, strings.Repeat(" ", 7-len(plain)), r.Duration.Round(10*time.Millisecond))
	}
	conformance.Check(ctx, bin, append(opts, conformance.WithProgress(progress))...)
	if asJSON {
		if len(failed) > 0 || notRun > 0 {
			return exitCode(1)
		}
		return nil
	}
	for _, r := range failed {
		fmt.Fprintf(a.Stdout, "\n%s %s:\n", st.red("✗"), st.bold(r.Name))
		for _, l := range strings.Split(strings.TrimRight(r.Err.Error(), "\n"), "\n") {
			fmt.Fprintf(a.Stdout, "    %s\n", l)
		}
	}
	fmt.Fprintf(a.Stdout, "\n%d passed, %d failed, %d not run\n", passed, len(failed), notRun)
	if len(failed) > 0 || notRun > 0 {
		return exitCode(1)
	}
	return nil
}

// signalContext is the command's context, cancelled by SIGINT or SIGTERM.
func signalContext(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
}
