// Command embed-host shows how a Go program embeds the agenthost host: it
// opens a host on a state directory, starts a session of the scripted
// example plugin, follows the session's journal live while a turn runs,
// and stops the session, which releases its lease.
//
//	go build -o /tmp/agenthost-plugin-scripted ./examples/scripted/cmd/agenthost-plugin-scripted
//	go run ./examples/embed-host -plugin /tmp/agenthost-plugin-scripted
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/leasestore"
	"github.com/agenthost/agenthost/leasestore/badgerstore"
)

func main() {
	plugin := flag.String("plugin", "", "path of the scripted plugin binary (default: agenthost-plugin-scripted on PATH)")
	prompt := flag.String("prompt", "count 5 50ms", "prompt to send")
	flag.Parse()
	if err := run(*plugin, *prompt); err != nil {
		fmt.Fprintln(os.Stderr, "embed-host:", err)
		os.Exit(1)
	}
}

func run(plugin, prompt string) error {
	if plugin == "" {
		p, err := exec.LookPath("agenthost-plugin-scripted")
		if err != nil {
			return errors.New("no plugin binary: build one with\n  go build -o /tmp/agenthost-plugin-scripted ./examples/scripted/cmd/agenthost-plugin-scripted\nand pass -plugin /tmp/agenthost-plugin-scripted")
		}
		plugin = p
	}
	plugin, err := filepath.Abs(plugin)
	if err != nil {
		return err
	}
	state, err := os.MkdirTemp("", "agenthost-embed-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(state)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The host keeps its sessions in a store the embedder opens: here the
	// embedded Badger store, in the state directory. host.Open takes it
	// over and closes it with the host.
	store, err := badgerstore.Open(ctx, state, badgerstore.Options{})
	if err != nil {
		return err
	}
	h, err := host.Open(ctx, host.Config{
		StateDir: state,
		Store:    store,
		Agents:   map[string]host.AgentPlugin{"scripted": {Path: plugin}},
	})
	if err != nil {
		return err
	}
	defer h.Close(context.Background())

	s, err := h.StartSession(ctx, host.SessionRequest{Agent: "scripted", Workspace: state})
	if err != nil {
		return err
	}
	fmt.Printf("session %s started: plugin pid %d, provider handle %s, fence %d\n", s.ID(), s.PID(), s.Handle(), s.Fence())

	// Follow the journal while the turn runs, until the turn's stop entry:
	// every entry is durable before it appears here.
	errTurnEnded := errors.New("turn ended")
	tailDone := make(chan error, 1)
	go func() {
		tailDone <- h.Store().Tail(ctx, s.ID(), 0, func(e leasestore.Entry) error {
			fmt.Printf("  journal %3d  %-9s %s\n", e.Seq, e.Kind, e.Payload)
			if e.Kind == leasestore.KindStop {
				return errTurnEnded
			}
			return nil
		})
	}()
	res, err := s.Prompt(ctx, prompt)
	if err != nil {
		return err
	}
	if err := <-tailDone; !errors.Is(err, errTurnEnded) {
		return fmt.Errorf("follow journal: %w", err)
	}
	fmt.Printf("turn %s ended: %s %s\n", res.TurnID, res.StopReason, res.Error)
	if err := s.Stop(ctx); err != nil {
		return err
	}
	rec, err := h.Store().Get(ctx, s.ID())
	if err != nil {
		return err
	}
	fmt.Printf("session stopped; lease %s at fence %d (%s)\n", rec.Lease.Claim, rec.Lease.Fence, rec.Lease.DeathEvidence.Kind)
	return nil
}
