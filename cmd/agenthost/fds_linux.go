package main

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// keepInheritedFDsHere marks every descriptor above stderr close-on-exec.
//
// Descriptors this process inherited without close-on-exec (a desktop
// app's pipes, a shell's saved redirections) would otherwise pass on to
// every plugin, and plugins outlive the host: a parent waiting for EOF on
// such a pipe would wait for the last plugin, not for agenthost. Go opens
// its own descriptors close-on-exec and hands children only what they are
// given explicitly, so nothing this binary starts needs them.
func keepInheritedFDsHere() {
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err == nil {
		return
	}
	// Before Linux 5.11: one descriptor at a time.
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			unix.CloseOnExec(fd)
		}
	}
}
