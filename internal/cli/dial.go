package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	acp "github.com/coder/acp-go-sdk"

	"github.com/agenthost/agenthost/api"
	"github.com/agenthost/agenthost/internal/apiclient"
)

// dialWait is how long a client command waits for a host that is starting.
const dialWait = 3 * time.Second

// errNoHost: nobody serves the state directory.
var errNoHost = errors.New("no agenthost is serving the state directory")

// dial connects to the host serving the state directory, retrying briefly
// while one is starting (a live process holds its lock). With nobody there
// it says how to start one.
func (a *App) dial(ctx context.Context, opts apiclient.Options) (*apiclient.Client, error) {
	dir, err := a.resolveStateDir()
	if err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, SocketName)
	deadline := time.Now().Add(dialWait)
	for {
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		c, err := apiclient.Dial(dctx, sock, opts)
		cancel()
		if err == nil {
			return c, nil
		}
		if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) {
			return nil, fmt.Errorf("connect to %s: %w", sock, err)
		}
		// A host that holds the state directory's lock is starting (it
		// listens once the store is open); a socket file without one was
		// left by a host that died.
		holder := lockHolder(dir)
		if holder == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			if holder > 0 {
				return nil, fmt.Errorf("agenthost pid %d holds %s but does not answer on %s (an 'agenthost acp' without the socket, or a host still starting): %v",
					holder, dir, sock, err)
			}
			return nil, fmt.Errorf("%w %s\nstart one with:  agenthost serve%s", errNoHost, dir, stateDirFlag(dir))
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// lockHolder returns the pid the state directory's lock file names, if
// that process is alive; 0 otherwise. It only reads: taking the lock, even
// briefly, could make a starting host fail.
func lockHolder(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, "agenthost.lock"))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return 0
	}
	// Where /proc shows open files, the holder must have the lock file
	// open: a recycled pid does not.
	lock := filepath.Join(dir, "agenthost.lock")
	fds, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "fd"))
	if err != nil {
		return pid
	}
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "fd", fd.Name())); err == nil && target == lock {
			return pid
		}
	}
	return 0
}

// connect dials the host and initializes the connection.
func (a *App) connect(ctx context.Context, opts apiclient.Options) (*apiclient.Client, error) {
	c, err := a.dial(ctx, opts)
	if err != nil {
		return nil, err
	}
	if err := c.Call(ctx, api.MethodInitialize, acp.InitializeRequest{
		ProtocolVersion: 1,
		ClientInfo:      &acp.Implementation{Name: "agenthost-cli", Version: a.version()},
		// No file system and no terminal: the zero capabilities.
	}, nil); err != nil {
		c.Close()
		if errors.Is(err, apiclient.ErrClosed) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
			return nil, fmt.Errorf("the host closed the connection before answering; it serves only processes of its own user (%v)", err)
		}
		return nil, err
	}
	return c, nil
}
