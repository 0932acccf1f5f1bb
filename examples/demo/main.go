// Command demo is what `make demo` runs: it builds bin/agenthost, starts
// `agenthost serve` on a temporary state directory, streams a turn of the
// scripted agent through the CLI, SIGKILLs the host in the middle of the
// turn, shows that the plugin lives on, restarts the host, shows the
// session readopted, waits for the turn to end, and checks that the
// session's journal is complete and gap-free — saying what happens as it
// goes. It exits with status 1 if any check fails. It needs nothing but
// Go; everything it starts is stopped and the state directory removed.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/examples/internal/narrate"
	"github.com/agenthost/agenthost/internal/apiclient"
	"github.com/agenthost/agenthost/internal/serveproc"
	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/leasestore"
)

const (
	session = "demo"
	chunks  = 60
	prompt  = "count 60 100ms"
	killAt  = 20 // the chunk after which the host is killed
)

func main() {
	d := &demo{}
	err := d.run()
	d.cleanup()
	narrate.Exit(err, "All checks passed: the session outlived its host, and its journal lost nothing.")
}

type demo struct {
	root, bin, dir string
	serve          *serveproc.Server
}

func (d *demo) command(args ...string) *exec.Cmd {
	cmd := exec.Command(d.bin, append([]string{"--state-dir", d.dir}, args...)...)
	cmd.Env = d.env()
	return cmd
}

// env is the environment of every agenthost command the demo runs.
func (d *demo) env() []string { return append(os.Environ(), "AGENTHOST_LOG_LEVEL=warn") }

