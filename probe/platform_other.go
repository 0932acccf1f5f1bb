//go:build !linux

package probe

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"runtime"
	"strconv"
	"time"

	"github.com/shirou/gopsutil/v4/host"
	"github.com/shirou/gopsutil/v4/process"
)

func platformTable(tokenVar string) Table { return &gopsutilTable{tokenVar: tokenVar} }

// entryUID: /proc trees exist only on Linux.
func entryUID(fs.DirEntry) int { return -1 }

// gopsutilTable reads creation times and environments through gopsutil v4
// (never v3: its Linux boot time and 1 s resolution break identity).
type gopsutilTable struct{ tokenVar string }

func (t *gopsutilTable) BootID() (string, error) {
	boot, err := host.BootTime()
	if err != nil {
		return "", err
	}
	return "boottime-" + strconv.FormatUint(boot, 10), nil
}

func (t *gopsutilTable) Read(ctx context.Context, pids []int) ([]Process, error) {
	out := make([]Process, len(pids))
	for i, pid := range pids {
		out[i] = t.read(ctx, pid)
	}
	return out, nil
}

func (t *gopsutilTable) read(ctx context.Context, pid int) Process {
	proc := Process{PID: pid, UID: -1}
	p, err := process.NewProcessWithContext(ctx, int32(pid))
	switch {
	case errors.Is(err, process.ErrorProcessNotRunning):
		proc.Presence = Absent
		return proc
	case err != nil:
		proc.Err = fmt.Errorf("inspect pid %d: %w", pid, err)
		return proc
	}
	ms, err := p.CreateTimeWithContext(ctx)
	if err != nil {
		proc.Err = fmt.Errorf("creation time of pid %d: %w", pid, err)
		return proc
	}
	proc.Presence, proc.StartTime = Present, time.UnixMilli(ms)
	if t.tokenVar == "" || runtime.GOOS == "windows" {
		return proc
	}
	env, err := p.EnvironWithContext(ctx)
	if err != nil {
		proc.Err = fmt.Errorf("environment of pid %d: %w", pid, err)
		return proc
	}
	proc.TokenRead = true
	prefix := t.tokenVar + "="
	for _, kv := range env {
		if len(kv) > len(prefix) && kv[:len(prefix)] == prefix {
			proc.Token = kv[len(prefix):]
		}
	}
	return proc
}

func (t *gopsutilTable) Scan(ctx context.Context) ([]Process, error) {
	if !platformSupport(runtime.GOOS) {
		return nil, ErrCannotEnumerate
	}
	pids, err := process.PidsWithContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCannotEnumerate, err)
	}
	out := make([]Process, 0, len(pids))
	for _, pid := range pids {
		if proc := t.read(ctx, int(pid)); proc.Presence != Absent {
			out = append(out, proc)
		}
	}
	return out, nil
}
