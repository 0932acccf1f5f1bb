package leasestore_test

import (
	"errors"
	"testing"

	"github.com/agenthost/agenthost/leasestore"
)

// A reservation records its host; the ownership it leads to keeps it, and
// a release clears it.
func TestReserveRecordsItsHost(t *testing.T) {
	s, _, err := leasestore.Reserve{ExpectedFence: 3, HostID: "host-a"}.Apply(stateReleased(), env)
	if err != nil {
		t.Fatal(err)
	}
	if s.Lease.ReservedBy != "host-a" || s.Lease.OwnerHost() != "host-a" {
		t.Fatalf("reserved by %q, owner host %q, want host-a", s.Lease.ReservedBy, s.Lease.OwnerHost())
	}
	o := owner
	o.SpawnToken = s.Lease.ReservedSpawnToken
	s, _, err = leasestore.CommitOwner{Fence: 4, Owner: o}.Apply(s, env)
	if err != nil {
		t.Fatal(err)
	}
	if s.Lease.ReservedBy != "host-a" || s.Lease.OwnerHost() != owner.HostID {
		t.Fatalf("committed: reserved by %q, owner host %q; want host-a and the owner's %q", s.Lease.ReservedBy, s.Lease.OwnerHost(), owner.HostID)
	}
	s, _, err = leasestore.Release{Fence: 4}.Apply(s, env)
	if err != nil {
		t.Fatal(err)
	}
	if s.Lease.ReservedBy != "" || s.Lease.OwnerHost() != "" {
		t.Fatalf("released lease still names host %q", s.Lease.ReservedBy)
	}
}

func TestReconciledBy(t *testing.T) {
	mine := stateReserved()
	mine.Lease.ReservedBy = "a"
	theirs := stateReserved()
	theirs.Lease.ReservedBy = "b"
	ownedThere := stateLive()
	ownedThere.Lease.ReservedBy = "a" // the owner committed names the host
	ownedThere.Lease.Owner.HostID = "b"
	releasedMine := stateReleased()
	releasedMine.Lease.ReservedBy = "a"
	for _, tc := range []struct {
		name string
		s    leasestore.Session
		want bool
	}{
		{"a reservation of this host", mine, true},
		{"a reservation of another host", theirs, false},
		{"an owner on another host", ownedThere, false},
		{"an owner on this host", stateLive(), true},     // owner.HostID is "local"
		{"held, naming no host", stateReserved(), true},  // fail closed
		{"latched, naming no host", stateManual(), true}, // fail closed
		{"conflicted on this host", stateConflicted(), true},
		{"released", releasedMine, false},
		{"released, naming no host", stateReleased(), false},
	} {
		host := "a"
		if tc.s.Lease.Owner != nil && tc.s.Lease.Owner.HostID == "local" {
			host = "local"
		}
		if got := tc.s.Lease.ReconciledBy(host); got != tc.want {
			t.Errorf("%s: ReconciledBy(%q) = %v, want %v", tc.name, host, got, tc.want)
		}
	}
}

// The loss of a host evicts only with the backend's proof (Env.LostHost,
// set by a cluster's takeover) and only a lease of that host.
func TestEvictOnHostLost(t *testing.T) {
	lost := leasestore.Evict{Fence: 4, Evidence: leasestore.DeathEvidence{Kind: leasestore.EvidenceHostLost, Detail: "lease expired"}}
	takeover := func(host string) leasestore.Env {
		e := env
		e.LostHost = host
		return e
	}
	reservedByA := stateReserved()
	reservedByA.Lease.ReservedBy = "a"
	for _, tc := range []struct {
		name string
		s    leasestore.Session
		env  leasestore.Env
		want error
	}{
		{"through a plain Apply", stateLive(), env, leasestore.ErrInvalidArgument},
		{"naming another host than the owner's", stateLive(), takeover("elsewhere"), leasestore.ErrInvalidArgument},
		{"of a lease naming no host", stateReserved(), takeover("a"), leasestore.ErrOwnershipUnknown},
		{"of the owner's host", stateLive(), takeover("local"), nil},
		{"of the owner's host, latched", stateRecovering(), takeover("local"), nil},
		{"of the host that reserved", reservedByA, takeover("a"), nil},
		{"of the host that reserved, unreconciled", unreconciled(reservedByA), takeover("a"), nil},
	} {
		s, entry, err := lost.Apply(tc.s, tc.env)
		if !errors.Is(err, tc.want) || (tc.want != nil) == (err == nil) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
			continue
		}
		if err != nil {
			continue
		}
		l := s.Lease
		if l.Claim != leasestore.ClaimReleased || l.Fence != 5 || l.DeathEvidence == nil || l.DeathEvidence.Kind != leasestore.EvidenceHostLost ||
			l.ReservedBy != "" || l.Owner != nil || l.Unreconciled || entry == nil {
			t.Errorf("%s: evicted to %+v (entry %v)", tc.name, l, entry)
		}
	}
}

func TestProviderStateValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		st   leasestore.ProviderState
		want error
	}{
		{"ok", leasestore.ProviderState{Handle: "h", Data: []byte("x")}, nil},
		{"empty data", leasestore.ProviderState{Handle: "h"}, nil},
		{"at the limit", leasestore.ProviderState{Handle: "h", Data: make([]byte, leasestore.MaxProviderStateBytes)}, nil},
		{"no handle", leasestore.ProviderState{Data: []byte("x")}, leasestore.ErrInvalidArgument},
		{"over the limit", leasestore.ProviderState{Handle: "h", Data: make([]byte, leasestore.MaxProviderStateBytes+1)}, leasestore.ErrInvalidArgument},
	} {
		if err := tc.st.Validate(); !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}
