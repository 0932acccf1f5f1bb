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

// A client command with no host serving the state directory says so, how
// to start one, and exits 1.
func TestStatusWithoutHost(t *testing.T) {
	t.Parallel()
	dir := stateDir(t)
	for _, args := range [][]string{{"status"}, {"sessions", "list"}, {"run", "--agent", "scripted", "hi"}, {"journal", "x"},
		{"sessions", "stop", "--all"}, {"sessions", "rm", "x"}, {"sessions", "prune", "--older-than", "1h"}} {
		start := time.Now()
		r := ah(t, append([]string{"--state-dir", dir}, args...)...)
		if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, "no agenthost is serving the state directory "+dir) ||
			!strings.Contains(r.stderr, "agenthost serve --state-dir "+dir) {
			t.Errorf("agenthost %s without a host: %s", strings.Join(args, " "), r)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("agenthost %s took %s to find no host; with no socket and no lock it must not wait", args[0], d)
		}
	}
}

func TestServe(t *testing.T) {
	t.Parallel()
	dir := stateDir(t)
	s := serve(t, dir)
	if s.ready.Socket != filepath.Join(dir, "agenthost.sock") || s.ready.PID != s.cmd.Process.Pid || s.ready.StateDir != dir ||
		strings.Join(s.ready.Agents, ",") != "claude,codex,scripted" {
		t.Errorf("ready line %+v", s.ready)
	}
	fi, err := os.Stat(s.ready.Socket)
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket %s: %v, mode %v; want a socket with mode 0600", s.ready.Socket, err, fi.Mode())
	}
	r := mustAH(t, "--state-dir", dir, "status")
	for _, want := range []string{"pid " + itoa(s.ready.PID), "state dir  " + dir, "claude, codex, scripted", "0 recorded, 0 running"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status does not say %q:\n%s", want, r.stdout)
		}
	}
	var st struct {
		Host struct {
			PID      int    `json:"pid"`
			StateDir string `json:"stateDir"`
		} `json:"host"`
		Version string `json:"version"`
	}
	if err := json.Unmarshal([]byte(mustAH(t, "--state-dir", dir, "status", "--json").stdout), &st); err != nil || st.Host.PID != s.ready.PID {
		t.Errorf("status --json: %+v, %v", st, err)
	}
	// The state directory is taken: a second host is told by whom.
	r = ah(t, "--state-dir", dir, "serve")
	if r.code != 1 || !strings.Contains(r.stderr, "in use by pid "+itoa(s.ready.PID)) || r.stdout != "" {
		t.Errorf("a second serve on the same state directory: %s", r)
	}
	// Logs are quiet by default.
	s.stop()
	if s.err != nil {
		t.Errorf("serve exited with %v after SIGTERM", s.err)
	}
	if text := s.stderrText(); text != "" {
		t.Errorf("serve logged on a quiet run:\n%s", text)
	}
	if _, err := os.Stat(s.ready.Socket); !os.IsNotExist(err) {
		t.Errorf("the socket is still there after serve exited: %v", err)
	}
}

// A socket file left by a host that died is replaced; one that answers is
// never touched.
func TestServeReplacesAStaleSocket(t *testing.T) {
	t.Parallel()
	dir := stateDir(t)
	s := startServe(t, dir)
	s.kill()
	if _, err := os.Stat(filepath.Join(dir, "agenthost.sock")); err != nil {
		t.Fatalf("a killed serve should leave its socket behind: %v", err)
	}
	s2 := serve(t, dir)
	mustAH(t, "--state-dir", dir, "status")
	_ = s2
}

func itoa(n int) string { return strconv.Itoa(n) }

