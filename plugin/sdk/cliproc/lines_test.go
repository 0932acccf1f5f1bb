package cliproc

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// readAll reads every line of in, capped at max, in a reader whose buffer
// is smaller than the lines; over-long lines are "TOO LONG n".
func readAll(t *testing.T, in string, max int) []string {
	t.Helper()
	l := NewLineReader(strings.NewReader(in), max)
	var got []string
	for {
		line, err := l.ReadLine()
		var long *LineTooLongError
		switch {
		case errors.As(err, &long):
			if !errors.Is(err, ErrLineTooLong) || long.Max != max ||
				!strings.Contains(err.Error(), "over the cap of "+strconv.Itoa(max)) {
				t.Errorf("too long: %v", err)
			}
			got = append(got, "TOO LONG "+strings.Repeat("#", long.Len/100))
			continue
		case errors.Is(err, io.EOF):
			return got
		case err != nil:
			t.Fatal(err)
		}
		got = append(got, string(line))
	}
}

func TestReadLine(t *testing.T) {
	long := strings.Repeat("x", 300)
	in := "short\n" + long + "\n" + "after\n" + strings.Repeat("y", 100) + "\n\nlast-no-newline"
	got := readAll(t, in, 100)
	want := []string{"short", "TOO LONG ###", "after", strings.Repeat("y", 100), "", "last-no-newline"}
	if !slices.Equal(got, want) {
		t.Errorf("lines = %q, want %q", got, want)
	}
	// A line of exactly the cap passes; one byte more does not, and the
	// reader stays in step.
	cap100 := strings.Repeat("x", 100)
	got = readAll(t, "short\n"+cap100+"\n"+cap100+"y\nafter\nlast", 100)
	if want := []string{"short", cap100, "TOO LONG #", "after", "last"}; !slices.Equal(got, want) {
		t.Errorf("lines = %q, want %q", got, want)
	}
	// An over-long last line without a newline.
	if got := readAll(t, "a\n"+long, 100); !slices.Equal(got, []string{"a", "TOO LONG ###"}) {
		t.Errorf("lines = %q", got)
	}
	if got := readAll(t, "", 100); len(got) != 0 {
		t.Errorf("an empty stream: %q", got)
	}
}

// A line far over the cap is read through in buffer-sized fragments: the
// reader never holds more than the cap.
func TestReadLineMemory(t *testing.T) {
	const huge = 64 << 20
	r := io.MultiReader(strings.NewReader("ok\n"), io.LimitReader(repeat('z'), huge), strings.NewReader("\nnext\n"))
	l := NewLineReader(r, 1024)
	var got []string
	for {
		line, err := l.ReadLine()
		var long *LineTooLongError
		if errors.As(err, &long) {
			got = append(got, "TOO LONG")
			if long.Len != huge {
				t.Errorf("Len = %d, want %d", long.Len, huge)
			}
			continue
		}
		if err != nil {
			break
		}
		got = append(got, string(line))
	}
	if !slices.Equal(got, []string{"ok", "TOO LONG", "next"}) {
		t.Errorf("lines %q", got)
	}
	if cap(l.buf) > 1024+64<<10 {
		t.Errorf("the reader grew to %d bytes for a cap of 1024", cap(l.buf))
	}
}

type repeat byte

func (b repeat) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(b)
	}
	return len(p), nil
}

// FuzzReadLine: any stream splits into the lines bytes.Lines finds, each
// either returned whole or reported over the cap with its length.
func FuzzReadLine(f *testing.F) {
	f.Add([]byte("a\nbb\n\nccc"), 2)
	f.Add([]byte(strings.Repeat("x", 200)+"\n"), 100)
	f.Fuzz(func(t *testing.T, in []byte, max int) {
		if max < 1 || max > 1<<16 {
			return
		}
		l := NewLineReader(bytes.NewReader(in), max)
		for want := range bytes.Lines(in) {
			want = bytes.TrimSuffix(want, []byte("\n"))
			got, err := l.ReadLine()
			var long *LineTooLongError
			switch {
			case len(want) > max:
				if !errors.As(err, &long) || long.Len != len(want) {
					t.Fatalf("line of %d, cap %d: %q, %v", len(want), max, got, err)
				}
			case err != nil || !bytes.Equal(got, want):
				t.Fatalf("line %q: %q, %v", want, got, err)
			}
		}
		if _, err := l.ReadLine(); !errors.Is(err, io.EOF) {
			t.Fatalf("at the end: %v", err)
		}
	})
}

func TestClip(t *testing.T) {
	for _, tt := range []struct {
		in   string
		n    int
		want string
	}{{"hello", 10, "hello"}, {"hello", 5, "hello"}, {"hello", 3, "hel…"}, {"héllo", 2, "h…"}, {"é", 0, "…"}} {
		if got := Clip(tt.in, tt.n); got != tt.want {
			t.Errorf("Clip(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
		}
	}
}

func TestTail(t *testing.T) {
	var tl Tail
	if got := tl.Last(5); len(got) != 0 {
		t.Errorf("empty tail: %q", got)
	}
	for i := range 25 {
		tl.Add(strings.Repeat(" ", i%2) + "\x1b[2mline\x1b[0m " + string(rune('a'+i)))
		tl.Add("")
	}
	got := tl.Last(3)
	if !slices.Equal(got, []string{"line w", "line x", "line y"}) {
		t.Errorf("Last(3) = %q", got)
	}
	if n := len(tl.Last(100)); n != TailLines {
		t.Errorf("kept %d lines", n)
	}
}

func TestJSONObject(t *testing.T) {
	for in, want := range map[string]string{
		" {\"a\":1}\r": `{"a":1}`, "{broken": "{broken",
		"": "", "  ": "", "[SandboxDebug] x": "", "null": "", `["a"]`: "",
	} {
		got, err := JSONObject([]byte(in))
		if want == "" {
			if !errors.Is(err, ErrNotJSONObject) {
				t.Errorf("JSONObject(%q) = %q, %v; want ErrNotJSONObject", in, got, err)
			}
		} else if err != nil || string(got) != want {
			t.Errorf("JSONObject(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}
