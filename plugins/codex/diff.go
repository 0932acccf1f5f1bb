package codex

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/agenthost/agenthost/plugin/sdk"
)

// A fileChange item carries each file's change as codex 0.171.0 reports
// it: an added file's whole text, a deleted file's whole old text, and an
// updated file's unified-diff hunks without file headers
// ("@@ -1,2 +1,2 @@\n line1\n-line2\n+LINE2\n"). A client shows a diff as
// the file's whole old and new text, so the plugin reads the file on disk
// and applies the hunks: before codex applies them (item/started, the
// approval) the disk has the old text, after (item/completed) the new,
// and the hunks are applied in reverse.

// fileDiffs are the diffs and locations of a fileChange's files. applied
// says whether codex has written them already.
func fileDiffs(changes []fileChange, applied bool) ([]sdk.ToolCallContent, []sdk.Location) {
	var content []sdk.ToolCallContent
	var locs []sdk.Location
	for _, ch := range changes {
		var kind struct {
			Type     string  `json:"type"`
			MovePath *string `json:"move_path"`
		}
		_ = json.Unmarshal(ch.Kind, &kind)
		switch kind.Type {
		case "add":
			content = append(content, sdk.DiffContent(ch.Path, nil, ch.Diff))
			locs = append(locs, sdk.Location{Path: ch.Path, Line: 1})
		case "delete":
			old := ch.Diff
			content = append(content, sdk.DiffContent(ch.Path, &old, ""))
			locs = append(locs, sdk.Location{Path: ch.Path})
		default:
			path := ch.Path
			if kind.MovePath != nil && *kind.MovePath != "" {
				path = *kind.MovePath
			}
			read := ch.Path
			if applied {
				read = path
			}
			oldText, newText, line := updateTexts(read, ch.Diff, applied)
			content = append(content, sdk.DiffContent(path, &oldText, newText))
			locs = append(locs, sdk.Location{Path: path, Line: line})
		}
	}
	return content, locs
}

// updateTexts are an updated file's old and new text, from the file at
// path and the hunks (reversed when the file has them applied already),
// and the first changed line. When the file and the hunks disagree (it
// changed meanwhile, or cannot be read), the texts are the hunks' own
// lines: less of the file, but the change itself.
func updateTexts(path, diff string, applied bool) (oldText, newText string, line int) {
	hunks, err := parseHunks(diff)
	if err != nil || len(hunks) == 0 {
		return "", diff, 0
	}
	line = hunks[0].newStart
	b, err := os.ReadFile(path)
	if err == nil {
		out, aerr := applyHunks(string(b), hunks, applied)
		if aerr == nil {
			if applied {
				return out, string(b), line
			}
			return string(b), out, line
		}
	}
	var o, n strings.Builder
	for _, h := range hunks {
		for _, l := range h.lines {
			switch l.op {
			case ' ':
				o.WriteString(l.text)
				n.WriteString(l.text)
			case '-':
				o.WriteString(l.text)
			case '+':
				n.WriteString(l.text)
			}
		}
	}
	return o.String(), n.String(), line
}

type hunkLine struct {
	op   byte   // ' ', '-' or '+'
	text string // with its newline, unless the file ends without one
}

type hunk struct {
	oldStart, newStart int
	lines              []hunkLine
}

// parseHunks reads unified-diff hunks; lines before the first hunk
// (file headers) are skipped. Hunks must be in order, without overlap, and
// each new start must be where its old start lands after the hunks
// before it: applied to a file they could otherwise not be undone (the
// diff shown after codex writes is the hunks reversed, placed by their
// new starts).
func parseHunks(diff string) ([]hunk, error) {
	hs, err := readHunks(diff)
	if err != nil {
		return nil, err
	}
	delta, end := 0, 0
	for _, h := range hs {
		oldAt, newAt := h.start(h.oldStart, '-'), h.start(h.newStart, '+')
		if oldAt < end || newAt != oldAt+delta {
			return nil, fmt.Errorf("hunk @@ -%d +%d @@ is out of order or its starts disagree", h.oldStart, h.newStart)
		}
		end = oldAt + h.countSide('-')
		delta += h.countSide('+') - h.countSide('-')
	}
	return hs, nil
}

