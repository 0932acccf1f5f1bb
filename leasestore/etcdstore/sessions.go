package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/agenthost/agenthost/leasestore"
)

// wait queues o on session id's writer and waits for it.
func (s *Store) wait(ctx context.Context, id string, o *op) error {
	if err := s.enqueue(ctx, id, o); err != nil {
		return fmt.Errorf("%s session %q: %w", o.name, id, err)
	}
	<-o.done
	return o.err
}

func newUpdate(name string, update func(cur *leasestore.Session, now time.Time) (plan, error)) *op {
	return &op{kind: opUpdate, name: name, update: update, done: make(chan struct{})}
}

func notFound(op, id string) error {
	return fmt.Errorf("%s session %q: %w", op, id, leasestore.ErrNotFound)
}

// Create implements leasestore.SessionStore.
func (s *Store) Create(ctx context.Context, spec leasestore.SessionSpec) (leasestore.Session, error) {
	return s.CreateAndApply(ctx, spec, nil)
}

// CreateAndApply implements leasestore.SessionStore: the record, its
// first journal entries and the transition's result are one transaction
// that requires the record to be absent.
func (s *Store) CreateAndApply(ctx context.Context, spec leasestore.SessionSpec, t leasestore.Transition) (leasestore.Session, error) {
	spec, err := spec.Prepare()
	if err != nil {
		return leasestore.Session{}, err
	}
	id := spec.ID
	o := newUpdate("create", func(cur *leasestore.Session, now time.Time) (plan, error) {
		if cur != nil {
			return plan{}, fmt.Errorf("create session %q: %w", id, leasestore.ErrExists)
		}
		sess, created := leasestore.NewSession(spec, now)
		p := plan{put: &sess, entries: []leasestore.Entry{{Fence: 0, Kind: created.Kind, Payload: created.Payload}}}
		if t == nil {
			return p, nil
		}
		next, entry, err := t.Apply(sess, s.env(now, ""))
		if err != nil {
			return plan{}, err
		}
		next.UpdatedAt = now
		p.put = &next
		if entry != nil {
			p.entries = append(p.entries, leasestore.Entry{Fence: next.Lease.Fence, Kind: entry.Kind, Payload: entry.Payload})
		}
		return p, nil
	})
	o.assumeAbsent = true
	if err := s.wait(ctx, id, o); err != nil {
		return leasestore.Session{}, err
	}
	return o.result, nil
}

func (s *Store) env(now time.Time, lostHost string) leasestore.Env {
	return leasestore.Env{Now: now, NewToken: s.opts.NewToken, LostHost: lostHost}
}

// transition is the update that runs t.
func (s *Store) transition(id string, t leasestore.Transition, lostHost string) *op {
	return newUpdate(t.Name(), func(cur *leasestore.Session, now time.Time) (plan, error) {
		if cur == nil {
			return plan{}, notFound(t.Name(), id)
		}
		next, entry, err := t.Apply(*cur, s.env(now, lostHost))
		if err != nil {
			return plan{}, err
		}
		next.UpdatedAt = now
		p := plan{put: &next}
		if entry != nil {
			p.entries = []leasestore.Entry{{Fence: next.Lease.Fence, Kind: entry.Kind, Payload: entry.Payload}}
		}
		return p, nil
	})
}

// Apply implements leasestore.SessionStore: one transaction that requires
// the record (and journal head) to be as the transition judged them.
func (s *Store) Apply(ctx context.Context, id string, t leasestore.Transition) (leasestore.Session, error) {
	if t == nil {
		return leasestore.Session{}, fmt.Errorf("%w: nil transition", leasestore.ErrInvalidArgument)
	}
	o := s.transition(id, t, "")
	if err := s.wait(ctx, id, o); err != nil {
		return leasestore.Session{}, err
	}
	return o.result, nil
}

// ApplyIfHostLost implements leasestore.Cluster: Apply whose transaction
// also requires the host key of hostID to be absent.
func (s *Store) ApplyIfHostLost(ctx context.Context, id, hostID string, t leasestore.Transition) (leasestore.Session, error) {
	if t == nil {
		return leasestore.Session{}, fmt.Errorf("%w: nil transition", leasestore.ErrInvalidArgument)
	}
	if hostID == "" {
		return leasestore.Session{}, fmt.Errorf("%w: take over session %q: empty host id", leasestore.ErrInvalidArgument, id)
	}
	o := s.transition(id, t, hostID)
	hk := s.keys.host(hostID)
	o.extra = []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(hk), "=", 0)}
	o.hostKey = hk
	if err := s.wait(ctx, id, o); err != nil {
		return leasestore.Session{}, err
	}
	return o.result, nil
}

// ApplyBatch implements leasestore.SessionStore. Moves are committed in
// groups of up to 24 sessions, one read and one transaction each (see
// commitMany); a group whose transaction lost a compare to another
// host's write goes one transaction per move instead. Each slot reports
// its own move's fate.
func (s *Store) ApplyBatch(ctx context.Context, moves []leasestore.Move) []leasestore.MoveResult {
	out := make([]leasestore.MoveResult, len(moves))
	if err := ctx.Err(); err != nil {
		for i, m := range moves {
			out[i].Err = fmt.Errorf("apply to session %q: %w", m.ID, err)
		}
		return out
	}
	if err := s.writable(); err != nil {
		for i, m := range moves {
			out[i].Err = fmt.Errorf("apply to session %q: %w", m.ID, err)
		}
		return out
	}
	var items []*item
	slots := map[*item]int{}
	for i, m := range moves {
		if m.Transition == nil {
			out[i].Err = fmt.Errorf("apply to session %q: %w: nil transition", m.ID, leasestore.ErrInvalidArgument)
			continue
		}
		it := &item{id: m.ID, op: s.transition(m.ID, m.Transition, "")}
		items = append(items, it)
		slots[it] = i
	}
	s.commitMany(items)
	for _, it := range items {
		i := slots[it]
		if it.err != nil {
			out[i].Err = it.err
		} else {
			out[i].Session = it.result
		}
	}
	return out
}

