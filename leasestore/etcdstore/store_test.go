package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/agenthost/agenthost/leasestore"
	"github.com/agenthost/agenthost/leasestore/etcdstore"
	"github.com/agenthost/agenthost/leasestore/etcdstore/etcdtest"
	"github.com/agenthost/agenthost/leasestore/leasestoretest"
)

func ctxFor(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// rawClient is a bare etcd client on c, for what the store must not be
// asked to do (compact on demand, find the leader).
func rawClient(t testing.TB, c *etcdtest.Cluster) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

func appendN(t testing.TB, ctx context.Context, s leasestore.Store, id string, fence uint64, n int, tag string) {
	t.Helper()
	for i := range n {
		if _, err := s.Append(ctx, id, fence, leasestore.EntryInput{Kind: leasestore.KindUpdate, Payload: fmt.Appendf(nil, "%s-%d", tag, i)}); err != nil {
			t.Fatalf("append %s-%d: %v", tag, i, err)
		}
	}
}

// TestTailAcrossCompaction: a tail whose watch revision was compacted
// while its reader was slow reads again from its next seq: it skips no
// entry and delivers none twice, and follows live entries afterwards.
func TestTailAcrossCompaction(t *testing.T) {
	t.Parallel()
	c := etcdtest.StartCluster(t, 1)
	s := open(t, c, "/tail/", func(o *etcdstore.Options) { o.CompactWindow = -1 })
	cli := rawClient(t, c)
	ctx := ctxFor(t)
	sess := leasestoretest.Live(t, ctx, s, "s")
	fence := sess.Lease.Fence
	appendN(t, ctx, s, "s", fence, 5, "before")

	entered, resume := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var seqs []uint64
	tailCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	tailed := make(chan error, 1)
	go func() {
		tailed <- s.Tail(tailCtx, "s", 1, func(e leasestore.Entry) error {
			mu.Lock()
			seqs = append(seqs, e.Seq)
			n := len(seqs)
			mu.Unlock()
			if n == 1 {
				close(entered)
				<-resume
			}
			return nil
		})
	}()
	<-entered
	appendN(t, ctx, s, "s", fence, 300, "while")
	resp, err := cli.Get(ctx, "/tail/")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, resp.Header.Revision); err != nil {
		t.Fatalf("compact: %v", err)
	}
	close(resume)
	appendN(t, ctx, s, "s", fence, 20, "after")
	last, err := s.LastSeq(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.After(30 * time.Second)
	for {
		mu.Lock()
		n := len(seqs)
		mu.Unlock()
		if uint64(n) >= last {
			break
		}
		select {
		case <-deadline:
			t.Fatalf("the tail delivered %d of %d entries", n, last)
		case <-time.After(20 * time.Millisecond):
		}
	}
	cancel()
	if err := <-tailed; !errors.Is(err, context.Canceled) {
		t.Errorf("tail ended with %v", err)
	}
	for i, seq := range seqs {
		if seq != uint64(i)+1 {
			t.Fatalf("delivery %d was seq %d: skipped or delivered twice", i, seq)
		}
	}
	if uint64(len(seqs)) != last {
		t.Errorf("delivered %d entries, the journal has %d", len(seqs), last)
	}
}

// TestCompactionKeepsEveryEntry: the store's own compaction removes old
// revisions but no journal entry, and a replay still reads them all.
func TestCompactionKeepsEveryEntry(t *testing.T) {
	t.Parallel()
	c := etcdtest.StartCluster(t, 1)
	s := open(t, c, "/compact/", func(o *etcdstore.Options) { o.CompactWindow = 200 * time.Millisecond })
	cli := rawClient(t, c)
	ctx := ctxFor(t)
	sess := leasestoretest.Live(t, ctx, s, "s")
	appendN(t, ctx, s, "s", sess.Lease.Fence, 50, "x")
	old, err := cli.Get(ctx, "/compact/")
	if err != nil {
		t.Fatal(err)
	}
	oldRev := old.Header.Revision
	appendN(t, ctx, s, "s", sess.Lease.Fence, 50, "y")
	for {
		_, err := cli.Get(ctx, "/compact/", clientv3.WithRev(oldRev))
		if errors.Is(err, rpctypes.ErrCompacted) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if ctx.Err() != nil {
			t.Fatal("the store never compacted")
		}
		// Compaction needs new revisions past the window to target.
		appendN(t, ctx, s, "s", sess.Lease.Fence, 1, "tick")
		time.Sleep(50 * time.Millisecond)
	}
	n := 0
	if err := s.Replay(ctx, "s", 0, func(e leasestore.Entry) error {
		n++
		if e.Seq != uint64(n) {
			return fmt.Errorf("entry %d has seq %d", n, e.Seq)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	last, err := s.LastSeq(ctx, "s")
	if err != nil || uint64(n) != last || n < 104 {
		t.Fatalf("replayed %d entries after compaction, last seq %d (%v)", n, last, err)
	}
}

// TestEntryTooLargeForOneTransaction: an entry that leasestore accepts
// but that cannot fit one etcd transaction with its key is refused
// before anything is written, naming the limit.
func TestEntryTooLargeForOneTransaction(t *testing.T) {
	t.Parallel()
	c := etcdtest.StartCluster(t, 1)
	s := open(t, c, "/big/", nil)
	ctx := ctxFor(t)
	id := strings.Repeat("long-id/", leasestore.MaxSessionIDLen/8)
	sess := leasestoretest.Live(t, ctx, s, id)
	before, err := s.LastSeq(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Append(ctx, id, sess.Lease.Fence,
		leasestore.EntryInput{Kind: leasestore.KindUpdate, Payload: []byte("small")},
		leasestore.EntryInput{Kind: leasestore.KindUpdate, Payload: make([]byte, leasestore.MaxPayloadSize)})
	if !errors.Is(err, leasestore.ErrInvalidArgument) || !strings.Contains(err.Error(), "MaxTxnBytes") {
		t.Fatalf("append of an entry too large for a transaction: %v", err)
	}
	if after, _ := s.LastSeq(ctx, id); after != before {
		t.Errorf("a refused append wrote %d entries", after-before)
	}
	// What fits goes in.
	if _, err := s.Append(ctx, id, sess.Lease.Fence, leasestore.EntryInput{Kind: leasestore.KindUpdate, Payload: make([]byte, 800<<10)}); err != nil {
		t.Errorf("append of an entry that fits: %v", err)
	}
}

// TestAppendsThroughAMemberLoss: appends go on while the leader of a
// three-member cluster is stopped and restarted; whatever became of the
// appends that failed meanwhile, the journal has no gap and no duplicate,
// and every acknowledged entry is in it once.
func TestAppendsThroughAMemberLoss(t *testing.T) {
	t.Parallel()
	c := etcdtest.StartCluster(t, 3)
	s := open(t, c, "/faults/", func(o *etcdstore.Options) { o.RequestTimeout = 5 * time.Second })
	cli := rawClient(t, c)
	ctx := ctxFor(t)
	ids := []string{"a", "b"}
	fences := map[string]uint64{}
	for _, id := range ids {
		fences[id] = leasestoretest.Live(t, ctx, s, id).Lease.Fence
	}
	const writers, per = 3, 60
	var mu sync.Mutex
	acked := map[string]bool{}
	failed := 0
	var wg sync.WaitGroup
	started := make(chan struct{})
	var once sync.Once
	for _, id := range ids {
		for w := range writers {
			wg.Go(func() {
				for i := range per {
					if i == per/4 {
						once.Do(func() { close(started) })
					}
					p := fmt.Sprintf("%s/%d/%d", id, w, i)
					_, err := s.Append(ctx, id, fences[id], leasestore.EntryInput{Kind: leasestore.KindUpdate, Payload: []byte(p)})
					mu.Lock()
					if err == nil {
						acked[p] = true
					} else {
						failed++
					}
					mu.Unlock()
					if errors.Is(err, leasestore.ErrDamaged) {
						return
					}
				}
			})
		}
	}
	<-started
	leader := -1
	for i, ep := range c.Endpoints() {
		st, err := cli.Status(ctx, ep)
		if err == nil && st.Leader == st.Header.MemberId {
			leader = i
		}
	}
	if leader < 0 {
		t.Fatal("no leader found")
	}
	c.Stop(leader)
	time.Sleep(700 * time.Millisecond)
	c.Restart(leader)
	wg.Wait()
	t.Logf("%d appends acknowledged, %d failed across the loss of member %d (the leader)", len(acked), failed, leader)

	check := open(t, c, "/faults/", nil)
	for _, id := range ids {
		seen := map[string]bool{}
		var next uint64 = 1
		if err := check.Replay(ctx, id, 0, func(e leasestore.Entry) error {
			if e.Seq != next {
				return fmt.Errorf("seq %d where %d was due", e.Seq, next)
			}
			next++
			if e.Kind != leasestore.KindUpdate {
				return nil
			}
			p := string(e.Payload)
			if seen[p] {
				return fmt.Errorf("entry %q journaled twice", p)
			}
			seen[p] = true
			return nil
		}); err != nil {
			t.Fatalf("journal of %q: %v", id, err)
		}
		for p := range acked {
			if strings.HasPrefix(p, id+"/") && !seen[p] {
				t.Errorf("acknowledged entry %q is not in the journal", p)
			}
		}
	}
}
