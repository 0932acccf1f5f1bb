package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/agenthost/agenthost/leasestore"
)

// replayChunk is how many entries one journal read returns; callbacks run
// between reads, never inside one.
const replayChunk = 256

// Append implements leasestore.JournalStore. The entries join the
// session's group commit; every transaction they go out in requires the
// writer key to hold fence. An entry that cannot fit one transaction is
// refused (ErrInvalidArgument) before anything is written; the entries of
// one call may span several transactions when they do not fit one
// together (their seqs stay consecutive: the session's writer commits
// nothing else in between).
func (s *Store) Append(ctx context.Context, id string, fence uint64, entries ...leasestore.EntryInput) ([]leasestore.Entry, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	if err := leasestore.ValidateSessionID(id); err != nil {
		return nil, err
	}
	// The largest entry a transaction holds beside the head put and the
	// compares.
	limit := s.appendBudget(id)
	for _, e := range entries {
		if err := e.Validate(); err != nil {
			return nil, err
		}
		key := s.keys.entry(id, 1)
		size := opBytes(key, make([]byte, len(leasestore.EncodeEntry(leasestore.Entry{Seq: math.MaxUint64, Fence: math.MaxUint64, Time: time.Now(), Kind: e.Kind, Payload: e.Payload}))))
		if size > limit {
			return nil, fmt.Errorf("%w: journal entry of %d bytes (with its key of %d) does not fit one etcd transaction: the limit is %d bytes (MaxTxnBytes %d, below etcd's --max-request-bytes); truncate or summarise it",
				leasestore.ErrInvalidArgument, len(e.Payload), len(key), limit, s.opts.MaxTxnBytes)
		}
	}
	o := &op{kind: opAppend, name: "append to", fence: fence, entries: entries, done: make(chan struct{})}
	if err := s.wait(ctx, id, o); err != nil {
		return nil, err
	}
	return o.out, nil
}

// OpenJournal implements leasestore.Store.
func (s *Store) OpenJournal(ctx context.Context, id string, fence uint64) (leasestore.Journal, error) {
	cur, err := s.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := leasestore.CheckAppend(cur, fence); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return nil, leasestore.ErrClosed
	}
	return s.journals.Track(leasestore.NewJournal(s, id, fence)), nil
}

// chunk is one read of a journal: the session's incarnation and head, and
// up to replayChunk entries from a seq, at one revision.
type chunk struct {
	incarnation string
	head        uint64
	entries     []leasestore.Entry
	rev         int64
}

// readChunk reads session id's record, head and entries from seq from,
// at rev (0: now). A session that is absent, or being deleted, is
// ErrNotFound.
func (s *Store) readChunk(ctx context.Context, id string, from uint64, rev int64) (chunk, error) {
	if err := s.readable(); err != nil {
		return chunk{}, err
	}
	var get []clientv3.OpOption
	if rev != 0 {
		get = append(get, clientv3.WithRev(rev))
	}
	jp := s.keys.journal(id)
	rangeOpts := append([]clientv3.OpOption{
		clientv3.WithRange(clientv3.GetPrefixRangeEnd(jp)), clientv3.WithLimit(replayChunk),
	}, get...)
	resp, err := s.cli.Txn(ctx).Then(
		clientv3.OpGet(s.keys.record(id), get...),
		clientv3.OpGet(s.keys.head(id), get...),
		clientv3.OpGet(s.keys.entry(id, max(from, 1)), rangeOpts...),
	).Commit()
	if err != nil {
		return chunk{}, s.mapErr(fmt.Sprintf("read the journal of %q", id), err)
	}
	rec := resp.Responses[0].GetResponseRange().Kvs
	if len(rec) == 0 {
		return chunk{}, notFound("read the journal of", id)
	}
	sess, err := leasestore.DecodeRecord(rec[0].Value)
	if err != nil {
		return chunk{}, err
	}
	if sess.Deleting {
		return chunk{}, fmt.Errorf("session %q is being deleted: %w", id, leasestore.ErrNotFound)
	}
	c := chunk{incarnation: sess.Incarnation, rev: resp.Header.Revision}
	if rev != 0 {
		c.rev = rev
	}
	if h := resp.Responses[1].GetResponseRange().Kvs; len(h) > 0 {
		if c.head, err = parsePad(h[0].Value); err != nil {
			return chunk{}, err
		}
	}
	for _, kv := range resp.Responses[2].GetResponseRange().Kvs {
		e, err := s.decodeEntry(id, kv.Key, kv.Value)
		if err != nil {
			return chunk{}, err
		}
		c.entries = append(c.entries, e)
	}
	return c, nil
}

func (s *Store) decodeEntry(id string, key, value []byte) (leasestore.Entry, error) {
	jp := s.keys.journal(id)
	seq, err := parsePad(key[len(jp):])
	if err != nil {
		return leasestore.Entry{}, fmt.Errorf("journal of %q: %w", id, err)
	}
	e, err := leasestore.DecodeEntry(value)
	if err != nil {
		return leasestore.Entry{}, fmt.Errorf("journal of %q at seq %d: %w", id, seq, err)
	}
	if e.Seq != seq {
		return leasestore.Entry{}, fmt.Errorf("%w: malformed journal entry: entry under seq %d says seq %d", leasestore.ErrDamaged, seq, e.Seq)
	}
	return e, nil
}