// runUpdates parses the output of run --json: session/update
// notifications, then the session/prompt response.
type rpcLine struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		SessionID string `json:"sessionId"`
		Update    struct {
			SessionUpdate string `json:"sessionUpdate"`
			Content       struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"update"`
	} `json:"params"`
	Result struct {
		StopReason string `json:"stopReason"`
	} `json:"result"`
}

func parseLines(t *testing.T, out string) []rpcLine {
	t.Helper()
	var lines []rpcLine
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var l rpcLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("run --json printed a line that is not JSON: %q (%v)", sc.Text(), err)
		}
		lines = append(lines, l)
	}
	return lines
}

func chunks(lines []rpcLine) string {
	var b strings.Builder
	for _, l := range lines {
		if l.Method == "session/update" && l.Params.Update.SessionUpdate == "agent_message_chunk" {
			b.WriteString(l.Params.Update.Content.Text + ",")
		}
	}
	return b.String()
}

func TestRunStreamsAndResumes(t *testing.T) {
	t.Parallel()
	dir := stateDir(t)
	serve(t, dir)
	work := t.TempDir()

	// Readable: the agent's text on stdout, the session and the stop on
	// stderr.
	r := mustAH(t, "--state-dir", dir, "run", "--agent", "scripted", "--cwd", work, "count", "3")
	if r.stdout != "123\n" || !strings.Contains(r.stderr, "(scripted, new)") || !strings.Contains(r.stderr, "turn ended: end_turn") {
		t.Errorf("run count 3: %s", r)
	}
	r = mustAH(t, "--state-dir", dir, "run", "--agent", "scripted", "tool")
	if !strings.Contains(r.stdout, "⚙ list files [execute] pending\n") || !strings.Contains(r.stdout, "↳ list files completed: README.md…\n") ||
		!strings.HasSuffix(r.stdout, "listed 2 files\n") {
		t.Errorf("run tool: %s", r)
	}
	// A failing turn: its message, exit 1.
	r = ah(t, "--state-dir", dir, "run", "--agent", "scripted", "fail", "out of tokens")
	if r.code != 1 || !strings.Contains(r.stderr, "the turn failed: out of tokens") {
		t.Errorf("run fail: %s", r)
	}
	// The prompt from stdin.
	if r := ahInput(t, "count 2\n", "--state-dir", dir, "run", "--agent", "scripted", "-"); r.code != 0 || r.stdout != "12\n" {
		t.Errorf("run - with the prompt on stdin: %s", r)
	}

	// --json: raw notifications, then the response; every line JSON.
	r = mustAH(t, "--state-dir", dir, "run", "--agent", "scripted", "--json", "count 2")
	lines := parseLines(t, r.stdout)
	if len(lines) < 3 || chunks(lines) != "1,2," || lines[len(lines)-1].Result.StopReason != "end_turn" || r.stderr != "" {
		t.Fatalf("run --json: %s", r)
	}
	id := lines[0].Params.SessionID

	// --session resumes: only the new turn's updates arrive.
	r = mustAH(t, "--state-dir", dir, "run", "--session", id, "--json", "count 1")
	lines = parseLines(t, r.stdout)
	if chunks(lines) != "1," || lines[0].Params.SessionID != id || lines[0].Params.Update.SessionUpdate != "user_message_chunk" {
		t.Errorf("run --session %s --json: %s", id, r)
	}
	r = mustAH(t, "--state-dir", dir, "run", "--session", id, "echo", "again")
	if r.stdout != "echo again\n" || !strings.Contains(r.stderr, "(scripted, resumed)") {
		t.Errorf("run --session readable: %s", r)
	}
	// A stopped session resumes too: a new plugin process, the same
	// session and journal.
	mustAH(t, "--state-dir", dir, "sessions", "stop", id)
	r = mustAH(t, "--state-dir", dir, "run", "--session", id, "count 2")
	if r.stdout != "12\n" || !strings.Contains(r.stderr, "resumed") {
		t.Errorf("run --session after stop: %s", r)
	}
	// Unknown sessions and agents are explained.
	if r := ah(t, "--state-dir", dir, "run", "--session", "nope", "hi"); r.code != 1 || !strings.Contains(r.stderr, "no session nope: name an --agent") {
		t.Errorf("run --session nope: %s", r)
	}
	if r := ah(t, "--state-dir", dir, "run", "--session", id, "--agent", "codex", "hi"); r.code != 1 || !strings.Contains(r.stderr, "runs agent scripted, not codex") {
		t.Errorf("run --session with another agent: %s", r)
	}
	if r := ah(t, "--state-dir", dir, "run", "hi"); r.code != 2 || !strings.Contains(r.stderr, "this host runs claude, codex, scripted") {
		t.Errorf("run without --agent: %s", r)
	}
	if r := ah(t, "--state-dir", dir, "run", "--agent", "nobody", "hi"); r.code != 1 || !strings.Contains(r.stderr, `unknown agent "nobody"`) {
		t.Errorf("run --agent nobody: %s", r)
	}
	// --agent with --session of no existing session: a new one, with that id.
	r = mustAH(t, "--state-dir", dir, "run", "--agent", "scripted", "--session", "my-task", "count 1")
	if !strings.Contains(r.stderr, "session my-task (scripted, new)") {
		t.Errorf("run --agent --session my-task: %s", r)
	}
	// Permission requests: answered by --permissions, refused without a
	// terminal to ask on.
	if r := mustAH(t, "--state-dir", dir, "run", "--agent", "scripted", "--permissions", "allow", "ask"); r.stdout != "permission: selected allow\n" {
		t.Errorf("run --permissions allow ask: %s", r)
	}
	if r := mustAH(t, "--state-dir", dir, "run", "--agent", "scripted", "ask"); r.stdout != "permission: cancelled\n" || !strings.Contains(r.stderr, "no terminal") {
		t.Errorf("run ask without a terminal: %s", r)
	}
}

// Ctrl-C cancels the turn: it ends as cancelled and run exits 130.
func TestRunInterruptCancelsTheTurn(t *testing.T) {
	t.Parallel()
	dir := stateDir(t)
	serve(t, dir)
	cmd := exec.Command(bins.agenthost, "--state-dir", dir, "run", "--agent", "scripted", "--json", "sleep 30s")
	cmd.Env = testEnv()
	var stdout, stderr logtest.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The prompt's echo is the sign the turn runs.
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(stdout.String(), "user_message_chunk") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	start := time.Now()
	_ = cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	exit, _ := err.(*exec.ExitError)
	if exit == nil || exit.ExitCode() != 130 {
		t.Fatalf("run interrupted: %v, want exit status 130\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the cancelled turn took %s to end", d)
	}
	// The turn ended as cancelled (not failed), in the journal.
	id := parseLines(t, stdout.String())[0].Params.SessionID
	var stop string
	for deadline := time.Now().Add(10 * time.Second); stop == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for _, e := range parseJournal(t, mustAH(t, "--state-dir", dir, "journal", id, "--json").stdout) {
			if e.Kind == "stop" {
				stop = e.Payload.StopReason
			}
		}
	}
	if stop != "cancelled" {
		t.Errorf("the interrupted turn's stop reason is %q, want cancelled", stop)
	}
}

// journalLine is one line of journal --json.
type journalLine struct {
	SessionID string    `json:"sessionId"`
	Seq       uint64    `json:"seq"`
	Fence     uint64    `json:"fence"`
	Time      time.Time `json:"time"`
	Kind      string    `json:"kind"`
	Payload   struct {
		PluginSeq  uint64 `json:"pluginSeq"`
		Event      string `json:"event"`
		StopReason string `json:"stopReason"`
		Update     struct {
			SessionUpdate string `json:"sessionUpdate"`
			Content       struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"content"`
		} `json:"update"`
	} `json:"payload"`
}

