package host

import (
	"context"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agenthost/agenthost/internal/buildtest"
	"github.com/agenthost/agenthost/leasestore"
	"github.com/agenthost/agenthost/leasestore/badgerstore"
)

// bins are the plugin binaries the tests start, built once per test run.
var bins struct {
	fixture  string
	scripted string
}

func TestMain(m *testing.M) {
	if code := tortureRole(); code >= 0 {
		os.Exit(code)
	}
	if code := roundtripRole(); code >= 0 {
		os.Exit(code)
	}
	os.Exit(buildtest.Main(m, map[*string]string{
		&bins.fixture:  "./testdata/fixture",
		&bins.scripted: "../examples/scripted/cmd/agenthost-plugin-scripted",
	}))
}

func unixGetsid(pid int) (int, error) { return unix.Getsid(pid) }

// openOnBadger opens a host on cfg over a Badger store in its state
// directory, logging and keeping time as the host does, the way the binary
// wires them.
func openOnBadger(ctx context.Context, cfg Config) (*Host, error) {
	store, err := openStore(ctx, cfg)
	if err != nil {
		return nil, err
	}
	cfg.Store = store
	return Open(ctx, cfg)
}

func openStore(ctx context.Context, cfg Config) (leasestore.Store, error) {
	opts := badgerstore.Options{Now: cfg.Now}
	if cfg.Logger != nil {
		opts.Logger = cfg.Logger.Named("store")
	}
	return badgerstore.Open(ctx, cfg.StateDir, opts)
}
