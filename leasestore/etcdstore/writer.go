package etcdstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/agenthost/agenthost/leasestore"
)

// Every write to a session goes through its sessionWriter: a queue that
// one goroutine drains while it is not empty, so the writes of one
// process to one session never race each other (another process's do,
// and lose their compare). Consecutive appends at one fence coalesce into
// one transaction (group commit) up to MaxTxnBytes and MaxTxnOps; a
// record change is a transaction of its own.
//
// The writer caches what it last read or wrote of the session (record,
// head seq, writer key, with their mod revisions), so an append costs one
// round trip. A stale cache costs nothing but a retry: every transaction
// compares what it read, and its Else branch reads the keys afresh.

type opKind int

const (
	opAppend opKind = iota
	opUpdate
)

// plan is what an update makes of the session as the writer last read it.
type plan struct {
	put       *leasestore.Session
	entries   []leasestore.Entry // Fence, Kind, Payload; the writer numbers and stamps them
	deleteAll bool
}

type op struct {
	kind opKind
	name string

	// opAppend
	fence   uint64
	entries []leasestore.EntryInput
	out     []leasestore.Entry

	// opUpdate: update must be pure, it runs again after a lost compare.
	// cur is nil for a session that does not exist.
	update  func(cur *leasestore.Session, now time.Time) (plan, error)
	extra   []clientv3.Cmp
	hostKey string // read back when the compare fails, for ErrHostAlive
	// assumeAbsent lets a create skip the read of a session this writer
	// knows nothing of: its compares require the keys absent, and a lost
	// compare reads them back.
	assumeAbsent bool
	result       leasestore.Session

	err  error
	done chan struct{}
}

func (o *op) finish(err error) {
	o.err = err
	close(o.done)
}

type sessionWriter struct {
	id      string
	queue   []*op // guarded by Store.mu
	running bool  // guarded by Store.mu

	// The cache, touched only by the draining goroutine.
	known     bool
	rec       []byte
	recRev    int64
	sess      *leasestore.Session
	decodeErr error
	head      uint64
	headRev   int64
	wFence    uint64
	wOK       bool
}

// enqueue queues ops on the writer of session id, in order, unless ctx
// ended or the store refuses writes; once queued every op completes.
func (s *Store) enqueue(ctx context.Context, id string, ops ...*op) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closing:
		return leasestore.ErrClosed
	case s.damaged != nil:
		return s.damaged
	}
	w := s.writers[id]
	if w == nil {
		w = &sessionWriter{id: id}
		s.writers[id] = w
	}
	w.queue = append(w.queue, ops...)
	if !w.running {
		w.running = true
		s.writersWG.Add(1)
		go s.drain(w)
	}
	return nil
}

func (s *Store) waitWriters() { s.writersWG.Wait() }

func (s *Store) drain(w *sessionWriter) {
	defer s.writersWG.Done()
	for {
		s.mu.Lock()
		if len(w.queue) == 0 {
			w.running = false
			if w.known && w.sess == nil {
				delete(s.writers, w.id) // deleted or never created: nothing worth caching
			}
			s.mu.Unlock()
			return
		}
		first := w.queue[0]
		n := 1
		if first.kind == opAppend {
			for n < len(w.queue) && w.queue[n].kind == opAppend && w.queue[n].fence == first.fence {
				n++
			}
		}
		batch := append([]*op(nil), w.queue[:n]...)
		w.queue = w.queue[n:]
		damaged := s.damaged
		s.mu.Unlock()
		if damaged != nil {
			for _, o := range batch {
				o.finish(damaged)
			}
			continue
		}
		// A host marking thousands of sessions, or a batch of hundreds of
		// moves, would otherwise send them all at once and make a loaded
		// etcd time out requests it then applies anyway.
		s.inflight <- struct{}{}
		if first.kind == opAppend {
			s.execAppends(w, batch)
		} else {
			s.execUpdate(w, first)
		}
		<-s.inflight
	}
}

