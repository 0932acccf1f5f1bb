// Command benchrun measures agenthost against the physical baselines that
// bound it, in one run, and prints a table of medians and ratios with the
// machine it ran on. `make bench` runs it. It never fails on absolute
// times: it reports them.
//
// Figures, each a performance target of agenthost beside the baseline that
// bounds it:
//
//   - create → ready (durable) vs a bare go-plugin start + first RPC of an
//     equally minimal plugin built the same way;
//   - reattach after a host restart vs a cold start, per session, at 100
//     sessions;
//   - a prompt's resume of an idle-stopped session to its first update vs a
//     cold create and first prompt to the same point (idle.go);
//   - durable journal appends from 8 concurrent sessions vs one raw
//     write+fsync per record;
//   - the same create → ready and durable appends on the etcd store
//     (etcd.go), each against a bare etcd client doing the same number of
//     transactions, and the takeover of a session after its host's
//     SIGKILL against the liveness TTL;
//   - batch probe of 500 owners vs a minimal hand-written /proc scan;
//   - host RSS with 50 live sessions, and per-plugin RSS;
//   - update latency from plugin to a subscribed API client at ~1,000
//     updates/s (p50/p99), and sustained updates/s;
//   - the first streamed token of a real claude and a real codex turn
//     through agenthost serve vs the same CLI driven alone (firsttoken.go;
//     skipped, saying why, where the pinned CLIs are not installed).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/localapi"
	"github.com/agenthost/agenthost/internal/pluginclient"
	"github.com/agenthost/agenthost/internal/wire"
	"github.com/agenthost/agenthost/journal"
	"github.com/agenthost/agenthost/leasestore"
	"github.com/agenthost/agenthost/leasestore/badgerstore"
	"github.com/agenthost/agenthost/probe"
)

type row struct {
	Name, Value, Baseline, Ratio, Target, Verdict string
}

func main() {
	quick := flag.Bool("quick", false, "fewer rounds and sessions (a smoke run, not a measurement)")
	out := flag.String("update", "", "also write the table into this markdown file, between its benchrun markers")
	step := flag.String("step", "", "internal: run one figure's step in this process and print its rows as JSON")
	work := flag.String("work", "", "internal: the work directory holding the built plugins")
	rssChild := flag.String("rss-child", "", "internal: measure RSS in this process (MODE,PLUGIN,SESSIONS)")
	only := flag.String("only", "", "run only these figures' steps, comma-separated (of "+strings.Join(stepNames, ", ")+"); the table then holds only their rows and -update is refused")
	profile := flag.String("profile", "", "write CPU and block profiles of the measured part of the steps that take one (reattach: host.Open readopting every session) into this directory")
	protocols := flag.String("plugin-protocols", "", "make the scripted plugin offer only these protocol versions (e.g. 1, to compare a host driving version 1 plugins); -update is refused with it")
	flag.Parse()
	if *protocols != "" {
		if _, err := wire.ParseProtocolVersions(*protocols); err != nil || *out != "" {
			fmt.Fprintln(os.Stderr, "benchrun: -plugin-protocols takes versions such as 1, and no -update:", err)
			os.Exit(2)
		}
		// The steps are this program re-executed: they inherit it.
		os.Setenv(wire.EnvProtocolVersions, *protocols)
	}
	var err error
	switch {
	case *rssChild != "":
		err = measureRSS(*rssChild)
	case *step != "":
		err = runStep(*step, *work, *quick, *profile)
	default:
		err = run(*quick, *out, *only, *profile)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchrun:", err)
		os.Exit(1)
	}
}

// steps are the figures, in the order of the table. Each runs in a fresh
// process of its own (this program, re-executed): a figure measured in a
// process that had just run 100 plugins and a store through a burst was
// measured against that process's leftovers (GC debt, exiting children),
// which moved the probe ratio alone from 1.1x to 1.7x.
var stepNames = []string{"create", "etcd-create", "reattach", "idle", "appends", "etcd-appends", "etcd-takeover", "probe", "rss", "latency", "claude-first-token", "codex-first-token"}

