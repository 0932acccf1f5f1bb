package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/internal/agentconfig"
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
its own in credentialVariables (with none, it inherits nothing). A running host reads these at start: restart it
to pick up changes. This command reads the files itself; no host is needed.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := a.resolveStateDir()
			if err != nil {
				return err
			}
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			agents, err := a.loadAgents(dir, exe)
			if err != nil {
				return err
			}
			if asJSON {
				type row struct {
					Name                string   `json:"name"`
					Source              string   `json:"source"`
					Path                string   `json:"path"`
					Args                []string `json:"args,omitempty"`
					SHA256              string   `json:"sha256,omitempty"`
					Credentials         string   `json:"credentials"`
					CredentialVariables []string `json:"credentialVariables"`
				}
				rows := []row{}
				for _, e := range agents {
					vars := append([]string{}, e.Credentials.Variables...)
					rows = append(rows, row{e.Name, e.Source, e.Plugin.Path, e.Plugin.Args, e.Plugin.SHA256, credentialsChoice(e.Credentials), vars})
				}
				b, _ := json.Marshal(map[string]any{"agents": rows})
				fmt.Fprintf(a.Stdout, "%s\n", b)
				return nil
			}
			tw := tabwriter.NewWriter(a.Stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "AGENT\tSOURCE\tCOMMAND\tSHA256\tCREDENTIALS")
			for _, e := range agents {
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
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.Name, e.Source, command, pin, describeCredentials(e.Credentials))
			}
			return tw.Flush()
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
