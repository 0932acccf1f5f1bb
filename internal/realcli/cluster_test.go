package realcli_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/internal/apiclient"
	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/leasestore/etcdstore/etcdtest"
	"github.com/agenthost/agenthost/plugin/sdk/modelserver"
)

// Sessions across machines with the real CLIs: two `agenthost serve
// --store etcd` hosts on one embedded etcd member, each a "machine" of its
// own (its own state directory, HOME, CLI config directory and model
// server, and its workspace at another path with the same files). A
// session runs a turn on host A; host A's machine dies (serve, the plugin
// and the CLI all SIGKILLed); host B tells its client where the session
// runs until it has taken it over, then continues it: the CLI on B sends
// B's model server the first turn, which B's machine never saw (only the
// provider state stored with the session carries it). Host A, started
// again on its state directory, leaves the session to B.
func TestClaudeContinuedOnAnotherMachine(t *testing.T) {
	t.Parallel()
	testContinuedOnAnotherMachine(t, claudeCLI)
}

// The same for codex: its rollout moves with the session.
func TestCodexContinuedOnAnotherMachine(t *testing.T) {
	t.Parallel()
	testContinuedOnAnotherMachine(t, codexCLI)
}

// livenessTTL is the hosts' --liveness-ttl: short, so the takeover comes
// within seconds (TTL + the host's default 1 s drift margin after the
// loss is observed).
const livenessTTL = 2 * time.Second

