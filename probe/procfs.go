package probe

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// ProcFS reads process identities from a Linux /proc file tree: the exact
// start tick and process group from <pid>/stat, the spawn token from
// <pid>/environ, and the boot id from sys/kernel/random/boot_id.
//
// The zero value reads the real /proc. Tests set FS to a synthetic tree;
// such a table never counts as platform support.
type ProcFS struct {
	// FS is the /proc tree. Default: os.DirFS("/proc").
	FS fs.FS
	// TokenVar is the environment variable that carries the spawn token.
	// Empty: tokens are not read.
	TokenVar string
}

func (p *ProcFS) fsys() fs.FS {
	if p.FS == nil {
		return os.DirFS("/proc")
	}
	return p.FS
}

// BootID implements Table.
func (p *ProcFS) BootID() (string, error) {
	b, err := fs.ReadFile(p.fsys(), "sys/kernel/random/boot_id")
	if err != nil {
		return "", fmt.Errorf("read boot id: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// Read implements Table.
func (p *ProcFS) Read(ctx context.Context, pids []int) ([]Process, error) {
	fsys := p.fsys()
	out := make([]Process, len(pids))
	var bufs readBufs
	for i, pid := range pids {
		if i%64 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		out[i] = p.read(fsys, pid, &bufs)
	}
	return out, nil
}

// readBufs are the buffers one batch reuses for every pid's files: a
// probe round reads two files per owner, and allocating (and growing) a
// buffer for each doubled its cost.
type readBufs struct{ stat, env []byte }

// readFile reads one file of a pid's /proc directory. On the real /proc
// (FS unset) it reads with raw system calls into buf (see readProcFile);
// the bytes are valid until the next call with the same buf.
func (p *ProcFS) readFile(fsys fs.FS, name string, buf *[]byte) ([]byte, error) {
	if p.FS != nil {
		return fs.ReadFile(fsys, name)
	}
	return readProcFile("/proc/"+name, buf)
}

// Scan implements Table.
func (p *ProcFS) Scan(ctx context.Context) ([]Process, error) {
	fsys := p.fsys()
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("%w: list processes: %v", ErrCannotEnumerate, err)
	}
	out := make([]Process, 0, len(entries))
	var bufs readBufs
	for i, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		if i%64 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		proc := p.read(fsys, pid, &bufs)
		if proc.Presence == Absent {
			continue // exited while we listed: not evidence either way
		}
		if !proc.TokenRead {
			// Only an unreadable environment needs to know its owner.
			proc.UID = entryUID(e)
		}
		out = append(out, proc)
	}
	return out, nil
}

// read reads one pid: its stat, and its environment if it is present.
func (p *ProcFS) read(fsys fs.FS, pid int, bufs *readBufs) Process {
	proc := Process{PID: pid, UID: -1}
	stat, err := p.readFile(fsys, strconv.Itoa(pid)+"/stat", &bufs.stat)
	switch {
	case err == nil:
	case isNoProcess(err):
		proc.Presence = Absent
		return proc
	default:
		proc.Err = fmt.Errorf("read stat of pid %d: %w", pid, err)
		return proc
	}
	if err := parseStat(stat, &proc); err != nil {
		proc.Err = fmt.Errorf("pid %d: %w", pid, err)
		return proc
	}
	proc.Presence = Present
	if proc.Zombie {
		// A thread-group leader that exited while other threads run also
		// shows as a zombie: only a zombie with no live threads has exited.
		if tasks, err := fs.ReadDir(fsys, strconv.Itoa(pid)+"/task"); err == nil && len(tasks) > 1 {
			proc.Zombie = false
		}
	}
	if p.TokenVar == "" {
		return proc
	}
	env, err := p.readFile(fsys, strconv.Itoa(pid)+"/environ", &bufs.env)
	if isNoProcess(err) {
		// The process exited (and was reaped) between the two reads: it is
		// gone, as a stat read after its exit would have said. Read as
		// unknown, one exit during a scan of a busy machine would fail the
		// whole spawn-token scan and keep a freed reservation latched.
		return Process{PID: pid, UID: -1, Presence: Absent}
	}
	if err != nil {
		// Permission (another user's process, a non-dumpable one), or any
		// other failure: the token is simply not known.
		if proc.Err == nil {
			proc.Err = fmt.Errorf("read environment of pid %d: %w", pid, err)
		}
		return proc
	}
	proc.Token, proc.TokenRead = envValue(env, p.TokenVar), true
	return proc
}

// isNoProcess reports whether err is the kernel saying the process does not
// exist. Only that is absence; everything else (EACCES, EIO, …) is unknown.
func isNoProcess(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH)
}

// parseStat parses the fields of /proc/<pid>/stat that identity needs. The
// command name (field 2) may contain spaces and parentheses, so fields are
// counted from after its last ')'.
func parseStat(b []byte, proc *Process) error {
	end := bytes.LastIndexByte(b, ')')
	if end < 0 || end+2 > len(b) {
		return errors.New("malformed stat: no command name")
	}
	// fields[0] is field 3 (state). Only the first 20 are needed.
	var fields [20]string
	n := 0
	for f := range strings.FieldsSeq(string(b[end+2:])) {
		fields[n] = f
		if n++; n == len(fields) {
			break
		}
	}
	if n < len(fields) {
		return fmt.Errorf("malformed stat: %d fields after the command name", n)
	}
	proc.Zombie = fields[0] == "Z" || fields[0] == "X"
	ppid, err := strconv.Atoi(fields[1]) // field 4
	if err != nil {
		return fmt.Errorf("malformed stat: parent %q", fields[1])
	}
	proc.PPID = ppid
	pgid, err := strconv.Atoi(fields[2]) // field 5
	if err != nil {
		return fmt.Errorf("malformed stat: process group %q", fields[2])
	}
	ticks, err := strconv.ParseUint(fields[19], 10, 64) // field 22
	if err != nil {
		return fmt.Errorf("malformed stat: start time %q", fields[19])
	}
	proc.PGID, proc.StartTicks = pgid, ticks
	return nil
}

// envValue returns the value of name in a NUL-separated environment block,
// "" when absent.
func envValue(env []byte, name string) string {
	prefix := name + "="
	for kv := range bytes.SplitSeq(env, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte(prefix)); ok {
			return string(v)
		}
	}
	return ""
}

// procVerifies reports whether the /proc tree fsys gives the evidence
// identity rests on: a boot id, and exact start ticks for this very process.
// A host without /proc, or with it mounted so that its own process is
// hidden, cannot verify identities.
func procVerifies(fsys fs.FS) bool {
	t := &ProcFS{FS: fsys}
	boot, err := t.BootID()
	if err != nil || boot == "" {
		return false
	}
	procs, err := t.Read(context.Background(), []int{os.Getpid()})
	return err == nil && procs[0].Presence == Present && procs[0].StartTicks != 0
}