func runStep(name, work string, quick bool, profileDir string) error {
	n := func(full, small int) int {
		if quick {
			return small
		}
		return full
	}
	scripted, fixture := filepath.Join(work, "scripted"), filepath.Join(work, "fixture")
	var rows []row
	var err error
	switch name {
	case "create":
		rows, err = benchCreate(work, scripted, fixture, n(20, 5))
	case "etcd-create":
		rows, err = benchEtcdCreate(work, scripted, fixture, n(20, 5))
	case "etcd-appends":
		rows, err = benchEtcdAppends(work, scripted, n(2000, 300))
	case "etcd-takeover":
		rows, err = benchEtcdTakeover(work, scripted, n(3, 1))
	case "reattach":
		rows, err = benchReattach(work, scripted, n(100, 10), profileDir)
	case "idle":
		rows, err = benchIdle(work, scripted, n(20, 5))
	case "appends":
		rows, err = benchAppends(work, scripted, n(2000, 300))
	case "probe":
		rows, err = benchProbe(n(500, 100), n(9, 3))
	case "rss":
		rows, err = benchRSS(work, scripted, fixture, n(50, 5))
	case "latency":
		rows, err = benchLatency(work, scripted, n(3000, 500))
	case "claude-first-token":
		rows, err = benchFirstToken(work, claudeReal, n(40, 3))
	case "codex-first-token":
		rows, err = benchFirstToken(work, codexReal, n(40, 3))
	default:
		return fmt.Errorf("unknown step %q", name)
	}
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(rows)
}

func run(quick bool, mdPath, only, profileDir string) error {
	steps := stepNames
	if only != "" {
		if mdPath != "" {
			return fmt.Errorf("-update writes the whole table: it cannot be combined with -only")
		}
		steps = strings.Split(only, ",")
		for _, name := range steps {
			if !slices.Contains(stepNames, name) {
				return fmt.Errorf("-only: unknown step %q (the steps are %s)", name, strings.Join(stepNames, ", "))
			}
		}
	}
	if profileDir != "" {
		abs, err := filepath.Abs(profileDir)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(abs, 0o755); err != nil {
			return err
		}
		profileDir = abs
	}
	work, err := os.MkdirTemp("", "ahb-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	for bin, pkg := range map[string]string{
		"scripted": "./examples/scripted/cmd/agenthost-plugin-scripted", "fixture": "./host/testdata/fixture", "agenthost": "./cmd/agenthost",
		"etcdmember": "./internal/etcdmember",
	} {
		if out, err := exec.Command("go", "build", "-o", filepath.Join(work, bin), pkg).CombinedOutput(); err != nil {
			return fmt.Errorf("build %s: %v\n%s", pkg, err, out)
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	machine := fmt.Sprintf("%d cores, Linux %s, %s", runtime.NumCPU(), kernel(), runtime.Version())
	fmt.Printf("agenthost benchmarks on %s\n\n", machine)

	var rows []row
	for _, name := range steps {
		args := []string{"-step", name, "-work", work}
		if quick {
			args = append(args, "-quick")
		}
		if profileDir != "" {
			args = append(args, "-profile", profileDir)
		}
		cmd := exec.Command(self, args...)
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("step %s: %w", name, err)
		}
		var r []row
		if err := json.Unmarshal(out, &r); err != nil {
			return fmt.Errorf("step %s printed %q: %w", name, out, err)
		}
		rows = append(rows, r...)
		for _, x := range r {
			fmt.Printf("  %-44s %s\n", x.Name, x.Value)
		}
	}
	table := render(rows)
	fmt.Printf("\n%s\n", table)
	if mdPath != "" {
		cmd := "go run ./internal/benchrun"
		if quick {
			cmd += " -quick"
		}
		md := fmt.Sprintf("Measured %s on %s with `%s` (`make bench`).\n\n%s",
			time.Now().UTC().Format("2006-01-02"), machine, cmd, table)
		return updateMarkdown(mdPath, md)
	}
	return nil
}

// The table's place in a markdown file: between these two lines, so the
// prose around it (why a target is missed, what would close it) stays.
const (
	beginMarker = "<!-- benchrun:begin -->"
	endMarker   = "<!-- benchrun:end -->"
)

func updateMarkdown(path, table string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	doc := string(b)
	i, j := strings.Index(doc, beginMarker), strings.Index(doc, endMarker)
	if i < 0 || j < i {
		return fmt.Errorf("%s has no %q … %q section to put the table in", path, beginMarker, endMarker)
	}
	doc = doc[:i+len(beginMarker)] + "\n" + table + doc[j:]
	return os.WriteFile(path, []byte(doc), 0o644)
}

func render(rows []row) string {
	var b strings.Builder
	b.WriteString("| figure | agenthost | baseline | ratio | target | met |\n|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", r.Name, r.Value, r.Baseline, r.Ratio, r.Target, r.Verdict)
	}
	return b.String()
}

