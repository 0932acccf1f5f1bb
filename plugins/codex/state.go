package codex

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/agenthost/agenthost/plugins/internal/portable"
)

// This file is the session's provider state (sdk.StateExporter,
// sdk.StateImporter). What codex 0.171.0 needs to resume a thread is its
// rollout, $CODEX_HOME/sessions/YYYY/MM/DD/rollout-<local time>-<thread
// id>.jsonl (the directories are the thread's creation date): seen live,
// a CODEX_HOME holding that one file and nothing else of the thread
// (none of its sqlite state or history databases) resumes it, from
// another cwd too, and the model then receives the earlier turns. Codex
// tells the model of the new cwd and CODEX_HOME itself (a new
// environment_context and skills message), so the rollout is moved as
// it is, nothing rewritten.

// stateAgent names the plugin in its exported states.
const stateAgent = "codex"

// maxExportBytes bounds the bytes of a rollout ExportState reads.
const maxExportBytes = 256 << 20

// The meta keys of a codex state.
const (
	metaCodexHome  = "codexHome"  // the exporting machine's CODEX_HOME
	metaCLIVersion = "cliVersion" // the codex version that wrote it
)

// checkStateHandle accepts only a canonical UUID, the form of a codex
// thread id, so a handle never adds a path element.
func checkStateHandle(handle string) error {
	id, err := uuid.Parse(handle)
	if err != nil || id.String() != handle {
		return fmt.Errorf("codex: %q is not a codex thread id (a lowercase UUID)", handle)
	}
	return nil
}

// stateHome is the CODEX_HOME the CLI uses: its environment's once a
// session is open (the session's env options included), else the
// plugin's (an import comes before the session opens). It is absolute.
func (a *agent) stateHome() (string, error) {
	a.mu.Lock()
	env := append(slices.Clone(a.env), a.opts.env...)
	a.mu.Unlock()
	home := codexHome(env)
	if home == "" {
		return "", errors.New("codex: no CODEX_HOME: set CODEX_HOME or HOME")
	}
	return filepath.Abs(home)
}

// rolloutName matches a rollout's path relative to CODEX_HOME.
var rolloutName = regexp.MustCompile(`^sessions/[0-9]{4}/[0-9]{2}/[0-9]{2}/rollout-[0-9A-Za-z:._-]+-([0-9a-f-]{36})\.jsonl$`)

// findRollouts returns the paths, relative to home, of the rollouts of
// thread handle, the most recently written first.
func findRollouts(home, handle string) []string {
	matches, _ := filepath.Glob(filepath.Join(home, "sessions", "*", "*", "*", "rollout-*-"+handle+".jsonl"))
	type found struct {
		rel string
		mod time.Time
	}
	var out []found
	for _, m := range matches {
		rel, err := filepath.Rel(home, m)
		st, serr := os.Lstat(m)
		if err != nil || serr != nil || !st.Mode().IsRegular() || !rolloutName.MatchString(filepath.ToSlash(rel)) {
			continue
		}
		out = append(out, found{filepath.ToSlash(rel), st.ModTime()})
	}
	slices.SortStableFunc(out, func(a, b found) int { return b.mod.Compare(a.mod) })
	names := make([]string, len(out))
	for i, f := range out {
		names[i] = f.rel
	}
	return names
}

// ExportState implements sdk.StateExporter: the rollout of thread
// handle, its path relative to CODEX_HOME. A line codex has not finished
// writing is left out.
func (a *agent) ExportState(ctx context.Context, handle string) ([]byte, error) {
	if err := checkStateHandle(handle); err != nil {
		return nil, err
	}
	home, err := a.stateHome()
	if err != nil {
		return nil, err
	}
	found := findRollouts(home, handle)
	if len(found) == 0 {
		return nil, fmt.Errorf("codex keeps no rollout of thread %s under %s: codex saves a thread once its first turn starts",
			handle, filepath.Join(home, "sessions"))
	}
	if len(found) > 1 {
		a.log.Warn("codex has several rollouts of the thread; exporting the newest", "thread", handle, "rollouts", found)
	}
	root, err := os.OpenRoot(home)
	if err != nil {
		return nil, fmt.Errorf("codex: export thread %s: %w", handle, err)
	}
	defer root.Close()
	a.mu.Lock()
	turn := ""
	if a.endedThread == handle {
		turn = a.endedTurn
	}
	a.mu.Unlock()
	if err := awaitTurnEnd(ctx, root, found[0], turn); err != nil {
		return nil, fmt.Errorf("codex: export thread %s: %w", handle, err)
	}
	b, mode, err := portable.ReadFile(root, found[0], maxExportBytes)
	if err != nil {
		return nil, fmt.Errorf("codex: export thread %s: %w", handle, err)
	}
	a.mu.Lock()
	version := a.version
	a.mu.Unlock()
	out, err := portable.Encode(portable.State{Agent: stateAgent, Handle: handle,
		Files: []portable.File{{Path: found[0], Mode: mode, Data: portable.TrimTornTail(b)}},
		Meta:  map[string]string{metaCodexHome: home, metaCLIVersion: version}})
	if err != nil {
		return nil, fmt.Errorf("codex: export thread %s: %w", handle, err)
	}
	a.log.Debug("exported the thread's provider state", "thread", handle, "rollout", found[0], "bytes", len(out))
	return out, nil
}

