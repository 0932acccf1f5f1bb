package etcdstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/agenthost/agenthost/leasestore"
	"github.com/agenthost/agenthost/leasestore/etcdstore"
	"github.com/agenthost/agenthost/leasestore/etcdstore/etcdtest"
	"github.com/agenthost/agenthost/leasestore/leasestoretest"
)

// open opens a store on c under prefix, closed when t ends.
func open(t testing.TB, c *etcdtest.Cluster, prefix string, mod func(*etcdstore.Options)) *etcdstore.Store {
	t.Helper()
	opts := etcdstore.Options{
		Endpoints: c.Endpoints(),
		Prefix:    prefix,
		Logger:    hclog.New(&hclog.LoggerOptions{Output: testWriter{t}, Level: hclog.Warn}),
	}
	if mod != nil {
		mod(&opts)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := etcdstore.Open(ctx, opts)
	if err != nil {
		t.Fatalf("open etcd store: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	return s
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p))
	return len(p), nil
}

func conformance(t *testing.T, members int) {
	t.Parallel() // each on its own cluster
	c := etcdtest.StartCluster(t, members)
	leasestoretest.Run(t, func(t *testing.T, cfg leasestoretest.StoreConfig) leasestore.Store {
		// The suite's Dir names the store's state: here its key prefix,
		// so a store opened again on the same Dir is a restart.
		return open(t, c, "/t"+cfg.Dir+"/", func(o *etcdstore.Options) { o.Now = cfg.Now })
	})
}

func TestConformanceOneMember(t *testing.T) { conformance(t, 1) }

func TestConformanceThreeMembers(t *testing.T) { conformance(t, 3) }
