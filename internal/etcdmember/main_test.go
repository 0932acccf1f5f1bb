package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/agenthost/agenthost/internal/buildtest"
)

var memberBin string

func TestMain(m *testing.M) {
	os.Exit(buildtest.Main(m, map[*string]string{&memberBin: "github.com/agenthost/agenthost/internal/etcdmember"}))
}

func TestFlagErrorsSayWhatToGive(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--data-dir", "/d", "--listen-client", "http://127.0.0.1:1", "--listen-peer", "http://127.0.0.1:2"}, "--name is required"},
		{[]string{"--name", "m", "--data-dir", "/d", "--listen-client", "http://127.0.0.1:1", "--listen-peer", "http://127.0.0.1:2", "--initial-cluster-state", "old"}, "give new (bootstrap) or existing"},
		{[]string{"--name", "m", "--data-dir", "/d", "--listen-client", "http://127.0.0.1:1", "--listen-peer", "http://127.0.0.1:2", "--log-level", "loud"}, "give debug, info, warn or error"},
		{[]string{"--name", "m", "stray"}, "every setting is a flag"},
	} {
		var stderr bytes.Buffer
		if _, err := parse(tc.args, &stderr); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.args, err, tc.want)
		}
	}
	var stderr bytes.Buffer
	if code := run([]string{"--name", "m", "--data-dir", t.TempDir(), "--listen-client", "127.0.0.1:1", "--listen-peer", "http://127.0.0.1:2"}, &bytes.Buffer{}, &stderr); code != 2 ||
		!strings.Contains(stderr.String(), `--listen-client "127.0.0.1:1": give http://host:port`) {
		t.Errorf("a URL without scheme: exit %d, %q", code, stderr.String())
	}
	o, err := parse([]string{"--name", "m", "--data-dir", "/d", "--listen-client", "http://127.0.0.1:1", "--listen-peer", "http://127.0.0.1:2"}, &stderr)
	if err != nil || o.initialCluster != "m=http://127.0.0.1:2" || o.state != "new" {
		t.Errorf("defaults: %+v, %v", o, err)
	}
}

// member is one etcdmember process.
type member struct {
	name, client string
	cmd          *exec.Cmd
	ready        chan readyLine
	stderr       bytes.Buffer
}

type readyLine struct {
	Ready      bool     `json:"ready"`
	Name       string   `json:"name"`
	PID        int      `json:"pid"`
	ClientURLs []string `json:"clientURLs"`
}

func start(t *testing.T, name, dataDir, client, peer, cluster, state string) *member {
	t.Helper()
	m := &member{name: name, client: client, ready: make(chan readyLine, 1)}
	m.cmd = exec.Command(memberBin, "--name", name, "--data-dir", dataDir, "--listen-client", client, "--listen-peer", peer,
		"--initial-cluster", cluster, "--initial-cluster-state", state, "--unsafe-no-fsync")
	m.cmd.Stderr = &m.stderr
	out, err := m.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if m.cmd.ProcessState == nil {
			_ = m.cmd.Process.Kill()
			_ = m.cmd.Wait()
		}
	})
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			var r readyLine
			if json.Unmarshal(sc.Bytes(), &r) == nil {
				m.ready <- r
			}
		}
		close(m.ready)
		for sc.Scan() {
		}
	}()
	return m
}

func (m *member) waitReady(t *testing.T) readyLine {
	t.Helper()
	select {
	case r, ok := <-m.ready:
		if !ok || !r.Ready {
			t.Fatalf("member %s printed no ready line; stderr:\n%s", m.name, m.stderr.String())
		}
		return r
	case <-time.After(60 * time.Second):
		t.Fatalf("member %s not ready in 60s; stderr:\n%s", m.name, m.stderr.String())
	}
	return readyLine{}
}

// stop sends SIGTERM and requires a clean exit.
func (m *member) stop(t *testing.T) {
	t.Helper()
	if err := m.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := m.cmd.Wait(); err != nil {
		t.Errorf("member %s after SIGTERM: %v; stderr:\n%s", m.name, err, m.stderr.String())
	}
}

// Three members on loopback form a cluster: each prints its ready line, a
// write through one is read through another, SIGTERM stops each cleanly
// (exit 0), and a member restarted on its data directory rejoins with the
// data.
func TestThreeMembersFormAClusterAndStopCleanly(t *testing.T) {
	var out bytes.Buffer
	if code := run([]string{"--free-ports", "6"}, &out, os.Stderr); code != 0 {
		t.Fatalf("--free-ports: exit %d", code)
	}
	ports := strings.Fields(out.String())
	if len(ports) != 6 {
		t.Fatalf("--free-ports 6 printed %q", out.String())
	}
	dir := t.TempDir()
	url := func(p string) string { return "http://127.0.0.1:" + p }
	var cluster []string
	for i := range 3 {
		cluster = append(cluster, fmt.Sprintf("m%d=%s", i+1, url(ports[3+i])))
	}
	ic := strings.Join(cluster, ",")
	var ms []*member
	for i := range 3 {
		ms = append(ms, start(t, fmt.Sprintf("m%d", i+1), filepath.Join(dir, fmt.Sprint(i+1)), url(ports[i]), url(ports[3+i]), ic, "new"))
	}
	for _, m := range ms {
		r := m.waitReady(t)
		if r.Name != m.name || r.PID != m.cmd.Process.Pid || len(r.ClientURLs) != 1 || r.ClientURLs[0] != m.client {
			t.Errorf("ready line %+v of member %s (pid %d, %s)", r, m.name, m.cmd.Process.Pid, m.client)
		}
	}
	fi, err := os.Stat(filepath.Join(dir, "1"))
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("data directory: %v, %v; want mode 0700", fi.Mode(), err)
	}
	ctx := t.Context()
	put := func(endpoint, k, v string) {
		t.Helper()
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Put(ctx, k, v); err != nil {
			t.Fatalf("put through %s: %v", endpoint, err)
		}
	}
	get := func(endpoint, k string) string {
		t.Helper()
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		r, err := c.Get(ctx, k) // linearizable: through the leader
		if err != nil {
			t.Fatalf("get through %s: %v", endpoint, err)
		}
		if len(r.Kvs) == 0 {
			return ""
		}
		return string(r.Kvs[0].Value)
	}
	put(ms[0].client, "k", "v1")
	if got := get(ms[2].client, "k"); got != "v1" {
		t.Errorf("read through m3: %q, want v1", got)
	}
	ms[2].stop(t)
	put(ms[1].client, "k", "v2") // two of three: a quorum
	ms[2] = start(t, "m3", filepath.Join(dir, "3"), url(ports[2]), url(ports[5]), ic, "existing")
	ms[2].waitReady(t)
	if got := get(ms[2].client, "k"); got != "v2" {
		t.Errorf("read through the restarted m3: %q, want v2", got)
	}
	for _, m := range ms {
		m.stop(t)
	}
}
