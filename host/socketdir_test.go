package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/internal/logtest"
	"github.com/agenthost/agenthost/internal/privdir"
)

// nobody is the uid that plays another local user.
const nobody = 65534

// A state directory too long for sockets inside it puts them under
// $TMPDIR/agenthost-<hash>, a name anyone can predict. Another user who
// made that name first (a 0777 directory of theirs, or a symbolic link to
// one) must never get this host's sockets: the host refuses with a clear
// error, or uses $XDG_RUNTIME_DIR when that is private.
func TestSocketRootSquattedByAnotherUserIsNeverUsed(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a directory owned by another uid")
	}
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, at string) (victim string) // plants the name; returns the directory the squatter reads
	}{
		{"another user's 0777 directory", func(t *testing.T, at string) string {
			othersDir(t, at)
			return at
		}},
		{"a symbolic link to another user's directory", func(t *testing.T, at string) string {
			target := othersDir(t, filepath.Join(t.TempDir(), "target"))
			if err := os.Symlink(target, at); err != nil {
				t.Fatal(err)
			}
			return target
		}},
		{"this user's directory others can write", func(t *testing.T, at string) string {
			if err := os.Mkdir(at, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(at, 0o777); err != nil {
				t.Fatal(err)
			}
			return at
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stateDir, tmp := longStateDir(t), sharedTmp(t)
			t.Setenv("TMPDIR", tmp)
			t.Setenv("XDG_RUNTIME_DIR", "")
			victim := tc.plant(t, filepath.Join(tmp, socketRootName(stateDir)))

			h, err := openOnBadger(context.Background(), squatConfig(t, stateDir))
			if err == nil {
				s, serr := h.StartSession(testCtx(t), SessionRequest{ID: "s", Agent: "scripted", Workspace: t.TempDir()})
				t.Errorf("the host opened on a socket root it does not own (session start: %v, socket %q)", serr, socketOf(t, h, s, serr))
				_ = h.Shutdown(context.Background())
			} else if !errors.Is(err, privdir.ErrNotPrivate) || !strings.Contains(err.Error(), socketRootName(stateDir)) {
				t.Errorf("open: %v, want ErrNotPrivate naming the directory", err)
			} else {
				t.Logf("refused: %v", err)
			}
			if entries, _ := os.ReadDir(victim); len(entries) != 0 {
				t.Errorf("the squatter's directory %s got %d entries: %v", victim, len(entries), entries)
			}
		})
	}

	t.Run("a private XDG_RUNTIME_DIR is used instead", func(t *testing.T) {
		stateDir, tmp := longStateDir(t), sharedTmp(t)
		// Short, as /run/user/<uid> is, so that sockets fit under it.
		runtime, err := os.MkdirTemp("/tmp", "r")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(runtime) })
		t.Setenv("TMPDIR", tmp)
		t.Setenv("XDG_RUNTIME_DIR", runtime)
		victim := othersDir(t, filepath.Join(tmp, socketRootName(stateDir)))

		h, err := openOnBadger(context.Background(), squatConfig(t, stateDir))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h.Shutdown(context.Background()) })
		s, err := h.StartSession(testCtx(t), SessionRequest{ID: "s", Agent: "scripted", Workspace: t.TempDir()})
		sock := socketOf(t, h, s, err)
		if err != nil || !strings.HasPrefix(sock, filepath.Join(runtime, socketRootName(stateDir))+"/") {
			t.Fatalf("session start %v; socket %q, want it under %s", err, sock, runtime)
		}
		if entries, _ := os.ReadDir(victim); len(entries) != 0 {
			t.Errorf("the squatter's directory got %v", entries)
		}
	})
}

// othersDir makes dir a 0777 directory owned by another user.
func othersDir(t *testing.T, dir string) string {
	t.Helper()
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	return dir
}

// longStateDir is a state directory too long for sockets inside it.
func longStateDir(t *testing.T) string {
	dir := filepath.Join(t.TempDir(), "a-state-directory-longer-than-forty-bytes")
	if len(filepath.Join(dir, "s")) <= maxSocketRoot {
		t.Fatalf("%s is not long enough", dir)
	}
	return dir
}

// sharedTmp is a temporary directory like /tmp: anyone may create in it,
// and the sticky bit keeps them from renaming what others made.
func sharedTmp(t *testing.T) string {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	return dir
}

// socketRootName is the predictable name, computed as a squatter would.
func socketRootName(stateDir string) string {
	sum := sha256.Sum256([]byte(stateDir))
	return "agenthost-" + hex.EncodeToString(sum[:6])
}

func squatConfig(t *testing.T, stateDir string) Config {
	return Config{StateDir: stateDir, Agents: map[string]AgentPlugin{"scripted": {Path: bins.scripted}},
		StartupTimeout: 20 * time.Second, StopTimeout: 5 * time.Second, Logger: logtest.New(t)}
}

// socketOf is the plugin socket the session's lease records.
func socketOf(t *testing.T, h *Host, s *Session, err error) string {
	if err != nil || s == nil {
		return ""
	}
	rec, err := h.store.Get(testCtx(t), s.ID())
	if err != nil || rec.Lease.Reattach == nil {
		t.Errorf("the session's lease: %v", err)
		return ""
	}
	return rec.Lease.Reattach.Address
}