// load reads the session's record, head and writer key in one revision.
func (s *Store) load(w *sessionWriter) error {
	ctx, cancel := s.reqCtx()
	defer cancel()
	resp, err := s.cli.Txn(ctx).Then(
		clientv3.OpGet(s.keys.record(w.id)), clientv3.OpGet(s.keys.head(w.id)), clientv3.OpGet(s.keys.writer(w.id)),
	).Commit()
	if err != nil {
		w.known = false
		return s.mapErr(fmt.Sprintf("read session %q", w.id), err)
	}
	return w.absorb(resp.Responses[0].GetResponseRange(), resp.Responses[1].GetResponseRange(), resp.Responses[2].GetResponseRange())
}

// absorb puts what a read of the record, head and writer key returned in
// the cache.
func (w *sessionWriter) absorb(rec, head, wr *etcdserverpb.RangeResponse) error {
	w.known = false
	w.rec, w.recRev, w.sess, w.decodeErr = nil, 0, nil, nil
	if len(rec.Kvs) > 0 {
		kv := rec.Kvs[0]
		w.rec, w.recRev = kv.Value, kv.ModRevision
		sess, err := leasestore.DecodeRecord(kv.Value)
		if err != nil {
			w.decodeErr = fmt.Errorf("session %q: %w", w.id, err)
		} else {
			w.sess = &sess
		}
	}
	w.head, w.headRev = 0, 0
	if len(head.Kvs) > 0 {
		n, err := parsePad(head.Kvs[0].Value)
		if err != nil {
			return fmt.Errorf("journal position of %q: %w", w.id, err)
		}
		w.head, w.headRev = n, head.Kvs[0].ModRevision
	}
	w.wFence, w.wOK = 0, false
	if len(wr.Kvs) > 0 {
		n, err := parsePad(wr.Kvs[0].Value)
		if err != nil {
			return fmt.Errorf("writer key of %q: %w", w.id, err)
		}
		w.wFence, w.wOK = n, true
	}
	w.known = true
	return nil
}

func (w *sessionWriter) absorbElse(s *Store, resp *clientv3.TxnResponse) error {
	r := resp.Responses
	return w.absorb(r[0].GetResponseRange(), r[1].GetResponseRange(), r[2].GetResponseRange())
}

// readBack is the Else branch of every write: the record, head and writer
// key afresh.
func (s *Store) readBack(id string) []clientv3.Op {
	return []clientv3.Op{clientv3.OpGet(s.keys.record(id)), clientv3.OpGet(s.keys.head(id)), clientv3.OpGet(s.keys.writer(id))}
}

// txnOverhead is what a transaction's framing takes beside the keys and
// values it writes and compares (counted apart). MaxTxnBytes sits half a
// MiB below etcd's default request limit, which covers the protobuf
// framing this leaves out.
const txnOverhead = 256

// appendBudget is what the entries of one append transaction may take:
// MaxTxnBytes less the head put, the two compares and the framing.
func (s *Store) appendBudget(id string) int {
	return s.opts.MaxTxnBytes - txnOverhead - opBytes(s.keys.head(id), make([]byte, 20)) -
		opBytes(s.keys.writer(id), make([]byte, 20)) - len(s.keys.head(id))
}

// opBytes is what one put costs of MaxTxnBytes.
func opBytes(key string, value []byte) int { return len(key) + len(value) + 32 }

