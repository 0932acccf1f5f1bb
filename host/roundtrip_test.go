package host

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The reference plugins through the host, against their fake CLIs: a Claude
// and a Codex session are created, prompted and cancelled by a host that is
// then SIGKILLed; the next host readopts both, and after they are stopped,
// each conversation resumes on its provider handle in a new plugin process.

const roundtripRoleEnv = "HOST_TEST_ROUNDTRIP"

var referencePlugins struct {
	once                            sync.Once
	err                             error
	claude, fakeClaude, codex, fake string
}

func buildReferencePlugins(t *testing.T) {
	t.Helper()
	rp := &referencePlugins
	rp.once.Do(func() {
		dir, err := os.MkdirTemp("", "ah-ref-")
		if err != nil {
			rp.err = err
			return
		}
		for dst, pkg := range map[*string]string{
			&rp.claude: "../plugins/claude/cmd/agenthost-plugin-claude", &rp.fakeClaude: "../plugins/claude/testdata/fakeclaude",
			&rp.codex: "../plugins/codex/cmd/agenthost-plugin-codex", &rp.fake: "../plugins/codex/testdata/fakecodex",
		} {
			*dst = filepath.Join(dir, filepath.Base(pkg))
			if out, err := exec.Command("go", "build", "-o", *dst, pkg).CombinedOutput(); err != nil {
				rp.err = fmt.Errorf("build %s: %v\n%s", pkg, err, out)
				return
			}
		}
	})
	if rp.err != nil {
		t.Fatal(rp.err)
	}
}

// referenceConfig configures both reference agents against the fakes, with
// their provider state under home.
func referenceConfig(dir, home string) Config {
	rp := &referencePlugins
	env := []string{"HOME=" + home, "CLAUDE_CONFIG_DIR=" + filepath.Join(home, ".claude"), "CODEX_HOME=" + filepath.Join(home, ".codex"),
		"AGENTHOST_CLAUDE_PATH=" + rp.fakeClaude, "AGENTHOST_CODEX_PATH=" + rp.fake}
	return Config{
		StateDir: dir,
		Agents: map[string]AgentPlugin{
			"claude": {Path: rp.claude, Env: env},
			"codex":  {Path: rp.codex, Env: env},
		},
		StartupTimeout: 30 * time.Second, StopTimeout: 5 * time.Second, ReattachTimeout: 10 * time.Second,
	}
}

// referenceOptions are the session options of the round trip: none; the
// fakes find logins in home (see writeLogins).
var referenceOptions map[string]string

// writeLogins leaves the files a logged-in claude and codex keep, so both
// plugins' credential checks and both fakes see a login.
func writeLogins(t *testing.T, home string) {
	t.Helper()
	for path, content := range map[string]string{
		filepath.Join(home, ".claude", ".credentials.json"): `{"claudeAiOauth":{"accessToken":"fake"}}`,
		filepath.Join(home, ".codex", "auth.json"):          `{"OPENAI_API_KEY":"fake"}`,
	} {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// roundtripRole is the first host, run in a child process so it can be
// SIGKILLed; -1 when this process is not that child.
func roundtripRole() int {
	if os.Getenv(roundtripRoleEnv) == "" {
		return -1
	}
	rp := &referencePlugins
	rp.claude, rp.fakeClaude = os.Getenv("RT_CLAUDE"), os.Getenv("RT_FAKECLAUDE")
	rp.codex, rp.fake = os.Getenv("RT_CODEX"), os.Getenv("RT_FAKECODEX")
	ctx := context.Background()
	dir, home := os.Getenv("RT_DIR"), os.Getenv("RT_HOME")
	h, err := openOnBadger(ctx, referenceConfig(dir, home))
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	var handles []string
	for _, agent := range []string{"claude", "codex"} {
		s, err := h.StartSession(ctx, SessionRequest{ID: "rt-" + agent, Agent: agent, Workspace: dir, Options: referenceOptions})
		if err != nil {
			fmt.Println("error:", err)
			return 1
		}
		if r, err := s.Prompt(ctx, "count 3"); err != nil || r.StopReason != "end_turn" {
			fmt.Printf("error: %s count turn: %+v %v\n", agent, r, err)
			return 1
		}
		done := make(chan TurnResult, 1)
		go func() { r, _ := s.Prompt(ctx, "sleep 30s"); done <- r }()
		time.Sleep(300 * time.Millisecond)
		if err := s.Cancel(ctx); err != nil {
			fmt.Println("error: cancel:", err)
			return 1
		}
		if r := <-done; r.StopReason != "cancelled" {
			fmt.Printf("error: %s cancelled turn ended %+v\n", agent, r)
			return 1
		}
		rec, _ := h.store.Get(ctx, s.ID())
		handles = append(handles, rec.Handle())
	}
	fmt.Println("handles", strings.Join(handles, " "))
	select {} // until killed
}

func TestReferencePluginsRoundTripThroughTheHost(t *testing.T) {
	t.Parallel()
	buildReferencePlugins(t)
	rp := &referencePlugins
	dir, home := stateDir(t), t.TempDir()
	writeLogins(t, home)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), roundtripRoleEnv+"=1", "RT_DIR="+dir, "RT_HOME="+home,
		"RT_CLAUDE="+rp.claude, "RT_FAKECLAUDE="+rp.fakeClaude, "RT_CODEX="+rp.codex, "RT_FAKECODEX="+rp.fake)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var handles []string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "error:") {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatal(line)
		}
		if rest, ok := strings.CutPrefix(line, "handles "); ok {
			handles = strings.Fields(rest)
			break
		}
	}
	if len(handles) != 2 || handles[0] == "" || handles[1] == "" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the first host reported handles %q", handles)
	}
	// Kill the host outright; its plugins (and their CLIs) live on.
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()

	ctx := testCtx(t)
	cfg := referenceConfig(dir, home)
	cfg.Logger = hostConfig(t, dir).Logger
	h := mustOpen(t, cfg)
	t.Cleanup(func() { _ = h.Shutdown(context.Background()) })
	for i, agent := range []string{"claude", "codex"} {
		id := "rt-" + agent
		if d := h.Decisions()[id]; d.Action != ActionReadopted {
			t.Fatalf("%s: decision %+v after the host was killed, want readopted", agent, d)
		}
		s, _ := h.Session(id)
		if r, err := s.Prompt(ctx, "count 2"); err != nil || r.StopReason != "end_turn" {
			t.Fatalf("%s: prompt after readoption: %+v, %v", agent, r, err)
		}
		// Stop, then resume the conversation in a new plugin process.
		if err := s.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		s2, err := h.StartSession(ctx, SessionRequest{ID: id, Agent: agent, Options: referenceOptions})
		if err != nil {
			t.Fatalf("%s: resume: %v", agent, err)
		}
		if s2.Handle() != handles[i] {
			t.Errorf("%s: resumed on handle %q, the conversation was %q", agent, s2.Handle(), handles[i])
		}
		if r, err := s2.Prompt(ctx, "count 1"); err != nil || r.StopReason != "end_turn" {
			t.Fatalf("%s: prompt after resuming: %+v, %v", agent, r, err)
		}
	}
}