func parseJournal(t *testing.T, out string) []journalLine {
	t.Helper()
	var entries []journalLine
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		var e journalLine
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("journal --json printed a line that is not one JSON object: %q (%v)", l, err)
		}
		entries = append(entries, e)
	}
	return entries
}

func TestJournal(t *testing.T) {
	t.Parallel()
	dir := stateDir(t)
	serve(t, dir)
	r := mustAH(t, "--state-dir", dir, "run", "--agent", "scripted", "--session", "j1", "count 3")
	_ = r
	entries := parseJournal(t, mustAH(t, "--state-dir", dir, "journal", "j1", "--json").stdout)
	var kinds, texts []string
	titled := false
	for i, e := range entries {
		if e.Seq != uint64(i+1) || e.SessionID != "j1" || e.Time.IsZero() {
			t.Fatalf("entry %d: %+v; want seq %d of session j1", i, e, i+1)
		}
		if e.Kind == "update" && e.Payload.Update.SessionUpdate == "session_info_update" && e.Payload.PluginSeq == 0 {
			titled = true // the title the host derived from the prompt
			continue
		}
		kinds = append(kinds, e.Kind)
		if e.Kind == "update" {
			if e.Payload.Update.SessionUpdate != "agent_message_chunk" || e.Payload.Update.Content.Type != "text" {
				t.Errorf("update entry %d is not ACP-shaped: %+v", e.Seq, e.Payload)
			}
			texts = append(texts, e.Payload.Update.Content.Text)
		}
	}
	if got := strings.Join(kinds, ","); !strings.HasSuffix(got, "lifecycle,prompt,update,update,update,stop") || !strings.HasPrefix(got, "lifecycle") {
		t.Errorf("journal kinds %s", got)
	}
	if !titled {
		t.Error("the journal holds no title for the session")
	}
	if strings.Join(texts, "") != "123" || entries[len(entries)-1].Payload.StopReason != "end_turn" {
		t.Errorf("journal texts %q, last %+v", texts, entries[len(entries)-1])
	}
	last := entries[len(entries)-1].Seq

	// --from: from that entry on.
	from := parseJournal(t, mustAH(t, "--state-dir", dir, "journal", "j1", "--json", "--from", itoa(int(last-1))).stdout)
	if len(from) != 2 || from[0].Seq != last-1 {
		t.Errorf("journal --from %d: %+v", last-1, from)
	}
	if r := mustAH(t, "--state-dir", dir, "journal", "j1", "--from", itoa(int(last+5))); r.stdout != "" {
		t.Errorf("journal --from past the end printed %q", r.stdout)
	}
	// Readable.
	r = mustAH(t, "--state-dir", dir, "journal", "j1")
	for _, want := range []string{"lifecycle  created", "prompt     > count 3", `update     agent_message_chunk "2"  [plugin #2]`, "stop       end_turn"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("journal does not show %q:\n%s", want, r.stdout)
		}
	}
	if r := ah(t, "--state-dir", dir, "journal", "nope"); r.code != 1 || !strings.Contains(r.stderr, "no session nope") {
		t.Errorf("journal nope: %s", r)
	}

	// --follow prints new entries as they are journaled, until SIGINT.
	cmd := exec.Command(bins.agenthost, "--state-dir", dir, "journal", "j1", "--follow", "--json", "--from", itoa(int(last+1)))
	cmd.Env = testEnv()
	var out logtest.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	mustAH(t, "--state-dir", dir, "run", "--session", "j1", "count 2")
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(out.String(), `"stopReason"`) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	_ = cmd.Process.Signal(syscall.SIGINT)
	if err := cmd.Wait(); err != nil {
		t.Errorf("journal --follow after SIGINT: %v\n%s", err, out.String())
	}
	followed := parseJournal(t, out.String())
	if len(followed) != 4 || followed[0].Seq != last+1 || followed[0].Kind != "prompt" || followed[3].Kind != "stop" {
		t.Errorf("journal --follow: %+v", followed)
	}
}

