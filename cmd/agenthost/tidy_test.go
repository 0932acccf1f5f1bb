package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// pluginPID returns the owner pid of session id's lease, from sessions
// show --json.
func pluginPID(t *testing.T, dir, id string) int {
	t.Helper()
	out := mustAH(t, "--state-dir", dir, "sessions", "show", id, "--json").stdout
	i := strings.Index(out, `"pid":`)
	if i < 0 {
		t.Fatalf("sessions show %s --json has no owner pid: %s", id, out)
	}
	var pid int
	for _, c := range out[i+len(`"pid":`):] {
		if c < '0' || c > '9' {
			break
		}
		pid = pid*10 + int(c-'0')
	}
	return pid
}

func TestSessionsStopAllRmAndPrune(t *testing.T) {
	t.Parallel()
	dir := stateDir(t)
	// An agent whose plugin exits at once: its session's first start fails.
	if err := os.WriteFile(filepath.Join(dir, "agenthost.json"), []byte(`{"agents":{"exits":{"path":"/bin/false"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	serve(t, dir)
	work := t.TempDir()
	run := func(id string) {
		mustAH(t, "--state-dir", dir, "run", "--agent", "scripted", "--session", id, "--cwd", work, "count 1")
	}
	run("a")
	run("b")
	if r := ah(t, "--state-dir", dir, "run", "--agent", "exits", "--session", "f", "--cwd", work, "hi"); r.code == 0 {
		t.Fatalf("run of a plugin that exits at once: %s", r)
	}
	r := mustAH(t, "--state-dir", dir, "sessions", "list")
	for _, want := range []string{`a\s+scripted\s+running`, `b\s+scripted\s+running`, `f\s+exits\s+failed`} {
		if !regexpMatch(want, r.stdout) {
			t.Errorf("sessions list does not match %q:\n%s", want, r.stdout)
		}
	}

	// rm of a running session is refused, and says what to do.
	pidA := pluginPID(t, dir, "a")
	r = ah(t, "--state-dir", dir, "sessions", "rm", "a")
	if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, "a: it is running") || !strings.Contains(r.stderr, "--force") {
		t.Errorf("sessions rm of a running session: %s", r)
	}
	if err := syscall.Kill(pidA, 0); err != nil {
		t.Errorf("the plugin of a session whose removal was refused is gone: %v", err)
	}
	// --force stops it first; each id is reported, an unknown one fails
	// the command.
	r = ah(t, "--state-dir", dir, "sessions", "rm", "--force", "a", "nope")
	if r.code != 1 || !regexpMatch(`^removed session a \(\d+(\.\d)? [KM]?i?B freed, stopped first\)\n$`, r.stdout) ||
		!strings.Contains(r.stderr, "1 session(s) not removed") || !strings.Contains(r.stderr, "nope: no such session") {
		t.Errorf("sessions rm --force a nope: %s", r)
	}
	if err := syscall.Kill(pidA, 0); err == nil {
		t.Errorf("the plugin (pid %d) runs after sessions rm --force", pidA)
	}
	if r := ah(t, "--state-dir", dir, "sessions", "show", "a"); r.code != 1 || !strings.Contains(r.stderr, "no session a") {
		t.Errorf("sessions show of a removed session: %s", r)
	}

	// stop, stop again (exit 0, says so), stop of an unknown session.
	if r := mustAH(t, "--state-dir", dir, "sessions", "stop", "b"); r.stdout != "stopped session b\n" {
		t.Errorf("sessions stop b: %s", r)
	}
	if r := mustAH(t, "--state-dir", dir, "sessions", "stop", "b"); r.stdout != "session b was stopped already\n" {
		t.Errorf("sessions stop of a stopped session: %s", r)
	}
	if r := ah(t, "--state-dir", dir, "sessions", "stop", "nope"); r.code != 1 || !strings.Contains(r.stderr, "no session nope") {
		t.Errorf("sessions stop nope: %s", r)
	}
	if r := ah(t, "--state-dir", dir, "sessions", "stop", "--all", "b"); r.code != 2 {
		t.Errorf("sessions stop --all with an id: %s", r)
	}

	// stop --all.
	run("c")
	run("d")
	pids := []int{pluginPID(t, dir, "c"), pluginPID(t, dir, "d")}
	if r := mustAH(t, "--state-dir", dir, "sessions", "stop", "--all"); r.stdout != "stopped session c\nstopped session d\n" {
		t.Errorf("sessions stop --all: %s", r)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("plugin pid %d runs after sessions stop --all", pid)
		}
	}
	if r := mustAH(t, "--state-dir", dir, "sessions", "stop", "--all"); r.stdout != "no session was running\n" {
		t.Errorf("sessions stop --all with nothing running: %s", r)
	}
	r = mustAH(t, "--state-dir", dir, "sessions", "list")
	for _, want := range []string{`b\s+scripted\s+stopped`, `c\s+scripted\s+stopped`, `d\s+scripted\s+stopped`, `f\s+exits\s+failed`} {
		if !regexpMatch(want, r.stdout) {
			t.Errorf("sessions list after stop --all does not match %q:\n%s", want, r.stdout)
		}
	}

	// prune: its age is required and checked before any host is asked.
	for _, args := range [][]string{{}, {"--older-than", "7d"}, {"--older-than", "-1h"}} {
		r := ah(t, append([]string{"--state-dir", dir, "sessions", "prune"}, args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, `Go duration such as "72h"`) {
			t.Errorf("sessions prune %v: %s", args, r)
		}
	}
	if r := mustAH(t, "--state-dir", dir, "sessions", "prune", "--older-than", "1h"); r.stdout != "no stopped, idle or failed session is older than 1h\n" {
		t.Errorf("sessions prune --older-than 1h: %s", r)
	}
	run("e") // running: never pruned
	want := "session b\n%s session c\n%s session d\n%s session f\n"
	if r := mustAH(t, "--state-dir", dir, "sessions", "prune", "--older-than", "0s", "--dry-run"); r.stdout != "would remove "+strings.ReplaceAll(want, "%s", "would remove") {
		t.Errorf("sessions prune --dry-run: %s", r)
	}
	if r := mustAH(t, "--state-dir", dir, "sessions", "list"); !regexpMatch(`f\s+exits\s+failed`, r.stdout) || !regexpMatch(`b\s+scripted\s+stopped`, r.stdout) {
		t.Errorf("a dry run removed sessions:\n%s", r.stdout)
	}
	if r := mustAH(t, "--state-dir", dir, "sessions", "prune", "--older-than", "0s"); r.stdout != "removed "+strings.ReplaceAll(want, "%s", "removed") {
		t.Errorf("sessions prune: %s", r)
	}
	r = mustAH(t, "--state-dir", dir, "sessions", "list")
	if !regexpMatch(`e\s+scripted\s+running`, r.stdout) || strings.Count(strings.TrimSpace(r.stdout), "\n") != 1 {
		t.Errorf("sessions list after prune: want only e, running:\n%s", r.stdout)
	}
	if r := mustAH(t, "--state-dir", dir, "status"); !regexpMatch(`disk use\s+\d+(\.\d)? [KMG]iB`, r.stdout) {
		t.Errorf("status does not show the disk use:\n%s", r.stdout)
	}
}
