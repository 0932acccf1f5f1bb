package main

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agenthost/agenthost/internal/logtest"
)

// The host is SIGKILLed mid-turn: the plugin runs on, a new host readopts
// it, the updates produced meanwhile reach the journal, and the journal is
// complete and gap-free; a client that follows the journal from the last
// seq it saw misses nothing.
func TestHostKilledMidTurnIsReadopted(t *testing.T) {
	t.Parallel()
	dir := stateDir(t)
	s := startServe(t, dir)
	t.Cleanup(func() { noPluginsLeft(t, dir) })

	const n = 40
	run := exec.Command(bins.agenthost, "--state-dir", dir, "run", "--agent", "scripted", "--session", "crash", "--json", "count "+strconv.Itoa(n)+" 50ms")
	run.Env = testEnv()
	out, err := run.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var runErr logtest.Buffer
	run.Stderr = &runErr
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	seen := 0
	var lastSeq uint64
	for seen < 10 && sc.Scan() {
		var l struct {
			Params struct {
				Update struct {
					SessionUpdate string `json:"sessionUpdate"`
				} `json:"update"`
				Meta struct {
					Agenthost struct {
						Seq uint64 `json:"seq"`
					} `json:"agenthost"`
				} `json:"_meta"`
			} `json:"params"`
		}
		_ = json.Unmarshal(sc.Bytes(), &l)
		if l.Params.Update.SessionUpdate == "agent_message_chunk" {
			seen++
			lastSeq = l.Params.Meta.Agenthost.Seq
		}
	}
	if seen < 10 {
		t.Fatalf("run streamed %d chunks before ending: %s", seen, runErr.String())
	}
	info := showSession(t, dir, "crash")
	pid := info.Session.Lease.Owner.PID

	s.kill()
	for sc.Scan() { // the client sees its connection go
	}
	if err := run.Wait(); err == nil || !strings.Contains(runErr.String(), "lost the connection to the host") ||
		!strings.Contains(runErr.String(), "agenthost journal crash --follow --state-dir "+dir) {
		t.Errorf("run when its host was killed: %v\n%s", err, runErr.String())
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("the plugin (pid %d) died with its host: %v", pid, err)
	}
	if cmdline, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline")); !strings.Contains(string(cmdline), "__plugin\x00scripted") {
		t.Errorf("the plugin's command line is %q; want this binary serving the built-in", cmdline)
	}
	if r := ah(t, "--state-dir", dir, "status"); r.code != 1 {
		t.Errorf("status with the host dead: %s", r)
	}

	s2 := serve(t, dir)
	r := mustAH(t, "--state-dir", dir, "status")
	if !strings.Contains(r.stdout, "readopted 1") || !strings.Contains(r.stdout, "1 running") {
		t.Errorf("status after the restart:\n%s", r.stdout)
	}
	// Follow from the entry after the last one the client saw, until
	// the turn's end.
	follow := exec.Command(bins.agenthost, "--state-dir", dir, "journal", "crash", "--follow", "--json", "--from", strconv.FormatUint(lastSeq+1, 10))
	follow.Env = testEnv()
	var followErr logtest.Buffer
	follow.Stderr = &followErr
	fout, err := follow.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	var rest []journalLine
	fsc := bufio.NewScanner(fout)
	for fsc.Scan() {
		var e journalLine
		if err := json.Unmarshal(fsc.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		rest = append(rest, e)
		if e.Kind == "stop" {
			break
		}
	}
	_ = follow.Process.Signal(syscall.SIGINT)
	_ = follow.Wait()
	if len(rest) == 0 || rest[0].Seq != lastSeq+1 {
		t.Fatalf("following from %d: %+v\n%s", lastSeq+1, rest, followErr.String())
	}
	for i, e := range rest {
		if e.Seq != lastSeq+1+uint64(i) {
			t.Fatalf("following: entry %d has seq %d, want %d", i, e.Seq, lastSeq+1+uint64(i))
		}
	}

	// The whole journal: seqs 1..N, the plugin's updates 1..n+1 exactly
	// once each, a readoption in between.
	entries := parseJournal(t, mustAH(t, "--state-dir", dir, "journal", "crash", "--json").stdout)
	var pluginSeqs []uint64
	var texts []string
	readopted := false
	for i, e := range entries {
		if e.Seq != uint64(i+1) {
			t.Fatalf("journal entry %d has seq %d", i, e.Seq)
		}
		switch e.Kind {
		case "update", "stop":
			if e.Payload.PluginSeq == 0 {
				continue // the host wrote it: the title it derived from the prompt
			}
			pluginSeqs = append(pluginSeqs, e.Payload.PluginSeq)
			if e.Kind == "update" {
				texts = append(texts, e.Payload.Update.Content.Text)
			}
		case "lifecycle":
			readopted = readopted || e.Payload.Event == "readopted"
		}
	}
	for i, ps := range pluginSeqs {
		if ps != uint64(i+1) {
			t.Fatalf("plugin seqs %v are not 1..%d", pluginSeqs, n+1)
		}
	}
	if len(pluginSeqs) != n+1 || !readopted || entries[len(entries)-1].Payload.StopReason != "end_turn" {
		t.Errorf("journal after the crash: %d plugin updates, readopted %v, last %+v", len(pluginSeqs), readopted, entries[len(entries)-1])
	}
	for i, txt := range texts {
		if txt != strconv.Itoa(i+1) {
			t.Fatalf("chunks %v are not 1..%d in order", texts, n)
		}
	}
	// The session goes on in the new host.
	if r := mustAH(t, "--state-dir", dir, "run", "--session", "crash", "count 2"); r.stdout != "12\n" {
		t.Errorf("a turn after the readoption: %s", r)
	}
	_ = s2
}

