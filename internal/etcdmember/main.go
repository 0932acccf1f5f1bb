// Command etcdmember runs one member of an etcd cluster, embedded
// (go.etcd.io/etcd/server/v3/embed), for `make cluster-demo` and the fault
// test: a real etcd server process that a test can SIGKILL, SIGSTOP and
// start again, without an etcd installation. It is no production server:
// it serves plaintext on the URLs it is given (loopback, in its users) and
// none of etcd's own tuning; a real cluster runs etcd itself (see the
// README's "Running several machines").
//
// Flags (all single values; URLs are http://host:port):
//
//	--name NAME                    the member's name in the cluster (required)
//	--data-dir DIR                 its data directory (required; created 0700)
//	--listen-client URL            where it serves clients (required; also advertised)
//	--listen-peer URL              where it talks to its peers (required; also advertised)
//	--initial-cluster N=URL,…      every member's name and peer URL (default: this one alone)
//	--initial-cluster-state S      new (bootstrap the cluster) or existing (join or restart) (default new)
//	--initial-cluster-token T      distinguishes clusters bootstrapped on one network (default agenthost)
//	--log-level L                  etcd's log level on stderr: debug, info, warn, error (default error)
//	--unsafe-no-fsync              skip fsync: faster under load, loses writes only if the machine
//	                               (not the process) crashes; for tests that kill processes
//	--free-ports N                 print N free loopback TCP ports, one a line, and exit (for
//	                               scripts choosing ports; another process may take one meanwhile)
//
// A member that restarts with its data directory rejoins with
// --initial-cluster-state existing (etcd ignores the initial flags once its
// data directory holds a member).
//
// When the member has joined a cluster with a leader (so a quorum of the
// initial cluster must run), it prints one JSON line on stdout and nothing
// else:
//
//	{"ready":true,"name":"m1","pid":1234,"clientURLs":["http://127.0.0.1:23790"],"peerURLs":["http://127.0.0.1:23800"]}
//
// SIGTERM or SIGINT stops it cleanly (etcd closes its WAL and listeners)
// and it exits 0; etcd failing or removing the member exits 1. Bad flags
// exit 2 with a message saying what to give.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// options are the parsed flags.
type options struct {
	name, dataDir, listenClient, listenPeer string
	initialCluster, state, token, logLevel  string
	noFsync                                 bool
	freePorts                               int
}

func parse(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("etcdmember", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.name, "name", "", "the member's name in the cluster (required)")
	fs.StringVar(&o.dataDir, "data-dir", "", "the member's data directory (required)")
	fs.StringVar(&o.listenClient, "listen-client", "", "client URL, http://host:port (required)")
	fs.StringVar(&o.listenPeer, "listen-peer", "", "peer URL, http://host:port (required)")
	fs.StringVar(&o.initialCluster, "initial-cluster", "", "name=peerURL,… of every member (default: this member alone)")
	fs.StringVar(&o.state, "initial-cluster-state", embed.ClusterStateFlagNew, "new or existing")
	fs.StringVar(&o.token, "initial-cluster-token", "agenthost", "the initial cluster token")
	fs.StringVar(&o.logLevel, "log-level", "error", "etcd's log level: debug, info, warn or error")
	fs.BoolVar(&o.noFsync, "unsafe-no-fsync", false, "skip fsync (loses writes only on a machine crash)")
	fs.IntVar(&o.freePorts, "free-ports", 0, "print this many free loopback ports and exit")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q: every setting is a flag", fs.Args())
	}
	if o.freePorts > 0 {
		return o, nil
	}
	for _, req := range []struct{ flag, v string }{{"name", o.name}, {"data-dir", o.dataDir}, {"listen-client", o.listenClient}, {"listen-peer", o.listenPeer}} {
		if req.v == "" {
			return o, fmt.Errorf("--%s is required (etcdmember --name m1 --data-dir DIR --listen-client http://127.0.0.1:23790 --listen-peer http://127.0.0.1:23800)", req.flag)
		}
	}
	if o.state != embed.ClusterStateFlagNew && o.state != embed.ClusterStateFlagExisting {
		return o, fmt.Errorf("--initial-cluster-state %q: give new (bootstrap) or existing (join or restart)", o.state)
	}
	switch o.logLevel {
	case "debug", "info", "warn", "error":
	default:
		return o, fmt.Errorf("--log-level %q: give debug, info, warn or error", o.logLevel)
	}
	if o.initialCluster == "" {
		o.initialCluster = o.name + "=" + o.listenPeer
	}
	return o, nil
}

func httpURL(flag, s string) (url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "http" || u.Port() == "" || (u.Path != "" && u.Path != "/") {
		return url.URL{}, fmt.Errorf("--%s %q: give http://host:port", flag, s)
	}
	return *u, nil
}

func run(args []string, stdout, stderr io.Writer) int {
	o, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "etcdmember: %v\n", err)
		return 2
	}
	if o.freePorts > 0 {
		return printFreePorts(o.freePorts, stdout, stderr)
	}
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = o.name, o.dataDir
	cfg.InitialCluster, cfg.ClusterState, cfg.InitialClusterToken = o.initialCluster, o.state, o.token
	cfg.LogLevel, cfg.LogOutputs = o.logLevel, []string{"stderr"}
	cfg.UnsafeNoFsync = o.noFsync
	client, err := httpURL("listen-client", o.listenClient)
	if err != nil {
		fmt.Fprintf(stderr, "etcdmember: %v\n", err)
		return 2
	}
	peer, err := httpURL("listen-peer", o.listenPeer)
	if err != nil {
		fmt.Fprintf(stderr, "etcdmember: %v\n", err)
		return 2
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	// Signals are caught before the server starts, so a SIGTERM during
	// the start still closes it cleanly.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sig)
	if err := os.MkdirAll(o.dataDir, 0o700); err != nil {
		fmt.Fprintf(stderr, "etcdmember: create the data directory: %v\n", err)
		return 1
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "etcdmember: start etcd member %s: %v\n", o.name, err)
		return 1
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		fmt.Fprintf(stderr, "etcdmember: member %s: %v\n", o.name, err)
		return 1
	case <-e.Server.StopNotify():
		fmt.Fprintf(stderr, "etcdmember: member %s stopped before it was ready\n", o.name)
		return 1
	case s := <-sig:
		fmt.Fprintf(stderr, "etcdmember: member %s: %s before it was ready; stopping\n", o.name, s)
		return 0
	}
	line, _ := json.Marshal(struct {
		Ready      bool     `json:"ready"`
		Name       string   `json:"name"`
		PID        int      `json:"pid"`
		ClientURLs []string `json:"clientURLs"`
		PeerURLs   []string `json:"peerURLs"`
	}{true, o.name, os.Getpid(), []string{client.String()}, []string{peer.String()}})
	fmt.Fprintf(stdout, "%s\n", line)
	select {
	case <-sig:
		return 0 // the deferred Close stops the member
	case err := <-e.Err():
		fmt.Fprintf(stderr, "etcdmember: member %s: %v\n", o.name, err)
		return 1
	case <-e.Server.StopNotify():
		fmt.Fprintf(stderr, "etcdmember: member %s stopped (removed from the cluster?)\n", o.name)
		return 1
	}
}

// printFreePorts prints n loopback TCP ports that were free: each is
// listened on, all at once so they differ, then closed.
func printFreePorts(n int, stdout, stderr io.Writer) int {
	var ports []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintf(stderr, "etcdmember: find a free port: %v\n", err)
			return 1
		}
		defer l.Close()
		ports = append(ports, strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
	}
	fmt.Fprintln(stdout, strings.Join(ports, "\n"))
	return 0
}
