package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/agenthost/agenthost/host/localapi"
)

// socketPollInterval is how often a serving host checks that its socket
// file is still the one it listens on.
const socketPollInterval = time.Second

// apiSocket is a listener on the API's unix socket file.
type apiSocket struct {
	ln   net.Listener
	path string
	id   fileID // the socket file listened on
}

// listenSocket listens on a new unix socket at path, makes it mode 0600 and
// checks it is this user's.
func listenSocket(path string) (*apiSocket, error) {
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	// The state directory is 0700 already; the peer uid check holds in
	// any case.
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	id, err := ownSocket(path)
	if err != nil {
		keepPath(ln)
		ln.Close()
		return nil, err
	}
	return &apiSocket{ln: ln, path: path, id: id}, nil
}

// remakeSuffix names the temporary socket remakeSocket links into place.
const remakeSuffix = "~"

// remakeSocket makes the deleted socket at path again: listening under a
// temporary name beside it first, then linked into place. A socket bound
// at path itself would be there a moment before it listens (bind and
// listen are two steps), refusing the clients that find it; and a link,
// unlike a rename, never replaces a file that appeared at path meanwhile.
func remakeSocket(path string) (*apiSocket, error) {
	tmp := path + remakeSuffix
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	s, err := listenSocket(tmp)
	if err != nil {
		return nil, err
	}
	// Its address is the temporary name: serveSocket removes path.
	keepPath(s.ln)
	err = os.Link(tmp, path)
	_ = os.Remove(tmp)
	if err != nil {
		s.ln.Close()
		return nil, err
	}
	s.path = path
	return s, nil
}

// serveSocket serves srv on sock until ctx ends, and
// watches the path: a socket deleted under the running host (a cleanup of
// the state directory, a user tidying up) left it unreachable for good,
// so a socket found gone is made again, with the rules of listen (mode
// 0600, owned by this user; every peer's uid is checked by the server),
// and served; clients of the old one go on. A path that now holds some
// other file, or a socket that cannot be made again, ends serveSocket with
// an error that says so, for a supervisor to restart the host.
func serveSocket(ctx context.Context, srv *localapi.Server, sock *apiSocket, log hclog.Logger) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	failed := make(chan error, 1)
	start := func(ln net.Listener) {
		wg.Go(func() {
			if err := srv.Serve(ctx, ln); err != nil && !errors.Is(err, net.ErrClosed) {
				select {
				case failed <- err:
				default:
				}
			}
		})
	}
	// A listener removes its socket file when it closes: only while the
	// path still holds that socket. A remade socket's listener has
	// another address, so its path is removed here.
	defer func() {
		cur, err := fileAt(sock.path)
		if err != nil || cur != sock.id {
			keepPath(sock.ln)
			return
		}
		if ul, ok := sock.ln.Addr().(*net.UnixAddr); ok && ul.Name != sock.path {
			_ = os.Remove(sock.path)
		}
	}()
	start(sock.ln)
	tick := time.NewTicker(socketPollInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-failed:
			return err
		case <-tick.C:
		}
		cur, err := fileAt(sock.path)
		switch {
		case err == nil && cur == sock.id:
			continue
		case err == nil:
			return fmt.Errorf("%s is no longer this host's socket (another file replaced it): exiting, as this host can no longer be reached", sock.path)
		case !errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("check the socket %s: %w", sock.path, err)
		}
		log.Warn("the API socket was deleted under this host; making it again", "socket", sock.path)
		next, err := remakeSocket(sock.path)
		if err != nil {
			return fmt.Errorf("the socket %s was deleted and making it again failed: %w", sock.path, err)
		}
		// The old listener has no path any more: no client can reach it.
		// Its close must not remove the new socket.
		keepPath(sock.ln)
		_ = sock.ln.Close()
		sock = next
		start(sock.ln)
	}
}

// fileID identifies a file: the same path holding another file has
// another.
type fileID struct{ dev, ino uint64 }

// fileAt is the identity of the file at path.
func fileAt(path string) (fileID, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return fileID{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, fmt.Errorf("stat %s: no device and inode", path)
	}
	return fileID{dev: uint64(st.Dev), ino: st.Ino}, nil
}

// ownSocket checks that the file at path is a socket this user owns with
// mode 0600, the rules listen makes it by, and returns its identity.
func ownSocket(path string) (fileID, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return fileID{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !ok:
		return fileID{}, fmt.Errorf("stat %s: no owner to check", path)
	case fi.Mode()&os.ModeSocket == 0:
		return fileID{}, fmt.Errorf("%s is not a socket (%s)", path, fi.Mode())
	case int(st.Uid) != os.Getuid():
		return fileID{}, fmt.Errorf("the socket %s is owned by uid %d, not this host's %d", path, st.Uid, os.Getuid())
	case fi.Mode().Perm() != 0o600:
		return fileID{}, fmt.Errorf("the socket %s has mode %s, not 0600", path, fi.Mode().Perm())
	}
	return fileID{dev: uint64(st.Dev), ino: st.Ino}, nil
}

// keepPath makes closing ln leave its path alone (a unix listener removes
// its socket file on close).
func keepPath(ln net.Listener) {
	if ul, ok := ln.(*net.UnixListener); ok {
		ul.SetUnlinkOnClose(false)
	}
}