func TestSessionsListShowStop(t *testing.T) {
	t.Parallel()
	dir := stateDir(t)
	serve(t, dir)
	if r := mustAH(t, "--state-dir", dir, "sessions", "list"); !strings.Contains(r.stdout, "no sessions yet") {
		t.Errorf("sessions list of an empty host: %s", r)
	}
	work := t.TempDir()
	mustAH(t, "--state-dir", dir, "run", "--agent", "scripted", "--session", "s-one", "--cwd", work, "count 1")
	r := mustAH(t, "--state-dir", dir, "sessions", "list")
	// The title is the first line of the first prompt.
	if !strings.Contains(r.stdout, "TITLE") || !regexpMatch(`s-one\s+scripted\s+running\s+1\s+\S+.*\s+`+work+`\s+count 1`, r.stdout) {
		t.Errorf("sessions list:\n%s", r.stdout)
	}
	r = mustAH(t, "--state-dir", dir, "sessions", "show", "s-one")
	for _, want := range []string{"session     s-one", "title       count 1", "agent       scripted", "workspace   " + work, "state       live, running in this host", "handles     scripted-", "journal     "} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("sessions show does not say %q:\n%s", want, r.stdout)
		}
	}
	var info struct {
		Session struct {
			ID    string `json:"id"`
			Lease struct {
				Claim string `json:"claim"`
				Owner struct {
					PID int `json:"pid"`
				} `json:"owner"`
			} `json:"lease"`
		} `json:"session"`
		Running bool `json:"running"`
	}
	if err := json.Unmarshal([]byte(mustAH(t, "--state-dir", dir, "sessions", "show", "s-one", "--json").stdout), &info); err != nil ||
		info.Session.ID != "s-one" || !info.Running || info.Session.Lease.Owner.PID == 0 {
		t.Fatalf("sessions show --json: %+v %v", info, err)
	}
	pid := info.Session.Lease.Owner.PID

	r = mustAH(t, "--state-dir", dir, "sessions", "stop", "s-one")
	if r.stdout != "stopped session s-one\n" {
		t.Errorf("sessions stop: %s", r)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("the plugin (pid %d) still runs after sessions stop", pid)
	}
	r = mustAH(t, "--state-dir", dir, "sessions", "list")
	if !regexpMatch(`s-one\s+scripted\s+stopped\s+2`, r.stdout) {
		t.Errorf("sessions list after stop:\n%s", r.stdout)
	}
	if r := ah(t, "--state-dir", dir, "sessions", "stop", "s-one"); r.code != 0 || r.stdout != "session s-one was stopped already\n" {
		t.Errorf("stopping a stopped session: %s", r)
	}
	if r := ah(t, "--state-dir", dir, "sessions", "show", "nope"); r.code != 1 || !strings.Contains(r.stderr, "no session nope") {
		t.Errorf("sessions show nope: %s", r)
	}
	if r := ah(t, "--state-dir", dir, "sessions", "show"); r.code != 2 {
		t.Errorf("sessions show without an id: %s", r)
	}
	// Completion offers the session ids.
	if r := mustAH(t, "--state-dir", dir, "__complete", "sessions", "show", ""); !strings.Contains(r.stdout, "s-one\tscripted") {
		t.Errorf("completing sessions show:\n%s", r.stdout)
	}
}