// ah runs an agenthost command to completion.
func (d *demo) ah(args ...string) (stdout, stderr string, err error) {
	cmd := d.command(args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

func (d *demo) run() error {
	fmt.Println("agenthost demo: a session survives its host being killed in the middle of a turn.")

	root, err := serveproc.ModuleRoot(context.Background())
	if err != nil {
		return err
	}
	d.root = root
	if d.bin == "" {
		d.bin = filepath.Join(d.root, "bin", "agenthost")
	}

	narrate.Step("1. Building bin/agenthost: one binary holding the host, its command line and the built-in plugins.")
	if err := serveproc.Build(context.Background(), d.root, d.bin); err != nil {
		return err
	}
	narrate.Detail("built %s", d.bin)

	// A short path: the host's unix socket lives in the state directory.
	if d.dir, err = os.MkdirTemp("/tmp", "ahdemo-"); err != nil {
		return err
	}
	narrate.Step("2. Starting the host on a fresh state directory, %s.", d.dir)
	narrate.Detail("%s", narrate.Command("serve"))
	ready, err := d.startServe()
	if err != nil {
		return err
	}
	narrate.Detail("it answers with one line for the app that launched it:")
	narrate.Detail("%s", ready)

	narrate.Step("3. Starting a session of the scripted agent, whose turn counts to %d, one number every 100 ms.", chunks)
	args := []string{"run", "--agent", "scripted", "--session", session, "--json", prompt}
	narrate.Detail("%s", narrate.Command(args...))
	run := d.command(args...)
	runOut, err := run.StdoutPipe()
	if err != nil {
		return err
	}
	var runErr bytes.Buffer
	run.Stderr = &runErr
	if err := run.Start(); err != nil {
		return err
	}
	sc := bufio.NewScanner(runOut)
	fmt.Print("   streaming:")
	seen, lastSeq, pluginPID := 0, uint64(0), 0
	for seen < killAt && sc.Scan() {
		text, seq, isChunk := messageChunk(sc.Bytes())
		if !isChunk {
			continue
		}
		seen++
		lastSeq = seq
		fmt.Print(" " + text)
		if pluginPID == 0 {
			if pluginPID, err = d.pluginPID(); err != nil {
				return err
			}
		}
	}
	fmt.Println()
	if seen < killAt {
		_ = run.Wait()
		return fmt.Errorf("the turn streamed %d chunks and stopped: %s", seen, runErr.String())
	}
	narrate.Detail("the client has seen the journal up to entry %d.", lastSeq)

	narrate.Step("4. Killing the host with SIGKILL (pid %d) in the middle of the turn: no chance to clean up.", d.serve.PID())
	d.serve.Kill()
	for sc.Scan() {
	}
	_ = run.Wait()
	narrate.Detail("the client lost its connection and says:")
	narrate.Block(runErr.String())
	if err := syscall.Kill(pluginPID, 0); err != nil {
		return fmt.Errorf("the plugin (pid %d) died with the host: %v", pluginPID, err)
	}
	cmdline, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pluginPID), "cmdline"))
	what := strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " "))
	if what == "" {
		what = "the scripted plugin"
	}
	narrate.OK("the plugin process is still running (pid %d: %s).", pluginPID, what)
	narrate.Detail("It runs in its own session, so the host's death did not reach it. It keeps counting, and keeps")
	narrate.Detail("every update in its outbox until a host confirms the update is in the journal.")
	_, e, _ := d.ah("status")
	narrate.Detail("%s", narrate.Command("status"))
	narrate.Block(e)
	time.Sleep(time.Second)

	narrate.Step("5. Restarting the host on the same state directory.")
	narrate.Detail("%s", narrate.Command("serve", "--shutdown-sessions"))
	if _, err := d.startServe("--shutdown-sessions"); err != nil {
		return err
	}
	status, _, err := d.ah("status")
	if err != nil {
		return fmt.Errorf("agenthost status: %v", err)
	}
	narrate.Detail("%s", narrate.Command("status"))
	narrate.Block(status)
	if !strings.Contains(status, "readopted 1") {
		return errors.New("the restarted host did not readopt the session")
	}
	narrate.OK("the new host probed the plugin, checked it is the very process the lease records, and readopted it")
	narrate.Detail("at the next fence; it drains the outbox into the journal from the last journaled update.")

	narrate.Step("6. Catching up from entry %d, the one after the last the client saw, until the turn ends.", lastSeq+1)
	fargs := []string{"journal", session, "--follow", "--json", "--from", strconv.FormatUint(lastSeq+1, 10)}
	narrate.Detail("%s", narrate.Command(fargs...))
	follow := d.command(fargs...)
	fout, err := follow.StdoutPipe()
	if err != nil {
		return err
	}
	if err := follow.Start(); err != nil {
		return err
	}
	fsc := bufio.NewScanner(fout)
	caught, next, ended := 0, lastSeq+1, ""
	for fsc.Scan() {
		e, err := readEntry(fsc.Bytes())
		if err != nil {
			return err
		}
		if e.Seq != next {
			_ = follow.Process.Kill()
			return fmt.Errorf("following the journal: entry %d arrived after %d", e.Seq, next-1)
		}
		next++
		caught++
		if stop, isStop := e.rec.(*journal.Stop); isStop {
			ended = stop.StopReason
			break
		}
	}
	_ = follow.Process.Signal(syscall.SIGINT)
	_ = follow.Wait()
	if ended == "" {
		return errors.New("the journal ended without the turn's end")
	}
	narrate.OK("%d entries arrived, numbered %d to %d without a gap, the last one the turn's end (%s).", caught, lastSeq+1, next-1, ended)

	narrate.Step("7. The session's journal, as the host made it durable:")
	narrate.Detail("%s", narrate.Command("journal", session))
	text, _, err := d.ah("journal", session)
	if err != nil {
		return fmt.Errorf("agenthost journal: %v", err)
	}
	narrate.Block(text)

	narrate.Step("8. Checking the journal.")
	if err := d.check(); err != nil {
		return err
	}

	narrate.Step("9. Shutting down: stopping the session, then the host.")
	narrate.Detail("%s", narrate.Command("sessions", "stop", session))
	if o, e, err := d.ah("sessions", "stop", session); err != nil {
		return fmt.Errorf("sessions stop: %v %s", err, e)
	} else {
		narrate.Block(o)
	}
	if err := d.serve.Stop(30 * time.Second); err != nil {
		return err
	}
	if !serveproc.Gone(pluginPID, 5*time.Second) {
		return fmt.Errorf("the plugin (pid %d) still runs after the session was stopped", pluginPID)
	}
	narrate.OK("the host exited on SIGTERM and no plugin process is left.")
	return nil
}

// entry is one line of agenthost journal --json, its payload decoded.
type entry struct {
	api.JournalEntry
	rec journal.Record
}

func readEntry(line []byte) (entry, error) {
	var e entry
	if err := json.Unmarshal(line, &e.JournalEntry); err != nil {
		return e, fmt.Errorf("journal --json printed %q: %v", line, err)
	}
	rec, err := journal.DecodePayload(leasestore.EntryKind(e.Kind), e.Payload)
	if err != nil {
		return e, fmt.Errorf("journal --json printed %q: %v", line, err)
	}
	e.rec = rec
	return e, nil
}

func isEndTurn(r journal.Record) bool {
	stop, ok := r.(*journal.Stop)
	return ok && stop.StopReason == "end_turn"
}