func kernel() string {
	b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return strings.TrimSpace(string(b))
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }

func verdict(ok bool) string {
	if ok {
		return "yes"
	}
	return "no"
}

func openHost(work, name, scripted string) (*host.Host, string, error) {
	dir, err := os.MkdirTemp(work, name+"-")
	if err != nil {
		return nil, "", err
	}
	h, err := openOnBadger(host.Config{
		StateDir: dir, Agents: map[string]host.AgentPlugin{"scripted": scriptedAgent(scripted),
			// The same plugin at protocol version 1, as one built before
			// version 2: the create figure's comparison.
			"scripted-v1": {Path: scripted, Env: []string{wire.EnvProtocolVersions + "=1"}}},
		StartupTimeout: time.Minute, StopTimeout: 5 * time.Second, ReattachTimeout: 30 * time.Second,
	})
	return h, dir, err
}

// scriptedAgent is the scripted plugin at path, offering the protocol
// versions -plugin-protocols names (through the step's environment; all
// when unset), so a run can measure version 1 against version 2.
func scriptedAgent(path string) host.AgentPlugin {
	a := host.AgentPlugin{Path: path}
	if v := os.Getenv(wire.EnvProtocolVersions); v != "" {
		a.Env = []string{wire.EnvProtocolVersions + "=" + v}
	}
	return a
}

// openOnBadger opens a host on cfg over a Badger store in its state
// directory, as the binary does.
func openOnBadger(cfg host.Config) (*host.Host, error) {
	store, err := badgerstore.Open(context.Background(), cfg.StateDir, badgerstore.Options{})
	if err != nil {
		return nil, err
	}
	cfg.Store = store
	return host.Open(context.Background(), cfg)
}

// benchCreate: a session from nothing to a proven, durable lease, against a
// bare go-plugin start and first RPC of a plugin that does nothing else.
func benchCreate(work, scripted, fixture string, rounds int) ([]row, error) {
	h, dir, err := openHost(work, "create", scripted)
	if err != nil {
		return nil, err
	}
	defer h.Shutdown(context.Background())
	// The three starts take turns, so a machine that gets busier during
	// the run slows each alike.
	var ours, v1, bare []time.Duration
	for i := range rounds + 2 {
		for agent, into := range map[string]*[]time.Duration{"scripted": &ours, "scripted-v1": &v1} {
			start := time.Now()
			s, err := h.StartSession(context.Background(), host.SessionRequest{Agent: agent, Workspace: dir})
			d := time.Since(start)
			if err != nil {
				return nil, err
			}
			if i >= 2 {
				*into = append(*into, d)
			}
			_ = s.Stop(context.Background())
		}

		start := time.Now()
		client, _, err := bareStart(fixture)
		if err != nil {
			return nil, err
		}
		d := time.Since(start)
		client.Kill()
		if i >= 2 {
			bare = append(bare, d)
		}
	}
	ratio := float64(median(ours)) / float64(median(bare))
	ratio1 := float64(median(v1)) / float64(median(bare))
	baseline := ms(median(bare)) + " bare go-plugin start + first RPC"
	return []row{
		{Name: "create → ready (durable), median", Value: ms(median(ours)), Baseline: baseline,
			Ratio: fmt.Sprintf("%.2f×", ratio), Target: "≤ 1.2×", Verdict: verdict(ratio <= 1.2)},
		{Name: "create → ready at plugin protocol version 1, median", Value: ms(median(v1)), Baseline: baseline,
			Ratio: fmt.Sprintf("%.2f×", ratio1), Target: "–", Verdict: "–"},
	}, nil
}

