package etcdstore

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/agenthost/agenthost/internal/bootclock"
	"github.com/agenthost/agenthost/leasestore"
)

// Join implements leasestore.Cluster. It grants an etcd lease of ttl
// (rounded up to whole seconds; etcd may raise it to its minimum, see
// Membership.TTL) and creates the host key, attached to the lease, in a
// transaction that requires the key to be absent: ErrHostRegistered when
// another registration of hostID is live. The Membership keeps the lease
// alive with a keepalive every TTL/3 and tracks Valid from the send time
// of the last answered one, on the monotonic and the boot clock (which
// counts time suspended: a host waking from a sleep is not live). A lease that expired anyway is never revived:
// the Membership reports not-live, revokes what is left of the old lease
// and registers again under a new incarnation, epoch+1.
func (s *Store) Join(ctx context.Context, req leasestore.JoinRequest) (leasestore.Membership, error) {
	hostID, ttl := req.HostID, req.TTL
	if hostID == "" {
		return nil, fmt.Errorf("%w: join the cluster: empty host id", leasestore.ErrInvalidArgument)
	}
	if ttl <= 0 {
		return nil, fmt.Errorf("%w: join the cluster: liveness TTL %v", leasestore.ErrInvalidArgument, ttl)
	}
	if err := s.writable(); err != nil {
		return nil, fmt.Errorf("join the cluster: %w", err)
	}
	m := &membership{s: s, hostID: hostID, ttl: ttl, address: req.Address, changed: make(chan struct{}, 1), stopped: make(chan struct{})}
	m.ctx, m.cancel = context.WithCancel(context.WithoutCancel(ctx))
	if err := m.register(ctx); err != nil {
		m.cancel()
		return nil, err
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		m.cancel()
		m.revoke(ctx)
		return nil, fmt.Errorf("join the cluster: %w", leasestore.ErrClosed)
	}
	s.members[m] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	stop := context.AfterFunc(ctx, m.cancel)
	go func() {
		defer s.wg.Done()
		defer stop()
		m.run()
	}()
	return m, nil
}

type membership struct {
	s      *Store
	hostID string
	ttl    time.Duration
	// address is published in the host record (JoinRequest.Address).
	address string

	ctx     context.Context
	cancel  context.CancelFunc
	stopped chan struct{}
	changed chan struct{}

	closeOnce sync.Once
	closeErr  error

	// pausedUntil (unix nanos), set only by tests, stops keepalives the
	// way a frozen process stops them.
	pausedUntil atomic.Int64

	mu      sync.Mutex
	lease   clientv3.LeaseID
	granted time.Duration
	// until is the send time of the last answered keepalive (or of the
	// grant) + its TTL on the monotonic clock, zero while not registered;
	// bootUntil the same instant on the machine's boot clock (0 where
	// there is none). The monotonic clock stops while the machine sleeps,
	// the cluster's does not: validUntil shortens until by the time spent
	// suspended, so a host waking from a sleep longer than what was left
	// of its TTL is not live, although until has not passed.
	until     time.Time
	bootUntil int64
	epoch     uint64
	rec       leasestore.HostRecord
}

// bootNow reads the boot clock; 0 where there is none.
func bootNow() int64 {
	ns, ok := bootclock.Now()
	if !ok {
		return 0
	}
	return ns
}

// validUntil is until, no later than bootUntil counted on the boot clock:
// now + (bootUntil - nowBoot). It keeps now's monotonic reading, so later
// comparisons with time.Now are monotonic. A zero until (not registered)
// or a zero bootUntil or nowBoot (no boot clock) leaves until as it is.
func validUntil(until time.Time, bootUntil int64, now time.Time, nowBoot int64) time.Time {
	if until.IsZero() || bootUntil == 0 || nowBoot == 0 {
		return until
	}
	if b := now.Add(time.Duration(bootUntil - nowBoot)); b.Before(until) {
		return b
	}
	return until
}

// validLocked is Valid's until now. Callers hold m.mu.
func (m *membership) validLocked() time.Time {
	return validUntil(m.until, m.bootUntil, time.Now(), bootNow())
}