// sessionJSON is what sessions show --json says of a session, in part.
type sessionJSON struct {
	Session struct {
		Options map[string]string `json:"options"`
		Lease   struct {
			Owner struct {
				PID int `json:"pid"`
			} `json:"owner"`
		} `json:"lease"`
	} `json:"session"`
	LastSeq uint64 `json:"lastSeq"`
	Running bool   `json:"running"`
}

// showSession is sessions show --json of session id of the host on dir.
func showSession(t *testing.T, dir, id string) sessionJSON {
	t.Helper()
	var info sessionJSON
	if err := json.Unmarshal([]byte(mustAH(t, "--state-dir", dir, "sessions", "show", id, "--json").stdout), &info); err != nil {
		t.Fatal(err)
	}
	return info
}

// serve without --shutdown-sessions detaches on SIGTERM: the plugins live
// on and the next host readopts them.
func TestServeDetachesOnSIGTERM(t *testing.T) {
	t.Parallel()
	dir := stateDir(t)
	cmd := exec.Command(bins.agenthost, "--state-dir", dir, "serve")
	cmd.Env = testEnv()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr logtest.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || !strings.Contains(line, `"ready":true`) {
		t.Fatalf("serve: %q %v\n%s", line, err, stderr.String())
	}
	mustAH(t, "--state-dir", dir, "run", "--agent", "scripted", "--session", "keep", "count 1")
	var info sessionJSON
	_ = json.Unmarshal([]byte(mustAH(t, "--state-dir", dir, "sessions", "show", "keep", "--json").stdout), &info)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil || stderr.String() != "" {
			t.Errorf("serve after SIGTERM: %v\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("serve did not exit on SIGTERM")
	}
	if err := syscall.Kill(info.Session.Lease.Owner.PID, 0); err != nil {
		t.Fatalf("the plugin did not outlive a detaching host: %v", err)
	}
	serve(t, dir)
	if r := mustAH(t, "--state-dir", dir, "status"); !strings.Contains(r.stdout, "readopted 1") {
		t.Errorf("status:\n%s", r.stdout)
	}
	if r := mustAH(t, "--state-dir", dir, "run", "--session", "keep", "count 1"); r.stdout != "1\n" {
		t.Errorf("run after readoption: %s", r)
	}
}
