package host

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/agenthost/agenthost/leasestore"
	"github.com/agenthost/agenthost/probe"
)

// The crash torture test: a driver (this test) runs a host in a child
// process with several sessions of the scripted plugin streaming updates,
// SIGKILLs it at random points — while it opens and creates sessions,
// mid-stream, while it stops and restarts a session — and restarts it. Each
// new host checks the invariants right after reconciliation and reports
// them; the driver fails on any violation.

const (
	tortureRoleEnv  = "HOST_TEST_ROLE"
	tortureSessions = 3
)

// tortureRole runs the child-process side when the test binary is
// re-executed as a host; it returns the exit code, or -1 when this process
// is not a torture child.
func tortureRole() int {
	role := os.Getenv(tortureRoleEnv)
	if role == "" {
		return -1
	}
	dir, plugin := os.Getenv("TORTURE_DIR"), os.Getenv("TORTURE_PLUGIN")
	ctx := context.Background()
	h, err := openOnBadger(ctx, Config{
		StateDir: dir, Agents: map[string]AgentPlugin{"scripted": {Path: plugin}},
		StartupTimeout: 20 * time.Second, StopTimeout: time.Second, ReattachTimeout: 5 * time.Second, ReprobeInterval: time.Hour,
		// Warnings reach the driver's failure messages (see ended).
		Logger: hclog.New(&hclog.LoggerOptions{Name: "torture-host", Level: hclog.Warn, Output: os.Stderr}),
	})
	if err != nil {
		fmt.Printf("violation: open failed: %v\n", err)
		return 1
	}
	fmt.Printf("tokenvar %s\n", h.tokenVar)
	<-h.reaped
	if v := checkInvariants(ctx, h); len(v) > 0 {
		fmt.Printf("violation: %s\n", strings.Join(v, "; "))
	} else {
		counts := map[Action]int{}
		for _, d := range h.Decisions() {
			counts[d.Action]++
		}
		fmt.Printf("invariants ok decisions=%v\n", counts)
	}
	if role == "final" {
		for id, d := range h.Decisions() {
			fmt.Printf("decision %q %s %s\n", id, d.Action, d.Reason)
		}
		if err := h.Shutdown(ctx); err != nil {
			fmt.Printf("violation: shutdown: %v\n", err)
			return 1
		}
		fmt.Println("shutdown")
		return 0
	}
	// Work until killed: keep every session streaming, and now and then
	// stop one and start it again.
	var wg sync.WaitGroup
	for i := range tortureSessions {
		id := fmt.Sprintf("torture-%d", i)
		rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(i)))
		wg.Go(func() {
			for {
				s, err := h.StartSession(ctx, SessionRequest{ID: id, Agent: "scripted", Workspace: dir})
				if err != nil {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				for range 1 + rng.IntN(3) {
					if _, err := s.Prompt(ctx, "count 40 3ms"); err != nil {
						break
					}
				}
				if rng.IntN(3) == 0 {
					_ = s.Stop(ctx)
				}
			}
		})
	}
	fmt.Println("working")
	wg.Wait()
	return 0
}

// checkInvariants verifies, right after reconciliation, what the torture
// test promises; it returns the violations.
func checkInvariants(ctx context.Context, h *Host) []string {
	var v []string
	sessions, err := h.store.List(ctx)
	if err != nil {
		return []string{"list: " + err.Error()}
	}
	decisions := h.Decisions()
	owned := map[string]string{} // token -> session
	for _, s := range sessions {
		d, ok := decisions[s.ID]
		switch {
		case !ok:
			v = append(v, fmt.Sprintf("session %q was not decided", s.ID))
		case d.Action == ActionLatched && d.Reason == "":
			v = append(v, fmt.Sprintf("session %q latched without a reason", s.ID))
		}
		if s.Lease.Unreconciled {
			v = append(v, fmt.Sprintf("session %q is still unreconciled", s.ID))
		}
		if s.Lease.Owner != nil {
			owned[s.Lease.Owner.SpawnToken] = s.ID
		}
		if s.Lease.ReservedSpawnToken != "" {
			owned[s.Lease.ReservedSpawnToken] = s.ID
		}
	}
	// Processes: each token on at most one live process, and every live
	// token owned by a lease (no orphan survives reconciliation).
	procs, err := (&probe.ProcFS{TokenVar: h.tokenVar}).Scan(ctx)
	if err != nil {
		return append(v, "scan: "+err.Error())
	}
	live := map[string][]int{}
	for _, p := range procs {
		if p.Token != "" && !p.Zombie {
			live[p.Token] = append(live[p.Token], p.PID)
		}
	}
	for token, pids := range live {
		if len(pids) > 1 {
			v = append(v, fmt.Sprintf("spawn token of session %q is held by %d live processes %v", owned[token], len(pids), pids))
		}
		if _, ok := owned[token]; !ok {
			v = append(v, fmt.Sprintf("orphan plugin %v survived reconciliation", pids))
		}
	}
	// Sockets: every socket directory belongs to a live plugin, or to a
	// session latched with its token (its plugin's fate is not known, so
	// the reaper keeps its socket).
	if entries, err := os.ReadDir(h.socketRoot()); err == nil {
		for _, e := range entries {
			if _, ok := live[e.Name()]; ok {
				continue
			}
			id, owned := owned[e.Name()]
			if !owned {
				v = append(v, fmt.Sprintf("stale socket directory %s, owned by no session", e.Name()))
				continue
			}
			if d := decisions[id]; d.Action != ActionLatched {
				var lease leasestore.Lease
				for _, s := range sessions {
					if s.ID == id {
						lease = s.Lease
					}
				}
				v = append(v, fmt.Sprintf("stale socket directory %s of session %q (decided %s: %s; claim %s, stage %s, reserved %q, owner %+v)",
					e.Name(), id, d.Action, d.Reason, lease.Claim, lease.Stage, lease.ReservedSpawnToken, lease.Owner))
			}
		}
	}
	// Journals: every plugin generation's updates appear exactly once and
	// in order.
	for _, s := range sessions {
		if msg := checkJournal(ctx, h, s.ID); msg != "" {
			v = append(v, msg)
		}
	}
	// Readopted plugins: once drained, the journal holds everything they
	// produced.
	for _, s := range sessions {
		h.mu.Lock()
		sess := h.sessions[s.ID]
		h.mu.Unlock()
		if sess == nil {
			continue
		}
		if msg := waitDrained(ctx, h, sess); msg != "" {
			v = append(v, msg)
		}
	}
	return v
}

