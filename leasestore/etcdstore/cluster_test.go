package etcdstore_test

import (
	"testing"
	"time"

	"github.com/agenthost/agenthost/leasestore"
	"github.com/agenthost/agenthost/leasestore/etcdstore"
	"github.com/agenthost/agenthost/leasestore/etcdstore/etcdtest"
	"github.com/agenthost/agenthost/leasestore/leasestoretest"
)

func runCluster(t *testing.T, members int) {
	t.Parallel() // each on its own cluster; most of the time is waiting for TTLs and elections
	c := etcdtest.StartCluster(t, members)
	leasestoretest.RunCluster(t, leasestoretest.ClusterHarness{
		Open: func(t *testing.T, name string) leasestoretest.ClusterStore {
			return open(t, c, "/c"+name+"/", nil)
		},
		Pause: etcdstore.PauseKeepalives,
		// etcdtest's members grant leases down to one second.
		TTL: time.Second,
	})
}

func TestClusterOneMember(t *testing.T) { runCluster(t, 1) }

func TestClusterThreeMembers(t *testing.T) { runCluster(t, 3) }

var _ leasestoretest.ClusterStore = (*etcdstore.Store)(nil)
var _ leasestore.Cluster = (*etcdstore.Store)(nil)
