package badgerstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/agenthost/agenthost/leasestore"
)

// Provider state (leasestore.ProviderStates).
//
// A state may hold leasestore.MaxProviderStateBytes (64 MiB), while in this
// store's profile one Badger value is at most 1 MiB and one transaction
// about 1.2 MiB (see badgerOptions). So a put writes the data as chunks of
// stateChunkSize under a fresh random generation, in as many transactions
// as they need (handed to the writer one transaction's worth at a time, so
// other sessions' appends share those commits rather than wait for the
// whole put), and the state changes only in the put's last transaction:
// it checks the writer's fence (leasestore.CheckAppend) on the record as
// that transaction reads it, checks that every chunk of the generation is
// there, points the description (stateMeta) at the new generation and
// deletes the previous generation's chunks. A reader reads the description
// and the chunks in one read transaction: it sees the old state or the new
// one, never a mix.
//
// Every chunk's transaction checks the fence as well, so once a Delete has
// marked the session Deleting (or a takeover moved the fence) no chunk of a
// late put lands, and Delete's sweep, which removes the provider state keys
// after the journal and before the record, leaves nothing behind. Chunks
// that no description names (a put refused half-way, or cut short by a
// crash) are swept by the session's next put and by its Delete. Puts of one
// session are serialised in this process (Store.stateLocks), so that sweep
// never removes chunks a put is still writing.
//
// Provider state is neither in the backup nor in the journal mirror: a
// store restored from its backup has none (the sessions stay resumable on
// this machine, from the provider's own files), and so cannot bring back
// the state of a session deleted since.

// stateChunkSize is the size of one chunk of a provider state's data: two
// fit one transaction, and each is far below Badger's value size limit.
const stateChunkSize = 512 << 10

// stateMeta describes the current provider state of a session.
type stateMeta struct {
	Handle     string    `json:"handle"`
	Fence      uint64    `json:"fence"`
	ExportedAt time.Time `json:"exportedAt"`
	Size       int       `json:"size"`
	Chunks     uint32    `json:"chunks"`
	Gen        uint64    `json:"gen"`
	// Incarnation is the session's when the state was stored: a session
	// deleted and created again under the same id never sees its
	// predecessor's state.
	Incarnation string `json:"incarnation,omitempty"`
	SHA256      []byte `json:"sha256"`
}

// stateLockCount is how many locks serialise provider state puts, by a
// hash of the session id.
const stateLockCount = 64

func (s *Store) stateLock(id string) func() {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	mu := &s.stateLocks[h.Sum32()%stateLockCount]
	mu.Lock()
	return mu.Unlock
}

func newStateGen() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return binary.BigEndian.Uint64(b[:])
}

