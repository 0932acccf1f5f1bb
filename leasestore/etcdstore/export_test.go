package etcdstore

import (
	"time"

	"github.com/agenthost/agenthost/leasestore"
)

// PauseKeepalives stops m's keepalives for d, as a frozen process would
// stop them (the lease then expires on its TTL).
func PauseKeepalives(m leasestore.Membership, d time.Duration) {
	m.(*membership).pausedUntil.Store(time.Now().Add(d).UnixNano())
}
