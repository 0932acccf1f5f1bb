package claude

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/agenthost/agenthost/plugins/internal/portable"
)

// This file is the session's provider state (sdk.StateExporter,
// sdk.StateImporter): what a host on another machine needs for
// --resume to continue the conversation.
//
// What claude 2.1.332 keeps of a session, as seen on disk (the doc's
// "Portable state" says what the live CLI did with it):
//
//	$CLAUDE_CONFIG_DIR/projects/<project>/<id>.jsonl     the transcript
//	$CLAUDE_CONFIG_DIR/projects/<project>/<id>/subagents/agent-<a>.jsonl, agent-<a>.meta.json
//	$CLAUDE_CONFIG_DIR/projects/<project>/<id>/tool-results/<r>.txt   large tool outputs
//
// <project> is the session's cwd with every character but letters and
// digits made '-'. The todos are in the transcript (TodoWrite calls);
// 2.1.332 writes no todos directory. file-history/<id> (checkpoints for
// rewinding files) is not exported: the workspace's files are not the
// plugin's to move, and a checkpoint of another machine's files would
// restore the wrong thing.

// stateAgent names the plugin in its exported states.
const stateAgent = "claude"

// maxExportBytes bounds the bytes ExportState reads of a conversation's
// files, before compression.
const maxExportBytes = 256 << 20

// stateConfigDir is the config directory the CLI uses: the one its
// environment names once a session is open, else the plugin's (an
// import comes before the session opens). It is absolute.
func (a *agent) stateConfigDir() (string, error) {
	a.mu.Lock()
	env := a.env
	a.mu.Unlock()
	dir := ""
	if env != nil {
		if v := lookupEnv(env, "CLAUDE_CONFIG_DIR"); v != "" {
			dir = v
		} else if home := lookupEnv(env, "HOME"); home != "" {
			dir = filepath.Join(home, ".claude")
		}
	}
	if dir == "" {
		dir = configDir()
	}
	if dir == "" {
		return "", errors.New("claude: no config directory: set CLAUDE_CONFIG_DIR or HOME")
	}
	return filepath.Abs(dir)
}

// lookupEnv finds key in a KEY=VALUE list, the last one winning.
func lookupEnv(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}

// checkStateHandle accepts only a canonical UUID, the form of a Claude
// session id, so a handle never adds a path element.
func checkStateHandle(handle string) error {
	id, err := uuid.Parse(handle)
	if err != nil || id.String() != handle {
		return fmt.Errorf("claude: %q is not a Claude session id (a lowercase UUID)", handle)
	}
	return nil
}

// findTranscript returns the project directory names under
// dir/projects holding <handle>.jsonl, the most recently written first.
func findTranscript(dir, handle string) []string {
	matches, _ := filepath.Glob(filepath.Join(dir, "projects", "*", handle+".jsonl"))
	type found struct {
		project string
		mod     time.Time
	}
	var fs []found
	for _, m := range matches {
		if st, err := os.Lstat(m); err == nil && st.Mode().IsRegular() {
			fs = append(fs, found{filepath.Base(filepath.Dir(m)), st.ModTime()})
		}
	}
	slices.SortStableFunc(fs, func(a, b found) int { return b.mod.Compare(a.mod) })
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.project
	}
	return out
}

// ExportState implements sdk.StateExporter: the transcript of session
// handle and its directory (sub-agents' transcripts, large tool
// outputs), paths relative to the config directory, with the config
// directory itself in the meta so an import can rewrite the paths that
// name it. A line the CLI has not finished writing is left out.
func (a *agent) ExportState(ctx context.Context, handle string) ([]byte, error) {
	if err := checkStateHandle(handle); err != nil {
		return nil, err
	}
	dir, err := a.stateConfigDir()
	if err != nil {
		return nil, err
	}
	projects := findTranscript(dir, handle)
	if len(projects) == 0 {
		return nil, fmt.Errorf("claude keeps no transcript of session %s under %s: a session has one once its first turn reached the CLI",
			handle, filepath.Join(dir, "projects"))
	}
	if len(projects) > 1 {
		a.log.Warn("claude has transcripts of the session in several project directories; exporting the newest",
			"session_id", handle, "projects", projects)
	}
	project := projects[0]
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("claude: export session %s: %w", handle, err)
	}
	defer root.Close()

	transcript := path.Join("projects", project, handle+".jsonl")
	a.mu.Lock()
	last := ""
	if a.handle == handle {
		last = a.lastLine
	}
	a.mu.Unlock()
	if err := awaitLine(ctx, root, transcript, last); err != nil {
		return nil, fmt.Errorf("claude: export session %s: %w", handle, err)
	}
	var files []portable.File
	budget := int64(maxExportBytes)
	add := func(name string) error {
		b, mode, err := portable.ReadFile(root, name, budget)
		if err != nil {
			return err
		}
		if strings.HasSuffix(name, ".jsonl") {
			b = portable.TrimTornTail(b)
		}
		budget -= int64(len(b))
		files = append(files, portable.File{Path: name, Mode: mode, Data: b})
		return nil
	}
	side := path.Join("projects", project, handle)
	err = fs.WalkDir(root.FS(), side, func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && name == side {
				return fs.SkipDir // a session without sub-agents or stored outputs
			}
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// Symbolic links and other non-regular files are not the CLI's
		// state; half-written imports of this plugin are not state.
		if !d.Type().IsRegular() || strings.Contains(d.Name(), ".agenthost-import-") {
			return nil
		}
		return add(name)
	})
	if err != nil {
		return nil, fmt.Errorf("claude: export session %s: %w", handle, err)
	}
	if err := add(transcript); err != nil {
		return nil, fmt.Errorf("claude: export session %s: %w", handle, err)
	}
	a.mu.Lock()
	version := a.version
	a.mu.Unlock()
	b, err := portable.Encode(portable.State{Agent: stateAgent, Handle: handle, Files: files,
		Meta: map[string]string{metaConfigDir: dir, metaProject: project, metaCLIVersion: version}})
	if err != nil {
		return nil, fmt.Errorf("claude: export session %s: %w", handle, err)
	}
	a.log.Debug("exported the session's provider state", "session_id", handle, "files", len(files), "bytes", len(b))
	return b, nil
}

