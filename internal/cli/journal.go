package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/internal/apiclient"
	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/leasestore"
)

const journalLong = `Print a session's journal: every lifecycle event of its lease, every prompt,
every agent update and every turn's end, in the order the host made them
durable, numbered from 1 without gaps.

Without --follow, it prints the entries that exist now and exits; with
--follow it keeps printing new entries as they are journaled, until Ctrl-C.
--from SEQ starts at that entry: a client that saw up to entry N asks from
N+1 and misses nothing, even across host restarts.

With --json, each entry is one JSON object per line:
  {"sessionId":…,"seq":7,"fence":1,"time":…,"kind":"update","payload":{…}}
where an update's payload holds the agent's update in its Agent Client Protocol
shape ({"pluginSeq":3,"turnId":…,"update":{"sessionUpdate":"agent_message_chunk",…}}).`

func (a *App) journalCommand() *cobra.Command {
	var from uint64
	var follow, asJSON bool
	cmd := &cobra.Command{
		Use:   "journal SESSION",
		Short: "Print a session's durable journal, optionally following it live",
		Long:  journalLong,
		Example: `  agenthost journal 0198c2d5-…
  agenthost journal 0198c2d5-… --follow
  agenthost journal 0198c2d5-… --from 120 --json | jq .payload.update`,
		Args:              exactArgs("SESSION"),
		ValidArgsFunction: a.completeSessionArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.journal(cmd.Context(), args[0], max(from, 1), follow, asJSON)
		},
	}
	cmd.Flags().Uint64Var(&from, "from", 1, "the first entry to print")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new entries until interrupted")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per entry")
	return cmd
}

func (a *App) journal(ctx context.Context, id string, from uint64, follow, asJSON bool) error {
	var mu sync.Mutex
	var queue []json.RawMessage
	wake := make(chan struct{}, 1)
	onNote := func(m *apiclient.Message) {
		if m.Method != api.MethodJournal {
			return
		}
		mu.Lock()
		queue = append(queue, m.Params)
		mu.Unlock()
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	c, err := a.connect(ctx, apiclient.Options{OnNotification: onNote})
	if err != nil {
		return err
	}
	defer c.Close()
	var sub api.SubscribeResult
	if err := c.Call(ctx, api.MethodSubscribe, api.Params{SessionID: id, FromSeq: from}, &sub); err != nil {
		return sessionError(id, err)
	}
	if !follow && sub.LastSeq < from {
		return nil
	}
	sigs := make(chan os.Signal, 1)
	if follow {
		signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
		defer signal.Stop(sigs)
	}
	st := styleFor(a.Stdout)
	next := from // the entry after the last one printed
	for {
		mu.Lock()
		batch := queue
		queue = nil
		mu.Unlock()
		for _, raw := range batch {
			var e api.JournalEntry
			if json.Unmarshal(raw, &e) != nil {
				continue
			}
			if !follow && e.Seq > sub.LastSeq {
				return nil
			}
			if asJSON {
				fmt.Fprintf(a.Stdout, "%s\n", raw)
			} else {
				printEntry(a.Stdout, st, e)
			}
			next = e.Seq + 1
			if !follow && e.Seq >= sub.LastSeq {
				return nil
			}
		}
		select {
		case <-wake:
		case <-sigs:
			return nil
		case <-c.Done():
			mu.Lock()
			n := len(queue)
			mu.Unlock()
			if n > 0 {
				continue
			}
			return fmt.Errorf("lost the connection to the host serving %s; the journal is kept: follow it again with --from %d once a host serves it", a.stateDirOrDefault(), next)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// printEntry prints one journal entry on a line.
func printEntry(w io.Writer, st style, e api.JournalEntry) {
	kind := fmt.Sprintf("%-9s", e.Kind)
	switch leasestore.EntryKind(e.Kind) {
	case leasestore.KindLifecycle:
		kind = st.dim(kind)
	case leasestore.KindPrompt:
		kind = st.bold(kind)
	case leasestore.KindStop:
		kind = st.yellow(kind)
	}
	fmt.Fprintf(w, "%6d  %s  %s  %s\n", e.Seq, st.dim(e.Time.Local().Format("15:04:05.000")), kind, summarize(st, e))
}

// summarize describes an entry's payload in a few words.
func summarize(st style, e api.JournalEntry) string {
	rec, err := journal.DecodePayload(leasestore.EntryKind(e.Kind), e.Payload)
	if err != nil {
		return firstLine(string(e.Payload), 100)
	}
	switch r := rec.(type) {
	case *journal.Lifecycle:
		if r.EntryKind() == leasestore.KindHandle {
			break // a handle entry shows its payload
		}
		parts := []string{r.Event, fmt.Sprintf("fence %d, %s", r.Fence, r.Claim)}
		if r.Stage != "" {
			parts[1] += "/" + string(r.Stage)
		}
		if r.PID != 0 {
			parts = append(parts, fmt.Sprintf("pid %d", r.PID))
		}
		if r.Handle != "" {
			parts = append(parts, "handle "+r.Handle)
		}
		if r.Evidence != nil {
			parts = append(parts, string(r.Evidence.Kind)+": "+firstLine(r.Evidence.Detail, 80))
		}
		if r.Reason != "" {
			parts = append(parts, firstLine(r.Reason, 80))
		}
		return strings.Join(parts, " · ")
	case *journal.Prompt:
		var text []string
		for _, b := range r.Prompt {
			text = append(text, contentText(b))
		}
		return "> " + firstLine(strings.Join(text, " "), 100)
	case *journal.Update:
		desc := string(r.Update.UpdateKind())
		switch u := r.Update.(type) {
		case *journal.Chunk:
			desc += fmt.Sprintf(" %q", firstLine(contentText(u.Content), 80))
		case *journal.ToolCall:
			desc += fmt.Sprintf(" %s %q %s", u.ToolCallID, u.Title, u.Status)
		case *journal.ToolCallUpdate:
			desc += fmt.Sprintf(" %s %s", u.ToolCallID, u.Status)
		case *journal.Plan:
			desc += fmt.Sprintf(" (%d entries)", len(u.Entries))
		}
		return desc + st.dim(fmt.Sprintf("  [plugin #%d]", r.PluginSeq))
	case *journal.Stop:
		desc := r.StopReason
		if r.Error != "" {
			desc += ": " + firstLine(r.Error, 100)
		}
		if r.PluginSeq > 0 {
			desc += st.dim(fmt.Sprintf("  [plugin #%d]", r.PluginSeq))
		}
		return desc
	}
	return firstLine(string(e.Payload), 100)
}
