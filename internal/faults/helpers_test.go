package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/internal/logtest"
	"github.com/agenthost/agenthost/leasestore"
	"github.com/agenthost/agenthost/leasestore/badgerstore"
)

// reports collects what a host sends to Config.OnError.
type reports struct {
	mu   sync.Mutex
	errs []error
}

func (r *reports) add(scope string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Errorf("%s: %w", scope, err))
}

// find returns the first report that matches target, or nil.
func (r *reports) find(target error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, err := range r.errs {
		if errors.Is(err, target) {
			return err
		}
	}
	return nil
}

// config is a host over stateDir with the fixture and scripted plugins.
func config(t *testing.T, stateDir string, r *reports) host.Config {
	cfg := host.Config{
		StateDir: stateDir,
		Agents: map[string]host.AgentPlugin{
			"fixture":  {Path: bins.fixture},
			"scripted": {Path: bins.scripted},
		},
		StartupTimeout: 30 * time.Second, StopTimeout: 2 * time.Second, ReattachTimeout: 10 * time.Second,
		Logger: logtest.New(t),
	}
	if r != nil {
		cfg.OnError = r.add
	}
	return cfg
}

// openOnBadger opens a host on cfg over a Badger store in its state
// directory, logging and keeping time as the host does, the way the binary
// wires them.
func openOnBadger(ctx context.Context, cfg host.Config) (*host.Host, error) {
	opts := badgerstore.Options{Now: cfg.Now}
	if cfg.Logger != nil {
		opts.Logger = cfg.Logger.Named("store")
	}
	store, err := badgerstore.Open(ctx, cfg.StateDir, opts)
	if err != nil {
		return nil, err
	}
	cfg.Store = store
	return host.Open(ctx, cfg)
}

func openHost(t *testing.T, cfg host.Config) *host.Host {
	t.Helper()
	h, err := openOnBadger(context.Background(), cfg)
	if err != nil {
		t.Fatalf("open host: %v", err)
	}
	t.Cleanup(func() {
		if err := h.Shutdown(context.Background()); err != nil {
			t.Errorf("shut the host down: %v", err)
		}
		noChildrenLeft(t)
	})
	return h
}

// noChildrenLeft fails the test if a process this test process started
// (plugins are children of the host, which runs in-process) is still
// running a few seconds after its host shut down.
func noChildrenLeft(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		kids := children(t)
		if len(kids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, pid := range kids {
				t.Errorf("process %d (%s) outlived its host's shutdown", pid, cmdline(pid))
			}
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// journal reads a session's whole journal.
func journal(t *testing.T, s leasestore.Store, id string) []leasestore.Entry {
	t.Helper()
	var out []leasestore.Entry
	if err := s.Replay(context.Background(), id, 1, func(e leasestore.Entry) error {
		out = append(out, e)
		return nil
	}); err != nil {
		t.Fatalf("replay %q: %v", id, err)
	}
	return out
}

// pluginSeqs returns the plugin sequence numbers the journal recorded
// (updates, and the turn ends the plugin streamed), in journal order.
func pluginSeqs(t *testing.T, es []leasestore.Entry) []uint64 {
	t.Helper()
	var seqs []uint64
	for _, e := range es {
		var rec struct {
			PluginSeq uint64 `json:"pluginSeq"`
		}
		switch e.Kind {
		case leasestore.KindUpdate, leasestore.KindStop:
			if err := json.Unmarshal(e.Payload, &rec); err != nil {
				t.Fatalf("journal entry %d: %v", e.Seq, err)
			}
		}
		// A stop the host wrote itself (a prompt never dispatched) has no
		// plugin seq.
		if rec.PluginSeq > 0 {
			seqs = append(seqs, rec.PluginSeq)
		}
	}
	return seqs
}

// checkOnceInOrder fails unless seqs is exactly from, from+1, …, to: every
// plugin update journaled, none twice, none reordered.
func checkOnceInOrder(t *testing.T, seqs []uint64, from, to uint64) {
	t.Helper()
	if uint64(len(seqs)) != to-from+1 {
		t.Fatalf("journal holds %d updates, want %d (plugin seqs %d..%d)", len(seqs), to-from+1, from, to)
	}
	for i, s := range seqs {
		if s != from+uint64(i) {
			t.Fatalf("journal update #%d has plugin seq %d, want %d: an update was lost, repeated or reordered", i, s, from+uint64(i))
		}
	}
}

// gone waits until pid no longer names a live process (a zombie counts as
// gone: it runs nothing) and fails if it still does after d.
func gone(t *testing.T, pid int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if !running(pid) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d (%s) still runs", pid, cmdline(pid))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func running(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

func cmdline(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// children lists this process's live child processes. TestMain makes the
// test process a child subreaper, so a plugin's orphaned descendants (a
// CLI's grandchildren, say) are counted here too once their parent died.
func children(t *testing.T) []int {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatalf("list this process's threads: %v", err)
	}
	var pids []int
	for _, task := range tasks {
		b, err := os.ReadFile(filepath.Join("/proc/self/task", task.Name(), "children"))
		if err != nil {
			if task.Name() == strconv.Itoa(os.Getpid()) {
				t.Fatalf("cannot count child processes: %v", err)
			}
			continue // a thread that ended meanwhile
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && running(pid) {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}
