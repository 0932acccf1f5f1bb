package probe_test

import (
	"context"
	"errors"
	"io/fs"
	"slices"
	"strings"
	"syscall"
	"testing"
	"testing/fstest"
	"time"

	"github.com/agenthost/agenthost/leasestore"
	"github.com/agenthost/agenthost/probe"
	"github.com/agenthost/agenthost/probe/probetest"
)

const (
	hostID   = "local"
	tokenVar = "AGENTHOST_SPAWN_TOKEN_TEST"
	bootID   = "boot-1"
)

var owner = leasestore.ProcessIdentity{HostID: hostID, PID: 4242, StartTicks: 1700, BootID: bootID, SpawnToken: "token-1"}

// session builds a record in the shape the seed suite uses: fence 3,
// released, no token, unless the lease says otherwise.
func session(id string, o *leasestore.ProcessIdentity, edit func(*leasestore.Lease)) leasestore.Session {
	l := leasestore.Lease{Fence: 3, Claim: leasestore.ClaimReleased, Owner: o}
	if o != nil {
		l.Claim = leasestore.ClaimLive
	}
	if edit != nil {
		edit(&l)
	}
	return leasestore.Session{ID: id, Agent: "codex", Lease: l}
}

func reserved(token string) func(*leasestore.Lease) {
	return func(l *leasestore.Lease) {
		l.Claim, l.Stage, l.ReservedSpawnToken = leasestore.ClaimReserved, leasestore.StageProving, token
	}
}

// countingTable counts calls on a table, to show what a probe did not do.
type countingTable struct {
	probe.Table
	reads, scans int
	scanErr      error
}

func (c *countingTable) Read(ctx context.Context, pids []int) ([]probe.Process, error) {
	c.reads++
	return c.Table.Read(ctx, pids)
}

func (c *countingTable) Scan(ctx context.Context) ([]probe.Process, error) {
	c.scans++
	if c.scanErr != nil {
		return nil, c.scanErr
	}
	return c.Table.Scan(ctx)
}

func proberOver(tree probetest.Tree, errs ...map[string]error) (*probe.Prober, *countingTable, *probetest.CountingFS) {
	var fsys fs.FS = tree.FS()
	if len(errs) > 0 {
		fsys = probetest.FailingFS{FS: fsys, Errs: errs[0]}
	}
	cfs := &probetest.CountingFS{FS: fsys}
	ct := &countingTable{Table: &probe.ProcFS{FS: cfs, TokenVar: tokenVar}}
	return &probe.Prober{HostID: hostID, Table: ct}, ct, cfs
}

func tokenEnv(token string) []string {
	return []string{"PATH=/bin", tokenVar + "=" + token, "HOME=/root"}
}

