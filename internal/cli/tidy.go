package cli

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/internal/apiclient"
)

// The commands that tidy the state directory: sessions stop (one, or
// --all), rm and prune. Like every sessions command they ask the host
// serving the state directory (it holds the store's lock, so nothing else
// could change it), and say how to start one when none serves it.

func (a *App) sessionsStopCommand() *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "stop SESSION | --all",
		Short: "Stop a running session (or every one): its turn ends, its plugin exits, its lease is released",
		Long: `Stop a session that runs in the host: the plugin is asked to close the session
(a running turn ends and is journaled), then stopped; the lease is released.
The session stays resumable with 'agenthost run --session SESSION'. A session
that was stopped already is no error: it says so and exits 0. A session whose
lease is latched or held by a plugin this host does not run is not stopped
already (its plugin may be alive): the command says why and exits 1
(agenthost status says more). --all stops every session running in the host.`,
		Example: `  agenthost sessions stop 0198c2d5-…
  agenthost sessions stop --all`,
		Args: func(cmd *cobra.Command, args []string) error {
			if all {
				return noArgs(cmd, args)
			}
			return exactArgs("SESSION")(cmd, args)
		},
		ValidArgsFunction: a.completeSessionArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := a.connect(ctx, apiclient.Options{})
			if err != nil {
				return err
			}
			defer c.Close()
			if all {
				var res api.StopAllResult
				if err := c.Call(ctx, api.MethodStopAll, nil, &res); err != nil {
					return err
				}
				for _, id := range res.Stopped {
					fmt.Fprintf(a.Stdout, "stopped session %s\n", displayID(id))
				}
				if len(res.Stopped) == 0 && len(res.Failed) == 0 {
					fmt.Fprintln(a.Stdout, "no session was running")
				}
				return failures("stopped", res.Failed, "agenthost sessions show ID says what it holds")
			}
			var res api.StopResult
			if err := c.Call(ctx, api.MethodStop, api.Params{SessionID: args[0]}, &res); err != nil {
				if apiclient.ErrorCode(err) == api.CodeSessionHeld {
					return fmt.Errorf("session %s is not known to be stopped: %w", displayID(args[0]), err)
				}
				return sessionError(args[0], err)
			}
			if res.AlreadyStopped {
				fmt.Fprintf(a.Stdout, "session %s was stopped already\n", displayID(args[0]))
				return nil
			}
			fmt.Fprintf(a.Stdout, "stopped session %s\n", displayID(args[0]))
			return nil
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "stop every session running in the host")
	return cmd
}

func (a *App) sessionsRemoveCommand() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:     "rm SESSION...",
		Aliases: []string{"remove"},
		Short:   "Remove sessions: their records, journals and session directories",
		Long: `Remove sessions for good: each one's record, journal and session directory
(its plugin's state and log). A running session is refused unless --force,
which stops it first. A session whose lease is latched or held by a plugin
this host does not run is always refused: nobody can say its plugin is gone.

Each session is reported on its own line; the command exits 1 if any was not
removed.`,
		Example: `  agenthost sessions rm 0198c2d5-… 0198c2d6-…
  agenthost sessions rm --force 0198c2d5-…`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErrorf("%s expects one or more SESSION ids (agenthost sessions list shows them)", cmd.CommandPath())
			}
			return nil
		},
		ValidArgsFunction: a.completeSessions,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := a.connect(ctx, apiclient.Options{})
			if err != nil {
				return err
			}
			defer c.Close()
			failed := map[string]string{}
			running := false
			for _, id := range args {
				var res api.RemoveResult
				if err := c.Call(ctx, api.MethodRemove, api.Params{SessionID: id, Force: force}, &res); err != nil {
					switch apiclient.ErrorCode(err) {
					case api.CodeSessionRunning:
						running = true
						failed[id] = "it is running: stop it first (agenthost sessions stop), or pass --force"
					case api.CodeNotFound:
						failed[id] = "no such session (agenthost sessions list shows them)"
					default:
						failed[id] = err.Error()
					}
					continue
				}
				how := ""
				if res.Stopped {
					how = ", stopped first"
				}
				fmt.Fprintf(a.Stdout, "removed session %s (%s freed%s)\n", displayID(id), humanBytes(res.FreedBytes), how)
			}
			hint := ""
			if running {
				hint = "--force removes a running session, stopping it first"
			}
			return failures("removed", failed, hint)
		},
	}
	cmd.Flags().BoolVarP(&force, "force", "f", false, "stop a running session first, then remove it")
	return cmd
}

