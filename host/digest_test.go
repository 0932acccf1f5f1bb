package host

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/internal/logtest"
	"github.com/agenthost/agenthost/leasestore"
)

// A pinned sha256 is verified before every spawn: the right digest starts
// the plugin, a wrong or malformed one fails the start before any process
// exists, with both digests in the error and pre-spawn proof in the lease.
func TestPluginSHA256IsVerifiedBeforeSpawn(t *testing.T) {
	ctx := testCtx(t)
	b, err := os.ReadFile(bins.scripted)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	good := hex.EncodeToString(sum[:])
	wrong := strings.Repeat("0", 64)
	dir, err := os.MkdirTemp("", "ah-digest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	h, err := openOnBadger(ctx, Config{
		StateDir: dir,
		Agents: map[string]AgentPlugin{
			"pinned":    {Path: bins.scripted, SHA256: strings.ToUpper(good)},
			"wrong":     {Path: bins.scripted, SHA256: wrong},
			"malformed": {Path: bins.scripted, SHA256: "not-a-digest"},
		},
		StartupTimeout: 20 * time.Second, StopTimeout: 5 * time.Second, Logger: logtest.New(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Shutdown(ctx); err != nil {
			t.Errorf("shut the host down: %v", err)
		}
	})

	s, err := h.StartSession(ctx, SessionRequest{ID: "pinned", Agent: "pinned", Workspace: t.TempDir()})
	if err != nil {
		t.Fatalf("a plugin with the right sha256 (upper case) did not start: %v", err)
	}
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	_, err = h.StartSession(ctx, SessionRequest{ID: "wrong", Agent: "wrong", Workspace: t.TempDir()})
	if !errors.Is(err, ErrDigestMismatch) || !strings.Contains(err.Error(), good) || !strings.Contains(err.Error(), wrong) ||
		!strings.Contains(err.Error(), bins.scripted) {
		t.Fatalf("wrong sha256: got %v, want an error naming the path and both digests", err)
	}
	rec, err := h.store.Get(ctx, "wrong")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Lease.Claim != leasestore.ClaimReleased || rec.Lease.Owner != nil || rec.Lease.DeathEvidence == nil ||
		rec.Lease.DeathEvidence.Kind != leasestore.EvidencePIDAbsent {
		t.Errorf("lease after a digest mismatch: %+v", rec.Lease)
	}
	var events []string
	for _, e := range journalOf(t, h, "wrong") {
		var ev leasestore.LifecycleEvent
		_ = json.Unmarshal(e.Payload, &ev)
		events = append(events, ev.Event)
	}
	if strings.Join(events, ",") != "created,reserved,pre-spawn-failure,released" {
		t.Errorf("lifecycle after a digest mismatch: %v (no spawn may begin)", events)
	}

	_, err = h.StartSession(ctx, SessionRequest{ID: "malformed", Agent: "malformed", Workspace: t.TempDir()})
	if !errors.Is(err, ErrDigestMismatch) || !strings.Contains(err.Error(), "not 64 hex digits") {
		t.Fatalf("malformed sha256: got %v", err)
	}
}
