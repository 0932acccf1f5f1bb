// Package probetest builds synthetic Linux /proc trees for tests of code
// that reads process identities, and wraps file systems to count reads and
// inject failures. A table built on them is an injected reader: it never
// makes a platform count as able to verify identities.
package probetest

import (
	"fmt"
	"io/fs"
	"maps"
	"sort"
	"strings"
	"sync"
	"testing/fstest"
)

// Proc describes one synthetic process.
type Proc struct {
	PID        int
	Comm       string // command name; may contain spaces and parentheses
	State      string // "S" unless set
	PGID       int    // defaults to PID
	StartTicks uint64
	Env        []string // KEY=VALUE entries
}

// Tree is a synthetic /proc: processes plus a boot id.
type Tree struct {
	BootID string
	Procs  []Proc
}

// FS renders the tree as the files ProcFS reads: <pid>/stat,
// <pid>/environ and sys/kernel/random/boot_id.
func (t Tree) FS() fstest.MapFS {
	m := fstest.MapFS{}
	if t.BootID != "" {
		m["sys/kernel/random/boot_id"] = &fstest.MapFile{Data: []byte(t.BootID + "\n")}
	}
	for _, p := range t.Procs {
		comm, state, pgid := p.Comm, p.State, p.PGID
		if comm == "" {
			comm = "plugin"
		}
		if state == "" {
			state = "S"
		}
		if pgid == 0 {
			pgid = p.PID
		}
		// Fields 1..22 of proc(5) stat, then a realistic tail.
		stat := fmt.Sprintf("%d (%s) %s 1 %d %d 0 -1 4194304 100 0 0 0 1 2 0 0 20 0 1 0 %d 1000000 100 18446744073709551615\n",
			p.PID, comm, state, pgid, pgid, p.StartTicks)
		m[fmt.Sprintf("%d/stat", p.PID)] = &fstest.MapFile{Data: []byte(stat)}
		env := strings.Join(p.Env, "\x00")
		if env != "" {
			env += "\x00"
		}
		m[fmt.Sprintf("%d/environ", p.PID)] = &fstest.MapFile{Data: []byte(env)}
		m[fmt.Sprintf("%d", p.PID)] = &fstest.MapFile{Mode: fs.ModeDir | 0o555}
	}
	return m
}

// CountingFS counts the Open calls per path on the wrapped file system.
type CountingFS struct {
	FS fs.FS

	mu     sync.Mutex
	counts map[string]int
}

// Open implements fs.FS.
func (c *CountingFS) Open(name string) (fs.File, error) {
	c.mu.Lock()
	if c.counts == nil {
		c.counts = map[string]int{}
	}
	c.counts[name]++
	c.mu.Unlock()
	return c.FS.Open(name)
}

// Count returns how often name was opened.
func (c *CountingFS) Count(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[name]
}

// Opened returns every opened path with its count, for failure messages.
func (c *CountingFS) Opened() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.counts)
}

// Paths returns the opened paths that end in suffix, sorted.
func (c *CountingFS) Paths(suffix string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for p := range c.counts {
		if strings.HasSuffix(p, suffix) {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// FailingFS returns Errs[path] for the listed paths and serves the rest
// from FS. Use fs.ErrPermission for "permission denied", fs.ErrNotExist or
// syscall.ESRCH for "no such process".
type FailingFS struct {
	FS   fs.FS
	Errs map[string]error
}

// Open implements fs.FS.
func (f FailingFS) Open(name string) (fs.File, error) {
	if err, ok := f.Errs[name]; ok {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return f.FS.Open(name)
}
