// Package leasestoretest is the conformance suite for leasestore.Store.
// Every backend runs it, through the interface only; a backend that passes
// can replace the embedded Badger store without the host noticing.
//
//	func TestConformance(t *testing.T) {
//		leasestoretest.Run(t, func(t *testing.T, cfg leasestoretest.StoreConfig) leasestore.Store {
//			return openMyStore(t, cfg.Dir, cfg.Now)
//		})
//	}
//
// Run closes every store it opened.
package leasestoretest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agenthost/agenthost/leasestore"
)

// StoreConfig is what the suite asks of a store it opens.
type StoreConfig struct {
	// Dir is where the store keeps its durable state: a new, empty
	// directory the first time a test names it. Opening the same Dir again
	// after the store that used it closed is a restart: the new store must
	// hold everything the closed one acknowledged. (A backend that keeps
	// its state elsewhere uses Dir as the name of that state.)
	Dir string
	// Now, when not nil, is the clock the store must stamp entry times,
	// record times and evidence with. Nil: the store's own.
	Now func() time.Time
}

// Factory opens a store of the backend under test as cfg says, and fails t
// if it cannot.
type Factory func(t *testing.T, cfg StoreConfig) leasestore.Store

// Run runs every conformance test against stores made by open, each in its
// own subtest with its own state.
func Run(t *testing.T, open Factory) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s leasestore.Store)
	}{
		{"CreateGet", testCreateGet},
		{"OpaqueSessionIDs", testOpaqueIDs},
		{"InvalidSessionIDs", testInvalidIDs},
		{"Lifecycle", testLifecycle},
		{"ReserveIsCompareAndSwap", testReserveCAS},
		{"CreateAndApplyIsOneStep", testCreateAndApply},
		{"RefusedTransitionLeavesNoTrace", testRefusedNoTrace},
		{"TokenMismatchRefused", testTokenMismatch},
		{"UnreconciledAdmitsOnlyDecisions", testUnreconciled},
		{"LatchLeavesOnlyOnEvidence", testLatch},
		{"PreSpawnProof", testPreSpawn},
		{"HandleChain", testHandleChain},
		{"AppendFenced", testAppendFenced},
		{"AppendRejectsBadEntries", testAppendBadEntries},
		{"ConcurrentAppendsGapless", testConcurrentAppends},
		{"ReplayFromAnySeq", testReplay},
		{"TailFollowsLiveEntries", testTail},
		{"JournalHandle", testJournalHandle},
		{"Delete", testDelete},
		{"DeleteIsNotRacedByReserve", testDeleteRace},
		{"TailEndsWhenTheSessionIsRecreated", testTailRecreated},
		{"BatchJudgesEachMoveOnItsOwn", testBatchEachMove},
		{"BatchOfManySessions", testBatchMany},
		{"BatchAfterCloseRefusesEveryMove", testBatchClosed},
		{"ClosedStoreRefuses", testClosed},
		{"ConcurrentCloses", testConcurrentCloses},
		{"MarkHostUnreconciledFlagsOnlyTheHostsLeases", testMarkHost},
		{"ReservedByLastsAsLongAsTheReservation", testReservedBy},
		{"HostLostEvidenceOnlyThroughATakeover", testHostLostEvidence},
		{"ProviderState", testProviderState},
		{"ProviderStateIsFenced", testProviderStateFenced},
		{"ProviderStateGoesWithTheSession", testProviderStateDeleted},
		{"ConcurrentProviderStatePuts", testProviderStateConcurrent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, opened(t, open, StoreConfig{Dir: t.TempDir()}))
		})
	}
	// These open their stores themselves: with a clock, or again after a
	// restart.
	reopening := []struct {
		name string
		fn   func(t *testing.T, open func(now func() time.Time) leasestore.Store)
	}{
		{"StateSurvivesRestart", testRestart},
		{"FailedJournalCloseIsRetriedByTheNextClose", testCloseRetry},
		{"TimesComeFromTheStoreClock", testClock},
		{"SettingsSurviveRestart", testSettings},
		{"ProviderStateSurvivesRestart", testProviderStateRestart},
	}
	for _, tc := range reopening {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.fn(t, func(now func() time.Time) leasestore.Store {
				return opened(t, open, StoreConfig{Dir: dir, Now: now})
			})
		})
	}
}

