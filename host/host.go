package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/agenthost/agenthost/leasestore"
	"github.com/agenthost/agenthost/probe"
)

// AgentPlugin says how to start an agent's plugin.
type AgentPlugin struct {
	// Path is the plugin executable; it must be absolute.
	Path string
	// Args are passed to the plugin.
	Args []string
	// Env is extra environment for this agent's plugins (KEY=VALUE), on
	// top of the host's allowlist.
	Env []string
}

// Config configures a Host. StateDir is required; every other field's zero
// value works.
type Config struct {
	// StateDir holds the lease store, per-session plugin directories and
	// logs. Must be absolute.
	StateDir string
	// HostID names this execution host in leases. Default: "local".
	HostID string
	// ClaimKeyID names the key claims are granted under. Default: "default".
	ClaimKeyID string
	// Agents maps agent names to their plugins.
	Agents map[string]AgentPlugin
	// StartupTimeout bounds a plugin's start, handshake to open session.
	// Default: 30s.
	StartupTimeout time.Duration
	// StopTimeout is how long a plugin gets to stop gracefully before its
	// process group is killed. Default: 5s.
	StopTimeout time.Duration
	// Logger receives the host's logs. Default: no logging.
	Logger hclog.Logger
}

// Host supervises agent sessions: one plugin process per session, each
// admitted as the session's writer only through the lease store.
type Host struct {
	cfg      Config
	log      hclog.Logger
	store    *leasestore.BadgerStore
	prober   *probe.Prober
	tokenVar string

	mu       sync.Mutex
	sessions map[string]*Session
	closed   bool
}

// Open opens the host's state directory.
func Open(ctx context.Context, cfg Config) (*Host, error) {
	if !filepath.IsAbs(cfg.StateDir) {
		return nil, fmt.Errorf("%w: state directory must be absolute, got %q", leasestore.ErrInvalidArgument, cfg.StateDir)
	}
	if cfg.HostID == "" {
		cfg.HostID = "local"
	}
	if cfg.ClaimKeyID == "" {
		cfg.ClaimKeyID = "default"
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	store, err := leasestore.OpenBadger(ctx, cfg.StateDir, leasestore.Options{Logger: cfg.Logger.Named("store")})
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(cfg.StateDir))
	tokenVar := probe.TokenVariable(hex.EncodeToString(sum[:4]))
	return &Host{
		cfg: cfg, log: cfg.Logger, store: store, tokenVar: tokenVar,
		prober:   &probe.Prober{HostID: cfg.HostID, TokenVar: tokenVar},
		sessions: map[string]*Session{},
	}, nil
}

// Store returns the host's lease store.
func (h *Host) Store() leasestore.Store { return h.store }

// Close stops every session the host runs and closes the store.
func (h *Host) Close(ctx context.Context) error {
	h.mu.Lock()
	h.closed = true
	sessions := make([]*Session, 0, len(h.sessions))
	for _, s := range h.sessions {
		sessions = append(sessions, s)
	}
	h.mu.Unlock()
	var errs []error
	for _, s := range sessions {
		if err := s.Stop(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := h.store.Close(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// socketRoot is where plugin socket directories live: under the state
// directory when that keeps socket paths within the 107-byte limit, else
// under the system temp directory, keyed by the state directory.
func (h *Host) socketRoot() string {
	dir := filepath.Join(h.cfg.StateDir, "s")
	if len(dir) <= 40 {
		return dir
	}
	sum := sha256.Sum256([]byte(h.cfg.StateDir))
	return filepath.Join(os.TempDir(), "agenthost-"+hex.EncodeToString(sum[:6]))
}

// environment builds a plugin's environment by policy: an allowlist of the
// host's variables, the agent's own extras, and what the protocol needs.
// Nothing else is inherited: credentials in the host's environment reach a
// plugin only when its configuration says so.
func (h *Host) environment(agent AgentPlugin) []string {
	var env []string
	for _, k := range []string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "XDG_RUNTIME_DIR"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return append(env, agent.Env...)
}

func (h *Host) agentNames() []string {
	names := make([]string, 0, len(h.cfg.Agents))
	for n := range h.cfg.Agents {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
