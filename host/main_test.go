package host

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

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
	dir, err := os.MkdirTemp("", "agenthost-host-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		for _, b := range []struct {
			dst *string
			pkg string
		}{
			{&bins.fixture, "./testdata/fixture"},
			{&bins.scripted, "../examples/scripted/cmd/agenthost-plugin-scripted"},
		} {
			*b.dst = filepath.Join(dir, filepath.Base(b.pkg))
			out, err := exec.Command("go", "build", "-o", *b.dst, b.pkg).CombinedOutput()
			if err != nil {
				fmt.Fprintf(os.Stderr, "build %s: %v\n%s", b.pkg, err, out)
				return 1
			}
		}
		return goleakMain(m)
	}()
	os.Exit(code)
}

func goleakMain(m *testing.M) int {
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			return 1
		}
	}
	return code
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