// execAppends commits ops, appends at one fence, in as few transactions
// as the limits allow. Each transaction requires the writer key to hold
// the fence (so etcd itself refuses a deposed writer's late append) and
// the head to be the one the entries were numbered after (so no seq is
// written twice and none is skipped).
func (s *Store) execAppends(w *sessionWriter, ops []*op) {
	fence := ops[0].fence
	id := w.id
	fresh := false
	if !w.known {
		if err := s.load(w); err != nil {
			failAll(ops, err)
			return
		}
		fresh = true
	}
	oi := 0 // ops[:oi] are finished
	retries := 0
	for oi < len(ops) {
		if w.decodeErr != nil {
			failAll(ops[oi:], w.decodeErr)
			return
		}
		if !w.wOK || w.wFence != fence {
			if !fresh {
				if err := s.load(w); err != nil {
					failAll(ops[oi:], err)
					return
				}
				fresh = true
				continue
			}
			failAll(ops[oi:], s.refuseAppend(w, fence))
			return
		}
		now := s.now()
		headKey := s.keys.head(id)
		budget := s.appendBudget(id)
		var puts []clientv3.Op
		type span struct{ op, from, to int }
		var spans []span
		seq := w.head
		var first []byte
	pack:
		for i := oi; i < len(ops); i++ {
			o := ops[i]
			from := len(o.out)
			k := from
			for ; k < len(o.entries); k++ {
				in := o.entries[k]
				e := leasestore.Entry{Seq: seq + 1, Fence: fence, Time: now, Kind: in.Kind, Payload: in.Payload}
				key, val := s.keys.entry(id, e.Seq), leasestore.EncodeEntry(e)
				cost := opBytes(key, val)
				if len(puts)+1 >= s.opts.MaxTxnOps || cost > budget {
					break
				}
				budget -= cost
				puts = append(puts, clientv3.OpPut(key, string(val)))
				if first == nil {
					first = val
				}
				seq++
			}
			if k > from {
				spans = append(spans, span{i, from, k})
			}
			if k < len(o.entries) {
				break pack
			}
		}
		if len(puts) == 0 {
			// Append checked every entry against the limit; only a
			// limit smaller than one entry gets here.
			failAll(ops[oi:], fmt.Errorf("%w: a journal entry of session %q does not fit one transaction (MaxTxnBytes %d)",
				leasestore.ErrInvalidArgument, id, s.opts.MaxTxnBytes))
			return
		}
		puts = append(puts, clientv3.OpPut(headKey, pad(seq)))
		ctx, cancel := s.reqCtx()
		resp, err := s.cli.Txn(ctx).If(
			clientv3.Compare(clientv3.Value(s.keys.writer(id)), "=", pad(fence)),
			clientv3.Compare(clientv3.ModRevision(headKey), "=", w.headRev),
		).Then(puts...).Else(s.readBack(id)...).Commit()
		cancel()
		if err != nil {
			firstKey := s.keys.entry(id, w.head+1)
			err = s.settle(w, fmt.Sprintf("append to session %q", id), err, headKey, w.headRev, pad(w.head),
				func(r *clientv3.TxnResponse) bool {
					kvs := r.Responses[0].GetResponseRange().Kvs
					return len(kvs) == 1 && bytes.Equal(kvs[0].Value, first)
				}, clientv3.OpGet(firstKey))
			if errors.Is(err, errNotCommitted) && retries < maxRetries {
				// Proven not landed, and fenced out for good: sending
				// the entries again cannot journal them twice.
				retries++
				if err := s.load(w); err != nil {
					failAll(ops[oi:], err)
					return
				}
				fresh = true
				continue
			}
			if err != nil {
				failAll(ops[oi:], err)
				return
			}
			// It landed: go on as if the commit had answered.
			if err := s.load(w); err != nil {
				failAll(ops[oi:], err)
				return
			}
		} else if !resp.Succeeded {
			if err := w.absorbElse(s, resp); err != nil {
				failAll(ops[oi:], err)
				return
			}
			fresh = true
			continue
		} else {
			w.head, w.headRev = seq, resp.Header.Revision
		}
		fresh = false
		at := seq - uint64(len(puts)-1) + 1 // the first seq of this commit
		for _, sp := range spans {
			o := ops[sp.op]
			for k := sp.from; k < sp.to; k++ {
				in := o.entries[k]
				o.out = append(o.out, leasestore.Entry{Seq: at, Fence: fence, Time: now, Kind: in.Kind, Payload: in.Payload})
				at++
			}
			if len(o.out) == len(o.entries) {
				o.finish(nil)
				oi = sp.op + 1
			}
		}
	}
}

