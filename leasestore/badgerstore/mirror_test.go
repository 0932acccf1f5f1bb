package badgerstore_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/agenthost/agenthost/leasestore"
	"github.com/agenthost/agenthost/leasestore/leasestoretest"
)

// A journal mirror whose tail is torn (a crash in the middle of a write)
// is cut off at its last whole frame and caught up from the store, so a
// later loss of the store still finds every entry in it.
func TestTornMirrorIsCaughtUpFromTheStore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := testCtx(t)
	s := openStore(t, dir)
	live := leasestoretest.Live(t, ctx, s, "m")
	for i := range 20 {
		if _, err := s.Append(ctx, "m", live.Lease.Fence, leasestore.EntryInput{Kind: leasestore.KindUpdate, Payload: []byte{byte('a' + i)}}); err != nil {
			t.Fatal(err)
		}
	}
	last, err := s.LastSeq(ctx, "m")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	mirror := filepath.Join(dir, "store.journal")
	fi, err := os.Stat(mirror)
	if err != nil {
		t.Fatal(err)
	}
	// Tear the last frames: half the file, and a torn header after it.
	if err := os.Truncate(mirror, fi.Size()/2); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(mirror, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte{9, 9, 9}); err != nil {
		t.Fatal(err)
	}
	f.Close()

	s2 := openStore(t, dir)
	if rec := s2.Recovery(); rec != nil {
		t.Fatalf("a torn mirror beside a whole store reported a recovery: %v", rec)
	}
	if err := s2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Lose the store: every entry must come back from the mirror.
	if err := os.RemoveAll(filepath.Join(dir, "store")); err != nil {
		t.Fatal(err)
	}
	s3 := openStore(t, dir)
	got := 0
	if err := s3.Replay(ctx, "m", 0, func(e leasestore.Entry) error {
		if e.Seq <= last {
			got++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got != int(last) {
		t.Fatalf("after the store was lost, %d of the %d entries came back from the caught-up mirror", got, last)
	}
}
