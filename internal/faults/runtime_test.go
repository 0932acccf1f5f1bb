package faults

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/leasestore"
	"github.com/agenthost/agenthost/leasestore/badgerstore"
)

// A plugin streams updates as fast as it can produce them, far faster than
// the disk syncs: group commit absorbs it, every update is journaled once
// and in order, and the session answers the next prompt.
func TestPluginFloodingUpdatesLosesNothing(t *testing.T) {
	h := openHost(t, config(t, t.TempDir(), nil))
	const sessions, per = 4, 25000
	injected(t, "%d plugins each stream %d updates back to back, with no pause between them", sessions, per)
	ws := t.TempDir()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, sessions)
	for i := range sessions {
		wg.Go(func() {
			id := fmt.Sprint("flood-", i)
			s, err := h.StartSession(ctxFor(t, time.Minute), host.SessionRequest{ID: id, Agent: "scripted", Workspace: ws})
			if err != nil {
				errs[i] = err
				return
			}
			res, err := s.Prompt(ctxFor(t, 5*time.Minute), fmt.Sprint("count ", per))
			if err == nil && res.StopReason != "end_turn" {
				err = fmt.Errorf("turn ended %+v", res)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("session %d: %v", i, err)
		}
	}
	for i := range sessions {
		id := fmt.Sprint("flood-", i)
		checkOnceInOrder(t, pluginSeqs(t, journal(t, h.Store(), id)), 1, per+1) // the updates and the turn's end
		s, _ := h.Session(id)
		if res, err := s.Prompt(ctxFor(t, time.Minute), "echo still here"); err != nil || res.StopReason != "end_turn" {
			t.Fatalf("session %s after the flood: %+v, %v", id, res, err)
		}
	}
	held(t, "%d updates journaled once each, in order, in %v (%.0f/s); every session answers afterwards",
		sessions*per, elapsed.Round(time.Millisecond), float64(sessions*per)/elapsed.Seconds())
}

// The wall clock is stepped back a day between two runs of the host (the
// clock is injected through Config.Now: stepping the machine's real clock
// would disturb every other process on it). Nothing is decided by time: the
// surviving plugin is readopted, journal sequence numbers go on without a
// reuse or a gap, and the entries simply carry earlier times.
func TestClockSteppedBackwardsBetweenRuns(t *testing.T) {
	dir := t.TempDir()
	cfg := config(t, dir, nil)
	h, err := openOnBadger(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	s, err := h.StartSession(ctxFor(t, time.Minute), host.SessionRequest{ID: "clock", Agent: "scripted", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Prompt(ctxFor(t, time.Minute), "count 5"); err != nil {
		t.Fatal(err)
	}
	fence1 := s.Fence()
	if err := h.Close(context.Background()); err != nil { // detach: the plugin lives on
		t.Fatal(err)
	}
	before := journalOfClosedHost(t, dir, "clock")

	const step = 24 * time.Hour
	injected(t, "the host restarts with its wall clock %v behind the previous run's", step)
	cfg.Now = func() time.Time { return time.Now().Add(-step) }
	h2 := openHost(t, cfg)
	st, err := h2.Status(context.Background())
	if err != nil || st.Decided[host.ActionReadopted] != 1 {
		t.Fatalf("after the clock step: %+v (%v), want the session readopted", st, err)
	}
	s2, ok := h2.Session("clock")
	if !ok {
		t.Fatal("readopted session not running")
	}
	if _, err := s2.Prompt(ctxFor(t, time.Minute), "count 5"); err != nil {
		t.Fatal(err)
	}
	if s2.Fence() <= fence1 {
		t.Fatalf("fence %d after readoption, want above %d", s2.Fence(), fence1)
	}
	es := journal(t, h2.Store(), "clock")
	for i, e := range es {
		if e.Seq != uint64(i+1) {
			t.Fatalf("journal entry #%d has seq %d: a seq was reused or skipped", i, e.Seq)
		}
	}
	checkOnceInOrder(t, pluginSeqs(t, es), 1, 12) // two turns of 5 updates and an end each
	last := before[len(before)-1]
	newest := es[len(es)-1]
	if !newest.Time.Before(last.Time) {
		t.Fatalf("entry %d written after the step has time %v, not before %v: the injected clock was not used", newest.Seq, newest.Time, last.Time)
	}
	held(t, "readopted at fence %d (was %d); seqs 1..%d without reuse; entry %d is dated %v, before entry %d's %v",
		s2.Fence(), fence1, len(es), newest.Seq, newest.Time.Format(time.RFC3339), last.Seq, last.Time.Format(time.RFC3339))
}

// journalOfClosedHost reads a session's journal from the store of a host
// that has closed, and closes the store again so the next host can open it.
func journalOfClosedHost(t *testing.T, dir, id string) []leasestore.Entry {
	t.Helper()
	s, err := badgerstore.Open(context.Background(), dir, badgerstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	return journal(t, s, id)
}

// Hundreds of sessions are started and stopped in a loop: afterwards the
// host holds as many descriptors and goroutines as before, and no plugin
// process is left.
func TestSessionChurnLeaksNothing(t *testing.T) {
	h := openHost(t, config(t, t.TempDir(), nil))
	ws := t.TempDir()
	// cycle runs in worker goroutines, where t.Fatal must not be called:
	// it returns its error instead.
	cycle := func(i int) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		s, err := h.StartSession(ctx, host.SessionRequest{ID: fmt.Sprint("churn-", i), Agent: "scripted", Workspace: ws})
		if err != nil {
			return fmt.Errorf("start #%d: %w", i, err)
		}
		if _, err := s.Prompt(ctx, "echo hi"); err != nil {
			return fmt.Errorf("prompt #%d: %w", i, err)
		}
		if err := s.Stop(ctx); err != nil {
			return fmt.Errorf("stop #%d: %w", i, err)
		}
		return nil
	}
	// Warm up: lazily created pools and caches are not leaks.
	for i := range 5 {
		if err := cycle(i); err != nil {
			t.Fatal(err)
		}
	}
	fds, goroutines := openFDs(t), settledGoroutines(0)
	const n = 300
	injected(t, "%d sessions started, prompted and stopped, 4 at a time (baseline: %d descriptors, %d goroutines)", n, fds, goroutines)
	var wg sync.WaitGroup
	next := make(chan int)
	errs := make(chan error, n)
	for range 4 {
		wg.Go(func() {
			for i := range next {
				if err := cycle(i); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := 5; i < 5+n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	g := settledGoroutines(goroutines)
	if g > goroutines+2 {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines after the loop, %d before:\n%s", g, goroutines, buf[:runtime.Stack(buf, true)])
	}
	// Descriptors close as the kernel and the runtime get to them; give
	// them a moment before counting.
	var f int
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if f = openFDs(t); f <= fds+2 || time.Now().After(deadline) {
			break
		}
	}
	if f > fds+2 {
		t.Errorf("%d open descriptors after the loop, %d before", f, fds)
	}
	if kids := children(t); len(kids) > 0 {
		for _, pid := range kids {
			t.Errorf("child %d (%s) is still running", pid, cmdline(pid))
		}
	}
	held(t, "after %d sessions: %d descriptors (was %d), %d goroutines (was %d), 0 child processes", n, f, fds, g, goroutines)
}

// settledGoroutines waits up to 15s for the goroutine count to fall to at
// most target, or (target 0) to stop changing for half a second, and
// returns it.
func settledGoroutines(target int) int {
	n, stable := runtime.NumGoroutine(), 0
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline) && (target > 0 || stable < 10); time.Sleep(50 * time.Millisecond) {
		runtime.GC()
		m := runtime.NumGoroutine()
		if target > 0 && m <= target {
			return m
		}
		if m == n {
			stable++
		} else {
			n, stable = m, 0
		}
	}
	return n
}