// opened opens a store and closes it when the test ends (a store the test
// closed already closes again at once).
func opened(t *testing.T, open Factory, cfg StoreConfig) leasestore.Store {
	t.Helper()
	s := open(t, cfg)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	return s
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Owner returns a process identity carrying token, for committing owners.
func Owner(pid int, token string) leasestore.ProcessIdentity {
	return leasestore.ProcessIdentity{
		HostID: "local", PID: pid, StartTicks: uint64(1000 + pid), BootID: "boot-1",
		SpawnToken: token, InstanceID: fmt.Sprintf("instance-%d", pid),
	}
}

// Live drives a session (created if it does not exist) through reserve,
// commit and prove, as the host does, and returns it live.
func Live(t testing.TB, ctx context.Context, s leasestore.Store, id string) leasestore.Session {
	t.Helper()
	sess, err := s.Get(ctx, id)
	if errors.Is(err, leasestore.ErrNotFound) {
		sess, err = s.Create(ctx, leasestore.SessionSpec{ID: id, Agent: "scripted", Workspace: "/work"})
	}
	must(t, err)
	sess = apply(t, ctx, s, id, leasestore.Reserve{ExpectedFence: sess.Lease.Fence, ClaimKeyID: "key-1"})
	fence := sess.Lease.Fence
	apply(t, ctx, s, id, leasestore.CommitOwner{Fence: fence, Owner: Owner(4242, sess.Lease.ReservedSpawnToken),
		Reattach: &leasestore.Reattach{Network: "unix", Address: "/tmp/plugin.sock", ProtocolVersion: 1}})
	return apply(t, ctx, s, id, leasestore.ProveOwner{Fence: fence, Handle: "handle-" + fmt.Sprint(fence), Origin: leasestore.HandleCreated})
}

// OwnerOn is Owner on host hostID.
func OwnerOn(hostID string, pid int, token string) leasestore.ProcessIdentity {
	o := Owner(pid, token)
	o.HostID = hostID
	return o
}

// LiveOn is Live for a host among several sharing the store: hostID
// reserves the session (Reserve.HostID) and its owner runs there.
func LiveOn(t testing.TB, ctx context.Context, s leasestore.Store, id, hostID string) leasestore.Session {
	t.Helper()
	sess := ReservedOn(t, ctx, s, id, hostID)
	fence := sess.Lease.Fence
	apply(t, ctx, s, id, leasestore.CommitOwner{Fence: fence, Owner: OwnerOn(hostID, 4242, sess.Lease.ReservedSpawnToken)})
	return apply(t, ctx, s, id, leasestore.ProveOwner{Fence: fence, Handle: "handle-" + fmt.Sprint(fence), Origin: leasestore.HandleCreated})
}

// ReservedOn reserves a session (created if it does not exist) for hostID
// and returns the ownerless reservation.
func ReservedOn(t testing.TB, ctx context.Context, s leasestore.Store, id, hostID string) leasestore.Session {
	t.Helper()
	sess, err := s.Get(ctx, id)
	if errors.Is(err, leasestore.ErrNotFound) {
		sess, err = s.Create(ctx, leasestore.SessionSpec{ID: id, Agent: "scripted", Workspace: "/work"})
	}
	must(t, err)
	return apply(t, ctx, s, id, leasestore.Reserve{ExpectedFence: sess.Lease.Fence, ClaimKeyID: "key-1", HostID: hostID})
}

func apply(t testing.TB, ctx context.Context, s leasestore.Store, id string, tr leasestore.Transition) leasestore.Session {
	t.Helper()
	sess, err := s.Apply(ctx, id, tr)
	if err != nil {
		t.Fatalf("%s on %q: %v", tr.Name(), id, err)
	}
	return sess
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantErr(t testing.TB, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("got error %v, want one matching %v", err, target)
	}
}

func entries(t testing.TB, ctx context.Context, s leasestore.Store, id string, from uint64) []leasestore.Entry {
	t.Helper()
	var out []leasestore.Entry
	must(t, s.Replay(ctx, id, from, func(e leasestore.Entry) error { out = append(out, e); return nil }))
	return out
}

func events(t testing.TB, es []leasestore.Entry) []string {
	t.Helper()
	var out []string
	for _, e := range es {
		if e.Kind != leasestore.KindLifecycle && e.Kind != leasestore.KindHandle {
			continue
		}
		var ev leasestore.LifecycleEvent
		if err := json.Unmarshal(e.Payload, &ev); err != nil {
			t.Fatalf("lifecycle payload at seq %d: %v", e.Seq, err)
		}
		out = append(out, ev.Event)
	}
	return out
}

func testCreateGet(t *testing.T, s leasestore.Store) {
	ctx := ctxFor(t)
	created, err := s.Create(ctx, leasestore.SessionSpec{ID: "s1", Agent: "codex", Workspace: "/w", Options: map[string]string{"model": "m"}})
	must(t, err)
	got, err := s.Get(ctx, "s1")
	must(t, err)
	if got.Agent != "codex" || got.Workspace != "/w" || got.Options["model"] != "m" {
		t.Errorf("Get returned %+v", got)
	}
	if got.Lease.Fence != 0 || got.Lease.Claim != leasestore.ClaimReleased || !got.CreatedAt.Equal(created.CreatedAt) {
		t.Errorf("new session lease %+v, created %v", got.Lease, got.CreatedAt)
	}
	_, err = s.Create(ctx, leasestore.SessionSpec{ID: "s1", Agent: "codex"})
	wantErr(t, err, leasestore.ErrExists)
	_, err = s.Get(ctx, "missing")
	wantErr(t, err, leasestore.ErrNotFound)
	_, err = s.Create(ctx, leasestore.SessionSpec{ID: "s2"})
	wantErr(t, err, leasestore.ErrInvalidArgument)

	gen, err := s.Create(ctx, leasestore.SessionSpec{Agent: "claude"})
	must(t, err)
	gen2, err := s.Create(ctx, leasestore.SessionSpec{Agent: "claude"})
	must(t, err)
	if gen.ID == "" || gen.ID == gen2.ID {
		t.Errorf("generated ids %q and %q", gen.ID, gen2.ID)
	}
	// UUIDv7 ids sort by creation time.
	if gen.ID > gen2.ID {
		t.Errorf("generated ids do not sort by creation: %q > %q", gen.ID, gen2.ID)
	}
	list, err := s.List(ctx)
	must(t, err)
	if len(list) != 3 {
		t.Errorf("List returned %d sessions, want 3", len(list))
	}
	if ev := events(t, entries(t, ctx, s, "s1", 0)); !slices.Equal(ev, []string{"created"}) {
		t.Errorf("journal of a new session: %v", ev)
	}
}

// testOpaqueIDs checks that ids containing separators, NUL, and ids that are
// prefixes of each other never share records or journal entries.
func testOpaqueIDs(t *testing.T, s leasestore.Store) {
	ctx := ctxFor(t)
	long := strings.Repeat("x/\x00é", leasestore.MaxSessionIDLen/5)
	ids := []string{"a", "a\x00", "a\x00b", "ab", "a/b", "a/", "/", "\x00", "\x00\x00", "j", "r", "é", "a\xc3\xa9", long, long + "y"}
	for i, id := range ids {
		if _, err := s.Create(ctx, leasestore.SessionSpec{ID: id, Agent: "scripted"}); err != nil {
			t.Fatalf("create %q: %v", id, err)
		}
		Live(t, ctx, s, id)
		for n := 0; n <= i; n++ {
			fence := mustGet(t, ctx, s, id).Lease.Fence
			if _, err := s.Append(ctx, id, fence, leasestore.EntryInput{Kind: leasestore.KindUpdate, Payload: []byte(fmt.Sprintf("%d:%d", i, n))}); err != nil {
				t.Fatalf("append to %q: %v", id, err)
			}
		}
	}
	list, err := s.List(ctx)
	must(t, err)
	var listed []string
	for _, sess := range list {
		listed = append(listed, sess.ID)
	}
	slices.Sort(listed)
	want := slices.Clone(ids)
	slices.Sort(want)
	if !slices.Equal(listed, want) {
		t.Fatalf("List returned %d ids, want the %d created (ids collided or leaked)", len(listed), len(want))
	}
	for i, id := range ids {
		got, err := s.Get(ctx, id)
		must(t, err)
		if got.ID != id {
			t.Errorf("Get(%q) returned id %q", id, got.ID)
		}
		var updates []string
		for _, e := range entries(t, ctx, s, id, 0) {
			if e.Kind == leasestore.KindUpdate {
				updates = append(updates, string(e.Payload))
			}
		}
		if len(updates) != i+1 {
			t.Errorf("session %d has %d updates, want %d: %q", i, len(updates), i+1, updates)
		}
		for n, u := range updates {
			if want := fmt.Sprintf("%d:%d", i, n); u != want {
				t.Errorf("session %d update %d is %q, want %q", i, n, u, want)
			}
		}
	}
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	must(t, err)
	return string(b)
}

func mustGet(t testing.TB, ctx context.Context, s leasestore.Store, id string) leasestore.Session {
	t.Helper()
	sess, err := s.Get(ctx, id)
	must(t, err)
	return sess
}

func testInvalidIDs(t *testing.T, s leasestore.Store) {
	ctx := ctxFor(t)
	for name, id := range map[string]string{
		"invalid UTF-8": "a\xff",
		"too long":      strings.Repeat("x", leasestore.MaxSessionIDLen+1),
	} {
		_, err := s.Create(ctx, leasestore.SessionSpec{ID: id, Agent: "scripted"})
		if !errors.Is(err, leasestore.ErrInvalidArgument) {
			t.Errorf("%s: got %v, want ErrInvalidArgument", name, err)
		}
	}
}

func testLifecycle(t *testing.T, s leasestore.Store) {
	ctx := ctxFor(t)
	_, err := s.Create(ctx, leasestore.SessionSpec{ID: "s", Agent: "scripted"})
	must(t, err)
	sess := Live(t, ctx, s, "s")
	l := sess.Lease
	if l.Fence != 1 || l.Claim != leasestore.ClaimLive || l.Stage != leasestore.StageNone || l.Owner == nil || !l.AdmitsWriter() {
		t.Fatalf("live lease: %+v", l)
	}
	if l.Reattach == nil || l.Reattach.Address != "/tmp/plugin.sock" || l.ClaimKeyID != "key-1" {
		t.Errorf("reattach %+v, claim key %q", l.Reattach, l.ClaimKeyID)
	}
	if len(sess.Handles) != 1 || sess.Handles[0].Fence != 1 || sess.Handle() != "handle-1" {
		t.Errorf("handle chain %+v", sess.Handles)
	}
	if _, err := s.Append(ctx, "s", 1, leasestore.EntryInput{Kind: leasestore.KindPrompt, Payload: []byte(`"hi"`)}); err != nil {
		t.Fatal(err)
	}
	sess = apply(t, ctx, s, "s", leasestore.Release{Fence: 1, Detail: "exit status 0"})
	l = sess.Lease
	if l.Fence != 2 || l.Claim != leasestore.ClaimReleased || l.Owner != nil || l.ReservedSpawnToken != "" || l.Reattach != nil {
		t.Fatalf("released lease: %+v", l)
	}
	if l.DeathEvidence == nil || l.DeathEvidence.Kind != leasestore.EvidenceExitObserved || l.DeathEvidence.Detail != "exit status 0" {
		t.Errorf("release evidence %+v", l.DeathEvidence)
	}
	// The released session stays resumable: its handle chain survives.
	if sess.Handle() != "handle-1" {
		t.Errorf("handle after release: %q", sess.Handle())
	}
	// A second generation resumes at the next fence, under a new handle.
	sess = Live(t, ctx, s, "s")
	if sess.Lease.Fence != 3 || len(sess.Handles) != 2 || sess.Handles[1].Fence != 3 || sess.Handle() != "handle-3" {
		t.Errorf("second generation: fence %d, handles %+v", sess.Lease.Fence, sess.Handles)
	}
	all := entries(t, ctx, s, "s", 0)
	want := []string{"created", "reserved", "owner-committed", "owner-proven", "released",
		"reserved", "owner-committed", "owner-proven"}
	if got := events(t, all); !slices.Equal(got, want) {
		t.Errorf("lifecycle journal:\n got %v\nwant %v", got, want)
	}
	for i, e := range all {
		if e.Seq != uint64(i+1) {
			t.Fatalf("entry %d has seq %d: journal has gaps", i, e.Seq)
		}
	}
}

func testReserveCAS(t *testing.T, s leasestore.Store) {
	ctx := ctxFor(t)
	_, err := s.Create(ctx, leasestore.SessionSpec{ID: "s", Agent: "scripted"})
	must(t, err)
	_, err = s.Apply(ctx, "s", leasestore.Reserve{ExpectedFence: 7})
	var stale *leasestore.StaleFenceError
	if !errors.As(err, &stale) || stale.Current != 0 || stale.Expected != 7 || !errors.Is(err, leasestore.ErrStaleFence) {
		t.Fatalf("reserve at a wrong fence: %v", err)
	}
	const racers = 8
	var wg sync.WaitGroup
	results := make([]error, racers)
	tokens := make([]string, racers)
	for i := range racers {
		wg.Go(func() {
			sess, err := s.Apply(ctx, "s", leasestore.Reserve{ExpectedFence: 0})
			results[i], tokens[i] = err, sess.Lease.ReservedSpawnToken
		})
	}
	wg.Wait()
	won := 0
	for i, err := range results {
		switch {
		case err == nil:
			won++
			if tokens[i] == "" {
				t.Error("the winning reservation has no spawn token")
			}
		case !errors.Is(err, leasestore.ErrStaleFence):
			t.Errorf("a losing reservation failed with %v, want a stale fence", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d of %d concurrent reservations at one fence won, want exactly 1", won, racers)
	}
	sess := mustGet(t, ctx, s, "s")
	_, err = s.Apply(ctx, "s", leasestore.Reserve{ExpectedFence: sess.Lease.Fence})
	wantErr(t, err, leasestore.ErrConflict)
}

// testCreateAndApply: create and reserve in one step, journaled as both; a
// refused transition creates nothing; a taken id is refused.
func testCreateAndApply(t *testing.T, s leasestore.Store) {
	ctx := ctxFor(t)
	sess, err := s.CreateAndApply(ctx, leasestore.SessionSpec{ID: "s", Agent: "scripted"}, leasestore.Reserve{ExpectedFence: 0, ClaimKeyID: "key-1"})
	must(t, err)
	if sess.Lease.Claim != leasestore.ClaimReserved || sess.Lease.Fence != 1 || sess.Lease.ReservedSpawnToken == "" {
		t.Fatalf("created and reserved: %+v", sess.Lease)
	}
	if got := mustGet(t, ctx, s, "s"); got.Lease.Fence != 1 || got.Lease.Claim != leasestore.ClaimReserved {
		t.Fatalf("stored: %+v", got.Lease)
	}
	if got := strings.Join(events(t, entries(t, ctx, s, "s", 0)), ","); got != "created,reserved" {
		t.Fatalf("journal %s, want created,reserved", got)
	}
	_, err = s.CreateAndApply(ctx, leasestore.SessionSpec{ID: "refused", Agent: "scripted"}, leasestore.Reserve{ExpectedFence: 3})
	wantErr(t, err, leasestore.ErrStaleFence)
	if _, err := s.Get(ctx, "refused"); !errors.Is(err, leasestore.ErrNotFound) {
		t.Fatalf("a refused first transition left the session behind: %v", err)
	}
	_, err = s.CreateAndApply(ctx, leasestore.SessionSpec{ID: "s", Agent: "scripted"}, leasestore.Reserve{ExpectedFence: 1})
	wantErr(t, err, leasestore.ErrExists)
}

func testRefusedNoTrace(t *testing.T, s leasestore.Store) {
	ctx := ctxFor(t)
	before := Live(t, ctx, s, "s")
	beforeEntries := entries(t, ctx, s, "s", 0)
	refused := []leasestore.Transition{
		leasestore.Reserve{ExpectedFence: before.Lease.Fence},
		leasestore.Release{Fence: before.Lease.Fence + 1},
		leasestore.Latch{Fence: before.Lease.Fence, Stage: leasestore.StageNone},
		leasestore.Evict{Fence: before.Lease.Fence, Evidence: leasestore.DeathEvidence{Kind: "timeout"}},
		leasestore.ProveOwner{Fence: before.Lease.Fence, Handle: "h2", Origin: leasestore.HandleCreated},
	}
	for _, tr := range refused {
		if _, err := s.Apply(ctx, "s", tr); err == nil {
			t.Errorf("%s was accepted on a live lease", tr.Name())
		}
	}
	after := mustGet(t, ctx, s, "s")
	after.UpdatedAt = before.UpdatedAt
	if a, b := mustJSON(t, after.Lease), mustJSON(t, before.Lease); a != b {
		t.Errorf("refused transitions changed the lease:\nbefore %s\nafter  %s", b, a)
	}
	if n := len(entries(t, ctx, s, "s", 0)); n != len(beforeEntries) {
		t.Errorf("refused transitions wrote %d journal entries", n-len(beforeEntries))
	}
	_, err := s.Apply(ctx, "missing", leasestore.Reserve{})
	wantErr(t, err, leasestore.ErrNotFound)
}

func testTokenMismatch(t *testing.T, s leasestore.Store) {
	ctx := ctxFor(t)
	_, err := s.Create(ctx, leasestore.SessionSpec{ID: "s", Agent: "scripted"})
	must(t, err)
	sess := apply(t, ctx, s, "s", leasestore.Reserve{ExpectedFence: 0})
	_, err = s.Apply(ctx, "s", leasestore.CommitOwner{Fence: sess.Lease.Fence, Owner: Owner(99, "not-the-token")})
	wantErr(t, err, leasestore.ErrTokenMismatch)
	good := Owner(100, sess.Lease.ReservedSpawnToken)
	apply(t, ctx, s, "s", leasestore.CommitOwner{Fence: sess.Lease.Fence, Owner: good})
	// Committing the same process again is a retry; another one is a conflict.
	apply(t, ctx, s, "s", leasestore.CommitOwner{Fence: sess.Lease.Fence, Owner: good})
	_, err = s.Apply(ctx, "s", leasestore.CommitOwner{Fence: sess.Lease.Fence, Owner: Owner(101, sess.Lease.ReservedSpawnToken)})
	wantErr(t, err, leasestore.ErrConflict)
}

func testUnreconciled(t *testing.T, s leasestore.Store) {
	ctx := ctxFor(t)
	live := Live(t, ctx, s, "live")
	_, err := s.Create(ctx, leasestore.SessionSpec{ID: "free", Agent: "scripted"})
	must(t, err)
	n, err := s.MarkAllUnreconciled(ctx)
	must(t, err)
	if n != 2 {
		t.Fatalf("marked %d sessions, want 2", n)
	}
	fence := live.Lease.Fence
	_, err = s.Append(ctx, "live", fence, leasestore.EntryInput{Kind: leasestore.KindUpdate})
	wantErr(t, err, leasestore.ErrReconciling)
	_, err = s.Apply(ctx, "free", leasestore.Reserve{ExpectedFence: 0})
	wantErr(t, err, leasestore.ErrReconciling)
	_, err = s.Apply(ctx, "live", leasestore.Release{Fence: fence})
	wantErr(t, err, leasestore.ErrReconciling)

	// Restart decisions are admitted; each one ends the unreconciled state.
	sess := apply(t, ctx, s, "live", leasestore.Readopt{Fence: fence, Owner: *live.Lease.Owner})
	if sess.Lease.Fence != fence+1 || sess.Lease.Unreconciled || !sess.Lease.AdmitsWriter() {
		t.Fatalf("readopted lease %+v", sess.Lease)
	}
	if _, err := s.Append(ctx, "live", fence, leasestore.EntryInput{Kind: leasestore.KindUpdate}); !errors.Is(err, leasestore.ErrStaleFence) {
		t.Errorf("the old host's fence after readoption: %v, want stale", err)
	}
	if _, err := s.Append(ctx, "live", fence+1, leasestore.EntryInput{Kind: leasestore.KindUpdate}); err != nil {
		t.Errorf("append at the readopted fence: %v", err)
	}
	apply(t, ctx, s, "free", leasestore.Reconciled{Fence: 0})
	apply(t, ctx, s, "free", leasestore.Reserve{ExpectedFence: 0})
}

func testLatch(t *testing.T, s leasestore.Store) {
	ctx := ctxFor(t)
	live := Live(t, ctx, s, "s")
	fence := live.Lease.Fence
	_, err := s.MarkAllUnreconciled(ctx)
	must(t, err)
	sess := apply(t, ctx, s, "s", leasestore.Latch{Fence: fence, Stage: leasestore.StageRecovering, Reason: "start time unreadable"})
	if sess.Lease.Stage != leasestore.StageRecovering || sess.Lease.Fence != fence || sess.Lease.Owner == nil {
		t.Fatalf("latched lease %+v", sess.Lease)
	}
	_, err = s.Apply(ctx, "s", leasestore.Reserve{ExpectedFence: fence})
	wantErr(t, err, leasestore.ErrOwnershipUnknown)
	_, err = s.Append(ctx, "s", fence, leasestore.EntryInput{Kind: leasestore.KindUpdate})
	wantErr(t, err, leasestore.ErrOwnershipUnknown)
	_, err = s.Apply(ctx, "s", leasestore.Release{Fence: fence})
	wantErr(t, err, leasestore.ErrOwnershipUnknown)
	// Evidence, and only evidence, unlatches.
	sess = apply(t, ctx, s, "s", leasestore.Evict{Fence: fence, Evidence: leasestore.DeathEvidence{Kind: leasestore.EvidencePIDAbsent, Detail: "pid 4242 absent"}})
	if sess.Lease.Claim != leasestore.ClaimReleased || sess.Lease.Fence != fence+1 || sess.Lease.DeathEvidence.Kind != leasestore.EvidencePIDAbsent {
		t.Fatalf("evicted lease %+v", sess.Lease)
	}
	apply(t, ctx, s, "s", leasestore.Reserve{ExpectedFence: fence + 1})
}

func testPreSpawn(t *testing.T, s leasestore.Store) {
	ctx := ctxFor(t)
	_, err := s.Create(ctx, leasestore.SessionSpec{ID: "s", Agent: "scripted"})
	must(t, err)
	sess := apply(t, ctx, s, "s", leasestore.Reserve{ExpectedFence: 0})
	fence := sess.Lease.Fence
	// Without proof, an ownerless reservation cannot be released: the
	// failure may have lost a race with a spawn.
	_, err = s.Apply(ctx, "s", leasestore.Release{Fence: fence})
	wantErr(t, err, leasestore.ErrOwnershipUnknown)
	sess = apply(t, ctx, s, "s", leasestore.PreSpawnFailure{Fence: fence, Reason: "plugin binary not found"})
	if sess.Lease.ProcesslessAt.IsZero() {
		t.Fatal("pre-spawn failure recorded no proof")
	}
	// The proof is final: no process can be committed as the owner
	// afterwards, so the proof cannot be wrong when the release relies on it.
	_, err = s.Apply(ctx, "s", leasestore.CommitOwner{Fence: fence, Owner: Owner(7, sess.Lease.ReservedSpawnToken)})
	wantErr(t, err, leasestore.ErrInvalidTransition)
	sess = apply(t, ctx, s, "s", leasestore.Release{Fence: fence, Detail: "binary missing"})
	if ev := sess.Lease.DeathEvidence; ev == nil || ev.Kind != leasestore.EvidencePIDAbsent {
		t.Errorf("processless release evidence %+v", ev)
	}
}

func testHandleChain(t *testing.T, s leasestore.Store) {
	ctx := ctxFor(t)
	sess := Live(t, ctx, s, "s")
	fence := sess.Lease.Fence
	sess = apply(t, ctx, s, "s", leasestore.RecordHandle{Fence: fence, Handle: "handle-1", Origin: leasestore.HandleResumed})
	if len(sess.Handles) != 1 {
		t.Fatalf("recording the current handle again added a link: %+v", sess.Handles)
	}
	sess = apply(t, ctx, s, "s", leasestore.RecordHandle{Fence: fence, Handle: "forked", Origin: leasestore.HandleForked})
	if len(sess.Handles) != 2 || sess.Handle() != "forked" || sess.Handles[1].Origin != leasestore.HandleForked {
		t.Fatalf("handle chain %+v", sess.Handles)
	}
	_, err := s.Apply(ctx, "s", leasestore.RecordHandle{Fence: fence, Handle: "", Origin: leasestore.HandleForked})
	wantErr(t, err, leasestore.ErrInvalidArgument)
	last := entries(t, ctx, s, "s", 0)
	if e := last[len(last)-1]; e.Kind != leasestore.KindHandle {
		t.Errorf("a handle change was journaled as %q", e.Kind)
	}
}

func testAppendFenced(t *testing.T, s leasestore.Store) {
	ctx := ctxFor(t)
	_, err := s.Create(ctx, leasestore.SessionSpec{ID: "s", Agent: "scripted"})
	must(t, err)
	_, err = s.Append(ctx, "s", 0, leasestore.EntryInput{Kind: leasestore.KindUpdate})
	wantErr(t, err, leasestore.ErrInvalidTransition)
	sess := Live(t, ctx, s, "s")
	fence := sess.Lease.Fence
	got, err := s.Append(ctx, "s", fence,
		leasestore.EntryInput{Kind: leasestore.KindPrompt, Payload: []byte("p")},
		leasestore.EntryInput{Kind: leasestore.KindUpdate, Payload: []byte("u")})
	must(t, err)
	if len(got) != 2 || got[1].Seq != got[0].Seq+1 || got[0].Fence != fence || got[0].Time.IsZero() {
		t.Fatalf("appended %+v", got)
	}
	_, err = s.Append(ctx, "s", fence-1, leasestore.EntryInput{Kind: leasestore.KindUpdate})
	wantErr(t, err, leasestore.ErrStaleFence)
	_, err = s.Append(ctx, "missing", 1, leasestore.EntryInput{Kind: leasestore.KindUpdate})
	wantErr(t, err, leasestore.ErrNotFound)
	apply(t, ctx, s, "s", leasestore.Release{Fence: fence})
	_, err = s.Append(ctx, "s", fence, leasestore.EntryInput{Kind: leasestore.KindUpdate})
	wantErr(t, err, leasestore.ErrStaleFence)
	_, err = s.Append(ctx, "s", fence+1, leasestore.EntryInput{Kind: leasestore.KindUpdate})
	wantErr(t, err, leasestore.ErrInvalidTransition)
}

func testAppendBadEntries(t *testing.T, s leasestore.Store) {
	ctx := ctxFor(t)
	sess := Live(t, ctx, s, "s")
	fence := sess.Lease.Fence
	before, err := s.LastSeq(ctx, "s")
	must(t, err)
	_, err = s.Append(ctx, "s", fence, leasestore.EntryInput{Kind: "gossip"})
	wantErr(t, err, leasestore.ErrInvalidArgument)
	_, err = s.Append(ctx, "s", fence,
		leasestore.EntryInput{Kind: leasestore.KindUpdate, Payload: []byte("fine")},
		leasestore.EntryInput{Kind: leasestore.KindUpdate, Payload: make([]byte, leasestore.MaxPayloadSize+1)})
	wantErr(t, err, leasestore.ErrInvalidArgument)
	after, err := s.LastSeq(ctx, "s")
	must(t, err)
	if after != before {
		t.Errorf("a refused append wrote %d entries", after-before)
	}
	big := bytes.Repeat([]byte("z"), leasestore.MaxPayloadSize)
	got, err := s.Append(ctx, "s", fence, leasestore.EntryInput{Kind: leasestore.KindUpdate, Payload: big})
	must(t, err)
	back := entries(t, ctx, s, "s", got[0].Seq)
	if len(back) != 1 || !bytes.Equal(back[0].Payload, big) {
		t.Errorf("the largest allowed payload did not round-trip")
	}
}

func testConcurrentAppends(t *testing.T, s leasestore.Store) {
	ctx := ctxFor(t)
	const sessions, writers, per = 3, 4, 25
	for i := range sessions {
		Live(t, ctx, s, fmt.Sprintf("s%d", i))
	}
	start := make(map[string]uint64)
	for i := range sessions {
		id := fmt.Sprintf("s%d", i)
		last, err := s.LastSeq(ctx, id)
		must(t, err)
		start[id] = last
	}
	var wg sync.WaitGroup
	errs := make(chan error, sessions*writers)
	for i := range sessions {
		id := fmt.Sprintf("s%d", i)
		fence := mustGet(t, ctx, s, id).Lease.Fence
		for w := range writers {
			wg.Go(func() {
				for n := range per {
					payload := []byte(fmt.Sprintf("w%d-%d", w, n))
					if _, err := s.Append(ctx, id, fence, leasestore.EntryInput{Kind: leasestore.KindUpdate, Payload: payload}); err != nil {
						errs <- err
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for id, first := range start {
		got := entries(t, ctx, s, id, first+1)
		if len(got) != writers*per {
			t.Fatalf("%s: %d entries after concurrent appends, want %d", id, len(got), writers*per)
		}
		seen := map[string]bool{}
		next := map[int]int{}
		for i, e := range got {
			if e.Seq != first+1+uint64(i) {
				t.Fatalf("%s: entry %d has seq %d: gap or duplicate", id, i, e.Seq)
			}
			p := string(e.Payload)
			if seen[p] {
				t.Fatalf("%s: payload %q journaled twice", id, p)
			}
			seen[p] = true
			var w, n int
			if _, err := fmt.Sscanf(p, "w%d-%d", &w, &n); err != nil {
				t.Fatalf("%s: payload %q: %v", id, p, err)
			}
			// One writer's appends keep their order.
			if n != next[w] {
				t.Fatalf("%s: writer %d's entry %d arrived where %d was due", id, w, n, next[w])
			}
			next[w]++
		}
		last, err := s.LastSeq(ctx, id)
		must(t, err)
		if last != first+writers*per {
			t.Errorf("%s: LastSeq %d, want %d", id, last, first+writers*per)
		}
	}
}

func testReplay(t *testing.T, s leasestore.Store) {
	ctx := ctxFor(t)
	sess := Live(t, ctx, s, "s")
	const n = 600 // more than one read chunk
	in := make([]leasestore.EntryInput, n)
	for i := range in {
		in[i] = leasestore.EntryInput{Kind: leasestore.KindUpdate, Payload: []byte(fmt.Sprint(i))}
	}
	got, err := s.Append(ctx, "s", sess.Lease.Fence, in...)
	must(t, err)
	last := got[n-1].Seq
	for _, from := range []uint64{0, 1, got[0].Seq, got[300].Seq, last, last + 1, last + 1000} {
		es := entries(t, ctx, s, "s", from)
		first := max(from, 1)
		want := 0
		if first <= last {
			want = int(last - first + 1)
		}
		if len(es) != want {
			t.Errorf("replay from %d: %d entries, want %d", from, len(es), want)
			continue
		}
		for i, e := range es {
			if e.Seq != first+uint64(i) {
				t.Fatalf("replay from %d: entry %d has seq %d", from, i, e.Seq)
			}
		}
	}
	stop := errors.New("stop")
	count := 0
	err = s.Replay(ctx, "s", 0, func(leasestore.Entry) error { count++; return stopIf(count == 3, stop) })
	if !errors.Is(err, stop) || count != 3 {
		t.Errorf("replay did not stop at the callback's error: %v after %d", err, count)
	}
	err = s.Replay(ctx, "missing", 0, func(leasestore.Entry) error { return nil })
	wantErr(t, err, leasestore.ErrNotFound)
}

func stopIf(cond bool, err error) error {
	if cond {
		return err
	}
	return nil
}

func testTail(t *testing.T, s leasestore.Store) {
	ctx := ctxFor(t)
	sess := Live(t, ctx, s, "s")
	fence := sess.Lease.Fence
	before, err := s.LastSeq(ctx, "s")
	must(t, err)

	tailCtx, cancel := context.WithCancel(ctx)
	got := make(chan leasestore.Entry, 1024)
	done := make(chan error, 1)
	go func() {
		done <- s.Tail(tailCtx, "s", before-1, func(e leasestore.Entry) error { got <- e; return nil })
	}()
	const n = 300
	go func() {
		for i := range n {
			if _, err := s.Append(ctx, "s", fence, leasestore.EntryInput{Kind: leasestore.KindUpdate, Payload: []byte(fmt.Sprint(i))}); err != nil {
				t.Errorf("append %d: %v", i, err)
				return
			}
		}
	}()
	want := before - 1
	for want <= before+n {
		select {
		case e := <-got:
			if e.Seq != want {
				t.Fatalf("tail delivered seq %d, want %d", e.Seq, want)
			}
			want++
		case <-time.After(20 * time.Second):
			t.Fatalf("tail stalled waiting for seq %d", want)
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("tail ended with %v, want context.Canceled", err)
	}
	select {
	case e := <-got:
		t.Errorf("tail delivered seq %d twice or beyond the end", e.Seq)
	default:
	}

	// A tail on a deleted session ends instead of waiting forever.
	apply(t, ctx, s, "s", leasestore.Release{Fence: fence})
	tailDone := make(chan error, 1)
	go func() {
		tailDone <- s.Tail(ctx, "s", before+n+100, func(leasestore.Entry) error { return nil })
	}()
	must(t, s.Delete(ctx, "s", fence+1))
	select {
	case err := <-tailDone:
		wantErr(t, err, leasestore.ErrNotFound)
	case <-time.After(20 * time.Second):
		t.Fatal("tail of a deleted session did not end")
	}
}

func testDelete(t *testing.T, s leasestore.Store) {
	ctx := ctxFor(t)
	sess := Live(t, ctx, s, "s")
	fence := sess.Lease.Fence
	Live(t, ctx, s, "s-other")
	in := make([]leasestore.EntryInput, 2000)
	for i := range in {
		in[i] = leasestore.EntryInput{Kind: leasestore.KindUpdate, Payload: []byte("x")}
	}
	_, err := s.Append(ctx, "s", fence, in...)
	must(t, err)
	wantErr(t, s.Delete(ctx, "s", fence), leasestore.ErrConflict)
	apply(t, ctx, s, "s", leasestore.Release{Fence: fence})
	wantErr(t, s.Delete(ctx, "s", fence), leasestore.ErrStaleFence)
	must(t, s.Delete(ctx, "s", fence+1))
	_, err = s.Get(ctx, "s")
	wantErr(t, err, leasestore.ErrNotFound)
	wantErr(t, s.Replay(ctx, "s", 0, func(leasestore.Entry) error { return nil }), leasestore.ErrNotFound)
	wantErr(t, s.Delete(ctx, "s", fence+1), leasestore.ErrNotFound)
	// The id is free again, with a fresh journal; the other session is intact.
	_, err = s.Create(ctx, leasestore.SessionSpec{ID: "s", Agent: "scripted"})
	must(t, err)
	if es := entries(t, ctx, s, "s", 0); len(es) != 1 || es[0].Seq != 1 {
		t.Errorf("a recreated session's journal holds %d entries", len(es))
	}
	if _, err := s.Get(ctx, "s-other"); err != nil {
		t.Errorf("deleting s touched s-other: %v", err)
	}
}

// testDeleteRace checks that a Delete, however many steps it takes to
// remove a long journal, cannot be overtaken by a Reserve that would leave
// the session live with part of its journal gone. A Reserve that comes
// before the Delete may win (the Delete is then refused and the journal
// kept whole); one that comes once the Delete has begun must be refused.
func testDeleteRace(t *testing.T, s leasestore.Store) {
	ctx := ctxFor(t)
	sess := Live(t, ctx, s, "s")
	fence := sess.Lease.Fence
	for range 4 {
		in := make([]leasestore.EntryInput, 2000)
		for i := range in {
			in[i] = leasestore.EntryInput{Kind: leasestore.KindUpdate, Payload: []byte("x")}
		}
		_, err := s.Append(ctx, "s", fence, in...)
		must(t, err)
	}
	fence = apply(t, ctx, s, "s", leasestore.Release{Fence: fence}).Lease.Fence
	total, err := s.LastSeq(ctx, "s")
	must(t, err)

	deleted := make(chan error, 1)
	go func() { deleted <- s.Delete(ctx, "s", fence) }()
	// Wait until the Delete has visibly begun (the first entry is gone, or
	// the session reads as gone), then try to take the session over.
	errFirst := errors.New("first entry read")
	for {
		var first uint64
		err := s.Replay(ctx, "s", 0, func(e leasestore.Entry) error { first = e.Seq; return errFirst })
		if errors.Is(err, leasestore.ErrNotFound) || (errors.Is(err, errFirst) && first != 1) {
			break
		}
		if !errors.Is(err, errFirst) {
			t.Fatalf("replay during delete: %v", err)
		}
		if ctx.Err() != nil {
			t.Fatal("the delete never began")
		}
	}
	_, reserveErr := s.Apply(ctx, "s", leasestore.Reserve{ExpectedFence: fence})
	deleteErr := <-deleted
	if reserveErr == nil {
		n := len(entries(t, ctx, s, "s", 0))
		t.Fatalf("a Reserve won during a Delete (which ended with %v); the session is live with %d of its %d entries",
			deleteErr, n, total+1)
	}
	wantErr(t, reserveErr, leasestore.ErrNotFound)
	must(t, deleteErr)
	_, err = s.Get(ctx, "s")
	wantErr(t, err, leasestore.ErrNotFound)
}

// testTailRecreated checks that a Tail whose session is deleted and created
// again under the same id while it is between reads ends with ErrNotFound
// instead of going on in the new journal, whose seqs restart at 1.
func testTailRecreated(t *testing.T, s leasestore.Store) {
	ctx := ctxFor(t)
	sess := Live(t, ctx, s, "s")
	for i := range 5 {
		_, err := s.Append(ctx, "s", sess.Lease.Fence, leasestore.EntryInput{Kind: leasestore.KindUpdate, Payload: []byte(fmt.Sprint(i))})
		must(t, err)
	}
	fence := apply(t, ctx, s, "s", leasestore.Release{Fence: sess.Lease.Fence}).Lease.Fence
	oldLast, err := s.LastSeq(ctx, "s")
	must(t, err)

	entered, resume := make(chan struct{}), make(chan struct{})
	var delivered []uint64
	tailed := make(chan error, 1)
	go func() {
		tailed <- s.Tail(ctx, "s", 1, func(e leasestore.Entry) error {
			if len(delivered) == 0 {
				close(entered)
				<-resume // a slow reader: the session changes meanwhile
			}
			delivered = append(delivered, e.Seq)
			return nil
		})
	}()
	<-entered
	must(t, s.Delete(ctx, "s", fence))
	again := Live(t, ctx, s, "s")
	for range 2 * int(oldLast) {
		_, err := s.Append(ctx, "s", again.Lease.Fence, leasestore.EntryInput{Kind: leasestore.KindUpdate, Payload: []byte("new")})
		must(t, err)
	}
	close(resume)
	select {
	case err := <-tailed:
		wantErr(t, err, leasestore.ErrNotFound)
	case <-time.After(20 * time.Second):
		t.Fatal("the tail of a recreated session did not end")
	}
	for _, seq := range delivered {
		if seq > oldLast {
			t.Fatalf("the tail went on into the new session's journal: delivered seqs %v, the old journal ended at %d", delivered, oldLast)
		}
	}
}

// testBatchEachMove is a host's readoption pass in one batch: most moves
// are accepted, and each refused one (a stale fence, a wrong process, a
// deleted session, no transition at all) fails in its own slot, leaves its
// session and journal as they were, and refuses nothing else. A second
// move of a session in the same batch sees the first one's result.
func testBatchEachMove(t *testing.T, s leasestore.Store) {
	ctx := ctxFor(t)
	live := map[string]leasestore.Session{}
	for _, id := range []string{"ok", "ok-then-handle", "stale", "other-process", "deleted"} {
		live[id] = Live(t, ctx, s, id)
	}
	del := live["deleted"]
	apply(t, ctx, s, "deleted", leasestore.Release{Fence: del.Lease.Fence})
	must(t, s.Delete(ctx, "deleted", del.Lease.Fence+1))
	_, err := s.MarkAllUnreconciled(ctx)
	must(t, err)
	before := map[string]int{}
	for id := range live {
		if id != "deleted" {
			before[id] = len(entries(t, ctx, s, id, 0))
		}
	}
	readopt := func(id string) leasestore.Readopt {
		l := live[id].Lease
		return leasestore.Readopt{Fence: l.Fence, Owner: *l.Owner, Reattach: l.Reattach}
	}
	stale := readopt("stale")
	stale.Fence--
	wrong := readopt("other-process")
	wrong.Owner.PID++
	next := live["ok-then-handle"].Lease.NextFence()
	moves := []leasestore.Move{
		{ID: "ok", Transition: readopt("ok")},
		{ID: "stale", Transition: stale},
		{ID: "ok-then-handle", Transition: readopt("ok-then-handle")},
		{ID: "other-process", Transition: wrong},
		{ID: "deleted", Transition: readopt("deleted")},
		{ID: "ok", Transition: nil},
		{ID: "ok-then-handle", Transition: leasestore.RecordHandle{Fence: next, Handle: "resumed-handle", Origin: leasestore.HandleResumed}},
	}
	res := s.ApplyBatch(ctx, moves)
	if len(res) != len(moves) {
		t.Fatalf("ApplyBatch returned %d results for %d moves", len(res), len(moves))
	}
	wantErr(t, res[1].Err, leasestore.ErrStaleFence)
	wantErr(t, res[3].Err, leasestore.ErrIdentityMismatch)
	wantErr(t, res[4].Err, leasestore.ErrNotFound)
	wantErr(t, res[5].Err, leasestore.ErrInvalidArgument)
	for _, i := range []int{0, 2, 6} {
		if res[i].Err != nil {
			t.Fatalf("move %d (%s on %q) was refused beside refused moves: %v", i, moves[i].Transition.Name(), moves[i].ID, res[i].Err)
		}
		if res[i].Session.ID != moves[i].ID {
			t.Fatalf("result %d is session %q, want %q: results must be in the order of moves", i, res[i].Session.ID, moves[i].ID)
		}
	}
	for _, id := range []string{"ok", "ok-then-handle"} {
		got := mustGet(t, ctx, s, id)
		if got.Lease.Fence != live[id].Lease.NextFence() || got.Lease.Claim != leasestore.ClaimLive || got.Lease.Unreconciled {
			t.Errorf("%q after its batched readoption: %+v", id, got.Lease)
		}
	}
	if got := res[6].Session.Handle(); got != "resumed-handle" {
		t.Errorf("the handle recorded after a readoption in the same batch is %q", got)
	}
	if got := mustGet(t, ctx, s, "ok-then-handle").Handle(); got != "resumed-handle" {
		t.Errorf("stored handle %q, want the one the batch's second move recorded", got)
	}
	wantEvents := map[string]string{"ok": "readopted", "ok-then-handle": "readopted,handle-changed", "stale": "", "other-process": ""}
	for id, want := range wantEvents {
		es := entries(t, ctx, s, id, 0)
		if got := strings.Join(events(t, es[before[id]:]), ","); got != want {
			t.Errorf("the batch journaled %q for %q, want %q", got, id, want)
		}
		if want == "" {
			got := mustGet(t, ctx, s, id)
			if got.Lease.Fence != live[id].Lease.Fence || !got.Lease.Unreconciled {
				t.Errorf("a refused move changed %q: %+v", id, got.Lease)
			}
		}
	}
	if res := s.ApplyBatch(ctx, nil); len(res) != 0 {
		t.Errorf("an empty batch returned %d results", len(res))
	}
}

// testBatchMany moves more sessions in one batch than a backend might
// group by default; every move is accepted, in order, and journaled.
func testBatchMany(t *testing.T, s leasestore.Store) {
	ctx := ctxFor(t)
	const n = 600
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			_, errs[i] = s.Create(ctx, leasestore.SessionSpec{ID: fmt.Sprintf("many-%03d", i), Agent: "scripted"})
		})
	}
	wg.Wait()
	must(t, errors.Join(errs...))
	moves := make([]leasestore.Move, n)
	for i := range moves {
		moves[i] = leasestore.Move{ID: fmt.Sprintf("many-%03d", i), Transition: leasestore.Reserve{ExpectedFence: 0, ClaimKeyID: "key-1"}}
	}
	res := s.ApplyBatch(ctx, moves)
	tokens := map[string]bool{}
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("move %d: %v", i, r.Err)
		}
		if r.Session.ID != moves[i].ID || r.Session.Lease.Fence != 1 || r.Session.Lease.Claim != leasestore.ClaimReserved {
			t.Fatalf("result %d: session %q lease %+v", i, r.Session.ID, r.Session.Lease)
		}
		tokens[r.Session.Lease.ReservedSpawnToken] = true
	}
	if len(tokens) != n {
		t.Errorf("%d reservations got %d distinct spawn tokens", n, len(tokens))
	}
	for _, i := range []int{0, n / 2, n - 1} {
		id := moves[i].ID
		if got := strings.Join(events(t, entries(t, ctx, s, id, 0)), ","); got != "created,reserved" {
			t.Errorf("journal of %q: %s", id, got)
		}
		if got := mustGet(t, ctx, s, id); got.Lease.Fence != 1 {
			t.Errorf("stored lease of %q: %+v", id, got.Lease)
		}
	}
}

// testBatchClosed: a closed store refuses every move of a batch, each in
// its slot.
func testBatchClosed(t *testing.T, s leasestore.Store) {
	ctx := ctxFor(t)
	_, err := s.Create(ctx, leasestore.SessionSpec{ID: "s", Agent: "scripted"})
	must(t, err)
	must(t, s.Close(ctx))
	res := s.ApplyBatch(ctx, []leasestore.Move{
		{ID: "s", Transition: leasestore.Reserve{}}, {ID: "t", Transition: leasestore.Reserve{}},
	})
	for i, r := range res {
		wantErr(t, r.Err, leasestore.ErrClosed)
		if r.Session.ID != "" {
			t.Errorf("slot %d of a refused batch holds session %q", i, r.Session.ID)
		}
	}
}

func testClosed(t *testing.T, s leasestore.Store) {
	ctx := ctxFor(t)
	sess := Live(t, ctx, s, "s")
	must(t, s.Close(ctx))
	must(t, s.Close(ctx))
	_, err := s.Create(ctx, leasestore.SessionSpec{ID: "t", Agent: "scripted"})
	wantErr(t, err, leasestore.ErrClosed)
	_, err = s.Append(ctx, "s", sess.Lease.Fence, leasestore.EntryInput{Kind: leasestore.KindUpdate})
	wantErr(t, err, leasestore.ErrClosed)
	_, err = s.Get(ctx, "s")
	wantErr(t, err, leasestore.ErrClosed)
	wantErr(t, s.Tail(ctx, "s", 0, func(leasestore.Entry) error { return nil }), leasestore.ErrClosed)
}

// testJournalHandle: OpenJournal hands out a writer only to the fence that
// may append, the handle appends at that fence, its Close is final, and the
// store's Close closes the handles nobody closed.
func testJournalHandle(t *testing.T, s leasestore.Store) {
	ctx := ctxFor(t)
	sess := Live(t, ctx, s, "s")
	fence := sess.Lease.Fence
	j, err := s.OpenJournal(ctx, "s", fence)
	must(t, err)
	if j.SessionID() != "s" || j.Fence() != fence {
		t.Errorf("handle for session %q at fence %d, want %q at %d", j.SessionID(), j.Fence(), "s", fence)
	}
	_, err = s.OpenJournal(ctx, "s", fence-1)
	wantErr(t, err, leasestore.ErrStaleFence)
	_, err = s.OpenJournal(ctx, "missing", 1)
	wantErr(t, err, leasestore.ErrNotFound)
	es, err := j.Append(ctx, leasestore.EntryInput{Kind: leasestore.KindUpdate, Payload: []byte("1")})
	if err != nil || len(es) != 1 || es[0].Fence != fence {
		t.Fatalf("append through handle: %+v, %v", es, err)
	}
	must(t, j.Close(ctx))
	if err := j.Close(ctx); err != nil {
		t.Errorf("a second close after success: %v", err)
	}
	_, err = j.Append(ctx, leasestore.EntryInput{Kind: leasestore.KindUpdate})
	wantErr(t, err, leasestore.ErrClosed)

	// A handle is refused where an append would be, and outlives no
	// fence: after the lease moved on, its appends are stale.
	_, err = s.Create(ctx, leasestore.SessionSpec{ID: "free", Agent: "scripted"})
	must(t, err)
	_, err = s.OpenJournal(ctx, "free", 0)
	wantErr(t, err, leasestore.ErrInvalidTransition)
	open, err := s.OpenJournal(ctx, "s", fence)
	must(t, err)
	apply(t, ctx, s, "s", leasestore.Release{Fence: fence})
	_, err = open.Append(ctx, leasestore.EntryInput{Kind: leasestore.KindUpdate})
	wantErr(t, err, leasestore.ErrStaleFence)

	// The store closes the handles nobody closed.
	must(t, s.Close(ctx))
	_, err = open.Append(ctx, leasestore.EntryInput{Kind: leasestore.KindUpdate})
	wantErr(t, err, leasestore.ErrClosed)
}

// testConcurrentCloses: Close may be called from several goroutines at
// once (a signal handler and a deferred stop, say): one shuts the store
// down, the others wait for it and return its success.
func testConcurrentCloses(t *testing.T, s leasestore.Store) {
	ctx := ctxFor(t)
	Live(t, ctx, s, "s")
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { errs[i] = s.Close(ctx) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("close #%d: %v", i, err)
		}
	}
	_, err := s.Get(ctx, "s")
	wantErr(t, err, leasestore.ErrClosed)
}

// testRestart: what a store acknowledged is there after a restart, opaque
// ids included, and a clean restart reports no recovery.
func testRestart(t *testing.T, open func(now func() time.Time) leasestore.Store) {
	ctx := ctxFor(t)
	const id = "s\x00/1"
	s := open(nil)
	if r := s.Recovery(); r != nil {
		t.Errorf("a new store reports a recovery: %v", r)
	}
	sess := Live(t, ctx, s, id)
	_, err := s.Append(ctx, id, sess.Lease.Fence, leasestore.EntryInput{Kind: leasestore.KindUpdate, Payload: []byte("kept")})
	must(t, err)
	must(t, s.Close(ctx))

	s2 := open(nil)
	got := mustGet(t, ctx, s2, id)
	if got.Lease.Fence != sess.Lease.Fence || got.Lease.Claim != leasestore.ClaimLive || !got.Lease.Owner.SameProcess(*sess.Lease.Owner) {
		t.Errorf("lease after restart: %+v", got.Lease)
	}
	if got.Incarnation != sess.Incarnation || got.Handle() != sess.Handle() {
		t.Errorf("record after restart: %+v, was %+v", got, sess)
	}
	last, err := s2.LastSeq(ctx, id)
	must(t, err)
	var payload string
	must(t, s2.Replay(ctx, id, last, func(e leasestore.Entry) error { payload = string(e.Payload); return nil }))
	if payload != "kept" {
		t.Errorf("last entry after restart: %q", payload)
	}
	if r := s2.Recovery(); r != nil {
		t.Errorf("a clean restart reported a recovery: %v", r)
	}
}

// testCloseRetry: a Close whose journal handle fails to close reports it,
// keeps the handle and the store (writes included: a host whose stop failed
// keeps running its sessions until it stops again); the next Close retries
// it, and only then lets the store go, so the next open succeeds.
func testCloseRetry(t *testing.T, open func(now func() time.Time) leasestore.Store) {
	ctx := ctxFor(t)
	const id = "session-teardown-retry"
	s := open(nil)
	sess := Live(t, ctx, s, id)
	real, err := s.OpenJournal(ctx, id, sess.Lease.Fence)
	must(t, err)
	flaky := &FlakyJournal{Journal: real, Failures: 2}
	if err := s.CloseRetries().CloseOrRetain(ctx, flaky); err == nil {
		t.Fatal("the first close was supposed to fail")
	}
	if err := s.Close(ctx); err == nil {
		t.Fatal("a close with a journal that still fails to close reported success")
	}
	if got := s.CloseRetries().Pending(); !slices.Equal(got, []string{flaky.Name()}) {
		t.Fatalf("pending closes after the failed stop: %q, want [%q]", got, flaky.Name())
	}
	mustGet(t, ctx, s, id)
	_, err = s.Append(ctx, id, sess.Lease.Fence, leasestore.EntryInput{Kind: leasestore.KindUpdate, Payload: []byte("between")})
	must(t, err)
	apply(t, ctx, s, id, leasestore.RecordHandle{Fence: sess.Lease.Fence, Handle: "h2", Origin: leasestore.HandleForked})
	j, err := s.OpenJournal(ctx, id, sess.Lease.Fence)
	must(t, err)
	if err := s.Close(ctx); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if got := s.CloseRetries().Pending(); len(got) != 0 {
		t.Fatalf("pending closes after the successful stop: %q", got)
	}
	_, err = j.Append(ctx, leasestore.EntryInput{Kind: leasestore.KindUpdate})
	wantErr(t, err, leasestore.ErrClosed)
	// The store is released: it opens again, with what was written
	// between the two closes.
	if got := mustGet(t, ctx, open(nil), id); got.Handle() != "h2" {
		t.Errorf("after the retried close and a restart: handle %q, want h2", got.Handle())
	}
}

// FlakyJournal is a Journal whose first Failures closes fail, for tests of
// the close-retry path.
type FlakyJournal struct {
	leasestore.Journal
	Failures int
}

// Close fails while Failures lasts, counting it down, and then closes the
// journal.
func (f *FlakyJournal) Close(ctx context.Context) error {
	if f.Failures > 0 {
		f.Failures--
		return errors.New("close rejected")
	}
	return f.Journal.Close(ctx)
}

// testClock: every time the store records comes from the clock it was
// given, even one stepped back a day between two runs: nothing in the store
// is decided by time.
func testClock(t *testing.T, open func(now func() time.Time) leasestore.Store) {
	ctx := ctxFor(t)
	for run, at := range []time.Time{
		time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC),
		time.Date(2031, 5, 5, 7, 8, 9, 0, time.UTC),
	} {
		s := open(func() time.Time { return at })
		var before uint64 // the last entry of the run before
		if run == 0 {
			created, err := s.Create(ctx, leasestore.SessionSpec{ID: "s", Agent: "scripted"})
			must(t, err)
			if !created.CreatedAt.Equal(at) || !created.UpdatedAt.Equal(at) {
				t.Errorf("created at %v, updated at %v, want %v", created.CreatedAt, created.UpdatedAt, at)
			}
		} else {
			_, err := s.MarkAllUnreconciled(ctx)
			must(t, err)
			apply(t, ctx, s, "s", leasestore.Reconciled{Fence: mustGet(t, ctx, s, "s").Lease.Fence})
			last, err := s.LastSeq(ctx, "s")
			must(t, err)
			before = last
		}
		fence := mustGet(t, ctx, s, "s").Lease.Fence
		sess := apply(t, ctx, s, "s", leasestore.Reserve{ExpectedFence: fence})
		sess = apply(t, ctx, s, "s", leasestore.PreSpawnFailure{Fence: sess.Lease.Fence, Reason: "no binary"})
		if !sess.Lease.ProcesslessAt.Equal(at) || !sess.UpdatedAt.Equal(at) {
			t.Errorf("run %d: pre-spawn proof at %v, updated at %v, want %v", run, sess.Lease.ProcesslessAt, sess.UpdatedAt, at)
		}
		sess = apply(t, ctx, s, "s", leasestore.Release{Fence: sess.Lease.Fence})
		if ev := sess.Lease.DeathEvidence; ev == nil || !ev.ObservedAt.Equal(at) {
			t.Errorf("run %d: release evidence %+v, want observed at %v", run, ev, at)
		}
		sess = Live(t, ctx, s, "s")
		if h := sess.Handles[len(sess.Handles)-1]; !h.ObservedAt.Equal(at) {
			t.Errorf("run %d: handle observed at %v, want %v", run, h.ObservedAt, at)
		}
		es, err := s.Append(ctx, "s", sess.Lease.Fence, leasestore.EntryInput{Kind: leasestore.KindUpdate, Payload: []byte("x")})
		must(t, err)
		if !es[0].Time.Equal(at) {
			t.Errorf("run %d: appended at %v, want %v", run, es[0].Time, at)
		}
		for _, e := range entries(t, ctx, s, "s", before+1) {
			if !e.Time.Equal(at) {
				t.Errorf("run %d: entry %d (%s) at %v, want %v", run, e.Seq, e.Kind, e.Time, at)
			}
		}
		apply(t, ctx, s, "s", leasestore.Release{Fence: sess.Lease.Fence})
		must(t, s.Close(ctx))
	}
}

// testSettings: the MCP servers a session is created with and what
// RecordSettings records (options, servers, title, allowed scopes, agent
// state) are in the record after a restart; a stale fence records nothing,
// and the lease survives a refused record as it was.
func testSettings(t *testing.T, open func(now func() time.Time) leasestore.Store) {
	ctx := ctxFor(t)
	const id = "settings"
	s := open(nil)
	servers := []leasestore.MCPServer{{Name: "fs", Transport: "stdio", Command: "/bin/fs", Args: []string{"--root", "/w"},
		Env: []leasestore.NameValue{{Name: "K", Value: "V"}}}}
	created, err := s.Create(ctx, leasestore.SessionSpec{ID: id, Agent: "scripted", Workspace: "/work",
		Options: map[string]string{"model": "asked"}, MCPServers: servers})
	must(t, err)
	if !reflect.DeepEqual(created.MCPServers, servers) {
		t.Errorf("created with servers %+v, want %+v", created.MCPServers, servers)
	}
	sess := Live(t, ctx, s, id)
	fence := sess.Lease.Fence
	_, err = s.Apply(ctx, id, leasestore.RecordSettings{Fence: fence - 1, Title: "stale"})
	wantErr(t, err, leasestore.ErrStaleFence)
	remote := append(slices.Clone(servers), leasestore.MCPServer{Name: "web", Transport: "http", URL: "http://127.0.0.1:1/mcp",
		Headers: []leasestore.NameValue{{Name: "Authorization", Value: "x"}}})
	apply(t, ctx, s, id, leasestore.RecordSettings{Fence: fence, Options: map[string]string{"model": "acked", "mode": "plan"},
		SetMCPServers: true, MCPServers: remote, AgentState: []byte(`{"currentModeId":"plan"}`)})
	apply(t, ctx, s, id, leasestore.RecordSettings{Fence: fence, Title: "Fix the tests", AllowScope: "edit"})
	apply(t, ctx, s, id, leasestore.RecordSettings{Fence: fence, AllowScope: "Bash(ls)"})
	must(t, s.Close(ctx))

	got := mustGet(t, ctx, open(nil), id)
	if want := map[string]string{"model": "acked", "mode": "plan"}; !reflect.DeepEqual(got.Options, want) {
		t.Errorf("options after restart %v, want %v", got.Options, want)
	}
	if !reflect.DeepEqual(got.MCPServers, remote) {
		t.Errorf("servers after restart %+v, want %+v", got.MCPServers, remote)
	}
	if got.Title != "Fix the tests" || !reflect.DeepEqual(got.AllowedScopes, []string{"edit", "Bash(ls)"}) ||
		string(got.AgentState) != `{"currentModeId":"plan"}` {
		t.Errorf("after restart: title %q, scopes %q, agent state %s", got.Title, got.AllowedScopes, got.AgentState)
	}
	if got.Lease.Fence != fence || got.Lease.Claim != leasestore.ClaimLive {
		t.Errorf("lease after restart %+v", got.Lease)
	}
}

// testMarkHost: a host among several flags only the held leases that are
// its own to decide (its owners', its reservations', and the held ones
// naming no host: fail closed), never a released one, and another host's
// writer goes on appending.
func testMarkHost(t *testing.T, s leasestore.Store) {
	ctx := ctxFor(t)
	_, err := s.MarkHostUnreconciled(ctx, "")
	wantErr(t, err, leasestore.ErrInvalidArgument)

	LiveOn(t, ctx, s, "a-live", "a")
	ReservedOn(t, ctx, s, "a-reserved", "a")
	latched := LiveOn(t, ctx, s, "a-latched", "a")
	apply(t, ctx, s, "a-latched", leasestore.Latch{Fence: latched.Lease.Fence, Stage: leasestore.StageRecovering, Reason: "unverified"})
	ReservedOn(t, ctx, s, "legacy", "") // a record from before hosts were recorded
	released := LiveOn(t, ctx, s, "a-released", "a")
	apply(t, ctx, s, "a-released", leasestore.Release{Fence: released.Lease.Fence})
	_, err = s.Create(ctx, leasestore.SessionSpec{ID: "never-held", Agent: "scripted"})
	must(t, err)
	theirs := LiveOn(t, ctx, s, "b-live", "b")
	theirsReserved := ReservedOn(t, ctx, s, "b-reserved", "b")
	// An owner committed names the host, whoever reserved.
	moved := ReservedOn(t, ctx, s, "a-reserved-b-owner", "a")
	apply(t, ctx, s, "a-reserved-b-owner", leasestore.CommitOwner{Fence: moved.Lease.Fence, Owner: OwnerOn("b", 77, moved.Lease.ReservedSpawnToken)})

	n, err := s.MarkHostUnreconciled(ctx, "a")
	must(t, err)
	flagged := map[string]bool{"a-live": true, "a-reserved": true, "a-latched": true, "legacy": true}
	if n != len(flagged) {
		t.Errorf("host a flagged %d sessions, want %d", n, len(flagged))
	}
	all, err := s.List(ctx)
	must(t, err)
	if len(all) != 9 {
		t.Fatalf("listed %d sessions, want 9", len(all))
	}
	for _, sess := range all {
		if sess.Lease.Unreconciled != flagged[sess.ID] {
			t.Errorf("session %q: unreconciled %v after host a opened, want %v (lease %+v)", sess.ID, sess.Lease.Unreconciled, flagged[sess.ID], sess.Lease)
		}
	}

	// Host b's sessions go on as if nothing happened.
	if _, err := s.Append(ctx, "b-live", theirs.Lease.Fence, leasestore.EntryInput{Kind: leasestore.KindUpdate, Payload: []byte("b")}); err != nil {
		t.Errorf("host b's writer after host a opened: %v", err)
	}
	apply(t, ctx, s, "b-reserved", leasestore.CommitOwner{Fence: theirsReserved.Lease.Fence, Owner: OwnerOn("b", 78, theirsReserved.Lease.ReservedSpawnToken)})
	// Host a's are awaiting its decision, and a released one is free.
	_, err = s.Append(ctx, "a-live", mustGet(t, ctx, s, "a-live").Lease.Fence, leasestore.EntryInput{Kind: leasestore.KindUpdate})
	wantErr(t, err, leasestore.ErrReconciling)
	ReservedOn(t, ctx, s, "a-released", "a")
	ReservedOn(t, ctx, s, "never-held", "a")

	// Host b, opening in turn, flags its own, and the legacy one again.
	n, err = s.MarkHostUnreconciled(ctx, "b")
	must(t, err)
	if n != 4 {
		t.Errorf("host b flagged %d sessions, want 4 (b-live, b-reserved, a-reserved-b-owner, legacy)", n)
	}
	_, err = s.Append(ctx, "b-live", theirs.Lease.Fence, leasestore.EntryInput{Kind: leasestore.KindUpdate})
	wantErr(t, err, leasestore.ErrReconciling)
	if got := mustGet(t, ctx, s, "a-released"); got.Lease.Unreconciled {
		t.Errorf("host b flagged host a's new reservation: %+v", got.Lease)
	}
}

// testReservedBy: the reserving host is recorded with the reservation and
// kept while the ownership it led to lasts; a release or an eviction
// clears it with the rest of the lease.
func testReservedBy(t *testing.T, s leasestore.Store) {
	ctx := ctxFor(t)
	sess := ReservedOn(t, ctx, s, "s", "host-a")
	if sess.Lease.ReservedBy != "host-a" {
		t.Fatalf("reserved by %q, want host-a", sess.Lease.ReservedBy)
	}
	if got := mustGet(t, ctx, s, "s"); got.Lease.ReservedBy != "host-a" {
		t.Fatalf("stored reservation by %q, want host-a", got.Lease.ReservedBy)
	}
	fence := sess.Lease.Fence
	apply(t, ctx, s, "s", leasestore.CommitOwner{Fence: fence, Owner: OwnerOn("host-a", 9, sess.Lease.ReservedSpawnToken)})
	sess = apply(t, ctx, s, "s", leasestore.ProveOwner{Fence: fence, Handle: "h", Origin: leasestore.HandleCreated})
	if sess.Lease.ReservedBy != "host-a" {
		t.Errorf("live lease reserved by %q, want host-a", sess.Lease.ReservedBy)
	}
	_, err := s.MarkHostUnreconciled(ctx, "host-a")
	must(t, err)
	sess = apply(t, ctx, s, "s", leasestore.Readopt{Fence: fence, Owner: *sess.Lease.Owner})
	if sess.Lease.ReservedBy != "host-a" {
		t.Errorf("readopted lease reserved by %q, want host-a", sess.Lease.ReservedBy)
	}
	sess = apply(t, ctx, s, "s", leasestore.Release{Fence: sess.Lease.Fence})
	if sess.Lease.ReservedBy != "" || mustGet(t, ctx, s, "s").Lease.ReservedBy != "" {
		t.Errorf("released lease still reserved by %q", sess.Lease.ReservedBy)
	}

	sess = ReservedOn(t, ctx, s, "s", "host-b")
	if sess.Lease.ReservedBy != "host-b" {
		t.Fatalf("reserved again by %q, want host-b", sess.Lease.ReservedBy)
	}
	sess = apply(t, ctx, s, "s", leasestore.Evict{Fence: sess.Lease.Fence, Evidence: leasestore.DeathEvidence{Kind: leasestore.EvidenceOperator, Detail: "confirmed"}})
	if sess.Lease.ReservedBy != "" || mustGet(t, ctx, s, "s").Lease.ReservedBy != "" {
		t.Errorf("evicted lease still reserved by %q", sess.Lease.ReservedBy)
	}
	// Without a host id nothing is recorded (a single machine's host, or
	// a caller from before hosts were recorded).
	if sess = ReservedOn(t, ctx, s, "s", ""); sess.Lease.ReservedBy != "" {
		t.Errorf("reserved without a host id, but recorded %q", sess.Lease.ReservedBy)
	}
}

// testHostLostEvidence: a host's loss proves its plugins gone only through
// a cluster's takeover (Cluster.ApplyIfHostLost), never through Apply.
func testHostLostEvidence(t *testing.T, s leasestore.Store) {
	ctx := ctxFor(t)
	sess := LiveOn(t, ctx, s, "s", "host-a")
	_, err := s.Apply(ctx, "s", leasestore.Evict{Fence: sess.Lease.Fence, Evidence: leasestore.DeathEvidence{Kind: leasestore.EvidenceHostLost}})
	wantErr(t, err, leasestore.ErrInvalidArgument)
	if got := mustGet(t, ctx, s, "s"); got.Lease.Claim != leasestore.ClaimLive || got.Lease.Fence != sess.Lease.Fence {
		t.Errorf("a refused takeover moved the lease: %+v", got.Lease)
	}
}

// providerData returns n bytes that differ with seed, so that a state put
// back from the wrong chunks or the wrong put shows.
func providerData(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7+i>>11) ^ seed
	}
	return b
}

func wantState(t testing.TB, ctx context.Context, s leasestore.Store, id string, want leasestore.ProviderState) {
	t.Helper()
	got, err := s.GetProviderState(ctx, id)
	if err != nil {
		t.Fatalf("provider state of %q: %v", id, err)
	}
	if got.Handle != want.Handle || got.Fence != want.Fence || !bytes.Equal(got.Data, want.Data) || !got.ExportedAt.Equal(want.ExportedAt) {
		t.Fatalf("provider state of %q: handle %q fence %d %d bytes exported %v; want handle %q fence %d %d bytes exported %v",
			id, got.Handle, got.Fence, len(got.Data), got.ExportedAt, want.Handle, want.Fence, len(want.Data), want.ExportedAt)
	}
	// The cheap read (the store's ProviderStateHandles, when it has one)
	// names the same handle.
	if h, err := leasestore.StoredStateHandle(ctx, s, id); err != nil || h != want.Handle {
		t.Fatalf("StoredStateHandle(%q) = %q, %v; want %q", id, h, err, want.Handle)
	}
}

// testProviderState: put, get and replace, at sizes above any one value or
// transaction a backend takes (the suite does not know its limits).
func testProviderState(t *testing.T, s leasestore.Store) {
	ctx := ctxFor(t)
	_, err := s.GetProviderState(ctx, "missing")
	wantErr(t, err, leasestore.ErrNotFound)
	_, err = leasestore.StoredStateHandle(ctx, s, "missing")
	wantErr(t, err, leasestore.ErrNotFound)
	sess := Live(t, ctx, s, "s")
	_, err = s.GetProviderState(ctx, "s")
	wantErr(t, err, leasestore.ErrNotFound)
	_, err = leasestore.StoredStateHandle(ctx, s, "s")
	wantErr(t, err, leasestore.ErrNotFound)
	fence := sess.Lease.Fence
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)

	big := leasestore.ProviderState{Handle: "h-1", Fence: fence, Data: providerData(3<<20+12345, 1), ExportedAt: at}
	must(t, s.PutProviderState(ctx, "s", fence, big))
	wantState(t, ctx, s, "s", big)

	small := leasestore.ProviderState{Handle: "h-2", Fence: fence, Data: []byte(`{"turns":2}`), ExportedAt: at.Add(time.Minute)}
	must(t, s.PutProviderState(ctx, "s", fence, small))
	wantState(t, ctx, s, "s", small)

	// The fence stored is the writer's, whatever the caller filled in.
	again := small
	again.Fence = fence + 40
	must(t, s.PutProviderState(ctx, "s", fence, again))
	wantState(t, ctx, s, "s", small)

	// An empty export is a state too.
	empty := leasestore.ProviderState{Handle: "h-3", Fence: fence, ExportedAt: at}
	must(t, s.PutProviderState(ctx, "s", fence, empty))
	wantState(t, ctx, s, "s", empty)

	// Another session's state is its own.
	other := Live(t, ctx, s, "other")
	must(t, s.PutProviderState(ctx, "other", other.Lease.Fence, leasestore.ProviderState{Handle: "o", Data: []byte("o"), ExportedAt: at}))
	wantState(t, ctx, s, "s", empty)

	err = s.PutProviderState(ctx, "s", fence, leasestore.ProviderState{Data: []byte("x"), ExportedAt: at})
	wantErr(t, err, leasestore.ErrInvalidArgument)
	err = s.PutProviderState(ctx, "s", fence, leasestore.ProviderState{Handle: "h", Data: make([]byte, leasestore.MaxProviderStateBytes+1)})
	wantErr(t, err, leasestore.ErrInvalidArgument)
	err = s.PutProviderState(ctx, "missing", 1, leasestore.ProviderState{Handle: "h", Data: []byte("x")})
	wantErr(t, err, leasestore.ErrNotFound)
	wantState(t, ctx, s, "s", empty)
}