// benchReattach: open a host over sessions whose plugins survived the last
// one (readoption of every session) against starting them cold.
func benchReattach(work, scripted string, sessions int, profileDir string) ([]row, error) {
	h, dir, err := openHost(work, "reattach", scripted)
	if err != nil {
		return nil, err
	}
	var cold []time.Duration
	for i := range sessions {
		start := time.Now()
		if _, err := h.StartSession(context.Background(), host.SessionRequest{ID: fmt.Sprint("r", i), Agent: "scripted", Workspace: dir}); err != nil {
			return nil, err
		}
		cold = append(cold, time.Since(start))
	}
	if err := h.Close(context.Background()); err != nil {
		return nil, err
	}
	// reopen opens a host over dir, which readopts every session, and
	// times it. Its work is labelled phase=open in the CPU profile, so
	// that go tool pprof -tagfocus phase=open leaves out the closes.
	reopen := func() (h2 *host.Host, counted *batchCounter, took time.Duration, err error) {
		pprof.Do(context.Background(), pprof.Labels("phase", "open"), func(ctx context.Context) {
			start := time.Now()
			store, serr := badgerstore.Open(ctx, dir, badgerstore.Options{})
			if serr != nil {
				err = serr
				return
			}
			counted = &batchCounter{Store: store}
			h2, err = host.Open(ctx, host.Config{
				StateDir: dir, Agents: map[string]host.AgentPlugin{"scripted": {Path: scripted}}, ReattachTimeout: 30 * time.Second,
				Store: counted,
			})
			took = time.Since(start)
		})
		return h2, counted, took, err
	}
	stopProfiles, err := startProfiles(profileDir, "reattach")
	if err != nil {
		return nil, err
	}
	h2, counted, total, err := reopen()
	if err != nil {
		_ = stopProfiles()
		return nil, err
	}
	st, _ := h2.Status(context.Background())
	// A profile of one open holds a few hundred samples: profile more
	// readoptions of the same sessions (the row times the first).
	for round := 1; profileDir != "" && round < profileRounds; round++ {
		if err := h2.Close(context.Background()); err != nil {
			_ = stopProfiles()
			return nil, err
		}
		if h2, _, _, err = reopen(); err != nil {
			_ = stopProfiles()
			return nil, err
		}
	}
	if err := stopProfiles(); err != nil {
		_ = h2.Shutdown(context.Background())
		return nil, err
	}
	defer h2.Shutdown(context.Background())
	per := total / time.Duration(sessions)
	ratio := float64(median(cold)) / float64(per)
	return []row{{Name: fmt.Sprintf("reattach per session at %d (open reconciles all)", sessions), Value: ms(per) + fmt.Sprintf(" (%d readopted; lease moves in %d batches)", st.Decided[host.ActionReadopted], counted.batches.Load()),
		Baseline: ms(median(cold)) + " cold start", Ratio: fmt.Sprintf("%.1f× faster", ratio), Target: "≥ 15×", Verdict: verdict(ratio >= 15)}}, nil
}

// profileRounds is how many times the reattach step readopts its sessions
// under -profile.
const profileRounds = 5

// batchCounter counts the store's ApplyBatch calls: how many commits the
// readoptions' lease moves took.
type batchCounter struct {
	leasestore.Store
	batches atomic.Int64
}

func (c *batchCounter) ApplyBatch(ctx context.Context, moves []leasestore.Move) []leasestore.MoveResult {
	c.batches.Add(1)
	return c.Store.ApplyBatch(ctx, moves)
}

