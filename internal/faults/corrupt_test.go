package faults

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/host"
)

// roleEnv makes the test binary a short-lived host instead of a test run:
// a damaged Badger table can panic inside Badger's own goroutines, which
// kills the process, so each open of a damaged store runs in a child.
const roleEnv = "AGENTHOST_FAULTS_ROLE"

// runRole runs the test binary as one of the suite's child processes.
func runRole(role string) int {
	switch role {
	case "open":
		return openRole()
	case "writer":
		return writerRole()
	}
	fmt.Fprintln(os.Stderr, "unknown role", role)
	return 2
}

// openRole opens a host on $AGENTHOST_FAULTS_DIR and prints one line: how
// the open went. Exit status 0 unless the open itself crashed.
func openRole() int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h, err := openOnBadger(ctx, host.Config{StateDir: os.Getenv("AGENTHOST_FAULTS_DIR")})
	if err != nil {
		fmt.Printf("error: %v\n", err)
		return 0
	}
	defer h.Shutdown(ctx)
	st, err := h.Status(ctx)
	if err != nil {
		fmt.Printf("error: status: %v\n", err)
		return 0
	}
	if st.Recovery != nil {
		fmt.Printf("recovered: %d sessions: %s\n", st.Sessions, *st.Recovery)
		return 0
	}
	fmt.Printf("opened: %d sessions\n", st.Sessions)
	return 0
}

func openInChild(t *testing.T, dir string) (string, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"=open", "AGENTHOST_FAULTS_DIR="+dir)
	out, err := cmd.Output()
	return strings.TrimSpace(string(out)), err
}

// Badger's files are truncated or overwritten while the host is down. The
// host either restores the session records from its backup (keeping the
// damaged store aside) or refuses with an error that says what to do; it
// never crash-loops: within the crash guard's two deaths it reaches one
// answer, and the next open gives the same answer.
func TestDamagedStoreRecoversOrIsRefusedWithoutCrashLoop(t *testing.T) {
	damages := map[string]func(t *testing.T, store string){
		"tables-overwritten": func(t *testing.T, store string) {
			for _, f := range glob(t, store, "*.sst") {
				overwriteTail(t, f, 256)
			}
		},
		"tables-truncated": func(t *testing.T, store string) {
			for _, f := range glob(t, store, "*.sst") {
				truncateHalf(t, f)
			}
		},
		"manifest-truncated": func(t *testing.T, store string) {
			// Badger reads a MANIFEST cut in half as a torn last write
			// and opens without the tables the lost half listed; only the
			// backup shows what is missing.
			truncateHalf(t, filepath.Join(store, "MANIFEST"))
		},
		"manifest-overwritten": func(t *testing.T, store string) {
			overwriteTail(t, filepath.Join(store, "MANIFEST"), 8)
		},
	}
	for name, damage := range damages {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "state")
			const sessions = 12
			h, err := openOnBadger(context.Background(), config(t, dir, nil))
			if err != nil {
				t.Fatal(err)
			}
			for i := range sessions {
				s, err := h.StartSession(ctxFor(t, time.Minute), host.SessionRequest{ID: fmt.Sprint("d", i), Agent: "scripted", Workspace: t.TempDir()})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := s.Prompt(ctxFor(t, time.Minute), "count 3"); err != nil {
					t.Fatal(err)
				}
			}
			if err := h.Shutdown(context.Background()); err != nil { // flushes the memtable into tables
				t.Fatal(err)
			}
			noChildrenLeft(t)
			damage(t, filepath.Join(dir, "store"))
			injected(t, "%s in the store of %d stopped sessions", name, sessions)

			var answer string
			crashes := 0
			for run := 1; answer == ""; run++ {
				if run > 4 {
					t.Fatalf("no stable answer after %d opens (%d crashed)", run-1, crashes)
				}
				out, err := openInChild(t, dir)
				switch {
				case err != nil:
					crashes++
					t.Logf("open #%d died (%v): the crash guard counts it", run, err)
				case strings.HasPrefix(out, "recovered:"), strings.HasPrefix(out, "error:"), strings.HasPrefix(out, "opened:"):
					answer = out
				default:
					t.Fatalf("open #%d printed %q", run, out)
				}
			}
			if crashes > 2 {
				t.Fatalf("%d opens crashed; the guard allows 2", crashes)
			}
			switch {
			case strings.HasPrefix(answer, "recovered:"):
				if !strings.HasPrefix(answer, fmt.Sprintf("recovered: %d sessions", sessions)) || !strings.Contains(answer, "kept at") {
					t.Fatalf("recovery %q: want all %d sessions back and the damaged store kept", answer, sessions)
				}
			case strings.HasPrefix(answer, "error:"):
				if !strings.Contains(answer, "damaged") {
					t.Fatalf("refusal %q does not say the store is damaged", answer)
				}
			case strings.HasPrefix(answer, "opened:"):
				if answer != fmt.Sprintf("opened: %d sessions", sessions) {
					t.Fatalf("the damaged store opened as %q, want all %d sessions", answer, sessions)
				}
			}
			again, err := openInChild(t, dir)
			if err != nil {
				t.Fatalf("the open after the answer died: %v (a crash loop)", err)
			}
			if strings.HasPrefix(answer, "error:") && again != answer {
				t.Fatalf("the next open answered %q, the first %q", again, answer)
			}
			if strings.HasPrefix(answer, "recovered:") && again != fmt.Sprintf("opened: %d sessions", sessions) {
				// Another restore here would mean the recovered store is
				// taken for damaged again: a restore on every start.
				t.Fatalf("the open after the recovery answered %q, want the restored store to open as it is", again)
			}
			held(t, "%d crashed open(s), then %q; the next open: %q", crashes, answer, again)
		})
	}
}

