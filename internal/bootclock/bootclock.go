// Package bootclock reads the machine's boot clock, the one clock a host
// and the plugins it spawns on the same machine share that keeps counting
// while the machine is suspended.
//
// Go's monotonic clock (time.Now's monotonic reading, time.Since, timers)
// is CLOCK_MONOTONIC on Linux, which stops while the machine sleeps: after
// a 60 s suspend a lease or a deadline kept on it is 60 s too generous,
// although the rest of the cluster counted those 60 s. CLOCK_BOOTTIME is
// the monotonic clock plus the time suspended, so a validity kept on it
// lapses across a suspend as it does for everyone else. Its readings are
// comparable between processes on one machine (not across machines, not
// across a reboot), which lets a host tell a plugin on the same machine
// when a grant ends on that clock.
//
// Where there is no boot clock (any system but Linux) Now reports ok
// false and callers keep the monotonic clock, with its suspend hazard.
package bootclock