// The meta keys of a claude state.
const (
	metaConfigDir  = "configDir"  // the exporting machine's config directory
	metaProject    = "project"    // its project directory name
	metaCLIVersion = "cliVersion" // the CLI version that wrote the files
)

// ImportState implements sdk.StateImporter: it puts the files of an
// exported session under this machine's config directory, before
// ResumeSession starts the CLI on it.
//
// Where: claude 2.1.332 finds a transcript for --resume in any project
// directory, whatever the cwd, and appends to it there (on one machine
// too, a session resumed from another cwd stays in its first project
// directory), so the files keep the exporting machine's project
// directory name, unless this machine already holds the session in
// another one, which is then replaced: one copy only. The CLI tells the
// model of a changed cwd itself ("Primary working directory: B (was
// A)"), so nothing of the workspace path is rewritten. What is
// rewritten is the path of the session's own directory under the config
// directory, which the CLI writes into the conversation for large tool
// outputs ("Full output saved to: <config>/projects/…/tool-results/…"),
// when this machine's config directory differs.
//
// It refuses a state that is not a claude state of this session, paths
// outside projects/<project>/<id>.jsonl and projects/<project>/<id>/,
// and a transcript at the target that is another conversation's. A
// transcript of this conversation that has turns the import lacks (this
// machine ran it after the export) is kept beside it as
// <id>.jsonl.displaced-<time>, never dropped.
func (a *agent) ImportState(ctx context.Context, handle string, state []byte) error {
	if err := checkStateHandle(handle); err != nil {
		return err
	}
	a.mu.Lock()
	opened := a.opened
	a.mu.Unlock()
	if opened {
		return errors.New("claude: a provider state is imported before its session opens, and this agent has one open")
	}
	s, err := portable.Decode(state, stateAgent, handle)
	if err != nil {
		return fmt.Errorf("claude: the provider state of session %s cannot be imported: %w", handle, err)
	}
	project, err := stateLayout(s, handle)
	if err != nil {
		return fmt.Errorf("claude: the provider state of session %s cannot be imported: %w", handle, err)
	}
	transcript := path.Join("projects", project, handle+".jsonl")
	var data []byte
	for _, f := range s.Files {
		if f.Path == transcript {
			data = f.Data
		}
	}
	if err := sameConversation(data, handle); err != nil {
		return fmt.Errorf("claude: the provider state of session %s cannot be imported: its transcript %w", handle, err)
	}

	dir, err := a.stateConfigDir()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("claude: import session %s: %w", handle, err)
	}
	target := project
	if local := findTranscript(dir, handle); len(local) > 0 && !slices.Contains(local, project) {
		target = local[0]
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("claude: import session %s: %w", handle, err)
	}
	defer root.Close()

	from := filepath.Join(s.Meta[metaConfigDir], "projects", project, handle) + string(filepath.Separator)
	to := filepath.Join(dir, "projects", target, handle) + string(filepath.Separator)
	rewrite := filepath.IsAbs(s.Meta[metaConfigDir]) && from != to
	oldPrefix, newPrefix := []byte(portable.JSONString(from)), []byte(portable.JSONString(to))

	local := func(f portable.File) (string, []byte) {
		name := path.Join("projects", target, strings.TrimPrefix(f.Path, path.Join("projects", project)+"/"))
		b := f.Data
		if rewrite && strings.HasSuffix(name, ".jsonl") {
			b = bytes.ReplaceAll(b, oldPrefix, newPrefix)
		}
		return name, b
	}
	// The target is checked before anything is written, so a refused
	// import leaves nothing behind.
	name, b := local(portable.File{Path: transcript, Data: data})
	writeTranscript, err := a.checkTarget(root, name, handle, b)
	if err != nil {
		return fmt.Errorf("claude: import session %s: %w", handle, err)
	}
	// The session's directory first, the transcript last: the CLI never
	// sees a transcript whose files are not there yet.
	slices.SortStableFunc(s.Files, func(x, y portable.File) int {
		return boolCmp(x.Path == transcript, y.Path == transcript)
	})
	for _, f := range s.Files {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if f.Path == transcript && !writeTranscript {
			continue
		}
		name, b := local(f)
		if err := portable.WriteFile(root, name, b, f.Mode); err != nil {
			return fmt.Errorf("claude: import session %s: %w", handle, err)
		}
	}
	a.log.Info("imported the session's provider state", "session_id", handle, "files", len(s.Files),
		"project", target, "exported_from", s.Meta[metaConfigDir], "exported_by", s.Meta[metaCLIVersion])
	return nil
}

