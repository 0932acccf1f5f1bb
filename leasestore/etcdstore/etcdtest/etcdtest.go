// Package etcdtest runs a real etcd cluster inside a test: one to several
// members of go.etcd.io/etcd/server/v3/embed on loopback, each on ports
// the kernel handed out, with its data in the test's temporary directory,
// and stopped when the test ends. Members can be stopped and restarted
// (Stop, Restart) to put faults under the store.
//
// The members run with a short heartbeat (50ms) and election timeout
// (500ms), so that a cluster elects a leader within a second of starting
// or of losing one, and so that etcd's smallest lease TTL (one and a half
// election timeouts, rounded up to a second) is one second: tests of
// liveness leases can use TTLs of a second or two. Their logs are dropped
// (etcd's zap logger is a no-op) unless AGENTHOST_ETCD_LOG=1, when they go
// to the test's log at warning level and above.
//
// Goroutines: a stopped member's goroutines have all ended when Stop
// returns. The server package (v3.7.3) starts none that outlive its
// members as far as package etcdstore's tests show (they run goleak with
// no exception); IgnoreLeaks names the ones that might.
package etcdtest

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// Cluster is a running embedded etcd cluster.
type Cluster struct {
	t       testing.TB
	mu      sync.Mutex
	members []*member
}

type member struct {
	name       string
	dir        string
	clientURL  url.URL
	peerURL    url.URL
	initial    string
	etcd       *embed.Etcd // nil while stopped
	everServed bool
}

// StartCluster starts an etcd cluster of members members (1 or more) and
// waits until every member serves clients. The cluster stops when t ends.
func StartCluster(t testing.TB, members int) *Cluster {
	t.Helper()
	if members < 1 {
		t.Fatalf("etcdtest: a cluster needs at least one member, asked for %d", members)
	}
	c := &Cluster{t: t}
	dir := t.TempDir()
	var initial []string
	for i := range members {
		m := &member{
			name:      fmt.Sprintf("m%d", i),
			dir:       filepath.Join(dir, fmt.Sprintf("m%d", i)),
			clientURL: freeURL(t),
			peerURL:   freeURL(t),
		}
		initial = append(initial, m.name+"="+m.peerURL.String())
		c.members = append(c.members, m)
	}
	for _, m := range c.members {
		m.initial = strings.Join(initial, ",")
	}
	t.Cleanup(c.stopAll)
	// Members of a new cluster wait for each other before any serves, so
	// they start together and are waited for together.
	errs := make([]error, members)
	var wg sync.WaitGroup
	for i, m := range c.members {
		wg.Go(func() { errs[i] = c.start(m, "new") })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("etcdtest: start member %d: %v", i, err)
		}
	}
	return c
}

// freeURL returns a loopback URL on a port the kernel had free. Another
// process may take it before the member binds it; the member then fails
// to start and the test with it, which is rare and loud.
func freeURL(t testing.TB) url.URL {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("etcdtest: find a free port: %v", err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return url.URL{Scheme: "http", Host: addr}
}

func (c *Cluster) config(m *member, state string) *embed.Config {
	cfg := embed.NewConfig()
	cfg.Name = m.name
	cfg.Dir = m.dir
	cfg.ListenClientUrls = []url.URL{m.clientURL}
	cfg.AdvertiseClientUrls = []url.URL{m.clientURL}
	cfg.ListenPeerUrls = []url.URL{m.peerURL}
	cfg.AdvertisePeerUrls = []url.URL{m.peerURL}
	cfg.ListenMetricsUrls = nil
	cfg.InitialCluster = m.initial
	cfg.InitialClusterToken = "etcdtest"
	cfg.ClusterState = state
	cfg.TickMs = 50
	cfg.ElectionMs = 500
	cfg.LogLevel = "error"
	if os.Getenv("AGENTHOST_ETCD_LOG") == "1" {
		logger := zaptest.NewLogger(c.t, zaptest.Level(zap.WarnLevel)).With(zap.String("member", m.name))
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(logger)
	} else {
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	}
	return cfg
}

func (c *Cluster) start(m *member, state string) error {
	e, err := embed.StartEtcd(c.config(m, state))
	if err != nil {
		return err
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return fmt.Errorf("member %s failed: %w", m.name, err)
	case <-time.After(30 * time.Second):
		e.Close()
		return fmt.Errorf("member %s did not become ready in 30s", m.name)
	}
	c.mu.Lock()
	m.etcd, m.everServed = e, true
	c.mu.Unlock()
	return nil
}

// Endpoints returns every member's client URL, stopped members included
// (a client given all of them fails over between them).
func (c *Cluster) Endpoints() []string {
	out := make([]string, len(c.members))
	for i, m := range c.members {
		out[i] = m.clientURL.String()
	}
	return out
}

// Endpoint returns member i's client URL.
func (c *Cluster) Endpoint(i int) string { return c.members[i].clientURL.String() }

// Stop stops member i (its data stays, for Restart). Stopping a stopped
// member does nothing.
func (c *Cluster) Stop(i int) {
	c.mu.Lock()
	m := c.members[i]
	e := m.etcd
	m.etcd = nil
	c.mu.Unlock()
	if e != nil {
		e.Close()
	}
}

// Restart starts member i again from its data, after Stop, and waits
// until it serves. In a cluster of several members it serves once it has
// rejoined a quorum, so restart enough members for one.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	c.mu.Lock()
	m := c.members[i]
	running := m.etcd != nil
	c.mu.Unlock()
	if running {
		return
	}
	if err := c.start(m, "existing"); err != nil {
		c.t.Fatalf("etcdtest: restart member %d: %v", i, err)
	}
}

func (c *Cluster) stopAll() {
	var wg sync.WaitGroup
	for i := range c.members {
		wg.Go(func() { c.Stop(i) })
	}
	wg.Wait()
}

// IgnoreLeaks returns goleak options for goroutines etcd's packages may
// start once per process and never stop, for a test package that embeds
// etcd:
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(m, etcdtest.IgnoreLeaks()...) }
//
// Each names the function such a goroutine parks in: the scheduler of
// etcd's pkg/schedule (used by the server's compactor and lessor) and
// OpenCensus's view worker (linked in through gRPC's older stats
// plumbing). None belongs to a running member: a member stopped leaves
// no goroutine behind, and package etcdstore's tests pass goleak without
// these.
func IgnoreLeaks() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
		goleak.IgnoreAnyFunction("go.etcd.io/etcd/pkg/v3/schedule.(*fifo).run"),
	}
}