// MarkAllUnreconciled implements leasestore.SessionStore.
func (s *Store) MarkAllUnreconciled(ctx context.Context) (int, error) {
	return s.markUnreconciled(ctx, func(leasestore.Lease) bool { return true })
}

// MarkHostUnreconciled implements leasestore.SessionStore: the leases
// hostID decides (leasestore.Lease.ReconciledBy), each judged on the
// record its own transaction compares.
func (s *Store) MarkHostUnreconciled(ctx context.Context, hostID string) (int, error) {
	if hostID == "" {
		return 0, fmt.Errorf("%w: mark a host's leases unreconciled: empty host id", leasestore.ErrInvalidArgument)
	}
	return s.markUnreconciled(ctx, func(l leasestore.Lease) bool { return l.ReconciledBy(hostID) })
}

// markUnreconciled flags the leases flag selects, one transaction each,
// all queued at once. Flagging deletes the writer key with the record
// change, so from that commit on etcd refuses the old writer's appends.
func (s *Store) markUnreconciled(ctx context.Context, flag func(leasestore.Lease) bool) (int, error) {
	const what = "mark-unreconciled"
	ids, err := s.sessionIDs(ctx)
	if err != nil {
		return 0, err
	}
	if err := s.writable(); err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	items := make([]*item, len(ids))
	for i, id := range ids {
		items[i] = &item{id: id, op: newUpdate(what, func(cur *leasestore.Session, now time.Time) (plan, error) {
			if cur == nil || !flag(cur.Lease) {
				return plan{}, errSkip // deleted since it was listed, or not this host's
			}
			cur.Lease.Unreconciled = true
			return plan{put: cur}, nil
		})}
	}
	s.commitMany(items)
	n := 0
	var errs []error
	for _, it := range items {
		switch {
		case errors.Is(it.err, errSkip):
		case it.err != nil:
			errs = append(errs, fmt.Errorf("%s session %q: %w", what, it.id, it.err))
		default:
			n++
		}
	}
	return n, errors.Join(errs...)
}

// errSkip is an update that decided to write nothing.
var errSkip = errors.New("nothing to write")

// Delete implements leasestore.SessionStore: one transaction, requiring
// the record to be as CheckDelete judged it, deletes the record and every
// key of the session (journal, head, writer key, provider state) at once,
// so nothing is ever left half deleted and no Deleting step is needed.
func (s *Store) Delete(ctx context.Context, id string, fence uint64) error {
	o := newUpdate("delete", func(cur *leasestore.Session, now time.Time) (plan, error) {
		if cur == nil {
			return plan{}, notFound("delete", id)
		}
		if err := leasestore.CheckDelete(*cur, fence); err != nil {
			return plan{}, err
		}
		return plan{deleteAll: true}, nil
	})
	return s.wait(ctx, id, o)
}

// Get implements leasestore.SessionStore.
func (s *Store) Get(ctx context.Context, id string) (leasestore.Session, error) {
	if err := s.readable(); err != nil {
		return leasestore.Session{}, err
	}
	resp, err := s.cli.Get(ctx, s.keys.record(id))
	if err != nil {
		return leasestore.Session{}, s.mapErr(fmt.Sprintf("read session %q", id), err)
	}
	if len(resp.Kvs) == 0 {
		return leasestore.Session{}, notFound("get", id)
	}
	return leasestore.DecodeRecord(resp.Kvs[0].Value)
}

// listPage is how many records one List read returns.
const listPage = 256

// List implements leasestore.SessionStore: pages of records, all read at
// the revision of the first.
func (s *Store) List(ctx context.Context) ([]leasestore.Session, error) {
	var out []leasestore.Session
	var bad []error
	err := s.scanRecords(ctx, false, func(id string, v []byte) {
		sess, err := leasestore.DecodeRecord(v)
		if err != nil {
			bad = append(bad, fmt.Errorf("session %q: %w", id, err))
			return
		}
		out = append(out, sess)
	})
	if err != nil {
		return nil, err
	}
	return out, errors.Join(bad...)
}

func (s *Store) sessionIDs(ctx context.Context) ([]string, error) {
	var ids []string
	err := s.scanRecords(ctx, true, func(id string, _ []byte) { ids = append(ids, id) })
	return ids, err
}

// scanRecords calls fn for every record key (and value, unless keysOnly)
// in key order, reading pages at the revision of the first page.
func (s *Store) scanRecords(ctx context.Context, keysOnly bool, fn func(id string, v []byte)) error {
	if err := s.readable(); err != nil {
		return err
	}
	prefix := s.keys.records()
	end := clientv3.GetPrefixRangeEnd(prefix)
	from := prefix
	var rev int64
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(listPage)}
		if keysOnly {
			opts = append(opts, clientv3.WithKeysOnly())
		}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := s.cli.Get(ctx, from, opts...)
		if err != nil {
			return s.mapErr("list sessions", err)
		}
		rev = resp.Header.Revision
		for _, kv := range resp.Kvs {
			id, err := decodeID(string(kv.Key[len(prefix):]))
			if err != nil {
				continue // not a key this store wrote
			}
			fn(id, kv.Value)
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}