// PutProviderState implements leasestore.ProviderStates.
func (s *Store) PutProviderState(ctx context.Context, id string, fence uint64, st leasestore.ProviderState) error {
	const what = "put provider state of"
	if err := st.Validate(); err != nil {
		return fmt.Errorf("%s session %q: %w", what, id, err)
	}
	if err := leasestore.ValidateSessionID(id); err != nil {
		return fmt.Errorf("%s session %q: %w", what, id, err)
	}
	unlock := s.stateLock(id)
	defer unlock()

	if st.ExportedAt.IsZero() {
		st.ExportedAt = s.now()
	}
	sum := sha256.Sum256(st.Data)
	meta := stateMeta{
		Handle: st.Handle, Fence: fence, ExportedAt: st.ExportedAt.UTC(), Size: len(st.Data),
		Chunks: uint32((len(st.Data) + stateChunkSize - 1) / stateChunkSize), Gen: newStateGen(), SHA256: sum[:],
	}
	admitted := func(b *batch) (leasestore.Session, error) {
		cur, err := b.session(id)
		if err != nil {
			return cur, err
		}
		return cur, leasestore.CheckAppend(cur, fence)
	}
	ops := make([]*op, 0, meta.Chunks+1)
	for i := range meta.Chunks {
		key := stateChunkKey(id, meta.Gen, i)
		data := st.Data[int(i)*stateChunkSize : min(int(i+1)*stateChunkSize, len(st.Data))]
		o := newOp(what, id, func(b *batch) error {
			if _, err := admitted(b); err != nil {
				return err
			}
			b.set(key, data)
			return nil
		})
		o.journal = true // refused first when the disk fills, like appends
		ops = append(ops, o)
	}
	final := newOp(what, id, func(b *batch) error {
		cur, err := admitted(b)
		if err != nil {
			return err
		}
		for i := range meta.Chunks {
			// The chunks' own transactions committed before this one, or
			// staged their writes in it: either way the transaction sees
			// them.
			if _, err := b.txn.Get(stateChunkKey(id, meta.Gen, i)); err != nil {
				return fmt.Errorf("chunk %d of %d of the new state did not land: %w", i, meta.Chunks, err)
			}
		}
		old, found, err := batchStateMeta(b, id)
		if err != nil {
			return err
		}
		if found && old.Gen != meta.Gen {
			for i := range old.Chunks {
				b.del(stateChunkKey(id, old.Gen, i))
			}
		}
		m := meta
		m.Incarnation = cur.Incarnation
		raw, err := json.Marshal(m)
		if err != nil {
			return fmt.Errorf("encode provider state description: %w", err)
		}
		b.set(stateMetaKey(id), raw)
		return nil
	})
	final.journal = true
	ops = append(ops, final)
	err := s.sendStateOps(ctx, ops)
	if err != nil {
		err = fmt.Errorf("%s session %q: %w", what, id, err)
	}
	// Bounded work, and it only deletes: it runs even when ctx ended.
	if sweepErr := s.sweepStateChunks(context.WithoutCancel(ctx), id); sweepErr != nil {
		s.log.Debug("provider state chunks no state names stay until the next put or the Delete", "session", id, "error", sweepErr)
	}
	return err
}

// stateChunksPerSend is how many chunk writes a put hands the writer at a
// time: one transaction's worth. The writer commits a send's ops before it
// takes anything queued after them, so a put sent whole would hold every
// other session's appends back for all of its transactions; sent a
// transaction at a time, the appends queued meanwhile share the put's
// commits instead (group commit) and wait for one of them at most.
const stateChunksPerSend = 2

// sendStateOps runs a put's ops in order, a few at a time, stopping at the
// first that fails (its error is the put's).
func (s *Store) sendStateOps(ctx context.Context, ops []*op) error {
	for len(ops) > 0 {
		n := min(len(ops), stateChunksPerSend)
		group := ops[:n]
		ops = ops[n:]
		if err := s.send(ctx, group...); err != nil {
			return err
		}
		var first error
		for _, o := range group {
			<-o.done
			if first == nil {
				first = o.err
			}
		}
		if first != nil {
			return first
		}
	}
	return nil
}

// batchStateMeta reads the session's state description as the batch sees
// it.
func batchStateMeta(b *batch, id string) (stateMeta, bool, error) {
	raw, err := b.get(stateMetaKey(id))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return stateMeta{}, false, nil
	}
	if err != nil {
		return stateMeta{}, false, fmt.Errorf("read provider state of %q: %w", id, err)
	}
	var m stateMeta
	if err := json.Unmarshal(raw, &m); err != nil {
		return stateMeta{}, false, fmt.Errorf("%w: provider state description of %q: %v", leasestore.ErrDamaged, id, err)
	}
	return m, true, nil
}

