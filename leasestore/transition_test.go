package leasestore_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/agenthost/agenthost/leasestore"
)

var (
	t0    = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	env   = leasestore.Env{Now: t0, NewToken: func() (string, error) { return "fresh-token", nil }}
	owner = leasestore.ProcessIdentity{HostID: "local", PID: 4242, StartTicks: 777, BootID: "boot", SpawnToken: "tok", InstanceID: "inst"}
)

// Lease states the table starts from; every one is at fence 4 unless its
// name says otherwise.
func stateReleased() leasestore.Session {
	return leasestore.Session{ID: "s", Agent: "a", Lease: leasestore.Lease{Fence: 3, Claim: leasestore.ClaimReleased}}
}

func stateReleasedWithFloor() leasestore.Session {
	s := stateReleased()
	s.Lease.MinNextFence = 10
	return s
}

func stateReserved() leasestore.Session {
	return leasestore.Session{ID: "s", Agent: "a", Lease: leasestore.Lease{
		Fence: 4, Claim: leasestore.ClaimReserved, Stage: leasestore.StageProving, ReservedSpawnToken: "tok"}}
}

func stateProcessless() leasestore.Session {
	s := stateReserved()
	s.Lease.ProcesslessAt = t0.Add(-time.Minute)
	return s
}

func stateReservedOwner() leasestore.Session {
	s := stateReserved()
	o := owner
	s.Lease.Owner = &o
	return s
}

func stateLive() leasestore.Session {
	s := stateReservedOwner()
	s.Lease.Claim, s.Lease.Stage = leasestore.ClaimLive, leasestore.StageNone
	s.Handles = []leasestore.HandleLink{{Handle: "h1", Origin: leasestore.HandleCreated, Fence: 4, ObservedAt: t0}}
	return s
}

func stateRecovering() leasestore.Session {
	s := stateLive()
	s.Lease.Stage, s.Lease.LatchReason = leasestore.StageRecovering, "unverified"
	return s
}

func stateManual() leasestore.Session {
	s := stateReserved()
	s.Lease.Stage = leasestore.StageManualRecovery
	return s
}

func stateConflicted() leasestore.Session {
	s := stateLive()
	s.Lease.Claim, s.Lease.Stage = leasestore.ClaimConflicted, leasestore.StageManualRecovery
	return s
}

func unreconciled(s leasestore.Session) leasestore.Session {
	s.Lease.Unreconciled = true
	return s
}

func fullChain() leasestore.Session {
	s := stateLive()
	s.Handles = make([]leasestore.HandleLink, leasestore.MaxHandleLinks)
	for i := range s.Handles {
		s.Handles[i] = leasestore.HandleLink{Handle: "old", Origin: leasestore.HandleResumed, Fence: 4}
	}
	return s
}

func withSettings(s leasestore.Session) leasestore.Session {
	s.Options = map[string]string{"model": "m1", "mode": "default"}
	s.MCPServers = []leasestore.MCPServer{{Name: "a", Transport: "stdio", Command: "/bin/a", Args: []string{"x"}, Env: []leasestore.NameValue{{Name: "K", Value: "V"}}}}
	s.Title = "old"
	s.AllowedScopes = []string{"Bash(ls)"}
	return s
}

func otherOwner() leasestore.ProcessIdentity {
	o := owner
	o.PID = 4343
	return o
}

