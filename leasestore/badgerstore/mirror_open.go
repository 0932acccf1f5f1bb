package badgerstore

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/hashicorp/go-hclog"

	"github.com/agenthost/agenthost/leasestore"
)

// mirrorFileName is the journal mirror beside the store (see mirror.go).
const mirrorFileName = "store.journal"

// journalState is what the store holds of one session's journal.
type journalState struct {
	incarnation string
	last        uint64
}

// journalStates reads every session's incarnation and journal position. A
// record that does not decode, or of a session being deleted, is left out:
// nothing is loaded into, or mirrored from, a session no operation can use
// or whose journal is going.
func journalStates(db *badger.DB) (map[string]journalState, error) {
	out := map[string]journalState{}
	err := db.View(func(txn *badger.Txn) error {
		for _, id := range recordIDs(txn, 0) {
			sess, err := getSession(txn, id)
			if err != nil || sess.Deleting {
				continue
			}
			last, err := readLastSeq(txn, id)
			if err != nil {
				continue
			}
			out[id] = journalState{incarnation: sess.Incarnation, last: last}
		}
		return nil
	})
	return out, err
}

// mirrored is what the mirror holds of one live session's journal.
type mirrored struct {
	max, maxFence uint64
}

// loadFromMirror writes into db every entry of the mirror at path that
// belongs to a session of want (same incarnation) and has a seq above the
// position want gives, and moves each such journal's position to the
// mirror's last seq if that is further. It returns how many entries it
// wrote and the mirror's last seq and fence per session it wrote to.
func loadFromMirror(db *badger.DB, path string, want map[string]journalState) (int, map[string]mirrored, error) {
	wb := db.NewWriteBatch()
	defer wb.Cancel()
	got := map[string]mirrored{}
	n := 0
	_, _, err := scanMirrorFile(path, func(f mirrorFrame) error {
		st, ok := want[f.ID]
		if !ok || st.incarnation != f.Incarnation || f.Seq <= st.last {
			return nil
		}
		if err := wb.Set(journalKey(f.ID, f.Seq), slices.Clone(f.Entry)); err != nil {
			return err
		}
		m := got[f.ID]
		m.max, m.maxFence = max(m.max, f.Seq), max(m.maxFence, f.Fence)
		got[f.ID] = m
		n++
		return nil
	})
	if err == nil {
		err = wb.Flush()
	}
	if err != nil {
		return 0, nil, fmt.Errorf("load journal entries from the mirror %s: %w", path, err)
	}
	for id, m := range got {
		err := runOne(db, func(b *batch) error {
			last, err := b.lastSeq(id)
			if err != nil {
				return err
			}
			if m.max > last {
				b.set(seqKey(id), encodeSeq(m.max))
			}
			return nil
		})
		if err != nil {
			return 0, nil, fmt.Errorf("move the journal position of %q to the mirror's: %w", id, err)
		}
	}
	return n, got, nil
}