// refuseAppend says why the writer key does not admit fence, from the
// record read with it.
func (s *Store) refuseAppend(w *sessionWriter, fence uint64) error {
	if w.sess == nil {
		return fmt.Errorf("append to session %q: %w", w.id, leasestore.ErrNotFound)
	}
	if err := leasestore.CheckAppend(*w.sess, fence); err != nil {
		return err
	}
	return fmt.Errorf("%w: session %q admits fence %d but its writer key says otherwise", leasestore.ErrDamaged, w.id, fence)
}

func failAll(ops []*op, err error) {
	for _, o := range ops {
		o.finish(err)
	}
}

// settle decides what became of a commit that failed without an answer
// (a timeout, a lost connection: it may have landed). It fences the
// commit out first: guard is a key the commit compared by mod revision,
// and rewriting it with its value (when its revision is still guardRev)
// makes sure the lost commit can never apply later. If the guard had
// moved, mine (read in the same transaction) tells whether it was the
// commit's own doing. A commit that did not land fails with err; one that
// did returns nil; if etcd cannot be reached to tell, the store refuses
// every later write (ErrDamaged), as the leasestore contract requires.
func (s *Store) settle(w *sessionWriter, what string, err error, guard string, guardRev int64, guardVal string,
	mine func(*clientv3.TxnResponse) bool, mineOps ...clientv3.Op) error {
	if w != nil {
		w.known = false
	}
	if definitelyNotApplied(err) {
		return s.mapErr(what, err)
	}
	s.log.Warn("etcd commit without an answer; settling its outcome", "what", what, "error", err)
	deadline := time.Now().Add(s.opts.RequestTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), s.opts.RequestTimeout)
		resp, rerr := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(guard), "=", guardRev)).
			Then(clientv3.OpPut(guard, guardVal)).Else(mineOps...).Commit()
		cancel()
		if rerr == nil {
			if resp.Succeeded || !mine(resp) {
				return fmt.Errorf("%s: the commit did not land (%v); nothing was written: %w", what, err, errNotCommitted)
			}
			return nil
		}
		if time.Now().After(deadline) || errors.Is(rerr, context.Canceled) {
			return s.setDamaged(fmt.Errorf("%s: %v; settling it: %v", what, err, rerr))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// maxRetries is how many times a write proven not landed (see settle) is
// sent again before its caller gets the error.
const maxRetries = 3

// errNotCommitted: a commit that went unanswered was proven not to have
// landed, and can no longer land. The write did not happen; a caller may
// try again.
var errNotCommitted = errors.New("etcd commit did not land")

// execUpdate runs one record change: it judges the session as last read,
// and commits the result if the record and head are still what it read
// (and o.extra holds); a lost compare reads afresh and judges again.
func (s *Store) execUpdate(w *sessionWriter, o *op) {
	id := w.id
	fresh := false
	switch {
	case !w.known && o.assumeAbsent:
		w.rec, w.recRev, w.sess, w.decodeErr, w.head, w.headRev, w.wFence, w.wOK = nil, 0, nil, nil, 0, 0, 0, false
		w.known = true
	case !w.known:
		if err := s.load(w); err != nil {
			o.finish(err)
			return
		}
		fresh = true
	}
	retries := 0
	for {
		if w.decodeErr != nil {
			o.finish(w.decodeErr)
			return
		}
		var cur *leasestore.Session
		if w.sess != nil {
			c := *w.sess
			cur = &c
		}
		now := s.now()
		p, err := o.update(cur, now)
		if err != nil {
			if !fresh {
				if err := s.load(w); err != nil {
					o.finish(err)
					return
				}
				fresh = true
				continue
			}
			o.finish(err)
			return
		}
		recKey, headKey, wKey := s.keys.record(id), s.keys.head(id), s.keys.writer(id)
		var ops []clientv3.Op
		var newRec []byte
		size := txnOverhead
		seq := w.head
		wFence, wOK := uint64(0), false
		if p.deleteAll {
			ops = append(ops, clientv3.OpDelete(recKey), clientv3.OpDelete(s.keys.session(id), clientv3.WithPrefix()))
		} else {
			newRec, err = leasestore.EncodeRecord(*p.put)
			if err != nil {
				o.finish(err)
				return
			}
			size += opBytes(recKey, newRec)
			ops = append(ops, clientv3.OpPut(recKey, string(newRec)))
			if leasestore.CheckAppend(*p.put, p.put.Lease.Fence) == nil {
				wFence, wOK = p.put.Lease.Fence, true
				ops = append(ops, clientv3.OpPut(wKey, pad(wFence)))
			} else {
				ops = append(ops, clientv3.OpDelete(wKey))
			}
			for _, e := range p.entries {
				seq++
				e.Seq, e.Time = seq, now
				val := leasestore.EncodeEntry(e)
				key := s.keys.entry(id, seq)
				size += opBytes(key, val)
				ops = append(ops, clientv3.OpPut(key, string(val)))
			}
			if seq != w.head || w.headRev == 0 {
				ops = append(ops, clientv3.OpPut(headKey, pad(seq)))
			}
		}
		if size > s.opts.MaxTxnBytes || len(ops) > s.opts.MaxTxnOps {
			o.finish(fmt.Errorf("%w: %s session %q: the record and its journal entries take %d bytes, more than one transaction holds (MaxTxnBytes %d)",
				leasestore.ErrInvalidArgument, o.name, id, size, s.opts.MaxTxnBytes))
			return
		}
		cmps := append([]clientv3.Cmp{
			clientv3.Compare(clientv3.ModRevision(recKey), "=", w.recRev),
			clientv3.Compare(clientv3.ModRevision(headKey), "=", w.headRev),
		}, o.extra...)
		elseOps := s.readBack(id)
		if o.hostKey != "" {
			elseOps = append(elseOps, clientv3.OpGet(o.hostKey, clientv3.WithCountOnly()))
		}
		ctx, cancel := s.reqCtx()
		resp, err := s.cli.Txn(ctx).If(cmps...).Then(ops...).Else(elseOps...).Commit()
		cancel()
		if err != nil {
			err = s.settle(w, fmt.Sprintf("%s session %q", o.name, id), err, headKey, w.headRev, pad(w.head),
				func(r *clientv3.TxnResponse) bool {
					kvs := r.Responses[0].GetResponseRange().Kvs
					if p.deleteAll {
						return len(kvs) == 0
					}
					return len(kvs) == 1 && bytes.Equal(kvs[0].Value, newRec)
				}, clientv3.OpGet(recKey))
			if errors.Is(err, errNotCommitted) && retries < maxRetries {
				// Proven not landed and fenced out: judge it again.
				retries++
				if err := s.load(w); err != nil {
					o.finish(err)
					return
				}
				fresh = true
				continue
			}
			if err != nil {
				o.finish(err)
				return
			}
		} else if !resp.Succeeded {
			if err := w.absorbElse(s, resp); err != nil {
				o.finish(err)
				return
			}
			if o.hostKey != "" && resp.Responses[3].GetResponseRange().Count > 0 {
				o.finish(fmt.Errorf("%s session %q: %w", o.name, id, leasestore.ErrHostAlive))
				return
			}
			fresh = true
			continue
		} else {
			rev := resp.Header.Revision
			if p.deleteAll {
				w.rec, w.recRev, w.sess, w.head, w.headRev, w.wFence, w.wOK = nil, 0, nil, 0, 0, 0, false
			} else {
				w.rec, w.recRev, w.sess = newRec, rev, p.put
				if seq != w.head || w.headRev == 0 {
					w.head, w.headRev = seq, rev
				}
				w.wFence, w.wOK = wFence, wOK
			}
		}
		if p.put != nil {
			o.result = *p.put
		}
		o.finish(nil)
		return
	}
}