// messageChunk reads a line of agenthost run --json: the text and journal
// seq of an agent message chunk, or false for any other line.
func messageChunk(line []byte) (text string, seq uint64, ok bool) {
	var m apiclient.Message
	if json.Unmarshal(line, &m) != nil {
		return "", 0, false
	}
	p, u, ok := m.SessionUpdate()
	if c, isChunk := u.(*journal.Chunk); ok && isChunk && c.Kind == journal.KindAgentMessageChunk {
		return c.Content.Text(), p.Meta.Agenthost.Seq, true
	}
	return "", 0, false
}

func (d *demo) check() error {
	out, _, err := d.ah("journal", session, "--json")
	if err != nil {
		return fmt.Errorf("agenthost journal --json: %v", err)
	}
	var entries []entry
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		e, err := readEntry([]byte(line))
		if err != nil {
			return err
		}
		entries = append(entries, e)
	}
	var pluginSeqs []uint64
	var texts []string
	readopted := false
	for i, e := range entries {
		if e.Seq != uint64(i+1) {
			return fmt.Errorf("journal entry %d has seq %d: a gap", i+1, e.Seq)
		}
		switch r := e.rec.(type) {
		case *journal.Update:
			if r.PluginSeq == 0 {
				// The host's own: the title it derived from the first
				// prompt, journaled with the prompt.
				continue
			}
			pluginSeqs = append(pluginSeqs, r.PluginSeq)
			if c, isChunk := r.Update.(*journal.Chunk); isChunk && c.Kind == journal.KindAgentMessageChunk {
				texts = append(texts, c.Content.Text())
			}
		case *journal.Stop:
			pluginSeqs = append(pluginSeqs, r.PluginSeq)
		case *journal.Lifecycle:
			readopted = readopted || (r.EntryKind() == leasestore.KindLifecycle && r.Event == "readopted")
		}
	}
	narrate.OK("entries 1 to %d, each once, no gap.", len(entries))
	for i, s := range pluginSeqs {
		if s != uint64(i+1) {
			return fmt.Errorf("the plugin's updates are journaled as %v, not 1 to %d", pluginSeqs, chunks+1)
		}
	}
	if len(pluginSeqs) != chunks+1 {
		return fmt.Errorf("%d of the plugin's %d updates are in the journal", len(pluginSeqs), chunks+1)
	}
	narrate.OK("the plugin's updates 1 to %d (%d chunks and the turn's end), each exactly once: those made while", chunks+1, chunks)
	narrate.Detail("  no host was running were delivered from the outbox, none lost and none twice.")
	for i, t := range texts {
		if t != strconv.Itoa(i+1) {
			return fmt.Errorf("the chunks read %v, not 1 to %d in order", texts, chunks)
		}
	}
	narrate.OK("the chunks read 1, 2, … %d in order.", chunks)
	if !readopted {
		return errors.New("no readoption is recorded in the journal")
	}
	narrate.OK("the readoption is recorded between them.")
	if last := entries[len(entries)-1]; !isEndTurn(last.rec) {
		return fmt.Errorf("the journal ends with %s %s, not the turn's end", last.Kind, last.Payload)
	}
	narrate.OK("the turn ended normally (end_turn).")
	return nil
}

// pluginPID reads the session's owner process from the host.
func (d *demo) pluginPID() (int, error) {
	out, e, err := d.ah("sessions", "show", session, "--json")
	if err != nil {
		return 0, fmt.Errorf("sessions show: %v %s", err, e)
	}
	var info api.SessionResult
	if err := json.Unmarshal([]byte(out), &info); err != nil || info.Session.Lease.Owner == nil {
		return 0, fmt.Errorf("sessions show --json: %q %v", out, err)
	}
	return info.Session.Lease.Owner.PID, nil
}

// startServe starts agenthost serve and returns its ready line.
func (d *demo) startServe(extra ...string) (string, error) {
	s, err := serveproc.Start(serveproc.Config{Bin: d.bin, StateDir: d.dir, Env: d.env(), Args: extra})
	if err != nil {
		return "", err
	}
	d.serve = s
	return s.Ready, nil
}

// cleanup stops the host and any plugin of the state directory, whatever
// happened, and removes the directory.
func (d *demo) cleanup() {
	if d.serve != nil {
		_ = d.serve.Stop(30 * time.Second)
	}
	if d.dir == "" {
		return
	}
	serveproc.KillSessionProcesses(d.dir)
	os.RemoveAll(d.dir)
}
