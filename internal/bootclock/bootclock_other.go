//go:build !linux

package bootclock

// Now reports that this system has no boot clock the package reads.
func Now() (ns int64, ok bool) { return 0, false }
