// Package readmetest keeps the README's transcripts true: its test starts
// a real agenthost serve with the scripted agent, sends every request the
// README shows, and compares the real answers with the README's.
//
// What differs from run to run is normalised on both sides before the
// comparison: session ids (UUIDs) and turn ids become placeholders numbered
// by first appearance (<id-1>, <turn-1>, …), the workspace path and the
// state directory become <workspace> and <state>, and the pid of the
// ready line is ignored. Everything else, sequence numbers included,
// must match. The lines of one exchange may arrive in another order than
// the README shows only where the protocol does not order them (the answer
// to session/set_mode and the updates it causes), so a session/set_mode
// exchange whose lines match in another order passes, and says so in the
// log; any other exchange must come in the README's order. After the last
// exchange a status request is sent: a line the host sends before its
// answer is one the README does not show, and fails the test.
//
// The initialize answer is cut as the README says (the scripted agent
// shown, claude's and codex's capabilities and auth methods elided); the
// cut part is checked for its shape: exactly the agents the note names,
// each with the keys the scripted agent's entry has, and top-level auth
// methods that are those agents' own.
//
// To regenerate the captured session after a deliberate change:
//
//	go test ./internal/readmetest -run TestReadmeTranscripts -update
package readmetest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/internal/buildtest"
	"github.com/agenthost/agenthost/internal/serveproc"
	"github.com/agenthost/agenthost/internal/serveproc/serveproctest"
)

var update = flag.Bool("update", false, "rewrite the README's captured session with the real output")

var agenthostBin string

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(buildtest.Main(m, map[*string]string{&agenthostBin: "github.com/agenthost/agenthost/cmd/agenthost"}))
}

const (
	capturedHeading = "### A session, captured"
	regenerate      = "go test ./internal/readmetest -run TestReadmeTranscripts -update"
	// lineTimeout bounds the wait for one line the README says comes:
	// only a failing test waits this long.
	lineTimeout = 30 * time.Second
)