// The owner probe's rules (package doc), one case each.
func TestOwnerProbe(t *testing.T) {
	ctx := context.Background()
	aliveOwner := probetest.Proc{PID: owner.PID, StartTicks: owner.StartTicks, Env: tokenEnv("token-1")}
	for _, tc := range []struct {
		name      string
		procs     []probetest.Proc
		sess      leasestore.Session
		scanErr   error
		fsErrs    map[string]error
		want      probe.Outcome
		field     probe.Field
		matched   []probe.Field
		reads     int // table reads expected
		scans     int // token scans expected
		reasonHas string
	}{
		{name: "an owner this host spawned is probed, and found gone",
			sess: session("s", &owner, nil), want: probe.PIDAbsent, reads: 1},
		{name: "an owner on another host is not probed: its pid means nothing here",
			procs: []probetest.Proc{aliveOwner},
			sess:  session("s", &leasestore.ProcessIdentity{HostID: "ssh:build-box", PID: owner.PID, SpawnToken: "token-1"}, nil),
			want:  probe.Indeterminate, reasonHas: "ssh:build-box"},
		{name: "a reservation another host made is not scanned for: its token lives there",
			procs: []probetest.Proc{{PID: 9001, StartTicks: 5, Env: tokenEnv("another-token")}},
			sess: session("s", nil, func(l *leasestore.Lease) {
				reserved("token-1")(l)
				l.ReservedBy = "build-box-2"
			}), want: probe.Indeterminate, reasonHas: `reserved by host "build-box-2"`},
		{name: "a reservation this host made is scanned for as before",
			procs: []probetest.Proc{{PID: 9001, StartTicks: 5, Env: tokenEnv("another-token")}},
			sess: session("s", nil, func(l *leasestore.Lease) {
				reserved("token-1")(l)
				l.ReservedBy = hostID
			}), want: probe.ReservationUnused, scans: 1},
		{name: "another host's reservation with durable pre-spawn proof is unused: the proof holds anywhere",
			sess: session("s", nil, func(l *leasestore.Lease) {
				reserved("token-1")(l)
				l.ReservedBy = "build-box-2"
				l.ProcesslessAt = time.Unix(1_800_000_000, 0)
			}), want: probe.ReservationUnused},
		{name: "a reservation whose token is live on this host stays latched",
			procs: []probetest.Proc{{PID: 9001, StartTicks: 5, Env: tokenEnv("token-1")}},
			sess:  session("s", nil, reserved("token-1")), want: probe.Indeterminate, scans: 1, reasonHas: "live on 1"},
		{name: "a host that cannot enumerate tokens answers indeterminate, never none",
			sess: session("s", nil, reserved("token-1")), scanErr: probe.ErrCannotEnumerate, want: probe.Indeterminate, scans: 1},
		{name: "a reservation no process carries is unused",
			procs: []probetest.Proc{{PID: 9001, StartTicks: 5, Env: tokenEnv("another-token")}},
			sess:  session("s", nil, reserved("token-1")), want: probe.ReservationUnused, scans: 1},
		{name: "a lease naming neither owner nor token is unused, without probe or scan",
			procs: []probetest.Proc{aliveOwner},
			sess:  session("s", nil, nil), want: probe.ReservationUnused},
		{name: "a reservation that recorded no token stays indeterminate",
			sess: session("s", nil, reserved("")), want: probe.Indeterminate, reasonHas: "no spawn token"},
		{name: "durable pre-spawn proof frees the reservation without probing",
			procs: []probetest.Proc{{PID: 9001, StartTicks: 5, Env: tokenEnv("token-1")}},
			sess: session("s", nil, func(l *leasestore.Lease) {
				reserved("token-1")(l)
				l.ProcesslessAt = time.Unix(1_800_000_000, 0)
			}), want: probe.ReservationUnused},
		{name: "provider activity at the reservation's fence stays indeterminate",
			sess: func() leasestore.Session {
				s := session("s", nil, reserved("token-1"))
				s.Handles = []leasestore.HandleLink{{Handle: "thread-1", Origin: leasestore.HandleCreated, Fence: 3}}
				return s
			}(), want: probe.Indeterminate, scans: 1, reasonHas: "handle"},
		{name: "token and start time both match",
			procs: []probetest.Proc{aliveOwner}, sess: session("s", &owner, nil),
			want: probe.IdentityMatched, matched: []probe.Field{probe.FieldSpawnToken, probe.FieldStartTime}, reads: 1},
		{name: "another spawn token at the pid is a mismatch",
			procs: []probetest.Proc{{PID: owner.PID, StartTicks: owner.StartTicks, Env: tokenEnv("token-2")}},
			sess:  session("s", &owner, nil), want: probe.IdentityMismatch, field: probe.FieldSpawnToken, reads: 1},
		{name: "another start time at the pid is a mismatch (a reused pid)",
			procs: []probetest.Proc{{PID: owner.PID, StartTicks: owner.StartTicks + 1, Env: []string{"PATH=/bin"}}},
			sess:  session("s", &owner, nil), want: probe.IdentityMismatch, field: probe.FieldStartTime, reads: 1},
		{name: "token matches but start time does not: contradictory, indeterminate",
			procs: []probetest.Proc{{PID: owner.PID, StartTicks: owner.StartTicks + 1, Env: tokenEnv("token-1")}},
			sess:  session("s", &owner, nil), want: probe.Indeterminate, reads: 1, reasonHas: "contradictory"},
		{name: "the recorded process as a zombie has exited",
			procs: []probetest.Proc{{PID: owner.PID, State: "Z", StartTicks: owner.StartTicks}},
			sess:  session("s", &owner, nil), want: probe.ExitObserved, reads: 1, reasonHas: "zombie"},
		{name: "a zombie at the pid with another start time is a mismatch",
			procs: []probetest.Proc{{PID: owner.PID, State: "Z", StartTicks: owner.StartTicks + 9}},
			sess:  session("s", &owner, nil), want: probe.IdentityMismatch, field: probe.FieldStartTime, reads: 1},
		{name: "start time alone proves life when the environment has no token",
			procs: []probetest.Proc{{PID: owner.PID, StartTicks: owner.StartTicks}},
			sess:  session("s", &owner, nil), want: probe.IdentityMatched, matched: []probe.Field{probe.FieldStartTime}, reads: 1},
		{name: "another boot is a mismatch",
			procs: []probetest.Proc{{PID: owner.PID, StartTicks: owner.StartTicks}},
			sess:  session("s", &leasestore.ProcessIdentity{HostID: hostID, PID: owner.PID, StartTicks: owner.StartTicks, BootID: "boot-0", SpawnToken: "token-1"}, nil),
			want:  probe.IdentityMismatch, field: probe.FieldBootID, reads: 1},
		{name: "another boot but the echoed token matches: contradictory, indeterminate",
			procs: []probetest.Proc{aliveOwner},
			sess:  session("s", &leasestore.ProcessIdentity{HostID: hostID, PID: owner.PID, StartTicks: owner.StartTicks, BootID: "boot-0", SpawnToken: "token-1"}, nil),
			want:  probe.Indeterminate, reads: 1, reasonHas: "contradictory"},
		{name: "a reservation is not freed while a process of this user hides its environment",
			procs:  []probetest.Proc{{PID: 900, StartTicks: 5, Env: tokenEnv("other")}},
			fsErrs: map[string]error{"900/environ": fs.ErrPermission},
			sess:   session("s", nil, reserved("token-1")), want: probe.Indeterminate, scans: 1, reasonHas: "cannot read the environment"},
		{name: "a process that exits between its stat and environment reads does not hold a reservation",
			procs:  []probetest.Proc{{PID: 900, StartTicks: 5, Env: tokenEnv("token-1")}},
			fsErrs: map[string]error{"900/environ": fs.ErrNotExist},
			sess:   session("s", nil, reserved("token-1")), want: probe.ReservationUnused, scans: 1},
		{name: "a process gone (ESRCH) at its environment read does not hold a reservation",
			procs:  []probetest.Proc{{PID: 900, StartTicks: 5, Env: tokenEnv("token-1")}},
			fsErrs: map[string]error{"900/environ": syscall.ESRCH},
			sess:   session("s", nil, reserved("token-1")), want: probe.ReservationUnused, scans: 1},
		{name: "an I/O error at the environment read keeps a reservation latched",
			procs:  []probetest.Proc{{PID: 900, StartTicks: 5, Env: tokenEnv("other")}},
			fsErrs: map[string]error{"900/environ": syscall.EIO},
			sess:   session("s", nil, reserved("token-1")), want: probe.Indeterminate, scans: 1, reasonHas: "cannot read the environment"},
		{name: "an owner that exits between its stat and environment reads is absent",
			procs:  []probetest.Proc{aliveOwner},
			fsErrs: map[string]error{"4242/environ": fs.ErrNotExist},
			sess:   session("s", &owner, nil), want: probe.PIDAbsent, reads: 1},
		{name: "a bare pid with nothing verifiable is indeterminate",
			procs: []probetest.Proc{{PID: owner.PID, StartTicks: 99}},
			sess:  session("s", &leasestore.ProcessIdentity{HostID: hostID, PID: owner.PID, SpawnToken: "token-1"}, nil),
			want:  probe.Indeterminate, reads: 1, reasonHas: "neither"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, ct, _ := proberOver(probetest.Tree{BootID: bootID, Procs: tc.procs}, tc.fsErrs)
			ct.scanErr = tc.scanErr
			got := p.Probe(ctx, tc.sess)
			if got.Outcome != tc.want || got.Field != tc.field || !slices.Equal(got.MatchedOn, tc.matched) {
				t.Errorf("probe = %v, want %s field %q matched %v", got, tc.want, tc.field, tc.matched)
			}
			if !strings.Contains(got.Reason, tc.reasonHas) {
				t.Errorf("reason %q does not mention %q", got.Reason, tc.reasonHas)
			}
			if ct.reads != tc.reads || ct.scans != tc.scans {
				t.Errorf("table reads %d, scans %d; want %d and %d", ct.reads, ct.scans, tc.reads, tc.scans)
			}
		})
	}
}

