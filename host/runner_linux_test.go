package host

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agenthost/agenthost/internal/logtest"
)

// signalStorm sends SIGURG (which Go's runtime takes as a preemption
// request and otherwise ignores) to every thread of this process, over and
// over, until the test ends, so that the runner's non-blocking pidfd polls
// are interrupted by signals as they are, now and then, in real use.
func signalStorm(t *testing.T) {
	t.Helper()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		pid := os.Getpid()
		for {
			select {
			case <-stop:
				return
			default:
			}
			tasks, _ := os.ReadDir("/proc/self/task")
			for _, task := range tasks {
				if tid, err := strconv.Atoi(task.Name()); err == nil {
					_ = unix.Tgkill(pid, tid, unix.SIGURG)
				}
			}
		}
	}()
	t.Cleanup(func() { close(stop); wg.Wait() })
}

// A signal that interrupts the runner's pidfd check is not an exit: under a
// storm of signals, no live process the runner watches (started by it, or
// attached to through a pidfd) is taken for exited, killed or reaped. The
// watcher once took an interrupted poll for an exit and SIGKILLed live
// plugins, a few in a hundred here.
func TestRunnerTakesNoSignalForAnExit(t *testing.T) {
	signalStorm(t)
	log := logtest.New(t)
	const rounds = 100
	early := 0
	for i := range rounds {
		r := &procRunner{path: "/bin/sleep", args: []string{"30"}, logPath: filepath.Join(t.TempDir(), "log"), log: log}
		if err := r.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		// Attach a second runner to a process this one did not start
		// through exec, as a host does after a restart.
		other := exec.Command("/bin/sleep", "30")
		if err := other.Start(); err != nil {
			t.Fatal(err)
		}
		pidfd, err := unix.PidfdOpen(other.Process.Pid, 0)
		if err != nil {
			t.Fatal(err)
		}
		a, err := attachRunner(other.Process.Pid, pidfd, "", log)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
		for name, w := range map[string]*procRunner{"started": r, "attached": a} {
			select {
			case <-w.exited:
				early++
				t.Errorf("round %d: the %s runner saw its live process %d exit (%s)", i, name, w.pid, w.exitDescription())
			default:
			}
		}
		_ = r.Kill(context.Background())
		_ = other.Process.Kill()
		_ = other.Wait()
		for _, w := range []*procRunner{r, a} {
			select {
			case <-w.exited:
			case <-time.After(5 * time.Second):
				t.Fatalf("round %d: the runner did not see process %d exit after SIGKILL", i, w.pid)
			}
		}
	}
	if early > 0 {
		t.Errorf("%d of %d watched processes were taken for exited while alive", early, 2*rounds)
	}
}