func testContinuedOnAnotherMachine(t *testing.T, c cli) {
	// The cluster first: its cleanup runs after the hosts' (they stop
	// while etcd still serves them).
	ec := etcdtest.StartCluster(t, 1)
	eps := strings.Join(ec.Endpoints(), ",")
	a, b := newRig(t, c), newRig(t, c)
	for _, r := range []*rig{a, b} {
		// The same project on both machines, at different paths.
		if err := os.WriteFile(filepath.Join(r.workspace, "README.md"), []byte("# the project\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if a.workspace == b.workspace || a.home == b.home {
		t.Fatalf("the machines share a workspace (%s) or a home (%s)", a.workspace, a.home)
	}
	args := func(id string) []string {
		return []string{"--store", "etcd", "--etcd-endpoints", eps, "--host-id", id, "--liveness-ttl", livenessTTL.String()}
	}
	sa := a.start(args("host-a")...)
	sb := b.start(args("host-b")...)

	const (
		q1 = "What is the capital of France?"
		a1 = "The capital of France is Paris."
		q2 = "And of Germany?"
		a2 = "And of Germany, Berlin."
	)
	a.script(modelserver.Text(a1))
	b.script(modelserver.Text(a2))
	ca := a.dial(sa)
	id := ca.newSession(a, nil)
	ca.mustPrompt(id, q1, acp.StopReasonEndTurn)
	if got := ownerOf(t, ca, id); got.OwnerHost != "host-a" || got.State != api.StateRunning || !got.Portable {
		t.Fatalf("host A lists its session as %+v, want running on host-a, portable (the %s plugin exports its state)", got, c.name)
	}
	cb := b.dial(sb)
	if got := ownerOf(t, cb, id); got.OwnerHost != "host-a" || got.State != api.StateElsewhere {
		t.Fatalf("host B lists host A's session as %+v, want elsewhere on host-a", got)
	}

	// Machine A dies: its host, and everything it started.
	onA := a.processes()
	if len(onA) == 0 {
		t.Fatal("no plugin or CLI runs on machine A after its turn")
	}
	sa.kill()
	killed := time.Now()
	for _, pid := range onA {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	waitUntil(t, 10*time.Second, "machine A's processes gone", func() bool { return len(a.processes()) == 0 })

	// Until the takeover, B does not run the session: while A's liveness
	// lease lives it says the session runs on host-a (-32011, with A's
	// socket); once B found the lease gone, until the TTL and the drift
	// margin have passed since, the session is held (-32007: retry
	// later). A client of B retries session/resume every 100 ms; the
	// session list says when B took the session over.
	var (
		phases  []string // each answer that differed from the one before, with its time
		last    int
		held    bool
		taken   time.Duration
		resumed bool
	)
	for taken == 0 {
		since := time.Since(killed)
		if since > 30*time.Second {
			t.Fatalf("host B had not taken the session over 30s after host A was killed; its answers: %v", phases)
		}
		if ownerOf(t, cb, id).OwnerHost != "host-a" {
			taken = since
			break
		}
		err := cb.c.Call(ctxFor(t, 60*time.Second), api.MethodSessionResume,
			acp.ResumeSessionRequest{SessionId: acp.SessionId(id), Cwd: b.workspace}, nil)
		var aerr *apiclient.Error
		switch {
		case err == nil:
			// Taken over between the list and the resume's answer.
			taken, resumed = since, true
			t.Logf("session/resume on host B, sent %.2fs after the kill while the session was host-a's, succeeded after %.2fs (the takeover came meanwhile, then its plugin and CLI started, the provider state imported)",
				since.Seconds(), (time.Since(killed) - since).Seconds())
			continue
		case !errors.As(err, &aerr):
			t.Fatalf("session/resume on host B %.2fs after host A died: %v", since.Seconds(), err)
		case aerr.Code == api.CodeSessionElsewhere:
			var data api.ElsewhereData
			if err := json.Unmarshal(aerr.Data, &data); err != nil || data.HostID != "host-a" || data.Address != sa.socket {
				t.Errorf("host B's -32011 names %s (%v); want host-a at %s", aerr.Data, err, sa.socket)
			}
			if held {
				t.Errorf("%.2fs after the kill host B said the session runs on host-a, after it had found host-a lost", since.Seconds())
			}
		case aerr.Code == api.CodeSessionHeld && strings.Contains(aerr.Message, "not registered"):
			held = true
		default:
			t.Fatalf("session/resume on host B %.2fs after host A died: code %d %q; want %d (runs on host-a) or %d (owner host lost, not yet taken over)",
				since.Seconds(), aerr.Code, aerr.Message, api.CodeSessionElsewhere, api.CodeSessionHeld)
		}
		if aerr.Code != last {
			last = aerr.Code
			phases = append(phases, fmt.Sprintf("%.2fs: %d %s", since.Seconds(), aerr.Code, aerr.Message))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(phases) == 0 {
		t.Error("host B was never asked for the session before it took it over")
	}
	t.Logf("host B's answers to session/resume after host A was killed:\n%s", strings.Join(phases, "\n"))
	t.Logf("host B took the session over %.2fs after host A was killed (liveness TTL %s, drift margin 1s)", taken.Seconds(), livenessTTL)
	if n := len(b.srv.ModelRequests()); n != 0 {
		t.Fatalf("machine B's model server was asked %d times before B resumed the session", n)
	}

	if !resumed {
		start := time.Now()
		cb.resumeSession(t, b, id)
		t.Logf("session/resume on host B took %.2fs (its plugin and CLI started, the provider state imported)", time.Since(start).Seconds())
	}
	cb.mustPrompt(id, q2, acp.StopReasonEndTurn)
	reqs := b.srv.ModelRequests()
	if len(reqs) != 1 {
		t.Fatalf("machine B's model server was asked %d times, want once", len(reqs))
	}
	if !hasMessage(reqs[0], "user", q1) || !hasMessage(reqs[0], "assistant", a1) || !strings.Contains(reqs[0].LastUserText(), q2) {
		t.Errorf("machine B's model request does not continue the conversation (want user %q, assistant %q, then %q); it carries:\n%s",
			q1, a1, q2, requestHistory(reqs[0]))
	}
	if got := ownerOf(t, cb, id); got.OwnerHost != "host-b" || got.State != api.StateRunning || !got.Portable {
		t.Errorf("host B lists the session it continued as %+v, want running on host-b, portable", got)
	}
	if len(b.processes()) == 0 {
		t.Error("no plugin runs on machine B after its turn")
	}
	// The conversation lives on machine B now, in its CLI's own files
	// (CLAUDE_CONFIG_DIR, CODEX_HOME under B's HOME); machine A's never
	// saw the second turn.
	if got := filesWith(t, b.home, q1, q2); len(got) == 0 {
		t.Errorf("no file under machine B's home %s holds both turns' prompts: the CLI did not keep the conversation on B", b.home)
	}
	if got := filesWith(t, a.home, q2); len(got) != 0 {
		t.Errorf("machine A's files %v hold the second turn, which ran on B", got)
	}

	// The journal through B: both turns, each sequence number once.
	es := b.journal(sb, id)
	var prompts []string
	var stops []*journal.Stop
	for i, e := range es {
		if i > 0 && e.Seq <= es[i-1].Seq {
			t.Errorf("journal entry %d has seq %d after %d", i, e.Seq, es[i-1].Seq)
		}
		switch r := e.Record.(type) {
		case *journal.Prompt:
			var text []string
			for _, p := range r.Prompt {
				text = append(text, p.Text())
			}
			prompts = append(prompts, strings.Join(text, ""))
		case *journal.Stop:
			stops = append(stops, r)
		}
	}
	if !slices.Equal(prompts, []string{q1, q2}) || len(stops) != 2 ||
		stops[0].StopReason != string(acp.StopReasonEndTurn) || stops[1].StopReason != string(acp.StopReasonEndTurn) {
		t.Errorf("the journal through host B holds prompts %q and %d stops; want turn 1 and turn 2, both ended end_turn", prompts, len(stops))
	}
	if text := journalText(es); !strings.Contains(text, a1) || !strings.Contains(text, a2) || strings.Count(text, a1) != 1 {
		t.Errorf("the journal's agent text %q; want %q once, then %q", text, a1, a2)
	}

	// Host A comes back on its state directory: the session is B's; A
	// starts no plugin for it and sends its clients to B.
	sa = a.start(args("host-a")...)
	ca = a.dial(sa)
	var st api.StatusResult
	if err := ca.c.Call(ctxFor(t, 10*time.Second), api.MethodStatus, nil, &st); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(st.Host.Running, id) || st.Host.Decided[api.ActionReadopted] != 0 {
		t.Errorf("host A, restarted, runs %v and decided %v; want nothing of the session B took over", st.Host.Running, st.Host.Decided)
	}
	if got := ownerOf(t, ca, id); got.OwnerHost != "host-b" || got.State != api.StateElsewhere {
		t.Errorf("host A, restarted, lists the session as %+v, want elsewhere on host-b", got)
	}
	// As a person on machine A sees it: agenthost sessions list.
	cmd := exec.CommandContext(ctxFor(t, 30*time.Second), agenthostBin, "--state-dir", a.dir, "sessions", "list")
	cmd.Env = a.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("agenthost sessions list on machine A: %v\n%s", err, out)
	}
	if row := listRow(string(out), id); len(row) < 4 || row[2] != api.StateElsewhere || row[3] != "host-b" {
		t.Errorf("agenthost sessions list on machine A shows the session as %q; want elsewhere on host-b:\n%s", row, out)
	}
	_, err = ca.prompt(ctxFor(t, 30*time.Second), id, "are you there, A?")
	var aerr *apiclient.Error
	if !errors.As(err, &aerr) || aerr.Code != api.CodeSessionElsewhere {
		t.Fatalf("a prompt through host A, restarted: %v; want -32011 (runs on host-b)", err)
	}
	var data api.ElsewhereData
	if err := json.Unmarshal(aerr.Data, &data); err != nil || data.HostID != "host-b" || data.Address != sb.socket {
		t.Errorf("host A's -32011 names %s (%v); want host-b at %s", aerr.Data, err, sb.socket)
	}
	if err := ca.c.Call(ctxFor(t, 30*time.Second), api.MethodSessionResume,
		acp.ResumeSessionRequest{SessionId: acp.SessionId(id), Cwd: a.workspace}, nil); apiclient.ErrorCode(err) != api.CodeSessionElsewhere {
		t.Errorf("session/resume through host A, restarted: %v; want -32011 (runs on host-b)", err)
	}
	if left := a.processes(); len(left) != 0 {
		t.Errorf("host A, restarted, runs processes %v; want none: the session is B's", left)
	}
	if n := len(a.srv.ModelRequests()); n != 1 {
		t.Errorf("machine A's model server was asked %d times, want once (the first turn only)", n)
	}
	var res api.SessionResult
	if err := cb.c.Call(ctxFor(t, 10*time.Second), api.MethodSession, api.Params{SessionID: id}, &res); err != nil || !res.Running {
		t.Errorf("host B after host A came back: running %v (%v); want the session running on B", res.Running, err)
	}
}

// ownerOf is the session's row in the host's session/list.
func ownerOf(t *testing.T, c *client, id string) api.ListedSessionMeta {
	t.Helper()
	var list api.ListSessionsResult
	if err := c.c.Call(ctxFor(t, 10*time.Second), api.MethodSessionList, map[string]any{}, &list); err != nil {
		t.Fatalf("session/list: %v", err)
	}
	for _, s := range list.Sessions {
		if s.SessionID == id {
			return s.Meta.Agenthost
		}
	}
	t.Fatalf("session/list lacks %s: %+v", id, list)
	return api.ListedSessionMeta{}
}

// journalText joins the agent message chunks the journal holds.
func journalText(es []entry) string {
	var ups []journal.SessionUpdate
	for _, u := range updates(es) {
		ups = append(ups, u.Update)
	}
	text, _ := messageText(ups)
	return text
}

// filesWith lists the regular files under dir (of at most 64 MiB) that
// contain every one of texts.
func filesWith(t *testing.T, dir string, texts ...string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // a CLI's temporary file, gone meanwhile
		}
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err == nil && fi.Size() > 64<<20 {
			return nil
		}
		var b []byte
		if err == nil {
			b, err = os.ReadFile(path)
		}
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(texts, func(s string) bool { return !strings.Contains(string(b), s) }) {
			out = append(out, path)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("read the files under %s: %v", dir, err)
	}
	return out
}

// listRow is the fields of session id's row in agenthost sessions list's
// output (SESSION AGENT STATE HOST PORTABLE …), nil when it has none.
func listRow(out, id string) []string {
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == id {
			return f
		}
	}
	return nil
}