// Only "no such process" is absence; a permission error, or any other
// failure to read, fails closed.
func TestUnreadableProcessIsIndeterminate(t *testing.T) {
	tree := probetest.Tree{BootID: bootID, Procs: []probetest.Proc{{PID: owner.PID, StartTicks: owner.StartTicks}}}
	for name, err := range map[string]error{
		"permission denied": fs.ErrPermission,
		"I/O error":         syscall.EIO,
	} {
		t.Run(name, func(t *testing.T) {
			ffs := probetest.FailingFS{FS: tree.FS(), Errs: map[string]error{"4242/stat": err}}
			p := &probe.Prober{HostID: hostID, Table: &probe.ProcFS{FS: ffs, TokenVar: tokenVar}}
			if got := p.Probe(context.Background(), session("s", &owner, nil)); got.Outcome != probe.Indeterminate {
				t.Errorf("probe = %v, want indeterminate", got)
			}
		})
	}
	ffs := probetest.FailingFS{FS: tree.FS(), Errs: map[string]error{"4242/stat": syscall.ESRCH}}
	p := &probe.Prober{HostID: hostID, Table: &probe.ProcFS{FS: ffs, TokenVar: tokenVar}}
	if got := p.Probe(context.Background(), session("s", &owner, nil)); got.Outcome != probe.PIDAbsent {
		t.Errorf("ESRCH: probe = %v, want pid-absent", got)
	}
	// An unreadable environment is no answer, not a mismatch: the start
	// time still decides.
	ffs = probetest.FailingFS{FS: tree.FS(), Errs: map[string]error{"4242/environ": fs.ErrPermission}}
	p = &probe.Prober{HostID: hostID, Table: &probe.ProcFS{FS: ffs, TokenVar: tokenVar}}
	if got := p.Probe(context.Background(), session("s", &owner, nil)); got.Outcome != probe.IdentityMatched || !slices.Equal(got.MatchedOn, []probe.Field{probe.FieldStartTime}) {
		t.Errorf("unreadable environment: probe = %v, want matched on start time", got)
	}
}

