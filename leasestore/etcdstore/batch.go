package etcdstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/agenthost/agenthost/leasestore"
)

// A batch of record changes to many sessions (ApplyBatch, marking a
// host's leases) is committed in a few transactions of many sessions
// each, rather than one per session: a group of up to batchSessions
// sessions is read in one transaction, its moves judged in order on what
// was read (a later move of a session sees the earlier one's result),
// and the accepted results written in one transaction that compares
// every touched session's record and head. If any of them changed
// meanwhile (another host wrote), or the commit went unanswered and was
// proven not landed, the group's moves go the one-transaction-per-move
// way through their sessions' writers instead, each judged again.

// batchSessions bounds the sessions of one batch transaction: every
// session costs two compares and at least three operations, so 24 fit
// etcd's default 128 operations with room for lifecycle entries.
const batchSessions = 24

type item struct {
	id     string
	op     *op // the update; its result and error are the move's
	result leasestore.Session
	err    error
	done   bool
}

// commitMany runs items (in order; moves of one session keep their order)
// and fills each item's result or error.
func (s *Store) commitMany(items []*item) {
	for start := 0; start < len(items); {
		// A group: consecutive items touching at most batchSessions
		// sessions.
		seen := map[string]bool{}
		end := start
		for end < len(items) && (seen[items[end].id] || len(seen) < batchSessions) {
			seen[items[end].id] = true
			end++
		}
		group := items[start:end]
		if !s.commitGroup(group) {
			s.oneByOne(group)
		}
		start = end
	}
}

// oneByOne runs each item as its own transaction on its session's writer.
func (s *Store) oneByOne(group []*item) {
	var queued []*item
	for _, it := range group {
		it.op.done = make(chan struct{})
		if err := s.enqueue(context.Background(), it.id, it.op); err != nil {
			it.err = fmt.Errorf("%s session %q: %w", it.op.name, it.id, err)
			continue
		}
		queued = append(queued, it)
	}
	for _, it := range queued {
		<-it.op.done
		it.result, it.err = it.op.result, it.op.err
	}
}

type groupSession struct {
	cur     *leasestore.Session
	recRev  int64
	head    uint64
	headRev int64
	changed bool
	deleted bool
	entries []leasestore.Entry
}

// commitGroup tries the group as one read and one write; false means the
// write lost a compare (or was proven not to land) and nothing of it was
// written.
func (s *Store) commitGroup(group []*item) bool {
	if err := s.writable(); err != nil {
		for _, it := range group {
			it.err = fmt.Errorf("%s session %q: %w", it.op.name, it.id, err)
		}
		return true
	}
	var ids []string
	sessions := map[string]*groupSession{}
	for _, it := range group {
		if _, ok := sessions[it.id]; !ok {
			sessions[it.id] = &groupSession{}
			ids = append(ids, it.id)
		}
	}
	var reads []clientv3.Op
	for _, id := range ids {
		reads = append(reads, clientv3.OpGet(s.keys.record(id)), clientv3.OpGet(s.keys.head(id)))
	}
	ctx, cancel := s.reqCtx()
	resp, err := s.cli.Txn(ctx).Then(reads...).Commit()
	cancel()
	if err != nil {
		return false
	}
	for i, id := range ids {
		g := sessions[id]
		if kvs := resp.Responses[2*i].GetResponseRange().Kvs; len(kvs) > 0 {
			sess, err := leasestore.DecodeRecord(kvs[0].Value)
			if err != nil {
				return false // the one-by-one path reports it per move
			}
			g.cur, g.recRev = &sess, kvs[0].ModRevision
		}
		if kvs := resp.Responses[2*i+1].GetResponseRange().Kvs; len(kvs) > 0 {
			n, err := parsePad(kvs[0].Value)
			if err != nil {
				return false
			}
			g.head, g.headRev = n, kvs[0].ModRevision
		}
	}
	now := s.now()
	for _, it := range group {
		g := sessions[it.id]
		var cur *leasestore.Session
		if g.cur != nil && !g.deleted {
			c := *g.cur
			cur = &c
		}
		p, err := it.op.update(cur, now)
		if err != nil {
			it.err, it.done = err, true
			continue
		}
		if p.deleteAll {
			return false // deletes go their own way
		}
		g.cur, g.changed = p.put, true
		for _, e := range p.entries {
			g.head++
			e.Seq, e.Time = g.head, now
			g.entries = append(g.entries, e)
		}
		it.result, it.done = *p.put, true
	}
	var cmps []clientv3.Cmp
	var writes []clientv3.Op
	size := txnOverhead
	var guard string
	var guardRev int64
	var guardVal string
	var mineKey string
	var mineVal []byte
	for _, id := range ids {
		g := sessions[id]
		if !g.changed {
			continue
		}
		rec, err := leasestore.EncodeRecord(*g.cur)
		if err != nil {
			return false
		}
		recKey, headKey := s.keys.record(id), s.keys.head(id)
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(recKey), "=", g.recRev),
			clientv3.Compare(clientv3.ModRevision(headKey), "=", g.headRev))
		size += len(recKey) + len(headKey) + 32
		writes = append(writes, clientv3.OpPut(recKey, string(rec)))
		size += opBytes(recKey, rec)
		if leasestore.CheckAppend(*g.cur, g.cur.Lease.Fence) == nil {
			writes = append(writes, clientv3.OpPut(s.keys.writer(id), pad(g.cur.Lease.Fence)))
		} else {
			writes = append(writes, clientv3.OpDelete(s.keys.writer(id)))
		}
		for _, e := range g.entries {
			val := leasestore.EncodeEntry(e)
			key := s.keys.entry(id, e.Seq)
			size += opBytes(key, val)
			writes = append(writes, clientv3.OpPut(key, string(val)))
		}
		if len(g.entries) > 0 {
			writes = append(writes, clientv3.OpPut(headKey, pad(g.head)))
		}
		if guard == "" {
			guard, guardRev, mineKey, mineVal = headKey, g.headRev, recKey, rec
			guardVal = pad(g.head - uint64(len(g.entries)))
		}
	}
	if len(writes) == 0 {
		return true // every move refused or changed nothing
	}
	if size > s.opts.MaxTxnBytes || len(writes) > s.opts.MaxTxnOps {
		return false
	}
	ctx, cancel = s.reqCtx()
	wresp, err := s.cli.Txn(ctx).If(cmps...).Then(writes...).Commit()
	cancel()
	if err != nil {
		err = s.settle(nil, "batch of moves", err, guard, guardRev, guardVal, func(r *clientv3.TxnResponse) bool {
			kvs := r.Responses[0].GetResponseRange().Kvs
			return len(kvs) == 1 && bytes.Equal(kvs[0].Value, mineVal)
		}, clientv3.OpGet(mineKey))
		switch {
		case err == nil:
			return true
		case errors.Is(err, errNotCommitted):
			return false
		}
		for _, it := range group {
			it.result, it.err = leasestore.Session{}, err
		}
		return true
	}
	return wresp.Succeeded
}