func boolCmp(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// stateLayout checks that every file of s is the session's transcript,
// projects/<project>/<handle>.jsonl, or inside its directory,
// projects/<project>/<handle>/, all of one project, and returns the
// project directory name.
func stateLayout(s portable.State, handle string) (string, error) {
	project := ""
	transcripts := 0
	for _, f := range s.Files {
		parts := strings.Split(f.Path, "/")
		if len(parts) < 3 || parts[0] != "projects" {
			return "", fmt.Errorf("file %s is not inside projects/<project>/", f.Path)
		}
		if project == "" {
			project = parts[1]
		} else if parts[1] != project {
			return "", fmt.Errorf("files of two project directories (%s, %s)", project, parts[1])
		}
		switch {
		case len(parts) == 3 && parts[2] == handle+".jsonl":
			transcripts++
		case len(parts) > 3 && parts[2] == handle:
		default:
			return "", fmt.Errorf("file %s is neither the transcript of session %s nor in its directory", f.Path, handle)
		}
	}
	if transcripts != 1 {
		return "", fmt.Errorf("no transcript projects/<project>/%s.jsonl", handle)
	}
	return project, nil
}

// sameConversation checks that a transcript is session handle's: its
// lines that name a session name that one, and at least one does.
func sameConversation(b []byte, handle string) error {
	seen := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, len(b)+1)
	for sc.Scan() {
		var line struct {
			SessionID *string `json:"sessionId"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil || line.SessionID == nil {
			continue
		}
		if *line.SessionID != handle {
			return fmt.Errorf("belongs to session %s, not %s", *line.SessionID, handle)
		}
		seen = true
	}
	if !seen {
		return fmt.Errorf("names no session")
	}
	return nil
}

// checkTarget decides whether the imported transcript b may replace the
// file at name (portable.CheckTarget), and says so when this machine's
// diverging copy was kept aside.
func (a *agent) checkTarget(root *os.Root, name, handle string, b []byte) (write bool, err error) {
	t, err := portable.CheckTarget(root, name, b, maxExportBytes, "transcript", func(old []byte) error { return sameConversation(old, handle) })
	if t.Aside != "" {
		a.log.Warn("this machine's transcript of the session had turns the imported state lacks; kept it beside the import",
			"session_id", handle, "kept", t.Aside)
	}
	return t.Write, err
}

// noteLine records the uuid of a main-conversation line the CLI printed
// (a sub-agent's lines go to its own transcript).
func (a *agent) noteLine(m *message) {
	if m.UUID == "" || m.ParentToolUseID != "" {
		return
	}
	a.mu.Lock()
	a.lastLine = m.UUID
	a.mu.Unlock()
}

// flushWait bounds how long ExportState waits for the CLI to write the
// last line it printed to the transcript; flushPoll is how often it
// looks. claude 2.1.332 was seen to write it before it prints the
// turn's result, so the wait is there for a slower disk or a later CLI.
const (
	flushWait = 5 * time.Second
	flushPoll = 50 * time.Millisecond
)

// awaitLine waits until the transcript at name holds the line with uuid
// id (nothing to wait for when id is empty), within flushWait and ctx.
func awaitLine(ctx context.Context, root *os.Root, name, id string) error {
	if id == "" {
		return nil
	}
	needle := []byte(`"uuid":"` + id + `"`)
	deadline := time.Now().Add(flushWait)
	for {
		b, _, err := portable.ReadFile(root, name, maxExportBytes)
		if err == nil && bytes.Contains(portable.TrimTornTail(b), needle) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("claude has not written the last message it printed (uuid %s) to %s after %s", id, name, flushWait)
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
