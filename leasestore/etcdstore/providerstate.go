package etcdstore

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/agenthost/agenthost/leasestore"
)

// Provider state is larger than any one transaction may be (up to
// leasestore.MaxProviderStateBytes, 64 MiB), so a put writes it in chunks
// under a generation of its own (<session>/q/<gen>/<n>), each chunk in a
// transaction that requires the writer key to hold the fence, and then
// flips the pointer (<session>/p) to the new generation in a transaction
// that requires the writer key again and the pointer to be the one it
// replaces, deleting the replaced generation's chunks in the same
// transaction. A reader reads the pointer and the chunks it names at one
// revision. So a reader sees one put whole or the one before it; a put
// refused or interrupted before its flip leaves the previous state as it
// was (its own chunks are removed, or at worst stay unreferenced until
// the session's Delete removes every key of it).

type statePointer struct {
	Gen        string    `json:"gen,omitempty"` // empty: no state
	Chunks     int       `json:"chunks"`
	Size       int       `json:"size"`
	Handle     string    `json:"handle"`
	Fence      uint64    `json:"fence"`
	ExportedAt time.Time `json:"exportedAt"`
}

func (k keys) chunk(id, gen string, i int) string {
	return fmt.Sprintf("%s%s/%08d", k.chunks(id), gen, i)
}
func (k keys) generation(id, gen string) string { return k.chunks(id) + gen + "/" }

// PutProviderState implements leasestore.ProviderStates.
func (s *Store) PutProviderState(ctx context.Context, id string, fence uint64, st leasestore.ProviderState) error {
	if err := leasestore.ValidateSessionID(id); err != nil {
		return fmt.Errorf("store provider state: %w", err)
	}
	if err := st.Validate(); err != nil {
		return fmt.Errorf("store provider state of %q: %w", id, err)
	}
	if err := s.writable(); err != nil {
		return fmt.Errorf("store provider state of %q: %w", id, err)
	}
	if st.ExportedAt.IsZero() {
		st.ExportedAt = s.now()
	}
	gen := rand.Text()
	wKey := s.keys.writer(id)
	fenced := clientv3.Compare(clientv3.Value(wKey), "=", pad(fence))
	size := max(1, s.opts.MaxTxnBytes-txnOverhead-len(s.keys.chunk(id, gen, 0))-64)
	n := 0
	cleanup := func() {
		if n == 0 {
			return
		}
		cctx, cancel := s.reqCtx()
		defer cancel()
		if _, err := s.cli.Delete(cctx, s.keys.generation(id, gen), clientv3.WithPrefix()); err != nil {
			s.log.Warn("could not remove the chunks of a provider state that was not stored; Delete of the session removes them", "session", id, "error", err)
		}
	}
	for off := 0; off < len(st.Data); off += size {
		if err := ctx.Err(); err != nil {
			cleanup()
			return err
		}
		part := st.Data[off:min(off+size, len(st.Data))]
		// A chunk's key is unique to this put, so writing it twice is
		// harmless: an unanswered chunk put is simply sent again.
		var resp *clientv3.TxnResponse
		var err error
		for try := 0; ; try++ {
			resp, err = s.cli.Txn(ctx).If(fenced).Then(clientv3.OpPut(s.keys.chunk(id, gen, n), string(part))).
				Else(s.readBack(id)...).Commit()
			if err == nil || definitelyNotApplied(err) || ctx.Err() != nil || s.ctx.Err() != nil || try == 3 {
				break
			}
			s.log.Debug("provider state chunk put without an answer; sending it again", "session", id, "error", err)
			time.Sleep(100 * time.Millisecond << try)
		}
		n++ // an unanswered put may have landed: clean up either way
		if err != nil {
			cleanup()
			return s.mapErr(fmt.Sprintf("store provider state of %q", id), err)
		}
		if !resp.Succeeded {
			cleanup()
			return s.refusePut(id, fence, resp)
		}
	}
	ptr := statePointer{Gen: gen, Chunks: n, Size: len(st.Data), Handle: st.Handle, Fence: fence, ExportedAt: st.ExportedAt.UTC()}
	val, err := json.Marshal(ptr)
	if err != nil {
		cleanup()
		return fmt.Errorf("encode provider state pointer: %w", err)
	}
	pKey := s.keys.pointer(id)
	// The pointer this put replaces, read fresh after every lost compare.
	prev, prevRev, err := s.readPointer(ctx, id)
	if err != nil {
		cleanup()
		return err
	}
	for {
		then := []clientv3.Op{clientv3.OpPut(pKey, string(val))}
		if prev.Gen != "" {
			then = append(then, clientv3.OpDelete(s.keys.generation(id, prev.Gen), clientv3.WithPrefix()))
		}
		cctx, cancel := s.reqCtx()
		resp, err := s.cli.Txn(cctx).If(fenced, clientv3.Compare(clientv3.ModRevision(pKey), "=", prevRev)).
			Then(then...).Else(append(s.readBack(id), clientv3.OpGet(pKey))...).Commit()
		cancel()
		if err != nil {
			guardVal := "{}"
			if prevRev != 0 {
				old, _ := json.Marshal(prev)
				guardVal = string(old)
			}
			err = s.settle(nil, fmt.Sprintf("store provider state of %q", id), err, pKey, prevRev, guardVal,
				func(r *clientv3.TxnResponse) bool {
					kvs := r.Responses[0].GetResponseRange().Kvs
					return len(kvs) == 1 && string(kvs[0].Value) == string(val)
				}, clientv3.OpGet(pKey))
			if err != nil {
				cleanup()
			}
			return err
		}
		if resp.Succeeded {
			return nil
		}
		if err := s.refusePut(id, fence, resp); !errors.Is(err, errRetry) {
			cleanup()
			return err
		}
		pk := resp.Responses[3].GetResponseRange().Kvs
		prev, prevRev = statePointer{}, 0
		if len(pk) > 0 {
			if err := json.Unmarshal(pk[0].Value, &prev); err != nil {
				cleanup()
				return fmt.Errorf("%w: provider state pointer of %q: %v", leasestore.ErrDamaged, id, err)
			}
			prevRev = pk[0].ModRevision
		}
	}
}

