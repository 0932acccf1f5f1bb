package probe

import (
	"os"
	"runtime"
	"strings"

	"github.com/agenthost/agenthost/leasestore"
)

// Location is where a session's agent process runs.
type Location struct {
	// HostID names the execution host; a session pinned to another host
	// can never be probed from this one.
	HostID string
}

// CanVerifyIdentity reports whether a host with id localHostID can verify
// the identity of processes it would start at loc: loc must be this host,
// and this platform must be able to read exact process identities (Linux:
// /proc start ticks and boot id; macOS: creation times). The host refuses to
// create sessions where this is false, because it could never prove their
// owners dead or alive.
//
// The answer depends on the real platform only: a process table injected
// into a Prober (as tests do) never makes a platform count as supported.
func CanVerifyIdentity(localHostID string, loc Location) bool {
	return loc.HostID == localHostID && platformSupport(runtime.GOOS)
}

// platformSupport answers for the operating system goos, from the real
// platform only. Linux: the real /proc must give boot id and start ticks.
// macOS: exact creation times (p_starttime, µs) and same-user environments
// through gopsutil. Windows is not supported: reading another process's
// environment answers an empty list on access denied, which cannot be told
// apart from "no token", and it has no process groups or graceful signals
// to stop a plugin's tree. Anything else: not supported.
func platformSupport(goos string) bool {
	switch goos {
	case "linux":
		return procVerifies(os.DirFS("/proc"))
	case "darwin":
		return true
	}
	return false
}

// TokenVariable returns the environment variable that carries spawn tokens
// for the host identified by hostKey (for example a short hash of its state
// directory). Each host scans only its own variable, so two hosts on one
// machine never mistake each other's plugins for orphans.
func TokenVariable(hostKey string) string {
	var b strings.Builder
	b.WriteString("AGENTHOST_SPAWN_TOKEN")
	if hostKey != "" {
		b.WriteByte('_')
		for _, r := range strings.ToUpper(hostKey) {
			if (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
				b.WriteRune(r)
			} else {
				b.WriteByte('_')
			}
		}
	}
	return b.String()
}

// OwnsToken reports whether any of sessions owns token, as its reserved
// spawn token or its owner's. A reaper's Owned function is typically this
// over a fresh listing of the store.
func OwnsToken(sessions []leasestore.Session, token string) bool {
	if token == "" {
		return false
	}
	for _, s := range sessions {
		if s.Lease.ReservedSpawnToken == token || (s.Lease.Owner != nil && s.Lease.Owner.SpawnToken == token) {
			return true
		}
	}
	return false
}
