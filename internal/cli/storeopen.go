package cli

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

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
	// Other hosts tell a client of theirs this socket when it asks for
	// a session that runs here: etcdstore publishes HostAddress with the
	// host's registration (host.Config.Address says the same to a store
	// that reads it from Join's context).
	addr := filepath.Join(hc.StateDir, SocketName)
	store, err := etcdstore.Open(ctx, etcdstore.Options{Endpoints: sc.Endpoints, TLS: sc.TLS, Prefix: sc.Prefix, Logger: log, HostAddress: addr})
	if err != nil {
		return fmt.Errorf("open the store on etcd at %s: %w; check the endpoints, that a quorum of the cluster's members runs, and the TLS files",
			strings.Join(sc.Endpoints, ","), err)
	}
	hc.Store, hc.Cluster = store, store
	hc.LivenessTTL = sc.LivenessTTL
	hc.Address = addr
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
