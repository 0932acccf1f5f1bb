package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/internal/apiclient"
)

func (a *App) sessionsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sessions",
		Short: "List, inspect, stop and remove sessions",
		Long: `List the sessions the host knows, show one in detail, stop one (or all), remove
some, or prune the ones nobody used for a while.

A session outlives its processes: stopping it ends its plugin and releases its
lease, and 'agenthost run --session ID' resumes it later from the agent's own
handle (a Claude session id, a Codex thread id). Removing it deletes its
record, journal and session directory for good.`,
		Example: `  agenthost sessions list
  agenthost sessions show 0198c2d5-…
  agenthost sessions stop 0198c2d5-…
  agenthost sessions stop --all
  agenthost sessions rm 0198c2d5-…
  agenthost sessions prune --older-than 168h --dry-run`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageErrorf("unknown command %q for %q: use list, show, stop, rm or prune", args[0], cmd.CommandPath())
			}
			return cmd.Help()
		},
	}
	cmd.AddCommand(a.sessionsListCommand(), a.sessionsShowCommand(), a.sessionsStopCommand(), a.sessionsRemoveCommand(), a.sessionsPruneCommand())
	return cmd
}

// displayID prints a session id as is, or quoted when it holds bytes a
// terminal would not show (session ids may hold any UTF-8, NUL included).
func displayID(id string) string {
	if id != "" && strings.IndexFunc(id, func(r rune) bool { return !unicode.IsPrint(r) || unicode.IsSpace(r) }) < 0 {
		return id
	}
	return strconv.Quote(id)
}