func TestExitObservedWins(t *testing.T) {
	p, ct, _ := proberOver(probetest.Tree{BootID: bootID, Procs: []probetest.Proc{{PID: owner.PID, StartTicks: owner.StartTicks}}})
	p.ExitObserved = func(id leasestore.ProcessIdentity) bool { return id.SameProcess(owner) }
	if got := p.Probe(context.Background(), session("s", &owner, nil)); got.Outcome != probe.ExitObserved {
		t.Fatalf("probe = %v, want exit-observed", got)
	}
	if ct.reads != 0 {
		t.Errorf("an observed exit still read the table %d times", ct.reads)
	}
}

// Many local owners cost one pass over the process table, each owner's
// files read once; many reservations cost one token scan, each process's
// environment read once.
func TestBatchProbeReadsOnce(t *testing.T) {
	var procs []probetest.Proc
	var sessions []leasestore.Session
	for i := range 50 {
		pid := 1000 + i
		token := "owner-token-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		if i%5 != 4 { // every fifth owner is gone
			procs = append(procs, probetest.Proc{PID: pid, StartTicks: uint64(pid * 10), Env: tokenEnv(token)})
		}
		o := leasestore.ProcessIdentity{HostID: hostID, PID: pid, StartTicks: uint64(pid * 10), BootID: bootID, SpawnToken: token}
		sessions = append(sessions, session("owner-"+token, &o, nil))
	}
	for i := range 10 {
		procs = append(procs, probetest.Proc{PID: 5000 + i, StartTicks: 7, Env: tokenEnv("unrelated")})
		sessions = append(sessions, session("reservation-"+string(rune('a'+i)), nil, reserved("reserved-"+string(rune('a'+i)))))
	}
	p, ct, cfs := proberOver(probetest.Tree{BootID: bootID, Procs: procs})
	results := p.ProbeAll(context.Background(), sessions)

	if ct.reads != 1 || ct.scans != 1 {
		t.Fatalf("%d table reads and %d scans for 50 owners and 10 reservations, want 1 and 1", ct.reads, ct.scans)
	}
	for _, path := range append(cfs.Paths("/stat"), cfs.Paths("/environ")...) {
		// Each owner's files are read by the batch read; each process's
		// once more by the scan at most.
		if n := cfs.Count(path); n > 2 {
			t.Errorf("%s read %d times", path, n)
		}
	}
	for _, path := range cfs.Paths("/environ") {
		if strings.HasPrefix(path, "50") && cfs.Count(path) != 1 {
			t.Errorf("the token scan read %s %d times, want once", path, cfs.Count(path))
		}
	}
	if len(results) != len(sessions) {
		t.Fatalf("%d results for %d sessions", len(results), len(sessions))
	}
	for i, s := range sessions[:50] {
		want := probe.IdentityMatched
		if i%5 == 4 {
			want = probe.PIDAbsent
		}
		if got := results[s.ID]; got.Outcome != want {
			t.Errorf("%s: %v, want %s", s.ID, got, want)
		}
	}
	for _, s := range sessions[50:] {
		if got := results[s.ID]; got.Outcome != probe.ReservationUnused {
			t.Errorf("%s: %v, want reservation-unused", s.ID, got)
		}
	}
}