func checkJournal(ctx context.Context, h *Host, id string) string {
	expected := uint64(1)
	var problem string
	err := h.store.Replay(ctx, id, 0, func(e leasestore.Entry) error {
		switch e.Kind {
		case leasestore.KindLifecycle:
			var ev leasestore.LifecycleEvent
			if json.Unmarshal(e.Payload, &ev) == nil && ev.Event == "owner-committed" {
				expected = 1 // a new plugin process numbers from 1
			}
		case leasestore.KindUpdate, leasestore.KindStop:
			var r struct {
				PluginSeq uint64 `json:"pluginSeq"`
			}
			if err := json.Unmarshal(e.Payload, &r); err != nil {
				return err
			}
			if r.PluginSeq == 0 {
				return nil // written by the host (a prompt that was never dispatched)
			}
			if r.PluginSeq != expected {
				problem = fmt.Sprintf("session %q journal seq %d holds plugin update %d where %d was due (lost or duplicated)", id, e.Seq, r.PluginSeq, expected)
				return errStopReplay
			}
			expected++
		}
		return nil
	})
	if err != nil && err != errStopReplay {
		return fmt.Sprintf("replay %q: %v", id, err)
	}
	return problem
}

var errStopReplay = fmt.Errorf("stop")

// waitDrained waits until the journal holds the readopted plugin's newest
// update.
func waitDrained(ctx context.Context, h *Host, s *Session) string {
	deadline := time.Now().Add(10 * time.Second)
	for {
		id, err := s.proc.rpc.Identify(ctx)
		if err != nil {
			return ""
		}
		got, err := h.lastPluginSeq(ctx, s.id)
		if err != nil {
			return fmt.Sprintf("session %q: %v", s.id, err)
		}
		if got >= id.LastSeq {
			return ""
		}
		if time.Now().After(deadline) {
			return fmt.Sprintf("session %q: plugin produced update %d, journal holds only up to %d", s.id, id.LastSeq, got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type tortureHost struct {
	cmd   *exec.Cmd
	lines chan string
	done  chan struct{}
	// races counts data races the child's race detector reported.
	races *int
	// waitErr is how the child ended; read it after done is closed.
	waitErr error
	// stderr keeps the child's last stderr lines, for failure messages.
	stderrMu sync.Mutex
	stderr   []string
}

// ended says how the child ended and what it last wrote to stderr.
func (th *tortureHost) ended() string {
	<-th.done
	th.stderrMu.Lock()
	defer th.stderrMu.Unlock()
	how := "exit status 0"
	if th.waitErr != nil {
		how = th.waitErr.Error()
	}
	if len(th.stderr) == 0 {
		return how + ", nothing on stderr"
	}
	return how + "; its stderr ended with:\n" + strings.Join(th.stderr, "\n")
}

func startTortureHost(t *testing.T, dir, role string) *tortureHost {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), tortureRoleEnv+"="+role, "TORTURE_DIR="+dir, "TORTURE_PLUGIN="+bins.scripted)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	races := new(int)
	th := &tortureHost{cmd: cmd, lines: make(chan string, 64), done: make(chan struct{}), races: races}
	stderrDone := make(chan struct{})
	go func() {
		// A killed child never exits with the race detector's status, so
		// its reports are read off stderr.
		defer close(stderrDone)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "WARNING: DATA RACE") {
				*races++
			}
			th.stderrMu.Lock()
			if th.stderr = append(th.stderr, sc.Text()); len(th.stderr) > 40 {
				th.stderr = th.stderr[1:]
			}
			th.stderrMu.Unlock()
			fmt.Fprintln(os.Stderr, sc.Text())
		}
	}()
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			th.lines <- sc.Text()
		}
		close(th.lines)
		<-stderrDone
		th.waitErr = cmd.Wait()
		close(th.done)
	}()
	return th
}

