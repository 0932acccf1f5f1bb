package etcdstore_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/agenthost/agenthost/leasestore"
	"github.com/agenthost/agenthost/leasestore/etcdstore/etcdtest"
	"github.com/agenthost/agenthost/leasestore/leasestoretest"
)

// The benchmarks run on one embedded member (its own fsyncs on this
// machine's disk), and each prints its raw baseline beside it: a bare etcd
// client doing the same transactions the store does, without the store.
// Compare the ops/s metrics of a pair, not across machines.

var payload200 = []byte(`{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"` +
	strings.Repeat("0123456789", 12) + `"}}`)

func benchCluster(b *testing.B) *etcdtest.Cluster {
	b.Helper()
	return etcdtest.StartCluster(b, 1)
}

// BenchmarkAppend8Sessions: durable appends from 8 sessions at once, one
// appender each (every append is its own transaction: nothing to
// coalesce), and with 4 appenders per session (group commit coalesces
// them); raw: 8 goroutines doing the append transaction (fence compare,
// head compare, entry and head puts) with a bare client.
func BenchmarkAppend8Sessions(b *testing.B) {
	const sessions = 8
	for _, appenders := range []int{1, 4} {
		b.Run(fmt.Sprintf("store/appenders=%d", appenders), func(b *testing.B) {
			c := benchCluster(b)
			s := open(b, c, "/bench/", nil)
			ctx := context.Background()
			fences := make([]uint64, sessions)
			for i := range sessions {
				fences[i] = leasestoretest.Live(b, ctx, s, fmt.Sprint(i)).Lease.Fence
			}
			per := b.N/(sessions*appenders) + 1
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for i := range sessions {
				for range appenders {
					wg.Go(func() {
						for range per {
							if _, err := s.Append(ctx, fmt.Sprint(i), fences[i], leasestore.EntryInput{Kind: leasestore.KindUpdate, Payload: payload200}); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
			}
			wg.Wait()
			b.ReportMetric(float64(per*sessions*appenders)/time.Since(start).Seconds(), "appends/s")
		})
	}
	b.Run("raw", func(b *testing.B) {
		c := benchCluster(b)
		cli := rawClient(b, c)
		ctx := context.Background()
		per := b.N/sessions + 1
		for i := range sessions {
			if _, err := cli.Put(ctx, fmt.Sprintf("/raw/%d/w", i), fmt.Sprintf("%020d", 1)); err != nil {
				b.Fatal(err)
			}
		}
		b.ResetTimer()
		start := time.Now()
		var wg sync.WaitGroup
		for i := range sessions {
			wg.Go(func() {
				var headRev int64
				w, n := fmt.Sprintf("/raw/%d/w", i), fmt.Sprintf("/raw/%d/n", i)
				for seq := 1; seq <= per; seq++ {
					resp, err := cli.Txn(ctx).If(
						clientv3.Compare(clientv3.Value(w), "=", fmt.Sprintf("%020d", 1)),
						clientv3.Compare(clientv3.ModRevision(n), "=", headRev),
					).Then(
						clientv3.OpPut(fmt.Sprintf("/raw/%d/j/%020d", i, seq), string(payload200)),
						clientv3.OpPut(n, fmt.Sprintf("%020d", seq)),
					).Commit()
					if err != nil || !resp.Succeeded {
						b.Errorf("raw append: %v", err)
						return
					}
					headRev = resp.Header.Revision
				}
			})
		}
		wg.Wait()
		b.ReportMetric(float64(per*sessions)/time.Since(start).Seconds(), "appends/s")
	})
}

// BenchmarkCreateReserve: a new session created and reserved in one step
// (CreateAndApply with Reserve, as the host creates every session), one
// at a time; raw: the same transaction (absent-record compare, record,
// head, writer key and two journal entries) with a bare client.
func BenchmarkCreateReserve(b *testing.B) {
	b.Run("store", func(b *testing.B) {
		c := benchCluster(b)
		s := open(b, c, "/bench/", nil)
		ctx := context.Background()
		i := 0
		for b.Loop() {
			i++
			if _, err := s.CreateAndApply(ctx, leasestore.SessionSpec{ID: fmt.Sprint(i), Agent: "scripted", Workspace: "/work"},
				leasestore.Reserve{ExpectedFence: 0, ClaimKeyID: "key", HostID: "host-a"}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "creates/s")
	})
	b.Run("raw", func(b *testing.B) {
		c := benchCluster(b)
		cli := rawClient(b, c)
		ctx := context.Background()
		sess, created := leasestore.NewSession(leasestore.SessionSpec{ID: "x", Agent: "scripted", Workspace: "/work"}, time.Now())
		rec, err := leasestore.EncodeRecord(sess)
		if err != nil {
			b.Fatal(err)
		}
		entry := string(leasestore.EncodeEntry(leasestore.Entry{Seq: 1, Time: time.Now(), Kind: created.Kind, Payload: created.Payload}))
		i := 0
		for b.Loop() {
			i++
			r := fmt.Sprintf("/raw/r/%d", i)
			p := fmt.Sprintf("/raw/s/%d/", i)
			resp, err := cli.Txn(ctx).If(
				clientv3.Compare(clientv3.ModRevision(r), "=", 0),
				clientv3.Compare(clientv3.ModRevision(p+"n"), "=", 0),
			).Then(
				clientv3.OpPut(r, string(rec)), clientv3.OpPut(p+"w", fmt.Sprintf("%020d", 1)),
				clientv3.OpPut(p+"j/1", entry), clientv3.OpPut(p+"j/2", entry), clientv3.OpPut(p+"n", fmt.Sprintf("%020d", 2)),
			).Commit()
			if err != nil || !resp.Succeeded {
				b.Fatalf("raw create: %v", err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "creates/s")
	})
}