// benchAppends: 8 sessions stream updates at once; every update is
// journaled durably before it is acknowledged.
func benchAppends(work, scripted string, per int) ([]row, error) {
	h, dir, err := openHost(work, "appends", scripted)
	if err != nil {
		return nil, err
	}
	defer h.Shutdown(context.Background())
	const sessions = 8
	var ss []*host.Session
	for i := range sessions {
		s, err := h.StartSession(context.Background(), host.SessionRequest{ID: fmt.Sprint("a", i), Agent: "scripted", Workspace: dir})
		if err != nil {
			return nil, err
		}
		ss = append(ss, s)
	}
	start := time.Now()
	var wg sync.WaitGroup
	for _, s := range ss {
		wg.Go(func() { _, _ = s.Prompt(context.Background(), fmt.Sprintf("count %d", per)) })
	}
	wg.Wait()
	elapsed := time.Since(start)
	rate := float64(sessions*per) / elapsed.Seconds()

	f, err := os.Create(filepath.Join(dir, "raw"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	record := make([]byte, 200)
	start = time.Now()
	for range per {
		if _, err := f.Write(record); err != nil {
			return nil, err
		}
		if err := f.Sync(); err != nil {
			return nil, err
		}
	}
	raw := float64(per) / time.Since(start).Seconds()
	ratio := rate / raw
	return []row{{Name: "durable journal appends, 8 concurrent sessions", Value: fmt.Sprintf("%.0f updates/s", rate),
		Baseline: fmt.Sprintf("%.0f records/s raw write+fsync", raw), Ratio: fmt.Sprintf("%.1f×", ratio), Target: "≥ 10×", Verdict: verdict(ratio >= 10)}}, nil
}

// benchProbe: one batch probe of every owner against reading each owner's
// /proc/<pid>/stat by hand.
func benchProbe(owners, rounds int) ([]row, error) {
	var cmds []*exec.Cmd
	defer func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}()
	const tokenVar = "AGENTHOST_SPAWN_TOKEN_BENCH"
	p := &probe.Prober{HostID: "local", TokenVar: tokenVar}
	var sessions []leasestore.Session
	var pids []int
	for i := range owners {
		c := exec.Command("sleep", "600")
		c.Env = []string{tokenVar + "=" + fmt.Sprint("tok-", i)}
		if err := c.Start(); err != nil {
			return nil, err
		}
		cmds = append(cmds, c)
		id, err := p.IdentifyStarted(context.Background(), c.Process.Pid)
		if err != nil {
			return nil, err
		}
		sessions = append(sessions, leasestore.Session{ID: fmt.Sprint(i), Lease: leasestore.Lease{Claim: leasestore.ClaimLive, Owner: &id}})
		pids = append(pids, c.Process.Pid)
	}
	var ours, scan []time.Duration
	for range rounds {
		start := time.Now()
		p.ProbeAll(context.Background(), sessions)
		ours = append(ours, time.Since(start))
		start = time.Now()
		for _, pid := range pids {
			b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
			if i := strings.LastIndexByte(string(b), ')'); i > 0 {
				f := strings.Fields(string(b[i+2:]))
				_, _ = strconv.ParseUint(f[19], 10, 64)
			}
		}
		scan = append(scan, time.Since(start))
	}
	ratio := float64(median(ours)) / float64(median(scan))
	return []row{{Name: fmt.Sprintf("batch probe of %d owners", owners), Value: ms(median(ours)), Baseline: ms(median(scan)) + " hand-written /proc scan",
		Ratio: fmt.Sprintf("%.2f×", ratio), Target: "≤ 1.5×", Verdict: verdict(ratio <= 1.5)}}, nil
}

func rssOf(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// benchRSS: a host process of its own (this program re-executed, so no
// other benchmark's garbage counts) with live sessions, and its plugins;
// beside a process holding as many bare go-plugin clients of the test
// fixture (a plugin without the SDK), and that fixture's own RSS.
func benchRSS(work, scripted, fixture string, sessions int) ([]row, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	measure := func(mode, plugin string) (proc, per int64, err error) {
		out, err := exec.Command(self, "-rss-child", fmt.Sprintf("%s,%s,%d", mode, plugin, sessions)).Output()
		if err != nil {
			return 0, 0, fmt.Errorf("%s RSS child: %w", mode, err)
		}
		if _, err := fmt.Sscanf(string(out), "%d %d", &proc, &per); err != nil {
			return 0, 0, fmt.Errorf("%s RSS child printed %q: %w", mode, out, err)
		}
		return proc, per, nil
	}
	hostRSS, per, err := measure("host", scripted)
	if err != nil {
		return nil, err
	}
	bareRSS, barePer, err := measure("bare", fixture)
	if err != nil {
		return nil, err
	}
	return []row{
		{Name: fmt.Sprintf("host RSS with %d live sessions", sessions), Value: mib(hostRSS),
			Baseline: mib(bareRSS) + fmt.Sprintf(" a process holding %d bare go-plugin clients", sessions),
			Ratio:    fmt.Sprintf("%.2f×", float64(hostRSS)/float64(bareRSS)), Target: "≤ 64 MiB", Verdict: verdict(hostRSS <= 64<<20)},
		{Name: "plugin RSS (median, scripted plugin)", Value: mib(per), Baseline: mib(barePer) + " plugin without the SDK",
			Ratio: fmt.Sprintf("%.2f×", float64(per)/float64(barePer)), Target: "≤ 20 MiB", Verdict: verdict(per <= 20<<20)},
	}, nil
}

// measureRSS is the child of benchRSS. In host mode it opens a host,
// starts the sessions and runs a short turn in each; in bare mode it starts
// as many go-plugin clients of the plugin and makes one RPC on each. It
// prints its own RSS and the median plugin RSS in bytes.
func measureRSS(arg string) error {
	parts := strings.Split(arg, ",")
	if len(parts) != 3 {
		return fmt.Errorf("-rss-child wants MODE,PLUGIN,SESSIONS, got %q", arg)
	}
	mode, plug := parts[0], parts[1]
	sessions, err := strconv.Atoi(parts[2])
	if err != nil {
		return fmt.Errorf("-rss-child: %w", err)
	}
	var pluginRSS []time.Duration // bytes, sorted as durations for median()
	switch mode {
	case "host":
		work, err := os.MkdirTemp("", "ahb-rss-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(work)
		h, dir, err := openHost(work, "rss", plug)
		if err != nil {
			return err
		}
		defer h.Shutdown(context.Background())
		for i := range sessions {
			s, err := h.StartSession(context.Background(), host.SessionRequest{ID: fmt.Sprint("m", i), Agent: "scripted", Workspace: dir})
			if err != nil {
				return err
			}
			if _, err := s.Prompt(context.Background(), "count 10"); err != nil {
				return err
			}
			pluginRSS = append(pluginRSS, time.Duration(rssOf(s.PID())))
		}
	case "bare":
		for range sessions {
			client, _, err := bareStart(plug)
			if err != nil {
				return err
			}
			defer client.Kill()
			pluginRSS = append(pluginRSS, time.Duration(rssOf(client.ReattachConfig().Pid)))
		}
	default:
		return fmt.Errorf("-rss-child: unknown mode %q", mode)
	}
	runtime.GC()
	debug.FreeOSMemory()
	fmt.Println(rssOf(os.Getpid()), int64(median(pluginRSS)))
	return nil
}

// bareStart is the baseline start: go-plugin starts the plugin, and the
// client makes its first RPC.
func bareStart(plug string) (*plugin.Client, *pluginclient.Client, error) {
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig: wire.Handshake(), VersionedPlugins: wire.PluginSets(nil),
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC}, Cmd: exec.Command(plug), Logger: hclog.NewNullLogger(),
	})
	rpc, err := client.Client()
	if err != nil {
		client.Kill()
		return nil, nil, err
	}
	agent, err := pluginclient.Dispense(rpc, client.NegotiatedVersion())
	if err != nil {
		client.Kill()
		return nil, nil, err
	}
	if _, err := agent.Identify(context.Background()); err != nil {
		client.Kill()
		return nil, nil, err
	}
	return client, agent, nil
}