// ImportState implements sdk.StateImporter: it puts the rollout of an
// exported thread under this machine's CODEX_HOME, at the path it had,
// before ResumeSession resumes the thread; if this machine already
// holds a rollout of the thread elsewhere (another creation date), the
// import replaces that one instead, so codex finds one copy.
//
// It refuses a state that is not a codex state of this thread, any file
// but one rollout of it, a rollout whose session_meta names another
// thread, and a file at the target that is another thread's. A rollout
// of this thread that has turns the import lacks (this machine ran it
// after the export) is kept beside it as <name>.displaced-<time>.
func (a *agent) ImportState(ctx context.Context, handle string, state []byte) error {
	if err := checkStateHandle(handle); err != nil {
		return err
	}
	a.mu.Lock()
	open := a.conn != nil
	a.mu.Unlock()
	if open {
		return errors.New("codex: a provider state is imported before its session opens, and this agent has one open")
	}
	s, err := portable.Decode(state, stateAgent, handle)
	if err != nil {
		return fmt.Errorf("codex: the provider state of thread %s cannot be imported: %w", handle, err)
	}
	if len(s.Files) != 1 {
		return fmt.Errorf("codex: the provider state of thread %s cannot be imported: %d files, want the one rollout", handle, len(s.Files))
	}
	f := s.Files[0]
	if m := rolloutName.FindStringSubmatch(f.Path); m == nil || m[1] != handle {
		return fmt.Errorf("codex: the provider state of thread %s cannot be imported: %s is not a rollout of the thread (sessions/YYYY/MM/DD/rollout-*-%s.jsonl)", handle, f.Path, handle)
	}
	if err := sameThread(f.Data, handle); err != nil {
		return fmt.Errorf("codex: the provider state of thread %s cannot be imported: its rollout %w", handle, err)
	}
	home, err := a.stateHome()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(home, 0o700); err != nil {
		return fmt.Errorf("codex: import thread %s: %w", handle, err)
	}
	target := f.Path
	if local := findRollouts(home, handle); len(local) > 0 && !slices.Contains(local, f.Path) {
		target = local[0]
	}
	root, err := os.OpenRoot(home)
	if err != nil {
		return fmt.Errorf("codex: import thread %s: %w", handle, err)
	}
	defer root.Close()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	write, err := a.checkTarget(root, target, handle, f.Data)
	if err != nil {
		return fmt.Errorf("codex: import thread %s: %w", handle, err)
	}
	if write {
		if err := portable.WriteFile(root, target, f.Data, f.Mode); err != nil {
			return fmt.Errorf("codex: import thread %s: %w", handle, err)
		}
	}
	a.log.Info("imported the thread's provider state", "thread", handle, "rollout", target, "written", write,
		"exported_from", s.Meta[metaCodexHome], "exported_by", s.Meta[metaCLIVersion])
	return nil
}

// sameThread checks that a rollout is thread handle's: its first line
// is the session_meta of that thread.
func sameThread(b []byte, handle string) error {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, len(b)+1)
	if !sc.Scan() {
		return errors.New("is empty")
	}
	var first struct {
		Type    string `json:"type"`
		Payload struct {
			ID string `json:"id"`
		} `json:"payload"`
	}
	if err := json.Unmarshal(sc.Bytes(), &first); err != nil || first.Type != "session_meta" {
		return errors.New("does not open with a session_meta line")
	}
	if first.Payload.ID != handle {
		return fmt.Errorf("belongs to thread %q, not %s", first.Payload.ID, handle)
	}
	return nil
}

// checkTarget decides whether the imported rollout b may replace the file
// at name (portable.CheckTarget), and says so when this machine's
// diverging copy was kept aside.
func (a *agent) checkTarget(root *os.Root, name, handle string, b []byte) (write bool, err error) {
	t, err := portable.CheckTarget(root, name, b, maxExportBytes, "rollout", func(old []byte) error { return sameThread(old, handle) })
	if t.Aside != "" {
		a.log.Warn("this machine's rollout of the thread had turns the imported state lacks; kept it beside the import",
			"thread", handle, "kept", t.Aside)
	}
	return t.Write, err
}

// noteTurnEnded records the turn codex reported completed.
func (a *agent) noteTurnEnded(threadID, turnID string) {
	a.mu.Lock()
	a.endedThread, a.endedTurn = threadID, turnID
	a.mu.Unlock()
}

// flushWait bounds how long ExportState waits for codex to record the
// end of the last turn it reported in the rollout; flushPoll is how often
// it looks.
const (
	flushWait = 5 * time.Second
	flushPoll = 50 * time.Millisecond
)

// turnEnds are the rollout events (event_msg payload types) that end a
// turn in codex 0.171.0.
var turnEnds = []string{"task_complete", "turn_aborted"}

// awaitTurnEnd waits until the rollout at name records the end of turn
// turnID (nothing to wait for when turnID is empty), within flushWait
// and ctx.
func awaitTurnEnd(ctx context.Context, root *os.Root, name, turnID string) error {
	if turnID == "" {
		return nil
	}
	deadline := time.Now().Add(flushWait)
	for {
		b, _, err := portable.ReadFile(root, name, maxExportBytes)
		if err == nil && recordsEnd(portable.TrimTornTail(b), turnID) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("codex has not recorded the end of turn %s in %s after %s", turnID, name, flushWait)
		}
		t := time.NewTimer(flushPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// recordsEnd reports whether a rollout has the event that ends turnID.
func recordsEnd(b []byte, turnID string) bool {
	needle := []byte(turnID)
	for line := range bytes.Lines(b) {
		if !bytes.Contains(line, needle) {
			continue
		}
		var l struct {
			Type    string `json:"type"`
			Payload struct {
				Type   string `json:"type"`
				TurnID string `json:"turn_id"`
			} `json:"payload"`
		}
		if json.Unmarshal(line, &l) == nil && l.Type == "event_msg" && l.Payload.TurnID == turnID && slices.Contains(turnEnds, l.Payload.Type) {
			return true
		}
	}
	return false
}