// next returns the next line the host printed that starts with one of
// prefixes, or "" if it exited first.
func (th *tortureHost) next(t *testing.T, prefixes ...string) string {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case line, ok := <-th.lines:
			if !ok {
				return ""
			}
			for _, p := range prefixes {
				if strings.HasPrefix(line, p) {
					return line
				}
			}
		case <-timeout:
			t.Fatalf("the host printed nothing matching %q for a minute", prefixes)
		}
	}
}

func (th *tortureHost) kill() {
	_ = th.cmd.Process.Signal(syscall.SIGKILL)
	for range th.lines {
	}
	<-th.done
}

func (th *tortureHost) check(t *testing.T, round int) {
	t.Helper()
	if *th.races > 0 {
		t.Fatalf("round %d: the host's race detector reported %d data race(s) (see stderr)", round, *th.races)
	}
}

func TestCrashTorture(t *testing.T) {
	t.Parallel() // its own state directory and processes; mostly waiting on them
	rounds := 50
	if testing.Short() {
		rounds = 10
	}
	if n, err := strconv.Atoi(os.Getenv("AGENTHOST_TORTURE_ROUNDS")); err == nil && n > 0 {
		rounds = n
	}
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("AGENTHOST_TORTURE_SEED"), 10, 64); err == nil {
		seed = s
	}
	t.Logf("crash torture: %d rounds, seed %d (AGENTHOST_TORTURE_SEED to replay)", rounds, seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	dir := stateDir(t)
	var tokenVar string
	t.Cleanup(func() { killTokenHolders(t, tokenVar) })

	results := map[string]int{}
	pluginKills := 0
	for round := 1; round <= rounds; round++ {
		th := startTortureHost(t, dir, "work")
		switch line := th.next(t, "tokenvar ", "violation: "); {
		case strings.HasPrefix(line, "violation: "):
			th.kill()
			t.Fatalf("round %d: %s", round, line)
		case line != "":
			tokenVar = strings.TrimPrefix(line, "tokenvar ")
		}
		// Now and then kill the host while it is still opening.
		if rng.IntN(8) == 0 {
			time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
			th.kill()
			th.check(t, round)
			results["killed during open"]++
			continue
		}
		line := th.next(t, "invariants ", "violation: ")
		switch {
		case strings.HasPrefix(line, "violation: "):
			th.kill()
			t.Fatalf("round %d: %s", round, line)
		case line == "":
			t.Fatalf("round %d: the host exited before checking its invariants (%s)", round, th.ended())
		}
		results["invariants ok"]++
		th.next(t, "working")
		time.Sleep(time.Duration(rng.IntN(400)) * time.Millisecond)
		th.kill()
		th.check(t, round)
		results["killed while working"]++
		// Sometimes a plugin dies too while no host is running.
		if rng.IntN(6) == 0 && killOnePlugin(t, tokenVar, rng) {
			pluginKills++
		}
	}
	th := startTortureHost(t, dir, "final")
	line := th.next(t, "invariants ", "violation: ")
	if !strings.HasPrefix(line, "invariants ok") {
		th.kill()
		t.Fatalf("final round: %q", line)
	}
	for {
		l := th.next(t, "decision ", "shutdown")
		if l == "" || l == "shutdown" {
			if l == "" {
				t.Fatal("the final host did not shut down cleanly")
			}
			break
		}
		t.Log(l)
	}
	<-th.done
	th.check(t, rounds+1)
	if left := tokenHolders(t, tokenVar); len(left) > 0 {
		t.Fatalf("plugin processes %v survive a clean shutdown", left)
	}
	t.Logf("crash torture: %d rounds, %d plugins killed while no host ran; %v; final shutdown left no process", rounds, pluginKills, results)
}

func tokenHolders(t *testing.T, tokenVar string) []int {
	t.Helper()
	if tokenVar == "" {
		return nil
	}
	procs, err := (&probe.ProcFS{TokenVar: tokenVar}).Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, p := range procs {
		if p.Token != "" && !p.Zombie {
			pids = append(pids, p.PID)
		}
	}
	slices.Sort(pids)
	return pids
}

func killOnePlugin(t *testing.T, tokenVar string, rng *rand.Rand) bool {
	pids := tokenHolders(t, tokenVar)
	if len(pids) == 0 {
		return false
	}
	return syscall.Kill(pids[rng.IntN(len(pids))], syscall.SIGKILL) == nil
}

// killTokenHolders kills every process carrying the token variable. A
// plugin a dying host had just forked shows its token only once its exec
// is through, so the scan is repeated until it comes up empty twice.
func killTokenHolders(t *testing.T, tokenVar string) {
	deadline := time.Now().Add(5 * time.Second)
	for empty := 0; empty < 2 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		pids := tokenHolders(t, tokenVar)
		if len(pids) == 0 {
			empty++
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