func TestTransitions(t *testing.T) {
	ev := func(kind leasestore.EvidenceKind) leasestore.DeathEvidence {
		return leasestore.DeathEvidence{Kind: kind, Detail: "probe"}
	}
	type check func(t *testing.T, l leasestore.Session)
	lease := func(fence uint64, claim leasestore.Claim, stage leasestore.Stage) check {
		return func(t *testing.T, s leasestore.Session) {
			if s.Lease.Fence != fence || s.Lease.Claim != claim || s.Lease.Stage != stage {
				t.Errorf("lease is fence %d %s/%q, want fence %d %s/%q", s.Lease.Fence, s.Lease.Claim, s.Lease.Stage, fence, claim, stage)
			}
		}
	}
	and := func(cs ...check) check {
		return func(t *testing.T, s leasestore.Session) {
			for _, c := range cs {
				c(t, s)
			}
		}
	}
	released := func(fence uint64, kind leasestore.EvidenceKind) check {
		return and(lease(fence, leasestore.ClaimReleased, leasestore.StageNone), func(t *testing.T, s leasestore.Session) {
			l := s.Lease
			if l.Owner != nil || l.ReservedSpawnToken != "" || l.Reattach != nil || l.Unreconciled || !l.ProcesslessAt.IsZero() {
				t.Errorf("released lease keeps ownership state: %+v", l)
			}
			if l.DeathEvidence == nil || l.DeathEvidence.Kind != kind {
				t.Errorf("evidence %+v, want %s", l.DeathEvidence, kind)
			}
		})
	}
	decided := func(t *testing.T, s leasestore.Session) {
		if s.Lease.Unreconciled {
			t.Error("a restart decision left the lease unreconciled")
		}
	}

	cases := []struct {
		name  string
		from  leasestore.Session
		tr    leasestore.Transition
		want  error // sentinel; nil = allowed
		check check
		quiet bool // allowed, but journals nothing
	}{
		// reserve
		{"reserve released", stateReleased(), leasestore.Reserve{ExpectedFence: 3, ClaimKeyID: "k"}, nil,
			and(lease(4, leasestore.ClaimReserved, leasestore.StageProving), func(t *testing.T, s leasestore.Session) {
				if s.Lease.ReservedSpawnToken != "fresh-token" || s.Lease.ClaimKeyID != "k" || s.Lease.Owner != nil {
					t.Errorf("reservation %+v", s.Lease)
				}
			}), false},
		{"reserve respects the fence floor", stateReleasedWithFloor(), leasestore.Reserve{ExpectedFence: 3}, nil,
			lease(10, leasestore.ClaimReserved, leasestore.StageProving), false},
		{"reserve at a stale fence", stateReleased(), leasestore.Reserve{ExpectedFence: 2}, leasestore.ErrStaleFence, nil, false},
		{"reserve a reservation", stateReserved(), leasestore.Reserve{ExpectedFence: 4}, leasestore.ErrConflict, nil, false},
		{"reserve a live lease", stateLive(), leasestore.Reserve{ExpectedFence: 4}, leasestore.ErrConflict, nil, false},
		{"reserve a recovering lease", stateRecovering(), leasestore.Reserve{ExpectedFence: 4}, leasestore.ErrOwnershipUnknown, nil, false},
		{"reserve a manual-recovery lease", stateManual(), leasestore.Reserve{ExpectedFence: 4}, leasestore.ErrOwnershipUnknown, nil, false},
		{"reserve a conflicted lease", stateConflicted(), leasestore.Reserve{ExpectedFence: 4}, leasestore.ErrConflict, nil, false},
		{"reserve before reconciliation", unreconciled(stateReleased()), leasestore.Reserve{ExpectedFence: 3}, leasestore.ErrReconciling, nil, false},

		// pre-spawn failure
		{"pre-spawn failure", stateReserved(), leasestore.PreSpawnFailure{Fence: 4, Reason: "no binary"}, nil,
			func(t *testing.T, s leasestore.Session) {
				if !s.Lease.ProcesslessAt.Equal(t0) {
					t.Errorf("processlessAt %v", s.Lease.ProcesslessAt)
				}
			}, false},
		{"pre-spawn failure after a spawn", stateReservedOwner(), leasestore.PreSpawnFailure{Fence: 4}, leasestore.ErrInvalidTransition, nil, false},
		{"pre-spawn failure on a live lease", stateLive(), leasestore.PreSpawnFailure{Fence: 4}, leasestore.ErrInvalidTransition, nil, false},
		{"pre-spawn failure when released", stateReleased(), leasestore.PreSpawnFailure{Fence: 3}, leasestore.ErrInvalidTransition, nil, false},
		{"pre-spawn failure recorded again", stateProcessless(), leasestore.PreSpawnFailure{Fence: 4, Reason: "again"}, nil,
			func(t *testing.T, s leasestore.Session) {
				if !s.Lease.ProcesslessAt.Equal(t0) {
					t.Errorf("processlessAt %v", s.Lease.ProcesslessAt)
				}
			}, false},

		// commit owner
		{"commit the token's process", stateReserved(), leasestore.CommitOwner{Fence: 4, Owner: owner, Reattach: &leasestore.Reattach{Network: "unix", Address: "/s"}}, nil,
			and(lease(4, leasestore.ClaimReserved, leasestore.StageProving), func(t *testing.T, s leasestore.Session) {
				if s.Lease.Owner == nil || !s.Lease.Owner.SameProcess(owner) || s.Lease.Reattach == nil {
					t.Errorf("owner %+v reattach %+v", s.Lease.Owner, s.Lease.Reattach)
				}
			}), false},
		{"commit another token", stateReserved(), leasestore.CommitOwner{Fence: 4, Owner: func() leasestore.ProcessIdentity { o := owner; o.SpawnToken = "x"; return o }()}, leasestore.ErrTokenMismatch, nil, false},
		{"commit the same owner again", stateReservedOwner(), leasestore.CommitOwner{Fence: 4, Owner: owner}, nil, lease(4, leasestore.ClaimReserved, leasestore.StageProving), true},
		{"commit a second owner", stateReservedOwner(), leasestore.CommitOwner{Fence: 4, Owner: otherOwner()}, leasestore.ErrConflict, nil, false},
		{"commit after pre-spawn proof", stateProcessless(), leasestore.CommitOwner{Fence: 4, Owner: owner}, leasestore.ErrInvalidTransition, nil, false},
		{"commit without a pid", stateReserved(), leasestore.CommitOwner{Fence: 4, Owner: leasestore.ProcessIdentity{HostID: "local", SpawnToken: "tok"}}, leasestore.ErrInvalidArgument, nil, false},
		{"commit on a live lease", stateLive(), leasestore.CommitOwner{Fence: 4, Owner: owner}, leasestore.ErrInvalidTransition, nil, false},
		{"commit at a stale fence", stateReserved(), leasestore.CommitOwner{Fence: 3, Owner: owner}, leasestore.ErrStaleFence, nil, false},

		// prove owner
		{"prove the committed owner", stateReservedOwner(), leasestore.ProveOwner{Fence: 4, Handle: "thread-1", Origin: leasestore.HandleCreated}, nil,
			and(lease(4, leasestore.ClaimLive, leasestore.StageNone), func(t *testing.T, s leasestore.Session) {
				if s.Handle() != "thread-1" || s.Handles[0].Fence != 4 || s.Handles[0].HostID != owner.HostID || !s.Lease.AdmitsWriter() {
					t.Errorf("proven session %+v", s)
				}
			}), false},
		{"prove the same handle under a new fence re-mints the head", func() leasestore.Session {
			s := stateReservedOwner()
			s.Handles = []leasestore.HandleLink{{Handle: "thread-1", Origin: leasestore.HandleCreated, Fence: 2}}
			return s
		}(), leasestore.ProveOwner{Fence: 4, Handle: "thread-1", Origin: leasestore.HandleResumed}, nil,
			func(t *testing.T, s leasestore.Session) {
				if len(s.Handles) != 1 || s.Handles[0].Fence != 4 || s.Handles[0].Origin != leasestore.HandleResumed {
					t.Errorf("chain %+v, want one link re-minted at fence 4", s.Handles)
				}
			}, false},
		{"a handle proven on another host names that host", func() leasestore.Session {
			s := stateReservedOwner()
			o := *s.Lease.Owner
			o.HostID = "host-b"
			s.Lease.Owner = &o
			s.Handles = []leasestore.HandleLink{{Handle: "thread-1", Origin: leasestore.HandleCreated, Fence: 2, HostID: "host-a"}}
			return s
		}(), leasestore.ProveOwner{Fence: 4, Handle: "thread-1", Origin: leasestore.HandleResumed}, nil,
			func(t *testing.T, s leasestore.Session) {
				if len(s.Handles) != 1 || s.Handles[0].HostID != "host-b" || s.Handles[0].Fence != 4 {
					t.Errorf("chain %+v, want the head re-minted on host-b", s.Handles)
				}
			}, false},
		{"prove a handle newer than the lease", func() leasestore.Session {
			s := stateReservedOwner()
			s.Handles = []leasestore.HandleLink{{Handle: "thread-1", Origin: leasestore.HandleCreated, Fence: 9}}
			return s
		}(), leasestore.ProveOwner{Fence: 4, Handle: "thread-2", Origin: leasestore.HandleResumed}, leasestore.ErrStaleFence, nil, false},
		{"prove records the instance and reattach address", stateReservedOwner(), leasestore.ProveOwner{Fence: 4, Handle: "h", Origin: leasestore.HandleCreated,
			InstanceID: "inst-2", Reattach: &leasestore.Reattach{Network: "unix", Address: "/s/plugin"}}, nil,
			func(t *testing.T, s leasestore.Session) {
				if s.Lease.Owner.InstanceID != "inst-2" || s.Lease.Owner.PID != owner.PID || s.Lease.Reattach == nil || s.Lease.Reattach.Address != "/s/plugin" {
					t.Errorf("proven owner %+v, reattach %+v", s.Lease.Owner, s.Lease.Reattach)
				}
			}, false},
		{"prove without an owner", stateReserved(), leasestore.ProveOwner{Fence: 4, Handle: "h", Origin: leasestore.HandleCreated}, leasestore.ErrInvalidTransition, nil, false},
		{"prove with an unknown origin", stateReservedOwner(), leasestore.ProveOwner{Fence: 4, Handle: "h", Origin: "guessed"}, leasestore.ErrInvalidArgument, nil, false},
		{"prove without a handle", stateReservedOwner(), leasestore.ProveOwner{Fence: 4, Origin: leasestore.HandleCreated}, leasestore.ErrInvalidArgument, nil, false},
		{"prove a live lease", stateLive(), leasestore.ProveOwner{Fence: 4, Handle: "h", Origin: leasestore.HandleCreated}, leasestore.ErrInvalidTransition, nil, false},

		// record handle
		{"record a new handle", stateLive(), leasestore.RecordHandle{Fence: 4, Handle: "h2", Origin: leasestore.HandleResumed}, nil,
			func(t *testing.T, s leasestore.Session) {
				if len(s.Handles) != 2 || s.Handle() != "h2" || s.Handles[1].HostID != owner.HostID {
					t.Errorf("chain %+v", s.Handles)
				}
			}, false},
		{"record the current handle", stateLive(), leasestore.RecordHandle{Fence: 4, Handle: "h1", Origin: leasestore.HandleResumed}, nil,
			func(t *testing.T, s leasestore.Session) {
				if len(s.Handles) != 1 {
					t.Errorf("chain %+v", s.Handles)
				}
			}, true},
		{"record on a full chain", fullChain(), leasestore.RecordHandle{Fence: 4, Handle: "new", Origin: leasestore.HandleForked}, leasestore.ErrInvalidArgument, nil, false},
		{"record before proving", stateReservedOwner(), leasestore.RecordHandle{Fence: 4, Handle: "h", Origin: leasestore.HandleResumed}, leasestore.ErrInvalidTransition, nil, false},

		// release
		{"release a live lease", stateLive(), leasestore.Release{Fence: 4, Detail: "exit status 0"}, nil,
			and(released(5, leasestore.EvidenceExitObserved), func(t *testing.T, s leasestore.Session) {
				if s.Handle() != "h1" {
					t.Error("release dropped the handle chain; the session must stay resumable")
				}
			}), false},
		{"release a proving owner", stateReservedOwner(), leasestore.Release{Fence: 4}, nil, released(5, leasestore.EvidenceExitObserved), false},
		{"release a processless reservation", stateProcessless(), leasestore.Release{Fence: 4}, nil, released(5, leasestore.EvidencePIDAbsent), false},
		{"release an unproven ownerless reservation", stateReserved(), leasestore.Release{Fence: 4}, leasestore.ErrOwnershipUnknown, nil, false},
		{"release a recovering lease", stateRecovering(), leasestore.Release{Fence: 4}, leasestore.ErrOwnershipUnknown, nil, false},
		{"release a released lease", stateReleased(), leasestore.Release{Fence: 3}, leasestore.ErrInvalidTransition, nil, false},
		{"release before reconciliation", unreconciled(stateLive()), leasestore.Release{Fence: 4}, leasestore.ErrReconciling, nil, false},
		{"release at a stale fence", stateLive(), leasestore.Release{Fence: 3}, leasestore.ErrStaleFence, nil, false},

		// evict
		{"evict a dead owner at restart", unreconciled(stateLive()), leasestore.Evict{Fence: 4, Evidence: ev(leasestore.EvidencePIDAbsent)}, nil,
			and(released(5, leasestore.EvidencePIDAbsent), decided), false},
		{"evict a recovering lease on evidence", stateRecovering(), leasestore.Evict{Fence: 4, Evidence: ev(leasestore.EvidenceIdentityMismatch)}, nil, released(5, leasestore.EvidenceIdentityMismatch), false},
		{"evict an unused reservation", unreconciled(stateManual()), leasestore.Evict{Fence: 4, Evidence: ev(leasestore.EvidencePIDAbsent)}, nil, released(5, leasestore.EvidencePIDAbsent), false},
		{"evict a conflict a person settled", stateConflicted(), leasestore.Evict{Fence: 4, Evidence: ev(leasestore.EvidenceOperator)}, nil, released(5, leasestore.EvidenceOperator), false},
		{"evict with a floor", func() leasestore.Session { s := stateLive(); s.Lease.MinNextFence = 9; return s }(), leasestore.Evict{Fence: 4, Evidence: ev(leasestore.EvidencePIDAbsent)}, nil, released(9, leasestore.EvidencePIDAbsent), false},
		{"evict on a timeout", stateLive(), leasestore.Evict{Fence: 4, Evidence: ev("deadline-lapsed")}, leasestore.ErrInvalidArgument, nil, false},
		{"evict a released lease", stateReleased(), leasestore.Evict{Fence: 3, Evidence: ev(leasestore.EvidencePIDAbsent)}, leasestore.ErrInvalidTransition, nil, false},
		{"evict at a stale fence", unreconciled(stateLive()), leasestore.Evict{Fence: 3, Evidence: ev(leasestore.EvidencePIDAbsent)}, leasestore.ErrStaleFence, nil, false},

		// readopt
		{"readopt the recorded owner", unreconciled(stateLive()), leasestore.Readopt{Fence: 4, Owner: owner}, nil,
			and(lease(5, leasestore.ClaimLive, leasestore.StageNone), decided), false},
		{"readopt a proving owner", unreconciled(stateReservedOwner()), leasestore.Readopt{Fence: 4, Owner: owner}, nil,
			and(lease(5, leasestore.ClaimReserved, leasestore.StageProving), decided), false},
		{"readopt a recovering owner proven alive", stateRecovering(), leasestore.Readopt{Fence: 4, Owner: owner, Reattach: &leasestore.Reattach{Address: "/new"}}, nil,
			and(lease(5, leasestore.ClaimLive, leasestore.StageNone), func(t *testing.T, s leasestore.Session) {
				if s.Lease.Reattach == nil || s.Lease.Reattach.Address != "/new" || s.Lease.LatchReason != "" {
					t.Errorf("readopted lease %+v", s.Lease)
				}
			}), false},
		{"readopt another process", unreconciled(stateLive()), leasestore.Readopt{Fence: 4, Owner: otherOwner()}, leasestore.ErrIdentityMismatch, nil, false},
		{"readopt a recycled pid", unreconciled(stateLive()), leasestore.Readopt{Fence: 4, Owner: func() leasestore.ProcessIdentity { o := owner; o.StartTicks++; return o }()}, leasestore.ErrIdentityMismatch, nil, false},
		{"readopt an ownerless reservation", unreconciled(stateReserved()), leasestore.Readopt{Fence: 4, Owner: owner}, leasestore.ErrInvalidTransition, nil, false},
		{"readopt a conflicted lease", stateConflicted(), leasestore.Readopt{Fence: 4, Owner: owner}, leasestore.ErrInvalidTransition, nil, false},
		{"readopt a released lease", stateReleased(), leasestore.Readopt{Fence: 3, Owner: owner}, leasestore.ErrInvalidTransition, nil, false},

		// latch
		{"latch an unverifiable owner", unreconciled(stateLive()), leasestore.Latch{Fence: 4, Stage: leasestore.StageRecovering, Reason: "permission denied"}, nil,
			and(lease(4, leasestore.ClaimLive, leasestore.StageRecovering), decided), false},
		{"latch an unattributable reservation", unreconciled(stateReserved()), leasestore.Latch{Fence: 4, Stage: leasestore.StageManualRecovery}, nil,
			and(lease(4, leasestore.ClaimReserved, leasestore.StageManualRecovery), decided), false},
		{"recovering needs an owner", unreconciled(stateReserved()), leasestore.Latch{Fence: 4, Stage: leasestore.StageRecovering}, leasestore.ErrInvalidTransition, nil, false},
		{"latch a released lease", unreconciled(stateReleased()), leasestore.Latch{Fence: 3, Stage: leasestore.StageManualRecovery}, leasestore.ErrInvalidTransition, nil, false},
		{"latch to a settled stage", unreconciled(stateLive()), leasestore.Latch{Fence: 4, Stage: leasestore.StageNone}, leasestore.ErrInvalidArgument, nil, false},

		// conflicted (no transition enters it; a record may carry it)
		{"release a conflicted lease", stateConflicted(), leasestore.Release{Fence: 4}, leasestore.ErrOwnershipUnknown, nil, false},
		{"latch a conflicted lease at restart", unreconciled(stateConflicted()), leasestore.Latch{Fence: 4, Stage: leasestore.StageManualRecovery, Reason: "no process to probe"}, nil,
			and(lease(4, leasestore.ClaimConflicted, leasestore.StageManualRecovery), decided), false},
		{"evict a conflict at restart", unreconciled(stateConflicted()), leasestore.Evict{Fence: 4, Evidence: ev(leasestore.EvidenceOperator)}, nil,
			and(released(5, leasestore.EvidenceOperator), decided), false},

		// reconciled
		{"reconcile a released lease", unreconciled(stateReleased()), leasestore.Reconciled{Fence: 3}, nil,
			and(lease(3, leasestore.ClaimReleased, leasestore.StageNone), decided), true},
		{"reconcile a held lease", unreconciled(stateLive()), leasestore.Reconciled{Fence: 4}, leasestore.ErrInvalidTransition, nil, false},

		// record settings
		{"record settings on a live lease", withSettings(stateLive()), leasestore.RecordSettings{Fence: 4,
			Options: map[string]string{"model": "m2"}, SetMCPServers: true, MCPServers: []leasestore.MCPServer{{Name: "b", Transport: "http", URL: "http://b"}},
			Title: "a title", AllowScope: "edit", AgentState: []byte(`{"modes":null}`)}, nil,
			and(lease(4, leasestore.ClaimLive, leasestore.StageNone), func(t *testing.T, s leasestore.Session) {
				if s.Options["model"] != "m2" || len(s.Options) != 1 || len(s.MCPServers) != 1 || s.MCPServers[0].Name != "b" ||
					s.Title != "a title" || !reflect.DeepEqual(s.AllowedScopes, []string{"Bash(ls)", "edit"}) || string(s.AgentState) != `{"modes":null}` {
					t.Errorf("settings %+v", s)
				}
			}), true},
		{"record nothing keeps every setting", withSettings(stateLive()), leasestore.RecordSettings{Fence: 4}, nil,
			func(t *testing.T, s leasestore.Session) {
				w := withSettings(stateLive())
				if !reflect.DeepEqual(s.Options, w.Options) || !reflect.DeepEqual(s.MCPServers, w.MCPServers) || s.Title != w.Title ||
					!reflect.DeepEqual(s.AllowedScopes, w.AllowedScopes) {
					t.Errorf("settings %+v, want %+v", s, w)
				}
			}, true},
		{"record a scope already allowed", withSettings(stateLive()), leasestore.RecordSettings{Fence: 4, AllowScope: "Bash(ls)"}, nil,
			func(t *testing.T, s leasestore.Session) {
				if !reflect.DeepEqual(s.AllowedScopes, []string{"Bash(ls)"}) {
					t.Errorf("scopes %q", s.AllowedScopes)
				}
			}, true},
		{"clear the MCP servers", withSettings(stateLive()), leasestore.RecordSettings{Fence: 4, SetMCPServers: true}, nil,
			func(t *testing.T, s leasestore.Session) {
				if len(s.MCPServers) != 0 {
					t.Errorf("servers %+v", s.MCPServers)
				}
			}, true},
		{"record settings on a reservation", stateReservedOwner(), leasestore.RecordSettings{Fence: 4, Options: map[string]string{"mode": "plan"}}, nil,
			func(t *testing.T, s leasestore.Session) {
				if s.Options["mode"] != "plan" {
					t.Errorf("options %v", s.Options)
				}
			}, true},
		{"record settings at a stale fence", stateLive(), leasestore.RecordSettings{Fence: 3, Title: "x"}, leasestore.ErrStaleFence, nil, false},
		{"record settings when released", stateReleased(), leasestore.RecordSettings{Fence: 3, Title: "x"}, leasestore.ErrInvalidTransition, nil, false},
		{"record settings when latched", stateRecovering(), leasestore.RecordSettings{Fence: 4, Title: "x"}, leasestore.ErrOwnershipUnknown, nil, false},
		{"record settings before reconciliation", unreconciled(stateLive()), leasestore.RecordSettings{Fence: 4, Title: "x"}, leasestore.ErrReconciling, nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before, err := json.Marshal(tc.from)
			if err != nil {
				t.Fatal(err)
			}
			got, entry, err := tc.tr.Apply(tc.from, env)
			after, _ := json.Marshal(tc.from)
			if string(before) != string(after) {
				t.Fatal("Apply mutated its input")
			}
			if tc.want != nil {
				if !errors.Is(err, tc.want) {
					t.Fatalf("got error %v, want %v", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			tc.check(t, got)
			if tc.quiet != (entry == nil) {
				t.Errorf("journal entry %+v, want one: %v", entry, !tc.quiet)
			}
			if entry != nil {
				var ev leasestore.LifecycleEvent
				if err := json.Unmarshal(entry.Payload, &ev); err != nil || ev.Fence != got.Lease.Fence || ev.Claim != got.Lease.Claim {
					t.Errorf("journal entry %s does not describe the new lease (%v)", entry.Payload, err)
				}
			}
		})
	}
}

func TestReserveSurfacesTokenFailure(t *testing.T) {
	boom := errors.New("entropy exhausted")
	_, _, err := leasestore.Reserve{ExpectedFence: 3}.Apply(stateReleased(),
		leasestore.Env{Now: t0, NewToken: func() (string, error) { return "", boom }})
	if !errors.Is(err, boom) {
		t.Fatalf("got %v, want the token error", err)
	}
}

// An empty spawn token would match a child that carries none.
func TestReserveRefusesEmptyToken(t *testing.T) {
	_, entry, err := leasestore.Reserve{ExpectedFence: 3}.Apply(stateReleased(),
		leasestore.Env{Now: t0, NewToken: func() (string, error) { return "", nil }})
	if err == nil || entry != nil {
		t.Fatalf("reserve with an empty token: %v, entry %v", err, entry)
	}
}

// Nothing moves a session whose Delete has begun, and appends are refused.
func TestDeletingSessionRefusesEverything(t *testing.T) {
	deleting := stateReleased()
	deleting.Deleting = true
	for _, tr := range []leasestore.Transition{
		leasestore.Reserve{ExpectedFence: 3},
		leasestore.Evict{Fence: 3, Evidence: leasestore.DeathEvidence{Kind: leasestore.EvidenceOperator}},
		leasestore.Reconciled{Fence: 3},
		leasestore.Latch{Fence: 3, Stage: leasestore.StageManualRecovery},
	} {
		if _, _, err := tr.Apply(deleting, env); !errors.Is(err, leasestore.ErrNotFound) {
			t.Errorf("%s on a session being deleted: %v, want ErrNotFound", tr.Name(), err)
		}
	}
	live := stateLive()
	live.Deleting = true
	if err := leasestore.CheckAppend(live, 4); !errors.Is(err, leasestore.ErrNotFound) {
		t.Errorf("append to a session being deleted: %v, want ErrNotFound", err)
	}
}

// CheckAppend refuses a lease no writer holds, and CheckDelete anything but
// a released, settled, decided session at its fence (one whose Delete has
// begun needs only its fence); the sentinel says why.
func TestChecks(t *testing.T) {
	deleting := unreconciled(stateReleased())
	deleting.Deleting = true
	conflictedUnlatched := stateConflicted()
	conflictedUnlatched.Lease.Stage = leasestore.StageNone
	appendCheck, deleteCheck := leasestore.CheckAppend, leasestore.CheckDelete
	for _, tc := range []struct {
		name  string
		check func(leasestore.Session, uint64) error
		from  leasestore.Session
		fence uint64
		want  error
	}{
		{"append live", appendCheck, stateLive(), 4, nil},
		{"append proving", appendCheck, stateReservedOwner(), 4, nil},
		{"append at a stale fence", appendCheck, stateLive(), 3, leasestore.ErrStaleFence},
		{"append released", appendCheck, stateReleased(), 3, leasestore.ErrInvalidTransition},
		{"append recovering", appendCheck, stateRecovering(), 4, leasestore.ErrOwnershipUnknown},
		{"append conflicted, in manual recovery", appendCheck, stateConflicted(), 4, leasestore.ErrOwnershipUnknown},
		{"append conflicted", appendCheck, conflictedUnlatched, 4, leasestore.ErrConflict},
		{"append unreconciled", appendCheck, unreconciled(stateLive()), 4, leasestore.ErrReconciling},

		{"delete released", deleteCheck, stateReleased(), 3, nil},
		{"delete at a stale fence", deleteCheck, stateReleased(), 2, leasestore.ErrStaleFence},
		{"delete live", deleteCheck, stateLive(), 4, leasestore.ErrConflict},
		{"delete latched", deleteCheck, stateManual(), 4, leasestore.ErrConflict},
		{"delete conflicted", deleteCheck, stateConflicted(), 4, leasestore.ErrConflict},
		{"delete unreconciled", deleteCheck, unreconciled(stateReleased()), 3, leasestore.ErrReconciling},
		{"delete again, flagged by a restart since", deleteCheck, deleting, 3, nil},
		{"delete again at a stale fence", deleteCheck, deleting, 2, leasestore.ErrStaleFence},
	} {
		if err := tc.check(tc.from, tc.fence); !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestTransitionErrorsExplain(t *testing.T) {
	_, _, err := leasestore.Reserve{ExpectedFence: 4}.Apply(stateRecovering(), env)
	var te *leasestore.TransitionError
	if !errors.As(err, &te) || te.Op != "reserve" || te.Stage != leasestore.StageRecovering {
		t.Fatalf("got %#v", err)
	}
	_, _, err = leasestore.Reserve{ExpectedFence: 1}.Apply(stateReleased(), env)
	var stale *leasestore.StaleFenceError
	if !errors.As(err, &stale) || stale.Current != 3 || stale.Expected != 1 {
		t.Fatalf("got %#v", err)
	}
}

func TestNextFence(t *testing.T) {
	for _, tc := range []struct{ fence, floor, want uint64 }{
		{0, 0, 1}, {4, 0, 5}, {4, 3, 5}, {4, 5, 5}, {4, 9, 9},
	} {
		l := leasestore.Lease{Fence: tc.fence, MinNextFence: tc.floor}
		if got := l.NextFence(); got != tc.want {
			t.Errorf("NextFence(fence %d, floor %d) = %d, want %d", tc.fence, tc.floor, got, tc.want)
		}
	}
}

func TestSameProcess(t *testing.T) {
	if !owner.SameProcess(owner) {
		t.Fatal("an identity differs from itself")
	}
	v := reflect.ValueOf(&owner).Elem()
	for i := range v.NumField() {
		other := owner
		f := reflect.ValueOf(&other).Elem().Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString(f.String() + "x")
		case reflect.Int:
			f.SetInt(f.Int() + 1)
		case reflect.Uint64:
			f.SetUint(f.Uint() + 1)
		case reflect.Struct:
			f.Set(reflect.ValueOf(t0))
		default:
			t.Fatalf("field %s of kind %s is not covered", v.Type().Field(i).Name, f.Kind())
		}
		if owner.SameProcess(other) {
			t.Errorf("identities differing in %s count as the same process", v.Type().Field(i).Name)
		}
	}
}
