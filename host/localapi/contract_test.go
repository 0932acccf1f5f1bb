package localapi

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/leasestore"
)

var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/golden from today's results")

// The results of _agenthost/session and _agenthost/status carry the host's
// own types; testdata/golden fixes their bytes, so a storage or host field
// renamed cannot change the API.
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
		},
		Incarnation: "inc-1", Deleting: true, CreatedAt: at, UpdatedAt: at.Add(time.Minute),
	}
	minimal := leasestore.Session{ID: "m", Agent: "scripted", Lease: leasestore.Lease{Claim: leasestore.ClaimReleased}}
	recovery := "restored from backup"
	status := host.Status{
		PID: 77, StateDir: "/state", HostID: "host-a", Agents: []string{"claude", "codex"}, Running: []string{"a", "b"},
		Sessions: 5, Decided: map[host.Action]int{host.ActionReadopted: 1, host.ActionEvicted: 2, host.ActionFree: 0},
		Recovery: &recovery, Latched: map[string]string{"x": "why", "a": "because"},
	}
	bare := host.Status{PID: 1, StateDir: "/s", Decided: map[host.Action]int{}}
	return map[string]any{
		"session-full":    map[string]any{"session": full, "lastSeq": uint64(12), "running": true},
		"session-minimal": map[string]any{"session": minimal, "lastSeq": uint64(0), "running": false},
		"status-full":     map[string]any{"host": status, "version": "1.2.3"},
		"status-bare":     map[string]any{"host": bare, "version": ""},
		// The _meta.agenthost of a session/list entry and of a
		// session/update notification.
		"list-meta": map[string]any{"agenthost": map[string]any{
			"agent": full.Agent, "claim": full.Lease.Claim, "stage": full.Lease.Stage, "fence": full.Lease.Fence, "handle": full.Handle(),
		}},
		"list-meta-minimal": map[string]any{"agenthost": map[string]any{
			"agent": minimal.Agent, "claim": minimal.Lease.Claim, "stage": minimal.Lease.Stage, "fence": minimal.Lease.Fence, "handle": minimal.Handle(),
		}},
		"update-meta": map[string]any{"agenthost": map[string]any{"seq": uint64(41), "turnId": "turn-1"}},
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
