package cli

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"

	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/internal/agentconfig"
	"github.com/agenthost/agenthost/leasestore/badgerstore"
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
// in the state directory, or the etcd cluster (as the host's Store and its
// Cluster both). host.Open owns the store from then on.
func openStore(ctx context.Context, hc *host.Config, sc storeConfig, log hclog.Logger) error {
	if !sc.Etcd {
		store, err := badgerstore.Open(ctx, hc.StateDir, badgerstore.Options{Logger: log})
		if err != nil {
			return err
		}
		hc.Store = store
		return nil
	}
	return fmt.Errorf("--store etcd: this build has no etcd store yet")
}

// hostOpenError words a failure of host.Open for the operator.
func hostOpenError(err error, sc storeConfig) error {
	return err
}