func TestResultEvidence(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	for _, tc := range []struct {
		r     probe.Result
		dead  bool
		alive bool
		kind  leasestore.EvidenceKind
	}{
		{probe.Result{Outcome: probe.ExitObserved}, true, false, leasestore.EvidenceExitObserved},
		{probe.Result{Outcome: probe.PIDAbsent}, true, false, leasestore.EvidencePIDAbsent},
		{probe.Result{Outcome: probe.IdentityMismatch, Field: probe.FieldStartTime}, true, false, leasestore.EvidenceIdentityMismatch},
		{probe.Result{Outcome: probe.ReservationUnused}, false, false, leasestore.EvidencePIDAbsent},
		{probe.Result{Outcome: probe.IdentityMatched, MatchedOn: []probe.Field{probe.FieldStartTime}}, false, true, ""},
		{probe.Result{Outcome: probe.IdentityMatched}, false, false, ""},
		{probe.Result{Outcome: probe.Indeterminate}, false, false, ""},
	} {
		if tc.r.ProvenDead() != tc.dead || tc.r.ProvenAlive() != tc.alive {
			t.Errorf("%v: dead %v alive %v, want %v %v", tc.r, tc.r.ProvenDead(), tc.r.ProvenAlive(), tc.dead, tc.alive)
		}
		ev, ok := tc.r.Evidence(now)
		if ok != (tc.kind != "") || ev.Kind != tc.kind || (ok && !ev.ObservedAt.Equal(now)) {
			t.Errorf("%v: evidence %+v %v, want kind %q", tc.r, ev, ok, tc.kind)
		}
	}
}

func TestIdentifyFromSyntheticProc(t *testing.T) {
	tree := probetest.Tree{BootID: bootID, Procs: []probetest.Proc{
		{PID: 77, Comm: "weird ) name (x", StartTicks: 123456, Env: tokenEnv("tok")},
	}}
	p := &probe.Prober{HostID: hostID, Table: &probe.ProcFS{FS: tree.FS(), TokenVar: tokenVar}}
	id, err := p.Identify(context.Background(), 77)
	if err != nil {
		t.Fatal(err)
	}
	want := leasestore.ProcessIdentity{HostID: hostID, PID: 77, StartTicks: 123456, BootID: bootID, SpawnToken: "tok"}
	if !id.SameProcess(want) {
		t.Errorf("identity %+v, want %+v", id, want)
	}
	if _, err := p.Identify(context.Background(), 78); !errors.Is(err, probe.ErrNoProcess) {
		t.Errorf("absent pid: %v", err)
	}
	ffs := probetest.FailingFS{FS: tree.FS(), Errs: map[string]error{"77/stat": fs.ErrPermission}}
	p.Table = &probe.ProcFS{FS: ffs, TokenVar: tokenVar}
	if _, err := p.Identify(context.Background(), 77); !errors.Is(err, probe.ErrUnverifiable) {
		t.Errorf("unreadable pid: %v", err)
	}
}

func TestMalformedStatIsUnknown(t *testing.T) {
	tree := probetest.Tree{BootID: bootID}
	m := tree.FS()
	for name, stat := range map[string]string{
		"no command": "12 plugin S 1 12 12",
		"truncated":  "12 (plugin) S 1 12",
		"bad start":  "12 (plugin) S 1 12 12 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 soon 0 0",
	} {
		m["12/stat"] = &fstest.MapFile{Data: []byte(stat)}
		tbl := &probe.ProcFS{FS: m}
		procs, err := tbl.Read(context.Background(), []int{12})
		if err != nil || procs[0].Presence != probe.Unknown || procs[0].Err == nil {
			t.Errorf("%s: %+v, %v; want unknown with an error", name, procs, err)
		}
	}
}

func TestOwnsToken(t *testing.T) {
	sessions := []leasestore.Session{
		session("reserved", nil, reserved("reserved-token")),
		session("live", &owner, func(l *leasestore.Lease) { l.ReservedSpawnToken = "" }),
		session("released", nil, nil),
	}
	for token, want := range map[string]bool{"reserved-token": true, owner.SpawnToken: true, "stranger": false, "": false} {
		if got := probe.OwnsToken(sessions, token); got != want {
			t.Errorf("OwnsToken(%q) = %v, want %v", token, got, want)
		}
	}
}

func TestTokenVariable(t *testing.T) {
	for key, want := range map[string]string{
		"":          "AGENTHOST_SPAWN_TOKEN",
		"a1b2":      "AGENTHOST_SPAWN_TOKEN_A1B2",
		"state/dir": "AGENTHOST_SPAWN_TOKEN_STATE_DIR",
	} {
		if got := probe.TokenVariable(key); got != want {
			t.Errorf("TokenVariable(%q) = %q, want %q", key, got, want)
		}
	}
}
