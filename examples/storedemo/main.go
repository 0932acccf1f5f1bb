// Command storedemo walks one agent session through the lease store: it
// opens a store in a temporary state directory, takes a lease the way the
// host does for a plugin process (reserve, spawn, commit the owner, prove its
// provider handle), journals a turn, shows a stale writer being refused,
// releases the lease, reopens the store as a restarted host would, and
// prints the session's journal.
//
// It is the lease store on its own; `make demo` runs examples/demo, which
// drives the whole binary. This process stands in for the plugin: it
// records its own pid as the owner.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/leasestore"
	"github.com/agenthost/agenthost/leasestore/badgerstore"
)

func main() {
	stateDir := flag.String("state-dir", "", "state directory to use (default: a temporary one, removed at exit)")
	logLevel := flag.String("log-level", "warn", "log level: trace, debug, info, warn, error")
	flag.Parse()
	if err := run(*stateDir, *logLevel); err != nil {
		fmt.Fprintln(os.Stderr, "storedemo:", err)
		os.Exit(1)
	}
}

func run(stateDir, logLevel string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := hclog.New(&hclog.LoggerOptions{Name: "storedemo", Level: hclog.LevelFromString(logLevel), Output: os.Stderr})
	if stateDir == "" {
		dir, err := os.MkdirTemp("", "agenthost-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		stateDir = dir
	}
	say := func(format string, args ...any) { fmt.Printf("• "+format+"\n", args...) }

	store, err := badgerstore.Open(ctx, stateDir, badgerstore.Options{Logger: log})
	if err != nil {
		return err
	}
	say("opened the lease store in %s", stateDir)

	sess, err := store.Create(ctx, leasestore.SessionSpec{Agent: "scripted", Workspace: stateDir})
	if err != nil {
		return err
	}
	id := sess.ID
	say("created session %s (fence %d, %s)", id, sess.Lease.Fence, sess.Lease.Claim)

	sess, err = store.Apply(ctx, id, leasestore.Reserve{ExpectedFence: 0, ClaimKeyID: "demo-key"})
	if err != nil {
		return err
	}
	fence := sess.Lease.Fence
	say("reserved the lease at fence %d with spawn token %s…, before any process exists", fence, sess.Lease.ReservedSpawnToken[:8])

	me := leasestore.ProcessIdentity{HostID: "local", PID: os.Getpid(), SpawnToken: sess.Lease.ReservedSpawnToken, InstanceID: "demo"}
	bad := me
	bad.SpawnToken = "someone-else"
	if _, err := store.Apply(ctx, id, leasestore.CommitOwner{Fence: fence, Owner: bad}); errors.Is(err, leasestore.ErrTokenMismatch) {
		say("a process without the reserved token is refused as owner: %v", err)
	}
	if _, err := store.Apply(ctx, id, leasestore.CommitOwner{Fence: fence, Owner: me}); err != nil {
		return err
	}
	say("committed pid %d as the owner: it echoed the reserved token", me.PID)

	sess, err = store.Apply(ctx, id, leasestore.ProveOwner{Fence: fence, Handle: "scripted-thread-1", Origin: leasestore.HandleCreated})
	if err != nil {
		return err
	}
	say("the owner proved provider handle %q: the lease is %s and admits a writer", sess.Handle(), sess.Lease.Claim)

	j, err := store.OpenJournal(ctx, id, fence)
	if err != nil {
		return err
	}
	// The records of one turn, in the shapes package journal owns.
	turn := []journal.Record{
		&journal.Prompt{TurnID: "turn-1", Prompt: []journal.Content{journal.TextContent("list the files")}},
		&journal.Update{PluginSeq: 1, TurnID: "turn-1",
			Update: &journal.Chunk{Kind: journal.KindAgentMessageChunk, Content: journal.TextContent("Looking…")}},
		&journal.Update{PluginSeq: 2, TurnID: "turn-1",
			Update: &journal.ToolCall{ToolCallID: "t1", Title: "ls", Status: "completed"}},
		&journal.Stop{PluginSeq: 3, TurnID: "turn-1", StopReason: "end_turn"},
	}
	for _, r := range turn {
		e, err := journal.Encode(r)
		if err != nil {
			return err
		}
		if _, err := j.Append(ctx, e); err != nil {
			return err
		}
	}
	say("journaled a turn: each append returned only once it was durable")

	sess, err = store.Apply(ctx, id, leasestore.Release{Fence: fence, Detail: "plugin exited with status 0"})
	if err != nil {
		return err
	}
	say("released the lease after the owner exited: fence %d, %s", sess.Lease.Fence, sess.Lease.Claim)
	late, err := journal.Encode(&journal.Stop{PluginSeq: 4, TurnID: "turn-1", StopReason: "end_turn"})
	if err != nil {
		return err
	}
	if _, err := j.Append(ctx, late); err != nil {
		say("the old writer, still holding fence %d, is refused: %v", fence, err)
	}
	if err := store.Close(ctx); err != nil {
		return err
	}
	say("closed the store (journal handles closed first)")

	store, err = badgerstore.Open(ctx, stateDir, badgerstore.Options{Logger: log})
	if err != nil {
		return err
	}
	defer store.Close(context.Background())
	n, err := store.MarkAllUnreconciled(ctx)
	if err != nil {
		return err
	}
	if _, err := store.Apply(ctx, id, leasestore.Reconciled{Fence: sess.Lease.Fence}); err != nil {
		return err
	}
	say("reopened as a restarted host: marked %d lease(s) unreconciled, then decided this released one", n)

	fmt.Printf("\njournal of session %s:\n", id)
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "SEQ\tFENCE\tKIND\tPAYLOAD")
	err = store.Replay(ctx, id, 0, func(e leasestore.Entry) error {
		_, err := fmt.Fprintf(w, "%d\t%d\t%s\t%s\n", e.Seq, e.Fence, e.Kind, e.Payload)
		return err
	})
	if err != nil {
		return err
	}
	return w.Flush()
}