func glob(t *testing.T, dir, pattern string) []string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, pattern))
	if len(files) == 0 {
		t.Fatalf("no %s in %s to damage", pattern, dir)
	}
	return files
}

func overwriteTail(t *testing.T, path string, n int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	n = min(n, fi.Size())
	garbage := []byte(strings.Repeat("\xde\xad\xbe\xef", int(n/4)+1))[:n]
	if _, err := f.WriteAt(garbage, fi.Size()-n); err != nil {
		t.Fatal(err)
	}
}

func truncateHalf(t *testing.T, path string) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, fi.Size()/2); err != nil {
		t.Fatal(err)
	}
}

// A store that has to be restored from its backup while plugins are alive
// (the host was detached, then its MANIFEST was damaged): the restored
// leases are readopted (their journals come back from the journal mirror,
// see TestStoreLossKeepsTheTranscript), and the plugins are not taken for
// protocol breakers when their outboxes resume past the updates the old
// host acknowledged.
func TestRestoredStoreReadoptsLivePlugins(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	cfg := config(t, dir, nil)
	h, err := openOnBadger(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	const sessions = 3
	for i := range sessions {
		s, err := h.StartSession(ctxFor(t, time.Minute), host.SessionRequest{ID: fmt.Sprint("live", i), Agent: "scripted", Workspace: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Prompt(ctxFor(t, time.Minute), "count 5"); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Close(context.Background()); err != nil { // detach: the plugins live on
		t.Fatal(err)
	}
	truncateHalf(t, filepath.Join(dir, "store", "MANIFEST"))
	injected(t, "the MANIFEST of a store whose %d plugins are alive (detached) is cut in half", sessions)

	r := &reports{}
	cfg.OnError = r.add
	h2 := openHost(t, cfg)
	st, err := h2.Status(context.Background())
	if err != nil || st.Recovery == nil || st.Decided[host.ActionReadopted] != sessions {
		t.Fatalf("after the damage: %+v (%v), want a restore and %d sessions readopted", st, err, sessions)
	}
	for i := range sessions {
		id := fmt.Sprint("live", i)
		s, ok := h2.Session(id)
		if !ok {
			t.Fatalf("session %s is not running", id)
		}
		res, err := s.Prompt(ctxFor(t, time.Minute), "count 5")
		if err != nil || res.StopReason != "end_turn" {
			t.Fatalf("session %s after the restore: %+v, %v", id, res, err)
		}
		seqs := pluginSeqs(t, journal(t, h2.Store(), id))
		if len(seqs) < 6 {
			t.Fatalf("session %s journaled %v after the restore, want at least the new turn", id, seqs)
		}
		checkOnceInOrder(t, seqs, seqs[0], seqs[0]+uint64(len(seqs))-1)
	}
	if rep := r.find(host.ErrProtocol); rep != nil {
		t.Fatalf("a readopted plugin was stopped: %v", rep)
	}
	held(t, "restored (%s); %d plugins readopted, each ran a new turn journaled once and in order", *st.Recovery, sessions)
}
