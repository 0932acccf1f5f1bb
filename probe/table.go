package probe

import (
	"context"
	"errors"
	"time"
)

// Presence is what the process table says about a pid.
type Presence int

const (
	// Unknown: the pid could not be inspected (permission, a transient
	// error). Never evidence that the process is gone.
	Unknown Presence = iota
	// Present: a process has the pid.
	Present
	// Absent: the kernel answered "no such process".
	Absent
)

func (p Presence) String() string {
	switch p {
	case Present:
		return "present"
	case Absent:
		return "absent"
	}
	return "unknown"
}

// Process is what one read of the process table learned about one pid.
// Every field may be missing; the zero value of a field means "not known",
// never "none".
type Process struct {
	PID      int
	Presence Presence
	// Err says why the process, or one of its fields, could not be read.
	Err error
	// StartTicks is the exact start time in clock ticks since boot (Linux).
	StartTicks uint64
	// StartTime is the creation time where exact ticks are not available.
	StartTime time.Time
	// PPID is the parent process, 0 when unknown.
	PPID int
	// PGID is the process group, 0 when unknown.
	PGID int
	// UID owns the process as /proc shows it (a non-dumpable process shows
	// as root); -1 when unknown. Filled by scans, where it decides whether
	// an unreadable environment could hide one of this host's plugins.
	UID int
	// Zombie: the process has exited and waits to be reaped.
	Zombie bool
	// Token is the value of the table's spawn-token variable in the
	// process's environment; TokenRead says whether the environment could be
	// read at all (TokenRead with Token "" means the variable is absent).
	Token     string
	TokenRead bool
}

// Table reads the host's process table. Implementations: ProcFS (Linux,
// /proc) and the gopsutil-backed table on other platforms. Tests inject
// ProcFS over a synthetic file tree; an injected table never makes a
// platform count as able to verify identities (see CanVerifyIdentity).
type Table interface {
	// BootID identifies the current boot, "" where the platform has none.
	BootID() (string, error)
	// Read inspects the given pids in one pass over the table and returns
	// one Process per pid, in order.
	Read(ctx context.Context, pids []int) ([]Process, error)
	// Scan inspects every process once. It returns ErrCannotEnumerate
	// where the platform cannot read other processes' environments: that
	// means "cannot tell", never "no process carries a token".
	Scan(ctx context.Context) ([]Process, error)
}

// ErrCannotEnumerate: this host cannot list the spawn tokens of its
// processes.
var ErrCannotEnumerate = errors.New("this host cannot enumerate process spawn tokens")

// ErrNoProcess: the kernel says no process has the pid.
var ErrNoProcess = errors.New("no such process")

// ErrUnverifiable: the process exists (or may) but its identity could not be
// read.
var ErrUnverifiable = errors.New("process identity cannot be verified")