func (a *App) sessionsPruneCommand() *cobra.Command {
	var olderThan string
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "prune --older-than DURATION",
		Short: "Remove every stopped or failed session not used for a while",
		Long: `Remove, as 'sessions rm' does, every session that is stopped (or idle, or
whose first start failed) and did not change for DURATION, a Go duration
("72h", "30m"; days are hours: "168h" is a week). Running, latched and held
sessions are never pruned. --dry-run lists what would be removed and removes
nothing.`,
		Example: `  agenthost sessions prune --older-than 168h --dry-run
  agenthost sessions prune --older-than 72h`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if olderThan == "" {
				return usageErrorf(`%s needs --older-than DURATION, a Go duration such as "72h" or "30m"`, cmd.CommandPath())
			}
			if d, err := time.ParseDuration(olderThan); err != nil || d < 0 {
				return usageErrorf(`--older-than %q: write a Go duration such as "72h" or "30m" (days are hours: "168h" for a week)`, olderThan)
			}
			ctx := cmd.Context()
			c, err := a.connect(ctx, apiclient.Options{})
			if err != nil {
				return err
			}
			defer c.Close()
			var res api.PruneResult
			if err := c.Call(ctx, api.MethodPrune, api.Params{OlderThan: olderThan, DryRun: dryRun}, &res); err != nil {
				return err
			}
			return printPruned(a.Stdout, res, olderThan)
		},
	}
	cmd.Flags().StringVar(&olderThan, "older-than", "", `prune sessions not changed for this long, a Go duration ("72h")`)
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "list what would be removed, remove nothing")
	return cmd
}

// printPruned writes what prune removed (or would remove) to w, and
// returns the error naming what it failed to remove. "Nothing to prune"
// is said only when nothing was found at all: a session that failed to be
// removed was found, and its failure is the answer.
func printPruned(w io.Writer, res api.PruneResult, olderThan string) error {
	verb := "removed"
	if res.DryRun {
		verb = "would remove"
	}
	for _, id := range res.Removed {
		fmt.Fprintf(w, "%s session %s\n", verb, displayID(id))
	}
	if len(res.Removed) == 0 && len(res.Failed) == 0 && res.Unlisted == "" {
		fmt.Fprintf(w, "no stopped, idle or failed session is older than %s\n", olderThan)
	}
	err := failures("removed", res.Failed, "")
	if res.Unlisted != "" {
		// Those sessions were not looked at: not a clean pass.
		err = errors.Join(err, fmt.Errorf("some sessions could not be listed, so were not pruned: %s", res.Unlisted))
	}
	return err
}

// failures is the error of a command that did what it could for several
// sessions: nil when none failed, else each failed one with why, and hint.
func failures(verb string, failed map[string]string, hint string) error {
	if len(failed) == 0 {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d session(s) not %s:", len(failed), verb)
	for _, id := range slices.Sorted(maps.Keys(failed)) {
		fmt.Fprintf(&b, "\n  %s: %s", displayID(id), failed[id])
	}
	if hint != "" {
		b.WriteString("\n" + hint)
	}
	return fmt.Errorf("%s", b.String())
}

// humanBytes writes n in binary units: 512 B, 8.0 KiB, 1.2 GiB.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
