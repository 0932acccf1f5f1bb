package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
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
                       "sha256": "<hex digest>"}}}

A plugin with a sha256 is verified right before every start; a mismatch fails
the start with both digests. A running host reads these at start: restart it
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
			agents, err := loadAgents(dir, exe, a.builtinNames())
			if err != nil {
				return err
			}
			if asJSON {
				type row struct {
					Name   string   `json:"name"`
					Source string   `json:"source"`
					Path   string   `json:"path"`
					Args   []string `json:"args,omitempty"`
					SHA256 string   `json:"sha256,omitempty"`
				}
				rows := []row{}
				for _, e := range agents {
					rows = append(rows, row{e.Name, e.Source, e.Plugin.Path, e.Plugin.Args, e.Plugin.SHA256})
				}
				b, _ := json.Marshal(map[string]any{"agents": rows})
				fmt.Fprintf(a.Stdout, "%s\n", b)
				return nil
			}
			tw := tabwriter.NewWriter(a.Stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "AGENT\tSOURCE\tCOMMAND\tSHA256")
			for _, e := range agents {
				command := e.Plugin.Path
				if e.Source == "built-in" {
					command = "(this binary) " + strings.Join(e.Plugin.Args, " ")
				} else if len(e.Plugin.Args) > 0 {
					command += " " + strings.Join(e.Plugin.Args, " ")
				}
				pin := "-"
				if e.Plugin.SHA256 != "" {
					pin = "pinned " + e.Plugin.SHA256[:min(12, len(e.Plugin.SHA256))] + "…"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", e.Name, e.Source, command, pin)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the agents as JSON")
	return cmd
}

// completeAgents completes agent names from the state directory's
// configuration.
func (a *App) completeAgents(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	names := a.builtinNames()
	if dir, err := a.resolveStateDir(); err == nil {
		if agents, err := loadAgents(dir, "", names); err == nil {
			names = make([]string, 0, len(agents))
			for _, e := range agents {
				names = append(names, e.Name+"\t"+e.Source)
			}
		}
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}