func (m *membership) notify() {
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

// register grants a lease and creates the host key under it.
func (m *membership) register(ctx context.Context) error {
	s := m.s
	secs := int64(math.Ceil(m.ttl.Seconds()))
	sent, sentBoot := time.Now(), bootNow()
	g, err := s.cli.Grant(ctx, secs)
	if err != nil {
		return s.mapErr("join the cluster: grant a liveness lease", err)
	}
	rec := leasestore.HostRecord{HostID: m.hostID, Incarnation: rand.Text(), PID: os.Getpid(), Registered: s.now()}
	rec.Address = m.address
	val, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode host record: %w", err)
	}
	key := s.keys.host(m.hostID)
	resp, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(val), clientv3.WithLease(g.ID))).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		_, _ = s.cli.Revoke(context.WithoutCancel(ctx), g.ID)
		return s.mapErr("join the cluster: register the host", err)
	}
	if !resp.Succeeded {
		_, _ = s.cli.Revoke(context.WithoutCancel(ctx), g.ID)
		return fmt.Errorf("join the cluster as %q: %w", m.hostID, leasestore.ErrHostRegistered)
	}
	m.mu.Lock()
	m.lease, m.granted, m.rec = g.ID, time.Duration(g.TTL)*time.Second, rec
	m.until = sent.Add(m.granted)
	m.bootUntil = 0
	if sentBoot != 0 {
		m.bootUntil = sentBoot + int64(m.granted)
	}
	m.epoch++
	again := m.epoch > 1
	m.mu.Unlock()
	if again {
		m.notify()
	}
	return nil
}

func (m *membership) run() {
	defer close(m.stopped)
	for {
		m.mu.Lock()
		interval := max(m.granted/3, 100*time.Millisecond)
		until := m.validLocked()
		m.mu.Unlock()
		wait := interval
		if !until.IsZero() {
			wait = min(wait, time.Until(until))
		}
		select {
		case <-m.ctx.Done():
			return
		case <-time.After(max(wait, time.Millisecond)):
		}
		if until.IsZero() {
			m.rejoin()
			continue
		}
		if time.Now().UnixNano() < m.pausedUntil.Load() {
			m.checkLapse()
			continue
		}
		m.keepalive()
	}
}

// keepalive renews the lease once; an answer sets Valid from the send
// time, a lease the cluster no longer knows is a loss.
func (m *membership) keepalive() {
	m.mu.Lock()
	id, until := m.lease, m.validLocked()
	m.mu.Unlock()
	sent, sentBoot := time.Now(), bootNow()
	ctx, cancel := context.WithDeadline(m.ctx, until)
	resp, err := m.s.cli.KeepAliveOnce(ctx, id)
	cancel()
	switch {
	case err == nil && resp.TTL > 0:
		m.mu.Lock()
		if m.lease == id {
			ttl := time.Duration(resp.TTL) * time.Second
			m.until = sent.Add(ttl)
			m.bootUntil = 0
			if sentBoot != 0 {
				m.bootUntil = sentBoot + int64(ttl)
			}
		}
		m.mu.Unlock()
	case errors.Is(err, rpctypes.ErrLeaseNotFound) || err == nil:
		m.lost("the cluster expired the liveness lease")
	default:
		m.checkLapse()
	}
}

// checkLapse reports the loss once Valid has passed without an answered
// keepalive: the cluster may have expired the lease.
func (m *membership) checkLapse() {
	m.mu.Lock()
	lapsed := !m.until.IsZero() && !time.Now().Before(m.validLocked())
	m.mu.Unlock()
	if lapsed {
		m.lost("no keepalive was answered within the TTL")
	}
}

func (m *membership) lost(why string) {
	m.mu.Lock()
	if m.until.IsZero() {
		m.mu.Unlock()
		return
	}
	m.until, m.bootUntil = time.Time{}, 0
	m.mu.Unlock()
	m.s.log.Warn("liveness lease lost; registering again under a new incarnation", "host", m.hostID, "reason", why)
	m.notify()
}

// rejoin revokes what is left of the lost lease (the cluster may not have
// expired it yet: the TTL counts from a keepalive's arrival) and
// registers again. Until it succeeds the host is not live.
func (m *membership) rejoin() {
	if time.Now().UnixNano() < m.pausedUntil.Load() {
		return
	}
	m.mu.Lock()
	old := m.lease
	m.mu.Unlock()
	ctx, cancel := context.WithTimeout(m.ctx, m.s.opts.RequestTimeout)
	defer cancel()
	if old != 0 {
		if _, err := m.s.cli.Revoke(ctx, old); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return // try again at the next tick
		}
		m.mu.Lock()
		m.lease = 0
		m.mu.Unlock()
	}
	if err := m.register(ctx); err != nil {
		m.s.log.Warn("could not register again", "host", m.hostID, "error", err)
	}
}

// Valid is the send time of the last answered keepalive + its TTL, counted
// on the boot clock where there is one: a host that was suspended (its
// monotonic clock stopped) for longer than what was left of the TTL gets
// an until in the past, not-live, until a keepalive or a new registration
// proves it again.
func (m *membership) Valid() (time.Time, uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.validLocked(), m.epoch
}

func (m *membership) Changed() <-chan struct{} { return m.changed }

func (m *membership) TTL() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.granted
}

func (m *membership) Record() leasestore.HostRecord {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rec
}

