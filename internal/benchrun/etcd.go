package main

// The etcd rows: the same figures as the Badger rows, on a host whose
// store is etcd (leasestore/etcdstore) and which runs in cluster mode,
// each beside the matching raw etcd baseline measured in the same step: a
// bare etcd client doing the same number of transactions the host's
// figure made (counted as the cluster's revision moved: etcd bumps its
// revision once per transaction that writes, and lease keepalives write
// none). The store is one etcd member (internal/etcdmember, a real
// process) with fsync on, so each transaction is as durable as a Badger
// synced commit on the same disk; a cluster of several members adds a
// network round trip per transaction, which loopback does not show.

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	acp "github.com/coder/acp-go-sdk"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/internal/apiclient"
	"github.com/agenthost/agenthost/internal/serveproc"
	"github.com/agenthost/agenthost/leasestore/etcdstore"
)

// etcdMember is one etcd member process the step started.
type etcdMember struct {
	endpoint string
	cmd      *exec.Cmd
	done     chan struct{}
}

// startEtcdMember starts one member (fsync on) with its data under work.
func startEtcdMember(work string) (*etcdMember, error) {
	ports, err := loopbackPorts(2)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(work, "etcd-")
	if err != nil {
		return nil, err
	}
	m := &etcdMember{endpoint: fmt.Sprintf("http://127.0.0.1:%d", ports[0]), done: make(chan struct{})}
	m.cmd = exec.Command(filepath.Join(work, "etcdmember"), "--name", "bench", "--data-dir", dir,
		"--listen-client", m.endpoint, "--listen-peer", fmt.Sprintf("http://127.0.0.1:%d", ports[1]))
	m.cmd.Stderr = os.Stderr
	out, err := m.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := m.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start etcdmember: %w", err)
	}
	lines := make(chan string, 1)
	go func() {
		br := bufio.NewReader(out)
		line, _ := br.ReadString('\n')
		lines <- line
		_, _ = br.WriteTo(discardWriter{})
		_ = m.cmd.Wait()
		close(m.done)
	}()
	select {
	case line := <-lines:
		if !strings.Contains(line, `"ready":true`) {
			m.stop()
			return nil, fmt.Errorf("etcdmember printed %q instead of its ready line", line)
		}
		return m, nil
	case <-time.After(time.Minute):
		m.stop()
		return nil, fmt.Errorf("etcdmember not ready within a minute")
	}
}

func (m *etcdMember) stop() {
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.done:
	case <-time.After(10 * time.Second):
		_ = m.cmd.Process.Kill()
		<-m.done
	}
}

type discardWriter struct{}

func (discardWriter) Write(p []byte) (int, error) { return len(p), nil }

func loopbackPorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// revision is the cluster's current revision.
func revision(ctx context.Context, cli *clientv3.Client) (int64, error) {
	resp, err := cli.Get(ctx, "/benchrun/revision")
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

// bareTxns runs n transactions from conc goroutines at once, each a put
// of a 200-byte value guarded by a compare on its key, as a fenced
// append is, and returns how long they took.
func bareTxns(ctx context.Context, cli *clientv3.Client, n, conc int) (time.Duration, error) {
	value := strings.Repeat("x", 200)
	var wg sync.WaitGroup
	errs := make(chan error, conc)
	start := time.Now()
	for g := range conc {
		count := n / conc
		if g < n%conc {
			count++
		}
		wg.Go(func() {
			key := fmt.Sprintf("/benchrun/bare/%d", g)
			for i := range count {
				_, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Version(key), ">", int64(-1))).
					Then(clientv3.OpPut(key, value), clientv3.OpPut(fmt.Sprintf("%s/%d", key, i), value)).Commit()
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	d := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	return d, nil
}

// etcdHost is a host in cluster mode on the member's store.
type etcdHost struct {
	h     *host.Host
	cli   *clientv3.Client
	dir   string
	store *etcdstore.Store
}

func openEtcdHost(work, name, scripted string, m *etcdMember) (*etcdHost, error) {
	dir, err := os.MkdirTemp(work, name+"-")
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	store, err := etcdstore.Open(ctx, etcdstore.Options{Endpoints: []string{m.endpoint}, Prefix: "/" + name + "/"})
	if err != nil {
		return nil, err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		_ = store.Close(ctx)
		return nil, err
	}
	h, err := host.Open(ctx, host.Config{
		StateDir: dir, Store: store, Cluster: store, HostID: name,
		Agents:         map[string]host.AgentPlugin{"scripted": scriptedAgent(scripted)},
		StartupTimeout: time.Minute, StopTimeout: 5 * time.Second, ReattachTimeout: 30 * time.Second,
	})
	if err != nil {
		cli.Close()
		return nil, err
	}
	return &etcdHost{h: h, cli: cli, dir: dir, store: store}, nil
}

func (e *etcdHost) close() {
	_ = e.h.Shutdown(context.Background())
	e.cli.Close()
}

// benchEtcdCreate: create → ready on etcd, against a bare go-plugin start
// plus the transactions the host's start made, one after the other, by a
// bare client.
func benchEtcdCreate(work, scripted, fixture string, rounds int) ([]row, error) {
	m, err := startEtcdMember(work)
	if err != nil {
		return nil, err
	}
	defer m.stop()
	e, err := openEtcdHost(work, "etcd-create", scripted, m)
	if err != nil {
		return nil, err
	}
	defer e.close()
	ctx := context.Background()
	var ours, bare []time.Duration
	var txns []int
	for i := range rounds + 2 {
		before, err := revision(ctx, e.cli)
		if err != nil {
			return nil, err
		}
		start := time.Now()
		s, err := e.h.StartSession(ctx, host.SessionRequest{Agent: "scripted", Workspace: e.dir})
		d := time.Since(start)
		if err != nil {
			return nil, err
		}
		after, err := revision(ctx, e.cli)
		if err != nil {
			return nil, err
		}
		_ = s.Stop(ctx)
		n := int(after - before)

		start = time.Now()
		client, _, err := bareStart(fixture)
		if err != nil {
			return nil, err
		}
		if _, err := bareTxns(ctx, e.cli, n, 1); err != nil {
			client.Kill()
			return nil, err
		}
		db := time.Since(start)
		client.Kill()
		if i >= 2 {
			ours, bare, txns = append(ours, d), append(bare, db), append(txns, n)
		}
	}
	ratio := float64(median(ours)) / float64(median(bare))
	return []row{{Name: "create → ready on etcd (1 member, fsync), median", Value: ms(median(ours)) + fmt.Sprintf(" (%d etcd txns)", medianInt(txns)),
		Baseline: ms(median(bare)) + " bare go-plugin start + first RPC + the same txns from a bare etcd client", Ratio: fmt.Sprintf("%.2f×", ratio), Target: "–", Verdict: "–"}}, nil
}

func medianInt(xs []int) int {
	ds := make([]time.Duration, len(xs))
	for i, x := range xs {
		ds[i] = time.Duration(x)
	}
	return int(median(ds))
}

// benchEtcdAppends: 8 sessions stream updates at once on etcd; each update
// is in a committed etcd transaction before it is acknowledged. Baseline:
// a bare client doing as many transactions as the host's journals took
// (group commit folds many updates into one), 8 at once.
func benchEtcdAppends(work, scripted string, per int) ([]row, error) {
	m, err := startEtcdMember(work)
	if err != nil {
		return nil, err
	}
	defer m.stop()
	e, err := openEtcdHost(work, "etcd-appends", scripted, m)
	if err != nil {
		return nil, err
	}
	defer e.close()
	ctx := context.Background()
	const sessions = 8
	var ss []*host.Session
	for i := range sessions {
		s, err := e.h.StartSession(ctx, host.SessionRequest{ID: fmt.Sprint("a", i), Agent: "scripted", Workspace: e.dir})
		if err != nil {
			return nil, err
		}
		ss = append(ss, s)
	}
	before, err := revision(ctx, e.cli)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	var wg sync.WaitGroup
	for _, s := range ss {
		wg.Go(func() { _, _ = s.Prompt(ctx, fmt.Sprintf("count %d", per)) })
	}
	wg.Wait()
	elapsed := time.Since(start)
	after, err := revision(ctx, e.cli)
	if err != nil {
		return nil, err
	}
	n := int(after - before)
	rate := float64(sessions*per) / elapsed.Seconds()
	bare, err := bareTxns(ctx, e.cli, n, sessions)
	if err != nil {
		return nil, err
	}
	bareRate := float64(sessions*per) / bare.Seconds()
	return []row{{Name: "durable journal appends on etcd, 8 concurrent sessions", Value: fmt.Sprintf("%.0f updates/s (%d etcd txns for %d updates)", rate, n, sessions*per),
		Baseline: fmt.Sprintf("%.0f updates/s: a bare etcd client doing the same %d txns, 8 at once (%.0f txns/s)", bareRate, n, float64(n)/bare.Seconds()),
		Ratio:    fmt.Sprintf("%.2f×", rate/bareRate), Target: "–", Verdict: "–"}}, nil
}

// takeoverTTL is the liveness TTL of the takeover figure's hosts:
// agenthost serve's default.
const takeoverTTL = 5 * time.Second

// benchEtcdTakeover: two `agenthost serve --store etcd` processes; a
// session created on A; A SIGKILLed; B prompted until it answers, which
// resumes the session once B took it over. The figure is the SIGKILL →
// B's admission of the plugin (its log line), and → the first prompt
// answered on B; the baseline is the liveness TTL itself, the least any
// takeover waits (etcd expires A's lease no earlier).
func benchEtcdTakeover(work, scripted string, rounds int) ([]row, error) {
	m, err := startEtcdMember(work)
	if err != nil {
		return nil, err
	}
	defer m.stop()
	var admitted, answered []time.Duration
	for i := range rounds {
		a, b, err := takeoverOnce(work, scripted, m.endpoint, fmt.Sprintf("/takeover%d/", i))
		if err != nil {
			return nil, err
		}
		admitted, answered = append(admitted, a), append(answered, b)
	}
	base := ms(takeoverTTL) + " liveness TTL (etcd expires the lost host's lease no earlier)"
	return []row{
		{Name: fmt.Sprintf("takeover after the owner host's SIGKILL on etcd: → admitted on another host, median of %d", rounds), Value: ms(median(admitted)),
			Baseline: base, Ratio: fmt.Sprintf("%.2f×", float64(median(admitted))/float64(takeoverTTL)), Target: "–", Verdict: "–"},
		{Name: fmt.Sprintf("takeover after the owner host's SIGKILL on etcd: → first prompt answered there, median of %d", rounds), Value: ms(median(answered)),
			Baseline: base, Ratio: fmt.Sprintf("%.2f×", float64(median(answered))/float64(takeoverTTL)), Target: "–", Verdict: "–"},
	}, nil
}

func takeoverOnce(work, scripted, endpoint, prefix string) (toAdmit, toAnswer time.Duration, err error) {
	var servers []*serveproc.Server
	var dirs []string
	defer func() {
		for i, s := range servers {
			_ = s.Stop(10 * time.Second)
			serveproc.KillSessionProcesses(dirs[i])
		}
	}()
	for _, id := range []string{"a", "b"} {
		dir, err := os.MkdirTemp("/tmp", "ahbt-")
		if err != nil {
			return 0, 0, err
		}
		defer os.RemoveAll(dir)
		cfg := fmt.Sprintf(`{"agents": {"scripted": {"path": %q}}}`, scripted)
		if err := os.WriteFile(filepath.Join(dir, "agenthost.json"), []byte(cfg), 0o600); err != nil {
			return 0, 0, err
		}
		s, err := serveproc.Start(serveproc.Config{Bin: filepath.Join(work, "agenthost"), StateDir: dir,
			Env:  append(os.Environ(), "AGENTHOST_LOG_LEVEL=info"),
			Args: []string{"--store", "etcd", "--etcd-endpoints", endpoint, "--etcd-prefix", prefix, "--host-id", id, "--liveness-ttl", takeoverTTL.String()}})
		if err != nil {
			return 0, 0, err
		}
		servers, dirs = append(servers, s), append(dirs, dir)
	}
	ctx := context.Background()
	ca, err := dialACP(ctx, servers[0].Socket)
	if err != nil {
		return 0, 0, err
	}
	defer ca.Close()
	meta := map[string]any{api.MetaKey: api.NewSessionMeta{Agent: "scripted", SessionID: "t"}}
	if err := ca.Call(ctx, api.MethodSessionNew, acp.NewSessionRequest{Cwd: dirs[0], McpServers: []acp.McpServer{}, Meta: meta}, nil); err != nil {
		return 0, 0, fmt.Errorf("session/new on host a: %w", err)
	}
	// One turn first: a session moves with its conversation, which its
	// first finished turn exports (before it, it is not portable).
	if err := ca.Call(ctx, api.MethodSessionPrompt, acp.PromptRequest{SessionId: "t", Prompt: []acp.ContentBlock{acp.TextBlock("hello")}}, nil); err != nil {
		return 0, 0, fmt.Errorf("session/prompt on host a: %w", err)
	}
	servers[0].Kill()
	killed := time.Now()
	cb, err := dialACP(ctx, servers[1].Socket)
	if err != nil {
		return 0, 0, err
	}
	defer cb.Close()
	deadline := killed.Add(10 * takeoverTTL)
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := cb.Call(cctx, api.MethodSessionResume, acp.ResumeSessionRequest{SessionId: "t", Cwd: dirs[0], McpServers: []acp.McpServer{}}, nil)
		if err == nil {
			err = cb.Call(cctx, api.MethodSessionPrompt, acp.PromptRequest{SessionId: "t", Prompt: []acp.ContentBlock{acp.TextBlock("hello")}}, nil)
		}
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("host b did not take the session over within %s: %w", 10*takeoverTTL, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	toAnswer = time.Since(killed)
	at, err := admittedAt(servers[1].Stderr(), "t")
	if err != nil {
		return 0, 0, err
	}
	return at.Sub(killed), toAnswer, nil
}

func dialACP(ctx context.Context, socket string) (*apiclient.Client, error) {
	c, err := apiclient.Dial(ctx, socket, apiclient.Options{})
	if err != nil {
		return nil, err
	}
	if err := c.Call(ctx, api.MethodInitialize, acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber}, nil); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// admittedAt finds the host's "plugin admitted" line for session id in
// its log (hclog's text format) and returns its time.
func admittedAt(log, id string) (time.Time, error) {
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "plugin admitted:") && strings.Contains(line, "session="+id+" ") {
			ts, _, _ := strings.Cut(line, " ")
			return time.Parse("2006-01-02T15:04:05.000Z0700", ts)
		}
	}
	return time.Time{}, fmt.Errorf("host b never logged the admission of session %s", id)
}
