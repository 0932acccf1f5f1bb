package main

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/internal/serveproc"
	"github.com/agenthost/agenthost/leasestore/etcdstore/etcdtest"
)

// Two real hosts on a 3-member etcd cluster: a session started on host A
// is listed by both with host-a as its owner host; host B tells a client
// that asks for it where it runs; once host A is SIGKILLed, host B takes
// the session over after the liveness TTL and continues it.
func TestTwoHostsOnEtcdShowTheOwnerHost(t *testing.T) {
	cluster := etcdtest.StartCluster(t, 3)
	eps := strings.Join(cluster.Endpoints(), ",")
	dirA, dirB := stateDir(t), stateDir(t)
	etcdArgs := func(id string) []string {
		return []string{"--store", "etcd", "--etcd-endpoints", eps, "--host-id", id, "--liveness-ttl", "2s"}
	}
	// Host A is killed below: its plugin outlives it (and fences
	// itself), so it is killed at the end rather than required gone.
	a := startServe(t, dirA, etcdArgs("host-a")...)
	t.Cleanup(func() {
		a.stop()
		serveproc.KillSessionProcesses(dirA)
		if t.Failed() {
			t.Logf("host A's stderr:\n%s", a.stderrText())
		}
	})
	b := serve(t, dirB, etcdArgs("host-b")...)

	run := mustAH(t, "--state-dir", dirA, "run", "--agent", "scripted", "count 2")
	m := regexp.MustCompile(`(?m)^session (\S+) \(scripted, new\)`).FindStringSubmatch(run.stderr)
	if m == nil {
		t.Fatalf("no session id in %s", run)
	}
	id := m[1]

	row := func(dir string) []string {
		t.Helper()
		r := mustAH(t, "--state-dir", dir, "sessions", "list")
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if got := strings.Join(strings.Fields(lines[0]), " "); got != "SESSION AGENT STATE HOST PORTABLE FENCE UPDATED WORKSPACE TITLE" {
			t.Fatalf("sessions list header on %s: %q", dir, got)
		}
		for _, l := range lines[1:] {
			if f := strings.Fields(l); len(f) > 0 && f[0] == id {
				return f
			}
		}
		t.Fatalf("sessions list on %s lacks %s:\n%s", dir, id, r.stdout)
		return nil
	}
	// PORTABLE is the stored session's: both hosts say yes once the turn
	// stored the scripted plugin's state.
	if f := row(dirA); f[2] != "running" || f[3] != "host-a" || f[4] != "yes" {
		t.Errorf("host A lists its session as %q, want running on host-a, portable", f)
	}
	if f := row(dirB); f[3] != "host-a" || f[2] != "elsewhere" || f[4] != "yes" {
		t.Errorf("host B lists host A's session as %q, want elsewhere on host-a, portable", f)
	}
	st := mustAH(t, "--state-dir", dirB, "status")
	for _, want := range []string{"host-a, pid", "host-b (this host), pid", id + " on host-a"} {
		if !strings.Contains(st.stdout, want) {
			t.Errorf("host B's status lacks %q:\n%s", want, st.stdout)
		}
	}
	wrong := ah(t, "--state-dir", dirB, "run", "--session", id, "count 1")
	if wrong.code != 1 || !strings.Contains(wrong.stderr, "runs on host host-a, not this one") ||
		!strings.Contains(wrong.stderr, filepath.Join(dirA, "agenthost.sock")) {
		t.Errorf("a client of host B asking for host A's session: %s\nwant it told host-a and its socket", wrong)
	}

	a.kill()
	killed := time.Now()
	// Host B takes the session over once host A's lease expired and the
	// TTL plus the drift margin passed: it is no longer host-a's.
	deadline := killed.Add(60 * time.Second)
	for row(dirB)[3] == "host-a" {
		if time.Now().After(deadline) {
			t.Fatalf("host B never took the session over; its stderr:\n%s", b.stderrText())
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("host B took the session over %s after host A was killed", time.Since(killed).Round(100*time.Millisecond))
	cont := mustAH(t, "--state-dir", dirB, "run", "--session", id, "count 1")
	if !strings.Contains(cont.stderr, "(scripted, resumed)") || strings.TrimSpace(cont.stdout) != "1" {
		t.Errorf("host B continuing the session: %s", cont)
	}
	if f := row(dirB); f[2] != "running" || f[3] != "host-b" {
		t.Errorf("after the takeover host B lists the session as %q, want running on host-b", f)
	}
}