var errRetry = errors.New("retry")

// refusePut says why a fenced provider state write lost its compare, from
// the record and writer key read back with it: errRetry when the writer
// key does admit fence (another compare of the transaction failed).
func (s *Store) refusePut(id string, fence uint64, resp *clientv3.TxnResponse) error {
	w := &sessionWriter{id: id}
	if err := w.absorbElse(s, resp); err != nil {
		return err
	}
	if w.decodeErr != nil {
		return w.decodeErr
	}
	if w.wOK && w.wFence == fence {
		return errRetry
	}
	if w.sess == nil {
		return notFound("store provider state of", id)
	}
	if err := leasestore.CheckAppend(*w.sess, fence); err != nil {
		return err
	}
	return fmt.Errorf("%w: session %q admits fence %d but its writer key says otherwise", leasestore.ErrDamaged, id, fence)
}

func (s *Store) readPointer(ctx context.Context, id string) (statePointer, int64, error) {
	resp, err := s.cli.Get(ctx, s.keys.pointer(id))
	if err != nil {
		return statePointer{}, 0, s.mapErr(fmt.Sprintf("read provider state of %q", id), err)
	}
	if len(resp.Kvs) == 0 {
		return statePointer{}, 0, nil
	}
	var p statePointer
	if err := json.Unmarshal(resp.Kvs[0].Value, &p); err != nil {
		return statePointer{}, 0, fmt.Errorf("%w: provider state pointer of %q: %v", leasestore.ErrDamaged, id, err)
	}
	return p, resp.Kvs[0].ModRevision, nil
}

// GetProviderState implements leasestore.ProviderStates: the pointer and
// its chunks at one revision (read again from the start if etcd compacted
// that revision between two chunk reads).
func (s *Store) GetProviderState(ctx context.Context, id string) (leasestore.ProviderState, error) {
	for {
		st, err := s.getProviderState(ctx, id)
		if errors.Is(err, rpctypes.ErrCompacted) {
			continue
		}
		return st, err
	}
}

// ProviderStateHandle implements leasestore.ProviderStateHandles: the
// record and the pointer, in one read of two small keys; no chunk is read.
func (s *Store) ProviderStateHandle(ctx context.Context, id string) (string, error) {
	p, _, err := s.statePointerOf(ctx, id)
	return p.Handle, err
}

// statePointerOf reads the session's record and its provider state
// pointer at one revision, and returns the pointer and that revision:
// ErrNotFound for an unknown session, one being deleted, or one with no
// state.
func (s *Store) statePointerOf(ctx context.Context, id string) (statePointer, int64, error) {
	if err := s.readable(); err != nil {
		return statePointer{}, 0, err
	}
	resp, err := s.cli.Txn(ctx).Then(clientv3.OpGet(s.keys.record(id)), clientv3.OpGet(s.keys.pointer(id))).Commit()
	if err != nil {
		return statePointer{}, 0, s.mapErr(fmt.Sprintf("read provider state of %q", id), err)
	}
	rec := resp.Responses[0].GetResponseRange().Kvs
	if len(rec) == 0 {
		return statePointer{}, 0, notFound("read provider state of", id)
	}
	if sess, err := leasestore.DecodeRecord(rec[0].Value); err != nil {
		return statePointer{}, 0, err
	} else if sess.Deleting {
		return statePointer{}, 0, notFound("read provider state of", id)
	}
	pk := resp.Responses[1].GetResponseRange().Kvs
	var p statePointer
	if len(pk) > 0 {
		if err := json.Unmarshal(pk[0].Value, &p); err != nil {
			return statePointer{}, 0, fmt.Errorf("%w: provider state pointer of %q: %v", leasestore.ErrDamaged, id, err)
		}
	}
	if p.Gen == "" {
		return statePointer{}, 0, fmt.Errorf("session %q has no provider state: %w", id, leasestore.ErrNotFound)
	}
	return p, resp.Header.Revision, nil
}

func (s *Store) getProviderState(ctx context.Context, id string) (leasestore.ProviderState, error) {
	p, rev, err := s.statePointerOf(ctx, id)
	if err != nil {
		return leasestore.ProviderState{}, err
	}
	data := make([]byte, 0, p.Size)
	prefix := s.keys.generation(id, p.Gen)
	from := prefix
	for got := 0; got < p.Chunks; {
		cr, err := s.cli.Get(ctx, from, clientv3.WithRange(clientv3.GetPrefixRangeEnd(prefix)), clientv3.WithRev(rev), clientv3.WithLimit(16))
		if err != nil {
			return leasestore.ProviderState{}, s.mapErr(fmt.Sprintf("read provider state of %q", id), err)
		}
		if len(cr.Kvs) == 0 {
			break
		}
		for _, kv := range cr.Kvs {
			data = append(data, kv.Value...)
			got++
		}
		from = string(cr.Kvs[len(cr.Kvs)-1].Key) + "\x00"
	}
	if len(data) != p.Size {
		return leasestore.ProviderState{}, fmt.Errorf("%w: provider state of %q: %d bytes in its chunks, its pointer says %d", leasestore.ErrDamaged, id, len(data), p.Size)
	}
	return leasestore.ProviderState{Handle: p.Handle, Fence: p.Fence, Data: data, ExportedAt: p.ExportedAt}, nil
}