// LastSeq implements leasestore.JournalStore.
func (s *Store) LastSeq(ctx context.Context, id string) (uint64, error) {
	if err := s.readable(); err != nil {
		return 0, err
	}
	resp, err := s.cli.Txn(ctx).Then(clientv3.OpGet(s.keys.record(id), clientv3.WithCountOnly()), clientv3.OpGet(s.keys.head(id))).Commit()
	if err != nil {
		return 0, s.mapErr(fmt.Sprintf("read the journal position of %q", id), err)
	}
	if resp.Responses[0].GetResponseRange().Count == 0 {
		return 0, notFound("read the journal position of", id)
	}
	if h := resp.Responses[1].GetResponseRange().Kvs; len(h) > 0 {
		return parsePad(h[0].Value)
	}
	return 0, nil
}

// Replay implements leasestore.JournalStore: every chunk is read at the
// revision of the first, so the replay is one snapshot; if etcd compacted
// that revision meanwhile (a slow reader), the rest is read at the newest
// revision, checking that the session is still the same incarnation.
func (s *Store) Replay(ctx context.Context, id string, from uint64, fn func(leasestore.Entry) error) error {
	first, err := s.readChunk(ctx, id, from, 0)
	if err != nil {
		return err
	}
	upTo, rev, inc := first.head, first.rev, first.incarnation
	c := first
	for {
		for _, e := range c.entries {
			if e.Seq > upTo {
				return nil
			}
			if err := fn(e); err != nil {
				return err
			}
			from = e.Seq + 1
		}
		if len(c.entries) < replayChunk || from > upTo {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		c, err = s.readChunk(ctx, id, from, rev)
		if errors.Is(err, rpctypes.ErrCompacted) {
			rev = 0
			c, err = s.readChunk(ctx, id, from, 0)
		}
		if err != nil {
			return err
		}
		if c.incarnation != inc {
			return recreated(id)
		}
	}
}

func recreated(id string) error {
	return fmt.Errorf("session %q was deleted (and created again) while it was read: %w", id, leasestore.ErrNotFound)
}

// Tail implements leasestore.JournalStore. It reads the journal in
// chunks; once it has read to the end it watches the journal's keys from
// the revision after its last read, so every entry committed later comes
// as a watch event, in seq order. A delete of any journal key (only
// Delete removes them, all at once) ends it with ErrNotFound. A watch
// that cannot go on (its start revision was compacted, its member lost
// the leader, the stream broke) is replaced by reading again from the
// next seq it was due and watching anew: entries are delivered by seq,
// so none is skipped and none twice. A read that finds another
// incarnation of the session (deleted and created again while the tail
// was not watching) ends it with ErrNotFound too.
func (s *Store) Tail(ctx context.Context, id string, from uint64, fn func(leasestore.Entry) error) error {
	next := max(from, 1)
	inc := ""
	first := true
	for {
		// Read to the end.
		var rev int64
		for {
			c, err := s.readChunk(ctx, id, next, 0)
			if err != nil {
				return err
			}
			if first {
				inc, first = c.incarnation, false
			} else if c.incarnation != inc {
				return recreated(id)
			}
			for _, e := range c.entries {
				if err := fn(e); err != nil {
					return err
				}
				next = e.Seq + 1
			}
			rev = c.rev
			if len(c.entries) < replayChunk {
				break
			}
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		again, err := s.follow(ctx, id, rev+1, &next, fn)
		if !again {
			return err
		}
		s.log.Debug("tail reads again", "session", id, "next", next, "reason", err)
		// A watch that failed at once (no leader yet) is not retried in
		// a busy loop.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.ctx.Done():
			return fmt.Errorf("tail session %q: %w", id, leasestore.ErrClosed)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// follow watches id's journal from rev, delivering entries from *next on.
// It returns again=true when the caller should read from *next and watch
// anew, or the error that ends the tail.
func (s *Store) follow(ctx context.Context, id string, rev int64, next *uint64, fn func(leasestore.Entry) error) (again bool, err error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()
	jp := s.keys.journal(id)
	wch := s.cli.Watch(clientv3.WithRequireLeader(wctx), jp, clientv3.WithPrefix(), clientv3.WithRev(rev))
	for resp := range wch {
		if err := resp.Err(); err != nil {
			return true, err
		}
		if resp.CompactRevision != 0 {
			return true, fmt.Errorf("watch revision %d compacted (now %d)", rev, resp.CompactRevision)
		}
		for _, ev := range resp.Events {
			if ev.Type == clientv3.EventTypeDelete {
				return false, fmt.Errorf("session %q was deleted: %w", id, leasestore.ErrNotFound)
			}
			e, err := s.decodeEntry(id, ev.Kv.Key, ev.Kv.Value)
			if err != nil {
				return false, err
			}
			switch {
			case e.Seq < *next:
				continue // delivered by the read before the watch
			case e.Seq > *next:
				return true, fmt.Errorf("watch delivered seq %d where %d was due", e.Seq, *next)
			}
			if err := fn(e); err != nil {
				return false, err
			}
			*next = e.Seq + 1
		}
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if s.ctx.Err() != nil {
		return false, fmt.Errorf("tail session %q: %w", id, leasestore.ErrClosed)
	}
	return true, errors.New("watch ended")
}
