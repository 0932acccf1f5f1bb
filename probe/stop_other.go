//go:build !linux

package probe

import (
	"context"
	"errors"
	"time"
)

func ownGroup() int { return 0 }

// stopOrphan refuses outside Linux: without pidfds a process cannot be
// re-identified and signalled atomically, and the reaper never signals a
// process it cannot prove is the orphan it found.
func stopOrphan(ctx context.Context, table Table, orphan Process, members []Process, group bool, grace time.Duration) (bool, error) {
	return false, errors.New("stopping orphan plugins needs pidfds, which this platform lacks; stop it by hand")
}
