package etcdstore

import (
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// compactor keeps etcd's MVCC history to CompactWindow: every window/4 it
// notes the cluster's revision, and compacts to the newest revision it
// noted at least a window ago. Compaction drops only the versions a key
// had before its latest one (and the tombstones of deleted keys); the
// latest value of every key stays, so it never removes a journal entry (a
// journal key is written once and deleted only with its session). Several
// hosts compacting the same cluster is harmless: compacting to a revision
// already compacted is refused and ignored.
func (s *Store) compactor() {
	window := s.opts.CompactWindow
	tick := max(window/4, 10*time.Millisecond)
	type sample struct {
		at  time.Time
		rev int64
	}
	var samples []sample
	var done int64
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := s.reqCtx()
		resp, err := s.cli.Get(ctx, s.opts.Prefix, s.countOnly()...)
		if err != nil {
			cancel()
			continue
		}
		now := time.Now()
		samples = append(samples, sample{now, resp.Header.Revision})
		var target int64
		for len(samples) > 0 && now.Sub(samples[0].at) >= window {
			target = samples[0].rev
			samples = samples[1:]
		}
		if target > done {
			_, err := s.cli.Compact(ctx, target)
			switch {
			case err == nil:
				done = target
				s.log.Debug("compacted etcd history", "revision", target)
			case errors.Is(err, rpctypes.ErrCompacted):
				done = target
			default:
				s.log.Warn("could not compact etcd history", "revision", target, "error", err)
			}
		}
		cancel()
	}
}
