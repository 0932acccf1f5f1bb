package bootclock

import "golang.org/x/sys/unix"

// Now reads CLOCK_BOOTTIME in nanoseconds.
func Now() (ns int64, ok bool) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		// Every Linux since 2.6.39 has it; without it, say there is none.
		return 0, false
	}
	return ts.Nano(), true
}