// Close stops the keepalives and revokes the lease, so other hosts see
// the loss at once.
func (m *membership) Close(ctx context.Context) error {
	m.closeOnce.Do(func() {
		m.cancel()
		select {
		case <-m.stopped:
		case <-ctx.Done():
		}
		m.closeErr = m.revoke(ctx)
		m.mu.Lock()
		m.until = time.Time{}
		m.mu.Unlock()
		m.notify()
		m.s.mu.Lock()
		delete(m.s.members, m)
		m.s.mu.Unlock()
	})
	return m.closeErr
}

func (m *membership) revoke(ctx context.Context) error {
	m.mu.Lock()
	id := m.lease
	m.lease = 0
	m.mu.Unlock()
	if id == 0 {
		return nil
	}
	if _, err := m.s.cli.Revoke(ctx, id); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("revoke the liveness lease of host %q (it expires on its TTL): %w", m.hostID, err)
	}
	return nil
}

// Hosts implements leasestore.Cluster.
func (s *Store) Hosts(ctx context.Context) (map[string]leasestore.HostRecord, error) {
	hosts, _, err := s.readHosts(ctx)
	return hosts, err
}

func (s *Store) readHosts(ctx context.Context) (map[string]leasestore.HostRecord, int64, error) {
	if err := s.readable(); err != nil {
		return nil, 0, err
	}
	resp, err := s.cli.Get(ctx, s.keys.hosts(), clientv3.WithPrefix())
	if err != nil {
		return nil, 0, s.mapErr("read the cluster's hosts", err)
	}
	out := make(map[string]leasestore.HostRecord, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var rec leasestore.HostRecord
		if err := json.Unmarshal(kv.Value, &rec); err != nil {
			s.log.Warn("unreadable host record", "key", string(kv.Key), "error", err)
			rec.HostID = string(kv.Key[len(s.keys.hosts()):])
		}
		out[rec.HostID] = rec
	}
	return out, resp.Header.Revision, nil
}

// WatchHosts implements leasestore.Cluster. It watches the host keys from
// the revision of its first read; a watch that cannot go on (compacted,
// leader lost) is replaced by reading the hosts again and reporting the
// difference (a host gone is a loss, a new incarnation a loss and a
// join), then watching from that read.
func (s *Store) WatchHosts(ctx context.Context, fn func(leasestore.HostEvent) error) error {
	known := map[string]leasestore.HostRecord{}
	for {
		hosts, rev, err := s.readHosts(ctx)
		if err != nil {
			return err
		}
		now := time.Now()
		for id, old := range known {
			if cur, ok := hosts[id]; !ok || cur.Incarnation != old.Incarnation {
				delete(known, id)
				if err := fn(leasestore.HostEvent{Kind: leasestore.HostLost, Record: old, ObservedAt: now}); err != nil {
					return err
				}
			}
		}
		for id, rec := range hosts {
			if _, ok := known[id]; !ok {
				known[id] = rec
				if err := fn(leasestore.HostEvent{Kind: leasestore.HostJoined, Record: rec, ObservedAt: now}); err != nil {
					return err
				}
			}
		}
		if err := s.watchHosts(ctx, rev+1, known, fn); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// watchHosts follows host keys from rev; nil means read again.
func (s *Store) watchHosts(ctx context.Context, rev int64, known map[string]leasestore.HostRecord, fn func(leasestore.HostEvent) error) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()
	prefix := s.keys.hosts()
	for resp := range s.cli.Watch(clientv3.WithRequireLeader(wctx), prefix, clientv3.WithPrefix(), clientv3.WithRev(rev), clientv3.WithPrevKV()) {
		if resp.Err() != nil || resp.CompactRevision != 0 {
			return nil
		}
		for _, ev := range resp.Events {
			id := string(ev.Kv.Key[len(prefix):])
			now := time.Now()
			if ev.Type == clientv3.EventTypeDelete {
				old, ok := known[id]
				if !ok {
					continue
				}
				delete(known, id)
				if err := fn(leasestore.HostEvent{Kind: leasestore.HostLost, Record: old, ObservedAt: now}); err != nil {
					return err
				}
				continue
			}
			var rec leasestore.HostRecord
			if err := json.Unmarshal(ev.Kv.Value, &rec); err != nil {
				rec.HostID = id
			}
			if old, ok := known[id]; ok {
				if old.Incarnation == rec.Incarnation {
					continue
				}
				if err := fn(leasestore.HostEvent{Kind: leasestore.HostLost, Record: old, ObservedAt: now}); err != nil {
					return err
				}
			}
			known[id] = rec
			if err := fn(leasestore.HostEvent{Kind: leasestore.HostJoined, Record: rec, ObservedAt: now}); err != nil {
				return err
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.ctx.Err() != nil {
		return fmt.Errorf("watch hosts: %w", leasestore.ErrClosed)
	}
	return nil
}
