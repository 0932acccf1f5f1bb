package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/agenthost/agenthost/probe"
)

// processTable works around a race in the host's start of a plugin: the
// host reads the new process's identity, spawn token included, from /proc
// as soon as it has started it, but the kernel lets the parent go on
// (the close-on-exec pipe closes) before it has set up the new program's
// environment, and /proc/<pid>/environ reads empty meanwhile. The host then
// sees no spawn token, the lease refuses the owner ("carries another spawn
// token") and the fresh plugin is killed. A big executable — this binary,
// serving the built-in plugins — widens the window; under load it hits
// several percent of starts.
//
// Read waits (up to settleTimeout) until each live process it is asked
// about shows an environment, then reads the table as the host's default
// would. The host derives its spawn-token variable from the state
// directory; this derives the same one. Remove this once the host retries
// the identity read itself.
func processTable(stateDir string) probe.Table {
	sum := sha256.Sum256([]byte(stateDir))
	return settlingTable{&probe.ProcFS{TokenVar: probe.TokenVariable(hex.EncodeToString(sum[:4]))}}
}

const settleTimeout = time.Second

type settlingTable struct{ probe.Table }

func (t settlingTable) Read(ctx context.Context, pids []int) ([]probe.Process, error) {
	deadline := time.Now().Add(settleTimeout)
	for _, pid := range pids {
		for execInProgress(pid) && time.Now().Before(deadline) {
			select {
			case <-ctx.Done():
				return t.Table.Read(ctx, pids)
			case <-time.After(time.Millisecond):
			}
		}
	}
	return t.Table.Read(ctx, pids)
}

// execInProgress reports whether pid is alive with an environment that
// reads empty: a process inside execve. Zombies and kernel threads read
// empty too; zombies are told apart by their state, and a kernel thread is
// never a plugin (it only costs the wait).
func execInProgress(pid int) bool {
	dir := filepath.Join("/proc", strconv.Itoa(pid))
	env, err := os.ReadFile(filepath.Join(dir, "environ"))
	if err != nil || len(env) > 0 {
		return false
	}
	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	return i > 0 && i+2 < len(stat) && stat[i+2] != 'Z' && stat[i+2] != 'X'
}