// start is the index of the first line the hunk covers on one side, from
// that side's header start: a side with no lines starts after line from,
// any other at it. It is negative for a start of 0 on a side with lines.
func (h hunk) start(from int, op byte) int {
	if h.countSide(op) == 0 {
		return from
	}
	return from - 1
}

// readHunks splits the diff into hunks.
func readHunks(diff string) ([]hunk, error) {
	var hs []hunk
	lines := strings.SplitAfter(diff, "\n")
	for _, raw := range lines {
		if raw == "" {
			continue
		}
		if strings.HasPrefix(raw, "@@") {
			h, err := parseHunkHeader(raw)
			if err != nil {
				return nil, err
			}
			hs = append(hs, h)
			continue
		}
		if len(hs) == 0 {
			continue
		}
		cur := &hs[len(hs)-1]
		if strings.HasPrefix(raw, `\`) {
			// "\ No newline at end of file": the line before has none.
			if n := len(cur.lines); n > 0 {
				cur.lines[n-1].text = strings.TrimSuffix(cur.lines[n-1].text, "\n")
			}
			continue
		}
		switch raw[0] {
		case ' ', '-', '+':
			cur.lines = append(cur.lines, hunkLine{op: raw[0], text: raw[1:]})
		default:
			return nil, fmt.Errorf("unexpected diff line %q", raw)
		}
	}
	return hs, nil
}

// parseHunkHeader reads "@@ -a[,b] +c[,d] @@".
func parseHunkHeader(s string) (hunk, error) {
	f := strings.Fields(s)
	if len(f) < 3 || !strings.HasPrefix(f[1], "-") || !strings.HasPrefix(f[2], "+") {
		return hunk{}, fmt.Errorf("bad hunk header %q", s)
	}
	start := func(r string) (int, error) {
		n, _, _ := strings.Cut(r[1:], ",")
		return strconv.Atoi(n)
	}
	a, err := start(f[1])
	if err != nil {
		return hunk{}, fmt.Errorf("bad hunk header %q", s)
	}
	c, err := start(f[2])
	if err != nil {
		return hunk{}, fmt.Errorf("bad hunk header %q", s)
	}
	return hunk{oldStart: a, newStart: c}, nil
}

var errDiffMismatch = errors.New("the file does not match the diff")

// applyHunks applies hunks to text, or undoes them (reverse).
func applyHunks(text string, hunks []hunk, reverse bool) (string, error) {
	src := strings.SplitAfter(text, "\n")
	if n := len(src); n > 0 && src[n-1] == "" {
		src = src[:n-1]
	}
	var out []string
	pos := 0 // next line of src to copy
	for _, h := range hunks {
		from, keep, add := h.oldStart, byte('-'), byte('+')
		if reverse {
			from, keep, add = h.newStart, '+', '-'
		}
		at := h.start(from, keep)
		if at < pos || at > len(src) {
			return "", errDiffMismatch
		}
		out = append(out, src[pos:at]...)
		pos = at
		for _, l := range h.lines {
			switch l.op {
			case ' ', keep:
				// Exactly, newline included: a line the diff says ends
				// the file without one matches only such a line.
				if pos >= len(src) || src[pos] != l.text {
					return "", errDiffMismatch
				}
				if l.op == ' ' {
					out = append(out, src[pos])
				}
				pos++
			case add:
				out = append(out, l.text)
			}
		}
	}
	out = append(out, src[pos:]...)
	for _, l := range out[:max(len(out)-1, 0)] {
		if !strings.HasSuffix(l, "\n") {
			// A line without its newline ("\ No newline at end of
			// file") that does not end the file.
			return "", errDiffMismatch
		}
	}
	return strings.Join(out, ""), nil
}

// countSide counts the hunk's lines on one side (op '-' or '+'), context
// included.
func (h hunk) countSide(op byte) int {
	n := 0
	for _, l := range h.lines {
		if l.op == ' ' || l.op == op {
			n++
		}
	}
	return n
}
