package localapi

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/leasestore"
)

var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/golden from today's results")

// testdata/golden fixes the bytes of the results of _agenthost/session and
// _agenthost/status, once the store's and the host's own types, and of the
// _meta the server adds to ACP messages: the API's types must marshal as
// those always did.
func goldenResults() map[string]any {
	at := time.Date(2025, 3, 4, 5, 6, 7, 891011121, time.UTC)
	full := leasestore.Session{
		ID: "s\x00/<1>", Agent: "claude", Workspace: "/work/space",
		Options: map[string]string{"model": "opus", "effort": "high"},
		Handles: []leasestore.HandleLink{
			{Handle: "h-1", Origin: leasestore.HandleCreated, Fence: 1, ObservedAt: at},
			{Handle: "h-2", Origin: leasestore.HandleForked, Fence: 3, ObservedAt: at.Add(time.Second)},
		},
		Lease: leasestore.Lease{
			Fence: 3, Claim: leasestore.ClaimReserved, Stage: leasestore.StageRecovering,
			Owner: &leasestore.ProcessIdentity{HostID: "host-a", PID: 4242, StartTicks: 987654, BootID: "boot-1",
				StartTime: at, SpawnToken: "tok", InstanceID: "inst"},
			ReservedSpawnToken: "tok", ProcesslessAt: at,
			Reattach: &leasestore.Reattach{Network: "unix", Address: "/tmp/p.sock", ProtocolVersion: 1,
				PluginPath: "/bin/plugin", LogPath: "/var/log/p.log"},
			DeathEvidence: &leasestore.DeathEvidence{Kind: leasestore.EvidenceExitObserved, Detail: "exit 1", ObservedAt: at},
			MinNextFence:  9, ClaimKeyID: "key-1", Unreconciled: true, LatchReason: "owner unverifiable",
			ReservedBy: "host-a",
		},
		Incarnation: "inc-1", Deleting: true, CreatedAt: at, UpdatedAt: at.Add(time.Minute),
	}
	minimal := leasestore.Session{ID: "m", Agent: "scripted", Lease: leasestore.Lease{Claim: leasestore.ClaimReleased}}
	recovery := "restored from backup"
	status := host.Status{
		PID: 77, StateDir: "/state", HostID: "host-a", Agents: []string{"claude", "codex"}, Running: []string{"a", "b"},
		Sessions: 5, Decided: map[host.Action]int{host.ActionReadopted: 1, host.ActionEvicted: 2, host.ActionFree: 0},
		Recovery: &recovery, Latched: map[string]string{"x": "why", "a": "because"}, DiskBytes: 4096,
		Owners: map[string]string{"a": "host-a", "x": "host-b"},
		Cluster: &host.ClusterStatus{Live: true, ValidUntil: at, Epoch: 2, LivenessTTL: 5 * time.Second, SelfFence: 2500 * time.Millisecond,
			DriftMargin: time.Second, Hosts: []leasestore.HostRecord{{HostID: "host-a", Incarnation: "i", PID: 9, Address: "/run/a.sock", Registered: at}},
			Takeovers: map[string]time.Time{"host-c": at}},
	}
	bare := host.Status{PID: 1, StateDir: "/s", Decided: map[host.Action]int{}}
	return map[string]any{
		"session-full":    api.SessionResult{LastSeq: 12, Running: true, Followers: 2, Session: apiSession(full, where{running: true})},
		"session-minimal": api.SessionResult{Session: apiSession(minimal, where{})},
		"status-full":     api.StatusResult{Host: apiStatus(status), Version: "1.2.3"},
		"status-bare":     api.StatusResult{Host: apiStatus(bare)},
		// The _meta.agenthost of a session/list entry and of a
		// session/update notification.
		"list-meta":         listedMeta(full, where{}),
		"list-meta-minimal": listedMeta(minimal, where{}),
		"update-meta":       updateMeta(41, "turn-1"),
	}
}

func TestResultGoldenBytes(t *testing.T) {
	for name, v := range goldenResults() {
		got, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join("testdata", "golden", name+".json")
		if *updateGolden {
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s:\n%s\nwant\n%s", name, got, want)
		}
	}
}

// The restart decisions the API names are the host's.
func TestActionsAreTheHosts(t *testing.T) {
	for act, name := range map[host.Action]string{
		host.ActionReadopted: api.ActionReadopted, host.ActionEvicted: api.ActionEvicted,
		host.ActionLatched: api.ActionLatched, host.ActionFree: api.ActionFree, host.ActionUndecided: api.ActionUndecided,
	} {
		if string(act) != name {
			t.Errorf("host action %q is %q in the API", act, name)
		}
	}
}
