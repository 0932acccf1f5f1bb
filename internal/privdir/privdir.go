// Package privdir creates and checks directories that must be this user's
// alone: the plugin socket root under a shared temporary directory, and the
// state directory's fallback there.
//
// The hazard is a predictable name in a directory everyone can write, such
// as /tmp/agenthost-<hash>. Another user can create it first (mode 0777, or
// a symbolic link to a directory of theirs) and then see, move or replace
// what this user puts in it: a plugin's socket moved away leaves its
// session latched after a restart. So a directory is used only if it is
// one this user made for itself: Ensure creates it without following a
// symbolic link (mkdir fails on any existing name) and then checks, with
// Lstat, that the name is a real directory, owned by the effective uid,
// with mode 0700 exactly, in a parent where not just anyone can rename it
// away (not world-writable, or sticky as /tmp is). Anything else is refused
// with ErrNotPrivate: the caller picks another place or stops, and never
// repairs a directory someone else made.
package privdir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// ErrNotPrivate: the directory exists but is not this user's private
// directory (another owner, a symbolic link, another mode, not a directory,
// or a parent others can rename it in).
var ErrNotPrivate = errors.New("not a private directory of this user")

// Ensure makes dir this user's private directory: it creates it (mode 0700;
// its parent must exist) or, when it exists, checks it as Check does.
func Ensure(dir string) error {
	err := os.Mkdir(dir, 0o700)
	switch {
	case err == nil:
		// Ours and new: the umask may have taken bits 0700 needs.
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("private directory %s: %w", dir, err)
		}
	case !errors.Is(err, fs.ErrExist):
		return fmt.Errorf("create private directory %s: %w", dir, err)
	}
	return Check(dir)
}

// Check reports whether dir, which must exist, is this user's private
// directory: ErrNotPrivate, saying why, when it is not.
func Check(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("check private directory: %w", err)
	}
	uid := os.Geteuid()
	switch st, _ := fi.Sys().(*syscall.Stat_t); {
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("%w: %s is a symbolic link", ErrNotPrivate, dir)
	case !fi.IsDir():
		return fmt.Errorf("%w: %s is not a directory (%s)", ErrNotPrivate, dir, fi.Mode().Type())
	case st == nil:
		return fmt.Errorf("%w: %s: its owner cannot be read here", ErrNotPrivate, dir)
	case int(st.Uid) != uid:
		return fmt.Errorf("%w: %s is owned by uid %d, not by this user (uid %d)", ErrNotPrivate, dir, st.Uid, uid)
	case fi.Mode()&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != 0o700:
		return fmt.Errorf("%w: %s has mode %04o, not 0700", ErrNotPrivate, dir, fi.Mode().Perm())
	}
	parent := filepath.Dir(filepath.Clean(dir))
	pi, err := os.Stat(parent)
	if err != nil {
		return fmt.Errorf("check the parent of private directory %s: %w", dir, err)
	}
	// A group-writable parent is the group its owner chose to trust (a
	// state directory under a umask of 002, say); a world-writable one
	// needs the sticky bit, or anyone could rename this directory away and
	// put theirs in its place.
	if pi.Mode().Perm()&0o002 != 0 && pi.Mode()&fs.ModeSticky == 0 {
		return fmt.Errorf("%w: %s is in %s, which anyone can write without the sticky bit (they could rename it away)", ErrNotPrivate, dir, parent)
	}
	return nil
}
