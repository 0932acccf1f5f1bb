package cliproc

import (
	"regexp"
	"strings"
	"sync"
)

// Bounds of a Tail.
const (
	// TailLines is how many lines a Tail keeps.
	TailLines = 20
	// TailLineMax is how many bytes of a line a Tail keeps.
	TailLineMax = 1000
)

// Tail keeps the last lines a child wrote to its stderr, tidied for an
// error message: colour escapes removed, blanks trimmed, empty lines
// dropped, each line clipped to TailLineMax bytes. Its zero value is ready;
// it is safe for concurrent use.
type Tail struct {
	mu    sync.Mutex
	lines []string
}

// Add keeps line (tidied) as the newest, dropping the oldest beyond
// TailLines.
func (t *Tail) Add(line string) {
	if s := tidy(line); s != "" {
		t.add(s)
	}
}

func (t *Tail) add(s string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, s)
	if over := len(t.lines) - TailLines; over > 0 {
		t.lines = append(t.lines[:0], t.lines[over:]...)
	}
}

// Last returns the last n lines kept, oldest first.
func (t *Tail) Last(n int) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := t.lines
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return append([]string(nil), lines...)
}

// ansi matches the colour and cursor escapes CLIs write to a terminal and
// often to a pipe too.
var ansi = regexp.MustCompile(`\x1b\[[0-9;?]*[A-Za-z]`)

// tidy is a stderr line as a Tail keeps it.
func tidy(line string) string {
	return Clip(strings.TrimSpace(ansi.ReplaceAllString(line, "")), TailLineMax)
}
