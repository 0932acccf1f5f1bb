package probe

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

func ownGroup() int { return unix.Getpgrp() }

// anchor is a process pinned by a pidfd and verified against what the scan
// saw. A pidfd refers to one process for its whole life: once that process
// is gone, signals through it fail with ESRCH instead of reaching whoever
// reuses the pid.
type anchor struct {
	proc Process
	fd   int
}

// alive reports whether the process still holds its pid (a zombie does:
// its pid, and so its group id, cannot be reused until it is reaped).
func (a anchor) alive() bool {
	return unix.PidfdSendSignal(a.fd, 0, nil, 0) == nil
}

// exited reports whether the process has exited (zombie or reaped): its
// pidfd turns readable then.
func (a anchor) exited() bool {
	fds := []unix.PollFd{{Fd: int32(a.fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0
}

// stopOrphan stops an orphan (and, when group is set and it leads its own
// process group, the group's members): SIGTERM, up to grace for everyone to
// exit, then SIGKILL.
// Each process is re-identified through its pidfd before every signal. It
// reports whether the orphan is gone at the end.
func stopOrphan(ctx context.Context, table Table, orphan Process, members []Process, group bool, grace time.Duration) (gone bool, err error) {
	leader, err := pin(orphan)
	if errors.Is(err, unix.ESRCH) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	defer unix.Close(leader.fd)
	anchors := []anchor{leader}
	for _, m := range members {
		a, err := pin(m)
		if err != nil {
			continue // gone already, or not ours to pin
		}
		defer unix.Close(a.fd)
		anchors = append(anchors, a)
	}
	group = group && orphan.PGID == orphan.PID

	for _, sig := range []unix.Signal{unix.SIGTERM, unix.SIGKILL} {
		verified, err := verify(ctx, table, anchors)
		if err != nil {
			return false, err
		}
		if len(verified) == 0 {
			return true, nil
		}
		if group && verified[0].proc.PID == leader.proc.PID && leader.alive() {
			// The verified, living leader holds the group id, so no other
			// group can own it: signalling the group reaches only the
			// orphan's tree, including children the scan never saw.
			if err := unix.Kill(-orphan.PGID, sig); err != nil && !errors.Is(err, unix.ESRCH) {
				return false, fmt.Errorf("signal process group %d: %w", orphan.PGID, err)
			}
		}
		for _, a := range verified {
			if err := unix.PidfdSendSignal(a.fd, sig, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
				return false, fmt.Errorf("signal pid %d: %w", a.proc.PID, err)
			}
		}
		wait := grace
		if sig == unix.SIGKILL {
			wait = max(grace, time.Second)
		}
		if waitExit(ctx, verified, wait) {
			return true, nil
		}
	}
	if !leader.exited() {
		return false, fmt.Errorf("pid %d survived SIGKILL", orphan.PID)
	}
	return true, nil
}

// pin opens a pidfd for p. The pidfd may already refer to a process that
// reused p's pid; verify, which reads identities after the open, is what
// ties the pidfd to the scanned process.
func pin(p Process) (anchor, error) {
	fd, err := unix.PidfdOpen(p.PID, 0)
	if err != nil {
		return anchor{}, err
	}
	return anchor{proc: p, fd: fd}, nil
}

// verify re-reads every anchored process and returns those that are still
// alive and still the processes the scan found (same start, same group, no
// other token). The leader, when verified, stays first.
func verify(ctx context.Context, table Table, anchors []anchor) ([]anchor, error) {
	pids := make([]int, len(anchors))
	for i, a := range anchors {
		pids[i] = a.proc.PID
	}
	cur, err := table.Read(ctx, pids)
	if err != nil {
		return nil, fmt.Errorf("re-read identities before signalling: %w", err)
	}
	var out []anchor
	for i, a := range anchors {
		if a.exited() || cur[i].Zombie {
			continue
		}
		// Read after the pidfd was opened: if this still matches, the pidfd
		// pins the very process that was scanned.
		if !sameOrphan(a.proc, cur[i]) || cur[i].PGID != a.proc.PGID {
			continue
		}
		out = append(out, a)
	}
	return out, nil
}

// waitExit waits until every anchor has exited (its pidfd turns readable),
// up to d. It reports whether they all did.
func waitExit(ctx context.Context, anchors []anchor, d time.Duration) bool {
	deadline := time.Now().Add(d)
	pending := anchors
	for len(pending) > 0 {
		left := time.Until(deadline)
		if left <= 0 || ctx.Err() != nil {
			return false
		}
		fds := make([]unix.PollFd, len(pending))
		for i, a := range pending {
			fds[i] = unix.PollFd{Fd: int32(a.fd), Events: unix.POLLIN}
		}
		// Wake at least every 100 ms to notice ctx.
		if _, err := unix.Poll(fds, int(min(left, 100*time.Millisecond)/time.Millisecond)+1); err != nil && !errors.Is(err, unix.EINTR) {
			return false
		}
		next := pending[:0:0]
		for i, a := range pending {
			if fds[i].Revents&(unix.POLLIN|unix.POLLHUP|unix.POLLERR) == 0 {
				next = append(next, a)
			}
		}
		pending = next
	}
	return true
}
