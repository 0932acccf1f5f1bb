package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/internal/agentconfig"
	"github.com/agenthost/agenthost/internal/apiclient"
)

func (a *App) agentsCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "agents",
		Short: "List the agents a host on this state directory runs, and where each comes from",
		Long: `List the agents a host on the state directory runs: the built-ins this binary
serves itself, every executable in <state-dir>/plugins/ (named after its file),
and those <state-dir>/agenthost.json names, which win over the others:

  {"agents": {"mine": {"path": "/abs/path/to/plugin", "args": [], "env": ["K=V"],
                       "sha256": "<hex digest>", "credentials": "inherit",
                       "credentialVariables": ["MY_PROVIDER_KEY"]},
              "claude": {"credentials": "inherit"}}}

A plugin with a sha256 is verified right before every start; a mismatch fails
the start with both digests. An entry without a path configures the built-in
of its name (its env and credentials). Provider credentials are stripped from
every plugin by default; "credentials": "inherit" passes the agent's credential
variables from the host's own environment to its plugin and CLI, in every
session. A built-in names its provider's variables; a third-party plugin names
its own in credentialVariables (with none, it inherits nothing).

A running host picks up changes without a restart: it watches the plugins
directory and agenthost.json, and rescans them when a request names an agent it
does not serve. A malformed change is refused and the agents before it kept.
This command reads the files itself, so no host is needed; when one serves the
state directory, it also asks it what it serves (the RUNNING HOST column, and
"host" in --json) and says where that differs from the files, and whether the
host refused them.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.agents(cmd.Context(), asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the agents as JSON")
	return cmd
}

// credentialsChoice is the operator's choice a policy records.
func credentialsChoice(p host.CredentialPolicy) string {
	if p.Inherit {
		return agentconfig.CredentialsInherit
	}
	return agentconfig.CredentialsStrip
}

// describeCredentials says what a policy does, for a table cell.
func describeCredentials(p host.CredentialPolicy) string {
	n := len(p.Variables)
	switch {
	case p.Inherit && n == 0:
		return "inherit (no variables named: nothing inherited)"
	case n == 0:
		return "strip (no variables named)"
	case n == 1:
		return credentialsChoice(p) + " " + p.Variables[0]
	default:
		return fmt.Sprintf("%s (%d variables)", credentialsChoice(p), n)
	}
}

// completeAgents completes agent names from the state directory's
// configuration.
func (a *App) completeAgents(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	names := a.builtinNames()
	if dir, err := a.resolveStateDir(); err == nil {
		if agents, err := a.loadAgents(dir, ""); err == nil {
			names = make([]string, 0, len(agents))
			for _, e := range agents {
				names = append(names, e.Name+"\t"+e.Source)
			}
		}
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}

// agents prints the configuration on disk and, when a host serves the
// state directory, what that host serves.
func (a *App) agents(ctx context.Context, asJSON bool) error {
	dir, err := a.resolveStateDir()
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	disk, diskErr := a.loadAgents(dir, exe)
	running, err := a.runningAgents(ctx)
	if err != nil {
		fmt.Fprintf(a.Stderr, "agenthost: not showing what the running host serves: %v\n", err)
	}
	if diskErr != nil && running == nil {
		return diskErr
	}
	if asJSON {
		return a.printAgentsJSON(disk, running, diskErr)
	}
	if running != nil && running.Reload != nil {
		if running.Reload.Error != "" {
			fmt.Fprintf(a.Stdout, "The running host refused the configuration on disk (its rescan at %s): %s\nIt serves the agents it had before.\n\n",
				running.Reload.At.Format(time.TimeOnly), running.Reload.Error)
		} else {
			fmt.Fprintf(a.Stdout, "A host serves this state directory (last rescan of its agents at %s).\n\n", running.Reload.At.Format(time.TimeOnly))
		}
	}
	tw := tabwriter.NewWriter(a.Stdout, 0, 0, 2, ' ', 0)
	header := "AGENT\tSOURCE\tCOMMAND\tSHA256\tCREDENTIALS"
	if running != nil {
		header += "\tRUNNING HOST"
	}
	fmt.Fprintln(tw, header)
	for _, e := range disk {
		command := e.Plugin.Path
		if e.builtin() {
			command = "(this binary) " + strings.Join(e.Plugin.Args, " ")
		} else if len(e.Plugin.Args) > 0 {
			command += " " + strings.Join(e.Plugin.Args, " ")
		}
		pin := "-"
		if e.Plugin.SHA256 != "" {
			pin = "pinned " + e.Plugin.SHA256[:min(12, len(e.Plugin.SHA256))] + "…"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s", e.Name, e.Source, command, pin, describeCredentials(e.Credentials))
		if running != nil {
			fmt.Fprintf(tw, "\t%s", servedState(e, running.Served))
		}
		fmt.Fprintln(tw)
	}
	if running != nil {
		for _, s := range running.Served {
			if slices.ContainsFunc(disk, func(e agentEntry) bool { return e.Name == s.Name }) {
				continue
			}
			state := "serves it; gone from disk"
			if diskErr != nil {
				state = "serves it" // and the files say nothing
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t%s\n", s.Name, s.Source, firstNonEmpty(s.Path, "(this binary)"), state)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if diskErr != nil {
		fmt.Fprintf(a.Stdout, "\nThe running host serves %s.\n", strings.Join(running.Agents, ", "))
		return fmt.Errorf("the configuration on disk is refused (the running host keeps the agents it had): %w", diskErr)
	}
	return nil
}

// runningAgents asks the host serving the state directory what it serves;
// nil, nil when none does.
func (a *App) runningAgents(ctx context.Context) (*api.AgentsResult, error) {
	c, err := a.dial(ctx, apiclient.Options{})
	if errors.Is(err, errNoHost) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var res api.AgentsResult
	if err := c.Call(ctx, api.MethodAgents, nil, &res); err != nil {
		return nil, fmt.Errorf("ask the host for its agents: %w", err)
	}
	return &res, nil
}

// servedState says how the running host serves e, as found on disk.
func servedState(e agentEntry, served []api.AgentInfo) string {
	i := slices.IndexFunc(served, func(s api.AgentInfo) bool { return s.Name == e.Name })
	if i < 0 {
		return "not served yet (from its next rescan)"
	}
	want := servedInfo([]agentEntry{e})[0]
	s := served[i]
	switch {
	case s.Source != want.Source || s.Path != want.Path:
		return "serves it from " + s.Source + " " + firstNonEmpty(s.Path, "(this binary)")
	case s.Fingerprint != want.Fingerprint:
		// The same file, started another way (arguments, environment,
		// sha256 pin, credential policy): sessions it starts use the
		// settings it read last.
		return "serves it with its previous settings (until its next rescan)"
	}
	return "serves it"
}

// printAgentsJSON prints the agents on disk and, with running, what the
// running host serves.
func (a *App) printAgentsJSON(disk []agentEntry, running *api.AgentsResult, diskErr error) error {
	type row struct {
		Name                string   `json:"name"`
		Source              string   `json:"source"`
		Path                string   `json:"path"`
		Args                []string `json:"args,omitempty"`
		SHA256              string   `json:"sha256,omitempty"`
		Credentials         string   `json:"credentials"`
		CredentialVariables []string `json:"credentialVariables"`
		// Running is servedState's answer, with a running host.
		Running string `json:"running,omitempty"`
	}
	rows := []row{}
	for _, e := range disk {
		vars := append([]string{}, e.Credentials.Variables...)
		r := row{e.Name, e.Source, e.Plugin.Path, e.Plugin.Args, e.Plugin.SHA256, credentialsChoice(e.Credentials), vars, ""}
		if running != nil {
			r.Running = servedState(e, running.Served)
		}
		rows = append(rows, r)
	}
	out := map[string]any{"agents": rows}
	if running != nil {
		out["host"] = running
	}
	if diskErr != nil {
		out["error"] = diskErr.Error()
	}
	b, _ := json.Marshal(out)
	fmt.Fprintf(a.Stdout, "%s\n", b)
	if diskErr != nil {
		return fmt.Errorf("the configuration on disk is refused (the running host keeps the agents it had): %w", diskErr)
	}
	return nil
}