// syncMirror brings the journal mirror and the store, just opened, into
// line, and opens the mirror for the writer:
//
//   - a journal the mirror holds further than the store shrank (Badger lost
//     its memtable log, say): the entries the store lacks are put back
//     from the mirror, and the journal's position jumps
//     leasestore.RestoredSeqGap past the mirror's last seq (the mirror may
//     lag the store by its sync interval after a power cut, and a seq a
//     client may have seen must never be handed out again), with a
//     "journal-recovered" entry saying so; the lease gets a fence floor
//     above every fence the mirror saw. Each such journal is returned.
//   - a journal the store holds further than the mirror (the mirror's tail
//     was torn or its writes failed, or it is new): the mirror catches up
//     from the store.
//   - a mirror mostly made of deleted sessions' entries is rewritten.
func syncMirror(db *badger.DB, stateDir string, delay time.Duration, now time.Time, log hclog.Logger) (*mirror, []leasestore.JournalRecovery, error) {
	path := stateDir + string(os.PathSeparator) + mirrorFileName
	states, err := journalStates(db)
	if err != nil {
		return nil, nil, fmt.Errorf("read journal positions: %w", err)
	}
	seen := map[string]mirrored{}
	var live, garbage int64
	valid, torn, err := scanMirrorFile(path, func(f mirrorFrame) error {
		st, ok := states[f.ID]
		if !ok || st.incarnation != f.Incarnation {
			garbage += f.Size
			return nil
		}
		live += f.Size
		m := seen[f.ID]
		m.max, m.maxFence = max(m.max, f.Seq), max(m.maxFence, f.Fence)
		seen[f.ID] = m
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("read journal mirror %s: %w", path, err)
	}
	if torn {
		log.Warn("the journal mirror ends in a torn or damaged frame; cutting it off there and catching up from the store",
			"path", path, "valid_bytes", valid)
	}

	var recovered []leasestore.JournalRecovery
	shrunk := map[string]journalState{}
	for id, st := range states {
		if seen[id].max > st.last {
			shrunk[id] = st
		}
	}
	if len(shrunk) > 0 {
		n, got, err := loadFromMirror(db, path, shrunk)
		if err != nil {
			return nil, nil, err
		}
		for _, id := range slices.Sorted(maps.Keys(shrunk)) {
			jr := leasestore.JournalRecovery{Session: id, StoreSeq: shrunk[id].last, MirrorSeq: got[id].max}
			err := runOne(db, func(b *batch) error {
				cur, err := b.session(id)
				if err != nil {
					return err
				}
				cur.Lease.MinNextFence = max(cur.Lease.MinNextFence, got[id].maxFence+1, cur.Lease.NextFence())
				cur.UpdatedAt = now
				if err := b.putSession(cur); err != nil {
					return err
				}
				b.set(seqKey(id), encodeSeq(jr.MirrorSeq+leasestore.RestoredSeqGap))
				ev := leasestore.LifecycleEntry(cur, leasestore.LifecycleEvent{Event: "journal-recovered", Reason: jr.String(), GapAfter: jr.MirrorSeq})
				es, err := b.appendEntries(id, cur.Incarnation, cur.Lease.Fence, now, ev)
				if err == nil {
					jr.NextSeq = es[0].Seq + 1
				}
				return err
			})
			if err != nil {
				return nil, nil, fmt.Errorf("recover the journal of %q from the mirror: %w", id, err)
			}
			recovered = append(recovered, jr)
		}
		log.Error("journals were shorter than their mirror; the missing entries were put back from it", "journals", len(shrunk), "entries", n)
		if states, err = journalStates(db); err != nil {
			return nil, nil, fmt.Errorf("read journal positions: %w", err)
		}
	}

	if garbage > live && garbage > 4<<20 {
		// Rewrite from the store: the new file is complete before it
		// replaces the old one.
		if err := writeFileAtomic(path, func(w io.Writer) error { return mirrorAll(db, states, nil, w) }); err != nil {
			return nil, nil, fmt.Errorf("rewrite journal mirror %s: %w", path, err)
		}
		fi, err := os.Stat(path)
		if err != nil {
			return nil, nil, err
		}
		valid = fi.Size()
		log.Debug("rewrote the journal mirror without the entries of deleted sessions", "path", path, "dropped_bytes", garbage)
	} else {
		m, err := openMirror(path, valid, delay, log)
		if err != nil {
			return nil, nil, err
		}
		bw := bufio.NewWriter(m.f)
		err = mirrorAll(db, states, seen, bw)
		if err == nil {
			err = bw.Flush()
		}
		if err == nil {
			err = m.f.Sync()
		}
		if err != nil {
			m.f.Close()
			return nil, nil, fmt.Errorf("catch the journal mirror %s up with the store: %w", path, err)
		}
		if err := m.f.Close(); err != nil {
			return nil, nil, err
		}
		fi, err := os.Stat(path)
		if err != nil {
			return nil, nil, err
		}
		valid = fi.Size()
	}
	m, err := openMirror(path, valid, delay, log)
	if err != nil {
		return nil, nil, err
	}
	return m, recovered, nil
}

// mirrorAll writes to w the frames of every store entry the mirror lacks:
// per session, the entries after what have (nil: all of them).
func mirrorAll(db *badger.DB, states map[string]journalState, have map[string]mirrored, w io.Writer) error {
	var buf []byte
	for _, id := range slices.Sorted(maps.Keys(states)) {
		st := states[id]
		from := have[id].max + 1
		if from > st.last {
			continue
		}
		err := db.View(func(txn *badger.Txn) error {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: journalPrefix(id), PrefetchValues: true, PrefetchSize: 64})
			defer it.Close()
			for it.Seek(journalKey(id, from)); it.Valid(); it.Next() {
				err := it.Item().Value(func(v []byte) error {
					buf = appendMirrorFrame(buf[:0], id, st.incarnation, v)
					_, err := w.Write(buf)
					return err
				})
				if err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("mirror the journal of %q: %w", id, err)
		}
	}
	return nil
}
