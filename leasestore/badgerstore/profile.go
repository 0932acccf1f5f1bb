package badgerstore

import (
	"fmt"
	"strings"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
	"github.com/hashicorp/go-hclog"
)

// The desktop profile. Badger's defaults are sized for a database server: a
// 64 MiB memtable, five of them, a 256 MiB block cache and a 1 GiB value log
// preallocated twice (2 GiB apparent size on disk). A desktop sidecar holds a
// few hundred sessions and their journals, so the profile trades peak write
// throughput for footprint (the numbers below are measured):
//
//   - MemTableSize 8 MiB, NumMemtables 2: two small arenas. The memtable also
//     caps one transaction at 15% of its size (1.2 MiB), which bounds a group
//     commit; larger batches are split by the writer.
//   - ValueThreshold 1 MiB (must stay <= 15% of the memtable): every value a
//     journal accepts (MaxPayloadSize plus header) and every session record
//     stays in the LSM tree, so the value log is never written. No value-log
//     GC is needed, and the "key present, value missing after power loss"
//     class of bugs cannot happen.
//   - ValueLogFileSize 1 MiB, the least Badger takes: the (unused) value log
//     is created at twice this, 2 MiB instead of 2 GiB. Badger's files are
//     allocated when created (not sparse: see third_party/ristretto's
//     PATCH.md), so this is disk really used; each memtable log takes twice
//     MemTableSize, 16 MiB.
//   - NumLevelZeroTables 2 / stall 4, BaseTableSize 1 MiB, BaseLevelSize
//     4 MiB: small compaction builders (they dominate heap under bursts).
//   - NumCompactors 2: 0 stalls writes eventually and 1 is rejected.
//   - Compression none and BlockCacheSize 0: entries are small JSON and
//     varints; a block cache is mandatory with compression and pointless
//     without it. IndexCacheSize 0 keeps the (small) indexes in memory.
//   - SyncWrites true: a lease change or an acknowledged journal entry must
//     survive power loss, not only a process crash. Group commit keeps the
//     cost to one sync per batch.
//   - MetricsEnabled false, NumGoroutines 2: no expvar, few stream workers.
//
// Measured with this profile on the 2-core development VM (process RSS, Go
// runtime included): 9 MiB before open, 12 MiB after opening a fresh store
// (open: 9 ms), 20 MiB after 1,000 synced appends of 200 bytes, 130 MiB at
// the peak of a burst of 100,000 appends (table builders during flush and
// compaction dominate). Steady desktop trickles stay near
// the low figures; the burst figure is what issue-level benchmarks track.
func badgerOptions(dir string, log hclog.Logger) badger.Options {
	return badger.DefaultOptions(dir).
		WithLogger(badgerLogger{log.Named("badger")}).
		WithSyncWrites(true).
		WithMemTableSize(8 << 20).
		WithNumMemtables(2).
		WithNumLevelZeroTables(2).
		WithNumLevelZeroTablesStall(4).
		WithBaseTableSize(1 << 20).
		WithBaseLevelSize(4 << 20).
		WithValueLogFileSize(1 << 20).
		WithValueThreshold(1 << 20).
		WithNumCompactors(2).
		WithCompression(options.None).
		WithBlockCacheSize(0).
		WithIndexCacheSize(0).
		WithMetricsEnabled(false).
		WithNumGoroutines(2)
}

// badgerLogger routes Badger's log lines to hclog. Badger logs table opens,
// replays and level summaries at INFO; those are debug detail for a host.
type badgerLogger struct{ l hclog.Logger }

func badgerMsg(f string, a []any) string { return strings.TrimRight(fmt.Sprintf(f, a...), "\n") }

func (b badgerLogger) Errorf(f string, a ...any)   { b.l.Error(badgerMsg(f, a)) }
func (b badgerLogger) Warningf(f string, a ...any) { b.l.Warn(badgerMsg(f, a)) }
func (b badgerLogger) Infof(f string, a ...any)    { b.l.Debug(badgerMsg(f, a)) }
func (b badgerLogger) Debugf(f string, a ...any)   { b.l.Trace(badgerMsg(f, a)) }