// fsyncLatencies writes and syncs n records of 200 bytes one at a time in
// dir and returns how long each took: the durable step every update takes
// before a client may see it.
func fsyncLatencies(dir string, n int) ([]time.Duration, error) {
	f, err := os.Create(filepath.Join(dir, "raw-latency"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	record := make([]byte, 200)
	out := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		if _, err := f.Write(record); err != nil {
			return nil, err
		}
		if err := f.Sync(); err != nil {
			return nil, err
		}
		out = append(out, time.Since(start))
	}
	return out, nil
}

// benchLatency: a client subscribed through the local API receives each
// update; latency is its arrival minus the time the plugin produced it.
func benchLatency(work, scripted string, updates int) ([]row, error) {
	h, dir, err := openHost(work, "latency", scripted)
	if err != nil {
		return nil, err
	}
	defer h.Shutdown(context.Background())
	sock := filepath.Join(dir, "api.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	srvDone := make(chan error, 1)
	go func() { srvDone <- (&localapi.Server{Host: h}).Serve(ctx, ln) }()
	defer func() { cancel(); <-srvDone }()

	s, err := h.StartSession(context.Background(), host.SessionRequest{ID: "lat", Agent: "scripted", Workspace: dir})
	if err != nil {
		return nil, err
	}
	conn, err := net.Dial("unix", sock)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	from, _ := h.Store().LastSeq(context.Background(), "lat")
	req, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": api.MethodSubscribe, "params": api.Params{SessionID: "lat", FromSeq: from + 1}})
	if _, err := conn.Write(append(req, '\n')); err != nil {
		return nil, err
	}
	measure := func(prompt string, n int) (lat []time.Duration, rate float64, err error) {
		got := make(chan struct{})
		var first, last time.Time
		go func() {
			defer close(got)
			sc := bufio.NewScanner(conn)
			sc.Buffer(make([]byte, 1<<20), 16<<20)
			seen := 0
			for sc.Scan() {
				now := time.Now()
				var m struct {
					Method string           `json:"method"`
					Params api.JournalEntry `json:"params"`
				}
				if json.Unmarshal(sc.Bytes(), &m) != nil || m.Method != api.MethodJournal || m.Params.Kind != string(leasestore.KindUpdate) {
					continue
				}
				r, err := journal.DecodePayload(leasestore.KindUpdate, m.Params.Payload)
				if err != nil {
					continue
				}
				rec := r.(*journal.Update)
				if rec.PluginTime == 0 {
					continue
				}
				if seen == 0 {
					first = now
				}
				last = now
				lat = append(lat, now.Sub(time.Unix(0, rec.PluginTime)))
				seen++
				if seen == n {
					return
				}
			}
		}()
		if _, err := s.Prompt(context.Background(), prompt); err != nil {
			return nil, 0, err
		}
		select {
		case <-got:
		case <-time.After(2 * time.Minute):
			return nil, 0, fmt.Errorf("the subscriber did not receive %d updates", n)
		}
		return lat, float64(n-1) / last.Sub(first).Seconds(), nil
	}
	lat, _, err := measure(fmt.Sprintf("count %d 1ms", updates), updates)
	if err != nil {
		return nil, err
	}
	p50, p99 := percentile(lat, 0.50), percentile(lat, 0.99)
	_, rate, err := measure(fmt.Sprintf("count %d", updates*3), updates*3)
	if err != nil {
		return nil, err
	}
	// The baseline: every update is durable before a client sees it, so
	// one write+fsync of a record bounds the latency from below.
	raw, err := fsyncLatencies(dir, updates/3)
	if err != nil {
		return nil, err
	}
	r50, r99 := percentile(raw, 0.50), percentile(raw, 0.99)
	return []row{
		{Name: "update latency plugin → API client at ~1,000/s, p50", Value: ms(p50), Baseline: ms(r50) + " one write+fsync, p50",
			Ratio: fmt.Sprintf("%.2f×", float64(p50)/float64(r50)), Target: "≤ 2 ms", Verdict: verdict(p50 <= 2*time.Millisecond)},
		{Name: "update latency plugin → API client at ~1,000/s, p99", Value: ms(p99), Baseline: ms(r99) + " one write+fsync, p99",
			Ratio: fmt.Sprintf("%.2f×", float64(p99)/float64(r99)), Target: "≤ 10 ms", Verdict: verdict(p99 <= 10*time.Millisecond)},
		{Name: "sustained updates to an API client", Value: fmt.Sprintf("%.0f updates/s", rate),
			Baseline: fmt.Sprintf("%.0f records/s raw write+fsync", float64(time.Second)/float64(r50)),
			Ratio:    fmt.Sprintf("%.1f×", rate*float64(r50)/float64(time.Second)), Target: "–", Verdict: "–"},
	}, nil
}

// startProfiles starts a CPU profile and the block profile of this process
// when dir is set, and returns what writes them as dir/NAME.cpu.pprof and
// dir/NAME.block.pprof (read them with go tool pprof). The block profile
// records every blocking event (rate 1), so it says where the goroutines of
// the measured part waited: syncs, RPCs, locks.
func startProfiles(dir, name string) (stop func() error, err error) {
	if dir == "" {
		return func() error { return nil }, nil
	}
	cpu, err := os.Create(filepath.Join(dir, name+".cpu.pprof"))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(cpu); err != nil {
		_ = cpu.Close()
		return nil, err
	}
	runtime.SetBlockProfileRate(1)
	return func() error {
		pprof.StopCPUProfile()
		runtime.SetBlockProfileRate(0)
		errs := []error{cpu.Close()}
		block, err := os.Create(filepath.Join(dir, name+".block.pprof"))
		if err != nil {
			return errors.Join(append(errs, err)...)
		}
		errs = append(errs, pprof.Lookup("block").WriteTo(block, 0), block.Close())
		return errors.Join(errs...)
	}, nil
}