// sweepStateChunks deletes the session's chunks that its description does
// not name. The caller holds the session's state lock, so no put is
// writing chunks meanwhile.
func (s *Store) sweepStateChunks(ctx context.Context, id string) error {
	var stale [][]byte
	err := s.view(func(txn *badger.Txn) error {
		var current uint64
		var named bool
		if item, err := txn.Get(stateMetaKey(id)); err == nil {
			var m stateMeta
			if err := item.Value(func(v []byte) error { return json.Unmarshal(v, &m) }); err != nil {
				return err
			}
			current, named = m.Gen, true
		} else if !errors.Is(err, badger.ErrKeyNotFound) {
			return err
		}
		it := txn.NewIterator(badger.IteratorOptions{Prefix: stateChunkPrefix(id)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if gen, ok := parseStateChunkKey(id, it.Item().Key()); ok && (!named || gen != current) {
				stale = append(stale, it.Item().KeyCopy(nil))
			}
		}
		return nil
	})
	if err != nil || len(stale) == 0 {
		return err
	}
	for len(stale) > 0 {
		n := min(len(stale), maxBatchOps*4)
		keys := stale[:n]
		stale = stale[n:]
		err := s.submit(ctx, "sweep provider state of", id, func(b *batch) error {
			m, named, err := batchStateMeta(b, id)
			if err != nil {
				return err
			}
			for _, k := range keys {
				if gen, ok := parseStateChunkKey(id, k); ok && (!named || gen != m.Gen) {
					b.del(k)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// ProviderStateHandle implements leasestore.ProviderStateHandles: the
// record and the state's description, no chunk.
func (s *Store) ProviderStateHandle(ctx context.Context, id string) (string, error) {
	var handle string
	err := s.view(func(txn *badger.Txn) error {
		m, err := stateMetaOf(txn, id)
		handle = m.Handle
		return err
	})
	return handle, err
}

// stateMetaOf reads the description of session id's provider state in
// txn: ErrNotFound for an unknown session, one being deleted, and one
// with no state of its current incarnation.
func stateMetaOf(txn *badger.Txn, id string) (stateMeta, error) {
	sess, err := getSession(txn, id)
	if err != nil {
		return stateMeta{}, err
	}
	none := fmt.Errorf("session %q has no provider state: %w", id, leasestore.ErrNotFound)
	if sess.Deleting {
		return stateMeta{}, none
	}
	item, err := txn.Get(stateMetaKey(id))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return stateMeta{}, none
	}
	if err != nil {
		return stateMeta{}, fmt.Errorf("read provider state of %q: %w", id, err)
	}
	var m stateMeta
	if err := item.Value(func(v []byte) error { return json.Unmarshal(v, &m) }); err != nil {
		return stateMeta{}, fmt.Errorf("%w: provider state description of %q: %v", leasestore.ErrDamaged, id, err)
	}
	if m.Incarnation != sess.Incarnation {
		return stateMeta{}, none // an earlier session's of the same id
	}
	return m, nil
}

// GetProviderState implements leasestore.ProviderStates. A session being
// deleted has none.
func (s *Store) GetProviderState(ctx context.Context, id string) (leasestore.ProviderState, error) {
	var out leasestore.ProviderState
	err := s.view(func(txn *badger.Txn) error {
		m, err := stateMetaOf(txn, id)
		if err != nil {
			return err
		}
		if m.Size < 0 || m.Size > leasestore.MaxProviderStateBytes {
			return fmt.Errorf("%w: provider state of %q claims %d bytes", leasestore.ErrDamaged, id, m.Size)
		}
		data := make([]byte, 0, m.Size)
		for i := range m.Chunks {
			item, err := txn.Get(stateChunkKey(id, m.Gen, i))
			if err != nil {
				return fmt.Errorf("%w: provider state of %q: chunk %d of %d: %v", leasestore.ErrDamaged, id, i, m.Chunks, err)
			}
			if err := item.Value(func(v []byte) error { data = append(data, v...); return nil }); err != nil {
				return fmt.Errorf("read provider state of %q: %w", id, err)
			}
		}
		if sum := sha256.Sum256(data); len(data) != m.Size || !bytes.Equal(sum[:], m.SHA256) {
			return fmt.Errorf("%w: provider state of %q does not match its checksum", leasestore.ErrDamaged, id)
		}
		out = leasestore.ProviderState{Handle: m.Handle, Fence: m.Fence, Data: data, ExportedAt: m.ExportedAt}
		return nil
	})
	return out, err
}