// TestReadmeTranscriptsAreTheRealOutput replays the README's captured
// session against a real host and compares, line by line, the ready line,
// the captured exchange, the initialize answer (cut to the scripted agent
// as the README cuts it) and the agenthost status output.
func TestReadmeTranscriptsAreTheRealOutput(t *testing.T) {
	t.Parallel()
	root, err := serveproc.ModuleRoot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	readmePath := filepath.Join(root, "README.md")
	b, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	section := sectionOf(t, readme, capturedHeading)
	blocks := fenced(section)
	if len(blocks) < 2 {
		t.Fatalf("README.md %q: expected the exchange and the initialize answer in two fenced blocks, found %d", capturedHeading, len(blocks))
	}
	exchange := transcriptLines(blocks[0])

	dir, err := os.MkdirTemp("/tmp", "ahtr-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	workspace := filepath.Join(dir, "project")
	if err := os.Mkdir(workspace, 0o755); err != nil {
		t.Fatal(err)
	}
	s := serveproctest.Start(t, agenthostBin, dir)

	// The README's side and the real side each get their own placeholders.
	doc := newNormaliser(readmeWorkspace(t, exchange), "")
	real := newNormaliser(workspace, dir)

	checkReadyLine(t, readme, s.Ready, dir)

	conn, err := net.Dial("unix", s.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReaderSize(conn, 1<<20)
	readLine := func() string {
		_ = conn.SetReadDeadline(time.Now().Add(lineTimeout))
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the host's next line: %v (the README expects more lines here; %s regenerates it)", err, regenerate)
		}
		return strings.TrimSuffix(line, "\n")
	}

	var got []string // the real exchange, as the README would show it
	var initAnswer string
	failed := false
	for i := 0; i < len(exchange); {
		req := exchange[i]
		if !strings.HasPrefix(req, "→ ") {
			t.Fatalf("README.md %q: line %q is an answer with no request before it", capturedHeading, req)
		}
		sent := real.denormalise(t, doc.normalise(req[len("→ "):]))
		if _, err := fmt.Fprintf(conn, "%s\n", sent); err != nil {
			t.Fatal(err)
		}
		got = append(got, "→ "+sent)
		i++
		if strings.Contains(req, `"method":"initialize"`) {
			// Shown after the exchange, cut to the scripted agent.
			initAnswer = readLine()
		}
		var want, have []string
		for ; i < len(exchange) && strings.HasPrefix(exchange[i], "← "); i++ {
			want = append(want, doc.normalise(exchange[i][len("← "):]))
			line := readLine()
			got = append(got, "← "+line)
			have = append(have, real.normalise(line))
		}
		switch {
		case slices.Equal(want, have):
		case strings.Contains(req, `"method":"session/set_mode"`) && sameLines(want, have):
			t.Logf("after %s the lines came in another order than the README shows (allowed there):\n%s", req, strings.Join(have, "\n"))
		default:
			failed = true
			t.Errorf("after README.md's\n%s\nthe host answered:\n%s\nexpected (normalised):\n%s", req, strings.Join(have, "\n"), strings.Join(want, "\n"))
		}
	}
	// Nothing more: a line the host sends before the answer to one last
	// request is one the README does not show.
	if _, err := fmt.Fprintf(conn, "%s\n", `{"jsonrpc":"2.0","id":"readmetest-last","method":"_agenthost/status"}`); err != nil {
		t.Fatal(err)
	}
	for {
		line := readLine()
		if strings.Contains(line, `"id":"readmetest-last"`) {
			break
		}
		failed = true
		got = append(got, "← "+line)
		t.Errorf("after README.md's last exchange the host sent a line the README does not show:\n%s", real.normalise(line))
	}
	if failed {
		t.Errorf("README.md's captured session is not what the host answers: fix the host or regenerate the README with\n\t%s", regenerate)
		if *update {
			rewriteExchange(t, readmePath, readme, blocks[0], got, doc, real)
		}
	}
	checkInitialize(t, blocks[1], initAnswer)
	checkStatus(t, readme, dir, doc, real)
}

// checkReadyLine compares serve's ready line with the README's, but for
// the pid and the state directory.
func checkReadyLine(t *testing.T, readme, ready, dir string) {
	t.Helper()
	m := regexp.MustCompile(`(?m)^\s*(\{"ready":true.*\})\s*$`).FindStringSubmatch(readme)
	if m == nil {
		t.Error(`README.md shows no ready line ({"ready":true,…})`)
		return
	}
	var doc, real map[string]any
	if err := json.Unmarshal([]byte(m[1]), &doc); err != nil {
		t.Fatalf("README.md's ready line: %v", err)
	}
	if err := json.Unmarshal([]byte(ready), &real); err != nil {
		t.Fatalf("serve's ready line %q: %v", ready, err)
	}
	docDir, _ := doc["stateDir"].(string)
	for _, m := range []map[string]any{doc, real} {
		m["pid"] = "<pid>"
	}
	real["stateDir"] = docDir
	real["socket"] = strings.Replace(real["socket"].(string), dir, docDir, 1)
	if a, b := canonical(doc), canonical(real); a != b {
		t.Errorf("README.md's ready line\n%s\nis not serve's (normalised)\n%s", a, b)
	}
}

// checkInitialize compares the README's initialize answer with the real
// one cut as the README says: the scripted agent only, and a note for
// the rest.
func checkInitialize(t *testing.T, block, answer string) {
	t.Helper()
	var doc, real map[string]any
	if err := json.Unmarshal([]byte(block), &doc); err != nil {
		t.Fatalf("README.md's initialize answer is not JSON: %v", err)
	}
	if err := json.Unmarshal([]byte(answer), &real); err != nil {
		t.Fatalf("the initialize answer %q: %v", answer, err)
	}
	res, _ := real["result"].(map[string]any)
	meta, _ := res["_meta"].(map[string]any)
	ah, _ := meta["agenthost"].(map[string]any)
	agents, _ := ah["agents"].(map[string]any)
	if agents == nil || agents["scripted"] == nil {
		t.Fatalf("the initialize answer has no _meta.agenthost.agents.scripted: %s", answer)
	}
	checkCut(t, doc, agents, res["authMethods"])
	ah["agents"] = map[string]any{"scripted": agents["scripted"], "…": "claude and codex likewise"}
	res["authMethods"] = []any{"… claude's and codex's"}
	if a, b := canonical(doc), canonical(real); a != b {
		t.Errorf("README.md's initialize answer is not the host's, cut to the scripted agent; the host's:\n%s", indent(real))
	}
}

// checkCut checks the part of the initialize answer the README elides
// for its shape: the agents besides scripted are the ones its note names
// ("claude and codex likewise"), each with the keys scripted's entry has;
// the top-level auth methods each have an id and a name, belong to one
// of those agents, and are exactly the ids the agents list.
func checkCut(t *testing.T, doc map[string]any, agents map[string]any, authMethods any) {
	t.Helper()
	note, _ := dig(doc, "result", "_meta", "agenthost", "agents", "…").(string)
	m := regexp.MustCompile(`^(\w+) and (\w+) likewise$`).FindStringSubmatch(note)
	if m == nil {
		t.Errorf("README.md's initialize answer: the note of the agents cut is %q, want \"NAME and NAME likewise\"", note)
		return
	}
	cut := m[1:]
	var names []string
	for n := range agents {
		names = append(names, n)
	}
	slices.Sort(names)
	if want := append([]string{"scripted"}, cut...); !sameLines(names, want) {
		t.Errorf("the initialize answer's agents are %q; README.md shows scripted and says %q", names, note)
	}
	keys := func(v any) []string {
		o, _ := v.(map[string]any)
		var k []string
		for n := range o {
			k = append(k, n)
		}
		slices.Sort(k)
		return k
	}
	ids := map[string]bool{}
	for _, n := range cut {
		if a, b := keys(agents[n]), keys(agents["scripted"]); !slices.Equal(a, b) {
			t.Errorf("the initialize answer's agent %s has keys %q, scripted's %q: not \"likewise\"", n, a, b)
		}
		list, _ := dig(agents, n, "authMethods").([]any)
		for _, id := range list {
			s, _ := id.(string)
			ids[s] = true
		}
	}
	list, ok := authMethods.([]any)
	if !ok || len(list) == 0 {
		t.Errorf("the initialize answer's authMethods: %v, want claude's and codex's as README.md says", authMethods)
		return
	}
	for _, e := range list {
		id, _ := dig(e, "id").(string)
		name, _ := dig(e, "name").(string)
		agent, _ := dig(e, "_meta", "agenthost", "agent").(string)
		if id == "" || name == "" || !slices.Contains(cut, agent) || !ids[id] {
			t.Errorf("the initialize answer's auth method %s: want an id and a name, of one of %q, listed in its agent's authMethods", canonical(e), cut)
		}
		delete(ids, id)
	}
	for id := range ids {
		t.Errorf("the initialize answer's agents list auth method %q, absent from its top-level authMethods", id)
	}
}

// dig returns v's member at path, or nil.
func dig(v any, path ...string) any {
	for _, k := range path {
		o, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = o[k]
	}
	return v
}

// checkStatus compares the README's `agenthost status` with the real
// output for a host running two sessions, as the README's shows.
func checkStatus(t *testing.T, readme, dir string, doc, real *normaliser) {
	t.Helper()
	m := regexp.MustCompile("(?s)\\$ agenthost status\n(host .*?)\n\n").FindStringSubmatch(readme)
	if m == nil {
		t.Error("README.md shows no `$ agenthost status` output")
		return
	}
	// The README's terminal session runs a second session first.
	if out, err := exec.Command(agenthostBin, "--state-dir", dir, "run", "--agent", "scripted", "tool").CombinedOutput(); err != nil {
		t.Fatalf("agenthost run --agent scripted tool: %v\n%s", err, out)
	}
	out, err := exec.Command(agenthostBin, "--state-dir", dir, "status").Output()
	if err != nil {
		t.Fatalf("agenthost status: %v", err)
	}
	pid := regexp.MustCompile(`pid \d+`)
	docDir := regexp.MustCompile(`(?m)^state dir\s+(\S+)$`).FindStringSubmatch(m[1])
	want := m[1]
	if docDir != nil {
		want = strings.ReplaceAll(want, docDir[1], "<state>")
	}
	// The disk use differs from run to run too (the store's files grow
	// as it writes): its figure is normalised, its unit and words not.
	disk := regexp.MustCompile(`(?m)^(disk use\s+)\d+(\.\d)? `)
	want = disk.ReplaceAllString(pid.ReplaceAllString(newNormaliser("", "").normalise(want), "pid <pid>"), "${1}<n> ")
	have := disk.ReplaceAllString(pid.ReplaceAllString(newNormaliser("", dir).normalise(strings.TrimRight(string(out), "\n")), "pid <pid>"), "${1}<n> ")
	if want != have {
		t.Errorf("README.md's agenthost status\n%s\nis not the real output (normalised)\n%s", want, have)
	}
}

// normaliser replaces what differs from run to run with placeholders,
// remembering which real value each stands for.
type normaliser struct {
	workspace, state string
	ids              map[string]string // value → placeholder
	values           map[string]string // placeholder → value
	n                map[string]int    // kind → last number
}

var (
	uuidRE = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	turnRE = regexp.MustCompile(`turn-[A-Z2-7]{16}`)
	holeRE = regexp.MustCompile(`<(id|turn)-\d+>|<workspace>|<state>`)
)

func newNormaliser(workspace, state string) *normaliser {
	return &normaliser{workspace: workspace, state: state, ids: map[string]string{}, values: map[string]string{}, n: map[string]int{}}
}

func (z *normaliser) placeholder(kind, v string) string {
	if p, ok := z.ids[v]; ok {
		return p
	}
	z.n[kind]++
	p := fmt.Sprintf("<%s-%d>", kind, z.n[kind])
	z.ids[v], z.values[p] = p, v
	return p
}

func (z *normaliser) normalise(s string) string {
	if z.workspace != "" {
		s = strings.ReplaceAll(s, z.workspace, "<workspace>")
	}
	if z.state != "" {
		s = strings.ReplaceAll(s, z.state, "<state>")
	}
	s = uuidRE.ReplaceAllStringFunc(s, func(v string) string { return z.placeholder("id", v) })
	return turnRE.ReplaceAllStringFunc(s, func(v string) string { return z.placeholder("turn", v) })
}

// denormalise puts this side's values back in place of placeholders.
func (z *normaliser) denormalise(t *testing.T, s string) string {
	t.Helper()
	return holeRE.ReplaceAllStringFunc(s, func(p string) string {
		switch p {
		case "<workspace>":
			return z.workspace
		case "<state>":
			return z.state
		}
		v, ok := z.values[p]
		if !ok {
			t.Fatalf("README.md sends %s before the host named it", p)
		}
		return v
	})
}

// sectionOf returns the README's section under heading, to the next
// heading of the same level or above.
func sectionOf(t *testing.T, readme, heading string) string {
	t.Helper()
	i := strings.Index(readme, heading+"\n")
	if i < 0 {
		t.Fatalf("README.md has no section %q", heading)
	}
	s := readme[i+len(heading):]
	if j := strings.Index(s, "\n### "); j >= 0 {
		s = s[:j]
	}
	if j := strings.Index(s, "\n## "); j >= 0 {
		s = s[:j]
	}
	return s
}

// fenced returns the contents of the fenced code blocks of s.
func fenced(s string) []string {
	var blocks []string
	for {
		i := strings.Index(s, "```")
		if i < 0 {
			return blocks
		}
		s = s[i+3:]
		nl := strings.IndexByte(s, '\n')
		if nl < 0 {
			return blocks
		}
		s = s[nl+1:]
		j := strings.Index(s, "```")
		if j < 0 {
			return blocks
		}
		blocks = append(blocks, s[:j])
		s = s[j+3:]
	}
}

func transcriptLines(block string) []string {
	var lines []string
	for _, l := range strings.Split(block, "\n") {
		if strings.HasPrefix(l, "→ ") || strings.HasPrefix(l, "← ") {
			lines = append(lines, l)
		}
	}
	return lines
}

// readmeWorkspace is the cwd of the README's first session/new.
func readmeWorkspace(t *testing.T, exchange []string) string {
	t.Helper()
	for _, l := range exchange {
		if m := regexp.MustCompile(`"method":"session/new","params":\{"cwd":"([^"]+)"`).FindStringSubmatch(l); m != nil {
			return m[1]
		}
	}
	t.Fatal("README.md's captured session opens no session (session/new with a cwd)")
	return ""
}

func sameLines(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// canonical is v as JSON with sorted keys.
func canonical(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func indent(v any) string {
	b, _ := json.MarshalIndent(v, "", " ")
	return string(b)
}

// rewriteExchange writes the real exchange into README.md in place of
// the old one, keeping the README's own ids and paths where the host's
// stand for the same thing.
func rewriteExchange(t *testing.T, path, readme, old string, got []string, doc, real *normaliser) {
	t.Helper()
	var b bytes.Buffer
	for _, l := range got {
		fmt.Fprintln(&b, docValues(t, real.normalise(l), doc, real))
	}
	if !strings.Contains(readme, old) {
		t.Fatal("README.md changed under the test")
	}
	if err := os.WriteFile(path, []byte(strings.Replace(readme, old, b.String(), 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("rewrote README.md's captured session: read the diff before committing it")
}

// docValues fills placeholders with the README's values where it has
// them, else with the real ones.
func docValues(t *testing.T, s string, doc, real *normaliser) string {
	return holeRE.ReplaceAllStringFunc(s, func(p string) string {
		if p == "<workspace>" {
			return doc.workspace
		}
		if v, ok := doc.values[p]; ok {
			return v
		}
		return real.denormalise(t, p)
	})
}