// A client started while the host is still opening waits for it.
func TestClientWaitsForAStartingHost(t *testing.T) {
	t.Parallel()
	dir := stateDir(t)
	cmd := exec.Command(bins.agenthost, "--state-dir", dir, "serve", "--shutdown-sessions")
	cmd.Env = testEnv()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	// As soon as the host holds the state directory's lock, before it
	// listens.
	lock := filepath.Join(dir, "agenthost.lock")
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
		if b, _ := os.ReadFile(lock); strings.TrimSpace(string(b)) == strconv.Itoa(cmd.Process.Pid) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the host never took the lock")
		}
	}
	if r := ah(t, "--state-dir", dir, "status"); r.code != 0 || !strings.Contains(r.stdout, "pid "+strconv.Itoa(cmd.Process.Pid)) {
		t.Errorf("status while the host starts: %s", r)
	}
}

// Only processes of the host's user are served, even when the socket's
// mode would let others connect.
func TestOtherUsersAreRefused(t *testing.T) {
	t.Parallel()
	if os.Getuid() != 0 {
		t.Skip("needs root to run a client as another user")
	}
	dir := stateDir(t)
	s := serve(t, dir)
	for _, p := range []string{bins.dir, bins.agenthost, dir} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(s.ready.Socket, 0o666); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bins.agenthost, "--state-dir", dir, "status")
	cmd.Env = testEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "the host closed the connection before answering; it serves only processes of its own user") {
		t.Errorf("status as another user: %v\n%s", err, out)
	}
	if r := mustAH(t, "--state-dir", dir, "status"); !strings.Contains(r.stdout, "pid ") {
		t.Errorf("status as the host's user: %s", r)
	}
}
