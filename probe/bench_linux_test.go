package probe_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/agenthost/agenthost/leasestore"
)

// BenchmarkBatchProbe500 probes 500 live owners with one batch, beside a
// minimal hand-written /proc scan of the same pids that reads only the
// start tick. It reports both times per round and their ratio (the design
// target is at most 1.5).
func BenchmarkBatchProbe500(b *testing.B) {
	const n = 500
	sessions := make([]leasestore.Session, n)
	pids := make([]int, n)
	for i := range n {
		c := sleeper(b, []string{tokenVar + "=" + fmt.Sprint("bench-", i)}, false)
		pids[i] = c.pid()
	}
	for i, pid := range pids {
		id := identify(b, pid)
		sessions[i] = session(fmt.Sprint(i), &id, nil)
	}
	ctx := context.Background()
	p := realProber()
	var probeTime, scanTime time.Duration
	rounds := 0
	for b.Loop() {
		start := time.Now()
		res := p.ProbeAll(ctx, sessions)
		probeTime += time.Since(start)
		start = time.Now()
		ticks := handwrittenScan(b, pids)
		scanTime += time.Since(start)
		rounds++
		if len(res) != n || len(ticks) != n {
			b.Fatalf("%d results, %d ticks", len(res), len(ticks))
		}
		if r := res["0"]; !r.ProvenAlive() {
			b.Fatalf("owner 0: %v", r)
		}
	}
	b.ReportMetric(float64(probeTime.Nanoseconds())/float64(rounds)/1e6, "probe-ms/round")
	b.ReportMetric(float64(scanTime.Nanoseconds())/float64(rounds)/1e6, "scan-ms/round")
	b.ReportMetric(float64(probeTime)/float64(scanTime), "ratio")
}

// handwrittenScan is the baseline: read each pid's stat and parse field 22.
func handwrittenScan(b *testing.B, pids []int) []uint64 {
	out := make([]uint64, 0, len(pids))
	for _, pid := range pids {
		data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			b.Fatal(err)
		}
		rest := data[bytes.LastIndexByte(data, ')')+2:]
		fields := bytes.Fields(rest)
		v, err := strconv.ParseUint(string(fields[19]), 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}