// ago says how long ago t was, roughly.
func ago(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := time.Since(t)
	switch {
	case d < time.Second:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return t.Local().Format("2006-01-02")
}

func (a *App) sessionsListCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List every session the host knows",
		Long: `List every session recorded in the state directory, newest first: its agent,
its state (running in this host; idle: stopped after the idle timeout,
resumed by its next prompt; stopped; failed: its first start failed;
latched: nobody can say whether its last plugin is gone; held: another
process holds its lease; elsewhere: it runs on another host of the
cluster), its fence, when it last changed, its workspace and its title (the
agent's, or the first line of its first prompt). A host on a cluster
(serve --store etcd) shows two columns more: HOST, the host holding the
session's lease (- when none does), and PORTABLE, whether any host of the
cluster can resume it (yes: its provider state is stored with it) or only
the machine it ran on. --json prints the first page of the session/list
result.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			var list api.ListSessionsResult
			c, done, err := a.query(ctx, api.MethodSessionList, nil, asJSON, &list)
			if err != nil || done {
				return err
			}
			defer c.Close()
			for list.NextCursor != nil {
				var page api.ListSessionsResult
				if err := c.Call(ctx, api.MethodSessionList, map[string]any{"cursor": *list.NextCursor}, &page); err != nil {
					return err
				}
				list.Sessions, list.NextCursor = append(list.Sessions, page.Sessions...), page.NextCursor
			}
			var st api.StatusResult
			_ = c.Call(ctx, api.MethodStatus, nil, &st)
			if len(list.Sessions) == 0 {
				fmt.Fprintln(a.Stdout, "no sessions yet: start one with agenthost run --agent NAME PROMPT")
				return nil
			}
			return printSessions(a.Stdout, list.Sessions, st)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the session/list result as JSON")
	return cmd
}

// printSessions prints the sessions table, newest first; st is the
// host's status (which sessions run in it, and whether it is on a
// cluster).
func printSessions(w io.Writer, sessions []api.ListedSession, st api.StatusResult) error {
	slices.SortStableFunc(sessions, func(x, y api.ListedSession) int {
		return strings.Compare(deref(y.UpdatedAt), deref(x.UpdatedAt))
	})
	// On a cluster two columns more, after STATE: the host holding
	// each session's lease and whether any host can resume it.
	// One machine's host owns every session it runs: the table
	// stays as it always was.
	cluster := st.Host.Cluster != nil
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if cluster {
		fmt.Fprintln(tw, "SESSION\tAGENT\tSTATE\tHOST\tPORTABLE\tFENCE\tUPDATED\tWORKSPACE\tTITLE")
	} else {
		fmt.Fprintln(tw, "SESSION\tAGENT\tSTATE\tFENCE\tUPDATED\tWORKSPACE\tTITLE")
	}
	for _, s := range sessions {
		ah := s.Meta.Agenthost
		state := ah.State
		if state == "" {
			// A host from before session states: its lease.
			state = ah.Claim
			if ah.Stage != "" {
				state += "/" + ah.Stage
			}
		}
		if slices.Contains(st.Host.Running, s.SessionID) {
			state = api.StateRunning
		}
		updated := "-"
		if s.UpdatedAt != nil {
			if t, err := time.Parse(time.RFC3339Nano, *s.UpdatedAt); err == nil {
				updated = ago(t)
			}
		}
		if cluster {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", displayID(s.SessionID), ah.Agent, state, orDash(ah.OwnerHost),
				yesNo(ah.Portable), ah.Fence, updated, s.Cwd, deref(s.Title))
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", displayID(s.SessionID), ah.Agent, state, ah.Fence, updated, s.Cwd, deref(s.Title))
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func (a *App) sessionsShowCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:               "show SESSION",
		Short:             "Show one session: its agent, lease, owner process, handles and journal",
		Args:              exactArgs("SESSION"),
		ValidArgsFunction: a.completeSessionArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			var info api.SessionResult
			c, done, err := a.query(cmd.Context(), api.MethodSession, api.Params{SessionID: args[0]}, asJSON, &info)
			if err != nil || done {
				return sessionError(args[0], err)
			}
			c.Close()
			printSession(a.Stdout, info)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the session record as JSON")
	return cmd
}

// query connects to the host and calls method, for the commands that show
// one result. With asJSON the raw result is printed and done is true (the
// connection is already closed); otherwise it is decoded into v, and the
// caller closes c (or calls on with it first).
func (a *App) query(ctx context.Context, method string, params any, asJSON bool, v any) (c *apiclient.Client, done bool, err error) {
	c, err = a.connect(ctx, apiclient.Options{})
	if err != nil {
		return nil, false, err
	}
	m, err := c.CallRaw(ctx, method, params)
	if err == nil && asJSON {
		fmt.Fprintf(a.Stdout, "%s\n", m.Result)
		c.Close()
		return nil, true, nil
	}
	if err == nil {
		err = json.Unmarshal(m.Result, v)
	}
	if err != nil {
		c.Close()
		return nil, false, err
	}
	return c, false, nil
}

// sessionError words a not-found error for a session id, and one that says
// the session runs on another host of the cluster; other errors (nil
// included) pass through.
func sessionError(id string, err error) error {
	switch apiclient.ErrorCode(err) {
	case api.CodeNotFound:
		return fmt.Errorf("no session %s in this state directory (agenthost sessions list shows them): %w", displayID(id), err)
	case api.CodeSessionElsewhere:
		return elsewhereError(id, err)
	case api.CodeSessionNotPortable:
		return fmt.Errorf("session %s cannot be resumed on this host: %w", displayID(id), err)
	}
	return err
}

// elsewhereError words CodeSessionElsewhere: the session runs on another
// host of the cluster, which this host leaves alone; the user is told
// which host, and where its clients reach it.
func elsewhereError(id string, err error) error {
	var ae *apiclient.Error
	var data api.ElsewhereData
	if !errors.As(err, &ae) || json.Unmarshal(ae.Data, &data) != nil || data.HostID == "" {
		return fmt.Errorf("session %s runs on another host of the cluster: %w", displayID(id), err)
	}
	where := "ask that host (it published no address)"
	if data.Address != "" {
		where = fmt.Sprintf("use it there: its socket is %s on that host's machine (agenthost%s … there)",
			data.Address, stateDirFlag(filepath.Dir(data.Address)))
	}
	return &exitError{code: 1, err: fmt.Errorf("session %s runs on host %s, not this one: %s; this host takes it over only once %s is lost from the cluster",
		displayID(id), data.HostID, where, data.HostID)}
}

func printSession(w io.Writer, info api.SessionResult) {
	s := info.Session
	l := s.Lease
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, format string, args ...any) { fmt.Fprintf(tw, "%s\t%s\n", k, fmt.Sprintf(format, args...)) }
	row("session", "%s", displayID(s.ID))
	if s.Title != "" {
		row("title", "%s", s.Title)
	}
	row("agent", "%s", s.Agent)
	if s.Workspace != "" {
		row("workspace", "%s", s.Workspace)
	}
	state := string(l.Claim)
	if l.Stage != "" {
		state += " (" + string(l.Stage) + ")"
	}
	if info.Running {
		state += ", running in this host"
	}
	row("state", "%s", state)
	row("fence", "%d", l.Fence)
	if l.Owner != nil {
		row("owner", "pid %d on %s", l.Owner.PID, l.Owner.HostID)
	}
	if l.Owner == nil && l.ReservedBy != "" {
		row("reserved by", "%s", l.ReservedBy)
	}
	if s.OwnerHost != "" && (l.Owner == nil || l.Owner.HostID != s.OwnerHost) {
		row("owner host", "%s", s.OwnerHost)
	}
	if l.LatchReason != "" {
		row("latched", "%s", l.LatchReason)
	}
	if e := l.DeathEvidence; e != nil {
		row("last exit", "%s: %s", e.Kind, e.Detail)
	}
	for i, h := range s.Handles {
		k := ""
		if i == 0 {
			k = "handles"
		}
		row(k, "%s (%s at fence %d)", h.Handle, h.Origin, h.Fence)
	}
	for i, m := range s.MCPServers {
		k := ""
		if i == 0 {
			k = "mcp servers"
		}
		target := m.URL
		if m.Transport == "stdio" {
			target = strings.Join(append([]string{m.Command}, m.Args...), " ")
		}
		row(k, "%s (%s) %s", m.Name, m.Transport, target)
	}
	if len(s.AllowedScopes) > 0 {
		row("allowed always", "%s", strings.Join(s.AllowedScopes, ", "))
	}
	if len(s.Options) > 0 {
		keys := make([]string, 0, len(s.Options))
		for k := range s.Options {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for i, k := range keys {
			label := ""
			if i == 0 {
				label = "options"
			}
			row(label, "%s=%s", k, s.Options[k])
		}
	}
	row("journal", "%d entries (agenthost journal %s)", info.LastSeq, shellQuote(s.ID))
	row("created", "%s (%s)", s.CreatedAt.Local().Format(time.DateTime), ago(s.CreatedAt))
	row("updated", "%s (%s)", s.UpdatedAt.Local().Format(time.DateTime), ago(s.UpdatedAt))
	if l.Reattach != nil && l.Reattach.LogPath != "" {
		row("plugin log", "%s", l.Reattach.LogPath)
	}
	_ = tw.Flush()
}

func (a *App) statusCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the host serving the state directory: agents, sessions, restart decisions",
		Long: `Show the host that serves the state directory: its pid and version, the agents
it runs, how many sessions it knows and which run now, what the state
directory takes on disk (its store, session directories and sockets; not the
installed plugins), and what it decided for
each session it found when it opened (readopted: the plugin survived the last
host and was taken over; evicted: its plugin was gone, the session is
resumable; latched: the evidence was incomplete, the session waits).

A host on a cluster (serve --store etcd) adds its membership (live or not,
its epoch, the liveness TTL, self-fence and drift margin it runs with), the
hosts registered, each session another host holds ("elsewhere": ID on
HOST), and the lost hosts whose sessions it is about to take over.

Exits with status 1 when no host serves the state directory.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var st api.StatusResult
			c, done, err := a.query(cmd.Context(), api.MethodStatus, nil, asJSON, &st)
			if err != nil || done {
				return err
			}
			c.Close()
			printStatus(a.Stdout, st)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the _agenthost/status result as JSON")
	return cmd
}