// testProviderStateFenced: a put is fenced exactly like an append: a stale
// fence, an unreconciled, latched or released lease refuse it and keep the
// state stored before; the state outlives the release (a host elsewhere
// resumes from it).
func testProviderStateFenced(t *testing.T, s leasestore.Store) {
	ctx := ctxFor(t)
	_, err := s.Create(ctx, leasestore.SessionSpec{ID: "s", Agent: "scripted"})
	must(t, err)
	err = s.PutProviderState(ctx, "s", 0, leasestore.ProviderState{Handle: "h", Data: []byte("x")})
	wantErr(t, err, leasestore.ErrInvalidTransition)

	sess := Live(t, ctx, s, "s")
	fence := sess.Lease.Fence
	kept := leasestore.ProviderState{Handle: "h", Fence: fence, Data: providerData(1<<20+1, 2), ExportedAt: time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)}
	must(t, s.PutProviderState(ctx, "s", fence, kept))
	late := leasestore.ProviderState{Handle: "late", Data: providerData(2<<20, 3)}

	err = s.PutProviderState(ctx, "s", fence-1, late)
	wantErr(t, err, leasestore.ErrStaleFence)
	wantState(t, ctx, s, "s", kept)

	_, err = s.MarkAllUnreconciled(ctx)
	must(t, err)
	wantErr(t, s.PutProviderState(ctx, "s", fence, late), leasestore.ErrReconciling)
	apply(t, ctx, s, "s", leasestore.Latch{Fence: fence, Stage: leasestore.StageRecovering, Reason: "unverified"})
	wantErr(t, s.PutProviderState(ctx, "s", fence, late), leasestore.ErrOwnershipUnknown)
	wantState(t, ctx, s, "s", kept)

	sess = apply(t, ctx, s, "s", leasestore.Evict{Fence: fence, Evidence: leasestore.DeathEvidence{Kind: leasestore.EvidencePIDAbsent}})
	wantErr(t, s.PutProviderState(ctx, "s", fence, late), leasestore.ErrStaleFence)
	wantErr(t, s.PutProviderState(ctx, "s", sess.Lease.Fence, late), leasestore.ErrInvalidTransition)
	wantState(t, ctx, s, "s", kept)

	// The next writer replaces it.
	next := Live(t, ctx, s, "s")
	wantState(t, ctx, s, "s", kept)
	wantErr(t, s.PutProviderState(ctx, "s", fence, late), leasestore.ErrStaleFence)
	fresh := leasestore.ProviderState{Handle: "h2", Fence: next.Lease.Fence, Data: []byte("next"), ExportedAt: kept.ExportedAt}
	must(t, s.PutProviderState(ctx, "s", next.Lease.Fence, fresh))
	wantState(t, ctx, s, "s", fresh)
}

