package privdir

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestEnsure(t *testing.T) {
	shared := t.TempDir()
	if err := os.Chmod(shared, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	fresh := filepath.Join(shared, "fresh")
	if err := Ensure(fresh); err != nil {
		t.Fatalf("a fresh directory: %v", err)
	}
	if fi, err := os.Lstat(fresh); err != nil || fi.Mode() != os.ModeDir|0o700 {
		t.Fatalf("a fresh directory: mode %v, %v", fi.Mode(), err)
	}
	if err := Ensure(fresh); err != nil {
		t.Errorf("ensured again: %v", err)
	}

	group := t.TempDir() // a group the parent's owner trusts
	if err := os.Chmod(group, 0o770); err != nil {
		t.Fatal(err)
	}
	if err := Ensure(filepath.Join(group, "d")); err != nil {
		t.Errorf("in a group-writable parent: %v", err)
	}

	file := filepath.Join(shared, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(shared, "link")
	if err := os.Symlink(fresh, link); err != nil {
		t.Fatal(err)
	}
	loose := filepath.Join(shared, "loose")
	if err := os.Mkdir(loose, 0o700); err != nil || os.Chmod(loose, 0o755) != nil {
		t.Fatal(err)
	}
	open := t.TempDir() // writable by others, without the sticky bit
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	for name, dir := range map[string]string{
		"a regular file":                   file,
		"a symbolic link to a private one": link,
		"mode 0755":                        loose,
		"in a parent others can rename in": filepath.Join(open, "d"),
	} {
		if err := Ensure(dir); !errors.Is(err, ErrNotPrivate) {
			t.Errorf("%s: %v, want ErrNotPrivate", name, err)
		}
	}
	if fi, err := os.Lstat(loose); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("a refused directory was changed: %v, %v", fi.Mode(), err)
	}
}