func printStatus(w io.Writer, st api.StatusResult) {
	h := st.Host
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, format string, args ...any) { fmt.Fprintf(tw, "%s\t%s\n", k, fmt.Sprintf(format, args...)) }
	row("host", "agenthost %s, pid %d, host id %s", st.Version, h.PID, h.HostID)
	row("state dir", "%s", h.StateDir)
	row("socket", "%s", h.StateDir+string(os.PathSeparator)+SocketName)
	row("agents", "%s", strings.Join(h.Agents, ", "))
	row("sessions", "%d recorded, %d running", h.Sessions, len(h.Running))
	row("disk use", "%s (store, session directories and sockets; agenthost sessions prune frees it)", humanBytes(h.DiskBytes))
	for i, id := range h.Running {
		k := ""
		if i == 0 {
			k = "running"
		}
		row(k, "%s", displayID(id))
	}
	var decided []string
	for _, act := range []string{api.ActionReadopted, api.ActionEvicted, api.ActionLatched, api.ActionFree} {
		if n := h.Decided[act]; n > 0 {
			decided = append(decided, fmt.Sprintf("%s %d", act, n))
		}
	}
	if len(decided) == 0 {
		decided = []string{"nothing to reconcile"}
	}
	row("at open", "%s", strings.Join(decided, ", "))
	ids := make([]string, 0, len(h.Latched))
	for id := range h.Latched {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for i, id := range ids {
		k := ""
		if i == 0 {
			k = "latched"
		}
		row(k, "%s: %s", displayID(id), h.Latched[id])
	}
	if h.Recovery != nil {
		row("recovery", "%s", *h.Recovery)
	}
	if c := h.Cluster; c != nil {
		printCluster(row, h, c)
	}
	_ = tw.Flush()
}

