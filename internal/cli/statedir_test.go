package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/agenthost/agenthost/internal/privdir"
)

// Without a home directory the state directory falls back to
// $TMPDIR/agenthost-<uid>, a predictable name. Another user's directory
// there (0777, or a symbolic link) is refused; a fresh one is made private.
func TestHomelessStateDirIsNeverAnotherUsers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a directory owned by another uid")
	}
	homeless := func(t *testing.T) string {
		tmp := t.TempDir()
		if err := os.Chmod(tmp, 0o777|os.ModeSticky); err != nil {
			t.Fatal(err)
		}
		t.Setenv("TMPDIR", tmp)
		t.Setenv("HOME", "")
		t.Setenv("XDG_STATE_HOME", "")
		t.Setenv(EnvStateDir, "")
		return filepath.Join(tmp, fmt.Sprintf("agenthost-%d", os.Getuid()))
	}
	squat := func(t *testing.T, dir string) {
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("another user's directory", func(t *testing.T) {
		dir := homeless(t)
		squat(t, dir)
		if got, err := (&App{}).resolveStateDir(); !errors.Is(err, privdir.ErrNotPrivate) {
			t.Errorf("resolveStateDir = %q, %v; want ErrNotPrivate", got, err)
		}
	})
	t.Run("a symbolic link to another user's directory", func(t *testing.T) {
		dir := homeless(t)
		target := filepath.Join(t.TempDir(), "target")
		squat(t, target)
		if err := os.Symlink(target, dir); err != nil {
			t.Fatal(err)
		}
		if got, err := (&App{}).resolveStateDir(); !errors.Is(err, privdir.ErrNotPrivate) {
			t.Errorf("resolveStateDir = %q, %v; want ErrNotPrivate", got, err)
		}
	})
	t.Run("made fresh, private", func(t *testing.T) {
		dir := homeless(t)
		got, err := (&App{}).resolveStateDir()
		if err != nil || got != dir {
			t.Fatalf("resolveStateDir = %q, %v; want %s", got, err, dir)
		}
		if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
			t.Errorf("the fallback: %v, %v", fi.Mode(), err)
		}
	})
}
