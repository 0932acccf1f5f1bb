package main

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// A descriptor agenthost inherited (here the write end of a pipe, as a
// desktop app might leak one) stays in agenthost but reaches neither its
// plugins nor the processes they start: plugins outlive the host, and a
// parent waiting for EOF on that pipe must see it when agenthost exits.
func TestInheritedDescriptorsStayInTheHost(t *testing.T) {
	t.Parallel()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(w.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	leaked := fmt.Sprintf("pipe:[%d]", st.Ino)
	dir := stateDir(t)
	s := startServeCmd(t, dir, func(cmd *exec.Cmd) { cmd.ExtraFiles = []*os.File{w} })
	w.Close() // agenthost holds the only write end now
	t.Cleanup(func() {
		s.stop()
		// The host is killed below and its plugin lives on, as it should.
		for _, pid := range pluginsOf(dir) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		noPluginsLeft(t, dir)
	})

	if !holds(t, s.cmd.Process.Pid, leaked) {
		t.Fatalf("agenthost does not hold the descriptor it inherited (%s)", leaked)
	}
	mustAH(t, "--state-dir", dir, "run", "--agent", "scripted", "--session", "fds", "--cwd", t.TempDir(), "count 1")
	plugins := pluginsOf(dir)
	if len(plugins) != 1 {
		t.Fatalf("plugins of the state directory: %v, want one", plugins)
	}
	if holds(t, plugins[0], leaked) {
		t.Errorf("the plugin (pid %d) inherited agenthost's inherited descriptor %s", plugins[0], leaked)
	}

	// With agenthost gone and its plugin still running, the pipe ends.
	s.kill()
	if len(pluginsOf(dir)) != 1 {
		t.Fatal("the plugin did not outlive a killed host")
	}
	eof := make(chan error, 1)
	go func() {
		_, err := r.Read(make([]byte, 1))
		eof <- err
	}()
	select {
	case err := <-eof:
		if err == nil {
			t.Error("read a byte from a pipe nobody writes")
		}
	case <-time.After(10 * time.Second):
		r.Close()
		t.Error("the pipe agenthost inherited did not end with agenthost: a plugin still holds it")
	}
}

// holds reports whether process pid has a descriptor open on target (a
// /proc/PID/fd link text such as "pipe:[123]").
func holds(t *testing.T, pid int, target string) bool {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatalf("list descriptors of %d: %v", pid, err)
	}
	for _, e := range ents {
		if link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name())); err == nil && link == target {
			return true
		}
	}
	return false
}