// printCluster adds the rows of a host on a cluster: its membership, the
// hosts registered, the sessions held by other hosts, and the takeovers
// it waits for.
func printCluster(row func(k, format string, args ...any), h api.Status, c *api.ClusterStatus) {
	live := "live"
	if !c.Live {
		live = "NOT live (registering again: takes no turn)"
	}
	row("cluster", "%s, epoch %d; liveness TTL %s, self-fence %s, drift margin %s", live, c.Epoch, c.LivenessTTL, c.SelfFence, c.DriftMargin)
	for i, m := range c.Hosts {
		k := ""
		if i == 0 {
			k = "hosts"
		}
		desc := m.HostID
		if m.HostID == h.HostID {
			desc += " (this host)"
		}
		if m.PID != 0 {
			desc += fmt.Sprintf(", pid %d", m.PID)
		}
		if m.Address != "" {
			desc += ", " + m.Address
		}
		row(k, "%s", desc)
	}
	ids := make([]string, 0, len(h.Owners))
	for id, owner := range h.Owners {
		if owner != h.HostID {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for i, id := range ids {
		k := ""
		if i == 0 {
			k = "elsewhere"
		}
		row(k, "%s on %s", displayID(id), h.Owners[id])
	}
	lost := make([]string, 0, len(c.Takeovers))
	for id := range c.Takeovers {
		lost = append(lost, id)
	}
	slices.Sort(lost)
	for i, id := range lost {
		k := ""
		if i == 0 {
			k = "taking over"
		}
		at := c.Takeovers[id]
		row(k, "the sessions of lost host %s at %s (%s)", id, at.Local().Format(time.TimeOnly), until(at))
	}
}

// until says roughly how long until t.
func until(t time.Time) string {
	d := time.Until(t)
	if d <= 0 {
		return "due"
	}
	return fmt.Sprintf("in %.1fs", d.Seconds())
}

// completeSessionArg completes a command's one SESSION argument.
func (a *App) completeSessionArg(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return a.completeSessions(cmd, args, toComplete)
}

// completeSessions completes session ids from the running host, if any.
func (a *App) completeSessions(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	dir, err := a.resolveStateDir()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c, err := apiclient.Dial(ctx, dir+string(os.PathSeparator)+SocketName, apiclient.Options{})
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	defer c.Close()
	var list api.ListSessionsResult
	if c.Call(ctx, api.MethodSessionList, nil, &list) != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []string
	for _, s := range list.Sessions {
		out = append(out, s.SessionID+"\t"+s.Meta.Agenthost.Agent)
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}
