package probe

import (
	"context"
	"os/exec"
	"syscall"
	"testing"
	"testing/fstest"
	"time"
)

// The reaper acts on what its scan saw. If the pid now belongs to another
// process (the orphan exited and its pid was reused), the re-check before
// the signal must refuse, and the process at that pid must live on.
func TestStopNeverSignalsAnotherProcessAtTheSamePID(t *testing.T) {
	cmd := exec.Command("sleep", "300")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })

	table := &ProcFS{TokenVar: "AGENTHOST_SPAWN_TOKEN_TEST"}
	procs, err := table.Read(context.Background(), []int{cmd.Process.Pid})
	if err != nil || procs[0].Presence != Present {
		t.Fatalf("read child: %+v %v", procs, err)
	}
	scanned := procs[0]
	scanned.Token = "orphan"
	earlier := scanned
	earlier.StartTicks-- // the scan saw a process that started earlier at this pid

	gone, err := stopOrphan(context.Background(), table, earlier, nil, true, 100*time.Millisecond)
	if err != nil || !gone {
		t.Fatalf("stale snapshot: gone %v, err %v; want the scanned process reported gone", gone, err)
	}
	select {
	case <-done:
		t.Fatal("the process now holding the pid was signalled")
	case <-time.After(200 * time.Millisecond):
	}

	// The matching snapshot is stopped.
	gone, err = stopOrphan(context.Background(), table, scanned, nil, true, time.Second)
	if err != nil || !gone {
		t.Fatalf("current snapshot: gone %v, err %v", gone, err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the verified orphan was not stopped")
	}
}

// Platform support comes from the operating system and its real /proc
// only. CanVerifyIdentity takes no table, so an injected reader cannot
// count as support by construction; this checks the per-OS answers, with a
// perfect injected reader at hand to show it changes nothing.
func TestPlatformSupportIgnoresInjectedReaders(t *testing.T) {
	perfect := &ProcFS{FS: fakeProcWithSelf(t)}
	p := &Prober{HostID: "local", Table: perfect}
	if _, err := p.Identify(context.Background(), 1); err != nil {
		t.Fatalf("the injected reader should identify processes perfectly: %v", err)
	}
	for _, goos := range []string{"windows", "freebsd", "plan9"} {
		if platformSupport(goos) {
			t.Errorf("%s counts as able to verify identities", goos)
		}
	}
	if !platformSupport("linux") {
		t.Error("this Linux host's real /proc does not count as support")
	}
}

func fakeProcWithSelf(t *testing.T) fstest.MapFS {
	t.Helper()
	return fstest.MapFS{
		"sys/kernel/random/boot_id": {Data: []byte("boot\n")},
		"1/stat":                    {Data: []byte("1 (init) S 0 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 42 0 0\n")},
		"1/environ":                 {Data: []byte("")},
	}
}