// testProviderStateDeleted: Delete removes the state with the session, and
// a session created again under the id has none.
func testProviderStateDeleted(t *testing.T, s leasestore.Store) {
	ctx := ctxFor(t)
	sess := Live(t, ctx, s, "s")
	fence := sess.Lease.Fence
	must(t, s.PutProviderState(ctx, "s", fence, leasestore.ProviderState{Handle: "h", Data: providerData(2<<20+7, 4)}))
	kept := Live(t, ctx, s, "kept")
	keptState := leasestore.ProviderState{Handle: "k", Fence: kept.Lease.Fence, Data: []byte("kept"), ExportedAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	must(t, s.PutProviderState(ctx, "kept", kept.Lease.Fence, keptState))
	apply(t, ctx, s, "s", leasestore.Release{Fence: fence})
	must(t, s.Delete(ctx, "s", fence+1))
	_, err := s.GetProviderState(ctx, "s")
	wantErr(t, err, leasestore.ErrNotFound)
	wantErr(t, s.PutProviderState(ctx, "s", fence, leasestore.ProviderState{Handle: "h", Data: []byte("x")}), leasestore.ErrNotFound)

	_, err = leasestore.StoredStateHandle(ctx, s, "s")
	wantErr(t, err, leasestore.ErrNotFound)

	Live(t, ctx, s, "s")
	_, err = s.GetProviderState(ctx, "s")
	wantErr(t, err, leasestore.ErrNotFound)
	_, err = leasestore.StoredStateHandle(ctx, s, "s")
	wantErr(t, err, leasestore.ErrNotFound)
	wantState(t, ctx, s, "kept", keptState)
}

// testProviderStateConcurrent: puts racing on one session leave one of
// them whole, never a mix.
func testProviderStateConcurrent(t *testing.T, s leasestore.Store) {
	ctx := ctxFor(t)
	sess := Live(t, ctx, s, "s")
	fence := sess.Lease.Fence
	at := time.Date(2026, 3, 3, 3, 3, 3, 0, time.UTC)
	states := make([]leasestore.ProviderState, 4)
	for i := range states {
		states[i] = leasestore.ProviderState{Handle: fmt.Sprintf("h-%d", i), Fence: fence, Data: providerData(1<<20+i*100_003, byte(10+i)), ExportedAt: at}
	}
	var wg sync.WaitGroup
	errs := make([]error, len(states))
	for i := range states {
		wg.Go(func() { errs[i] = s.PutProviderState(ctx, "s", fence, states[i]) })
	}
	wg.Wait()
	must(t, errors.Join(errs...))
	got, err := s.GetProviderState(ctx, "s")
	must(t, err)
	i := slices.IndexFunc(states, func(st leasestore.ProviderState) bool { return st.Handle == got.Handle })
	if i < 0 {
		t.Fatalf("provider state with handle %q, which no put wrote", got.Handle)
	}
	wantState(t, ctx, s, "s", states[i])
}

// testProviderStateRestart: a stored state survives a restart.
func testProviderStateRestart(t *testing.T, open func(now func() time.Time) leasestore.Store) {
	ctx := ctxFor(t)
	s := open(nil)
	sess := Live(t, ctx, s, "s")
	st := leasestore.ProviderState{Handle: "h", Fence: sess.Lease.Fence, Data: providerData(1<<20+3, 5), ExportedAt: time.Date(2026, 2, 2, 2, 2, 2, 2, time.UTC)}
	must(t, s.PutProviderState(ctx, "s", sess.Lease.Fence, st))
	must(t, s.Close(ctx))
	wantState(t, ctx, open(nil), "s", st)
}
