package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"

	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/internal/agentconfig"
	"github.com/agenthost/agenthost/leasestore"
	"github.com/agenthost/agenthost/leasestore/badgerstore"
	"github.com/agenthost/agenthost/leasestore/etcdstore"
)

// resolveStore reads agenthost.json's "serve" settings and merges them
// with the store flags cmd was given.
func (a *App) resolveStore(cmd *cobra.Command, f *storeFlags) (storeConfig, error) {
	dir, err := a.resolveStateDir()
	if err != nil {
		return storeConfig{}, err
	}
	path := filepath.Join(dir, ConfigName)
	file, err := agentconfig.Read(path)
	if err != nil {
		return storeConfig{}, err
	}
	return f.resolve(cmd.Flags().Changed, file.Serve, path)
}

// openStore opens the store sc names into hc: this machine's Badger store
// in the state directory, or the etcd cluster, which is the host's Store
// and its Cluster both (the *etcdstore.Store implements both), with this
// host's socket as the address other hosts name to its clients. host.Open
// owns the store from then on.
func openStore(ctx context.Context, hc *host.Config, sc storeConfig, log hclog.Logger) error {
	if !sc.Etcd {
		store, err := badgerstore.Open(ctx, hc.StateDir, badgerstore.Options{Logger: log})
		if err != nil {
			return err
		}
		hc.Store = store
		return nil
	}
	log.Debug("opening the etcd store", "endpoints", sc.Endpoints, "tls", sc.TLS != nil, "prefix", sc.Prefix,
		"hostID", sc.HostID, "hostIDFrom", sc.HostIDSource, "livenessTTL", sc.LivenessTTL)
	store, err := etcdstore.Open(ctx, etcdstore.Options{Endpoints: sc.Endpoints, TLS: sc.TLS, Prefix: sc.Prefix, Logger: log})
	if err != nil {
		return fmt.Errorf("open the store on etcd at %s: %w; %s", strings.Join(sc.Endpoints, ","), err, tlsDiagnosis(ctx, sc))
	}
	hc.Store, hc.Cluster = store, store
	hc.LivenessTTL = sc.LivenessTTL
	// Other hosts tell a client of theirs this socket when it asks for
	// a session that runs here.
	hc.Address = filepath.Join(hc.StateDir, SocketName)
	return nil
}

// hostOpenError words a failure of host.Open for the operator: on a
// cluster, a host id another live host has registered.
func hostOpenError(err error, sc storeConfig) error {
	if sc.Etcd && errors.Is(err, leasestore.ErrHostRegistered) {
		return fmt.Errorf("host id %q (from %s) is registered by another live agenthost on the cluster: "+
			"another machine with the same id, or a second host on this machine; give each host its own --host-id: %w", sc.HostID, sc.HostIDSource, err)
	}
	return err
}

// tlsDiagnosis says what to check when the store could not be opened.
// etcd's client reports a TLS handshake that failed (a server certificate
// the CA did not sign, a client certificate the server refused) only as
// a cluster that does not answer, so with TLS each endpoint is dialled
// once more, directly, and the first handshake failure is named.
func tlsDiagnosis(ctx context.Context, sc storeConfig) string {
	const generic = "check the endpoints, that a quorum of the cluster's members runs, and the TLS files"
	if sc.TLS == nil {
		return generic
	}
	for _, ep := range sc.Endpoints {
		u, err := url.Parse(ep)
		if err != nil {
			continue
		}
		cfg := sc.TLS.Clone()
		cfg.ServerName = u.Hostname()
		d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 3 * time.Second}, Config: cfg}
		dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		conn, err := d.DialContext(dctx, "tcp", u.Host)
		cancel()
		if err != nil {
			var opErr *net.OpError
			if errors.As(err, &opErr) && opErr.Op == "dial" {
				continue // not reachable at all: not a TLS matter
			}
			return fmt.Sprintf("the TLS handshake with %s failed: %v: check --etcd-ca (the CA of the servers' certificates)", ep, err)
		}
		// With TLS 1.3 a server refuses a client certificate after the
		// client's side of the handshake: its alert is the first read.
		_ = conn.SetReadDeadline(time.Now().Add(time.Second))
		_, rerr := conn.Read(make([]byte, 1))
		conn.Close()
		var alert tls.AlertError
		if errors.As(rerr, &alert) || (rerr != nil && strings.Contains(rerr.Error(), "remote error: tls:")) {
			return fmt.Sprintf("%s refused this host's client certificate (%v): check --etcd-cert and --etcd-key (a certificate the cluster's client CA signed)", ep, rerr)
		}
	}
	return generic
}
