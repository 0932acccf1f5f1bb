package portable

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/internal/wire"
)

const handle = "7ae65b20-5758-4ff8-86b5-04a056ec858f"

func sample() State {
	return State{Agent: "claude", Handle: handle, Meta: map[string]string{"configDir": "/home/a/.claude"},
		Files: []File{
			{Path: "projects/-home-a-work/" + handle + ".jsonl", Mode: 0o600, Data: []byte(`{"type":"user"}` + "\n")},
			{Path: "projects/-home-a-work/" + handle + "/subagents/agent-1.jsonl", Mode: 0o644, Data: bytes.Repeat([]byte("x"), 100000)},
			{Path: "projects/-home-a-work/" + handle + "/empty", Mode: 0o600, Data: []byte{}},
		}}
}

func TestRoundTrip(t *testing.T) {
	s := sample()
	b, err := Encode(s)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 10000 {
		t.Errorf("the state is %d bytes: its files were not compressed", len(b))
	}
	var head struct {
		Format  string `json:"format"`
		Version int    `json:"version"`
	}
	if err := json.Unmarshal(b, &head); err != nil || head.Format != Format || head.Version != Version {
		t.Errorf("the envelope does not describe itself: %+v %v", head, err)
	}
	got, err := Decode(b, "claude", handle)
	if err != nil {
		t.Fatal(err)
	}
	if got.Agent != s.Agent || got.Handle != s.Handle || got.Meta["configDir"] != "/home/a/.claude" || len(got.Files) != len(s.Files) {
		t.Fatalf("decoded %+v", got)
	}
	for i, f := range got.Files {
		if f.Path != s.Files[i].Path || f.Mode != s.Files[i].Mode || !bytes.Equal(f.Data, s.Files[i].Data) {
			t.Errorf("file %d: %s %#o %d bytes, want %s %#o %d bytes", i, f.Path, f.Mode, len(f.Data), s.Files[i].Path, s.Files[i].Mode, len(s.Files[i].Data))
		}
	}
	if _, err := Decode(b, "codex", handle); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `"claude"'s, not "codex"'s`) {
		t.Errorf("another agent's state: %v", err)
	}
	if _, err := Decode(b, "claude", "11111111-2222-4333-8444-555555555555"); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "not \"11111111") {
		t.Errorf("another conversation's state: %v", err)
	}
}

// raw encodes an envelope by hand, without Encode's checks.
func raw(t testing.TB, mutate func(*envelope)) []byte {
	t.Helper()
	data := []byte("line\n")
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(data)
	zw.Close()
	sum := sha256.Sum256(data)
	env := envelope{Format: Format, Version: Version, Agent: "claude", Handle: handle,
		Files: []fileEnvelope{{Path: "projects/p/" + handle + ".jsonl", Mode: 0o600, Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:]), Gzip: z.Bytes()}}}
	if mutate != nil {
		mutate(&env)
	}
	b, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodeRefuses(t *testing.T) {
	if _, err := Decode(raw(t, nil), "claude", handle); err != nil {
		t.Fatalf("the valid envelope: %v", err)
	}
	bomb := func() []byte {
		var z bytes.Buffer
		zw := gzip.NewWriter(&z)
		zw.Write(bytes.Repeat([]byte{0}, 10<<20))
		zw.Close()
		return z.Bytes()
	}()
	for _, tt := range []struct {
		name   string
		mutate func(*envelope)
		want   string
	}{
		{"traversal", func(e *envelope) { e.Files[0].Path = "../../etc/passwd" }, "leads out"},
		{"traversal clean", func(e *envelope) { e.Files[0].Path = "../x" }, "leads out"},
		{"dotdot", func(e *envelope) { e.Files[0].Path = ".." }, "leads out"},
		{"absolute", func(e *envelope) { e.Files[0].Path = "/etc/passwd" }, "absolute"},
		{"unclean", func(e *envelope) { e.Files[0].Path = "projects/./x" }, "not clean"},
		{"inner dotdot", func(e *envelope) { e.Files[0].Path = "projects/../../x" }, "not clean"},
		{"backslash", func(e *envelope) { e.Files[0].Path = `projects\..\x` }, "backslash"},
		{"nul", func(e *envelope) { e.Files[0].Path = "projects/x\x00" }, "NUL"},
		{"empty path", func(e *envelope) { e.Files[0].Path = "" }, "empty"},
		{"dot", func(e *envelope) { e.Files[0].Path = "." }, "directory itself"},
		{"long path", func(e *envelope) { e.Files[0].Path = strings.Repeat("a/", 600) + "x" }, "over the limit"},
		{"duplicate", func(e *envelope) { e.Files = append(e.Files, e.Files[0]) }, "twice"},
		{"file and dir", func(e *envelope) {
			f := e.Files[0]
			f.Path += "/x"
			e.Files = append(e.Files, f)
		}, "is a file and the directory"},
		{"no files", func(e *envelope) { e.Files = nil }, "no files"},
		{"setuid", func(e *envelope) { e.Files[0].Mode = 0o4755 }, "permission bits"},
		{"format", func(e *envelope) { e.Format = "tarball" }, "format"},
		{"version", func(e *envelope) { e.Version = 2 }, "version 2"},
		{"digest", func(e *envelope) { e.Files[0].SHA256 = strings.Repeat("0", 64) }, "SHA-256"},
		{"short", func(e *envelope) { e.Files[0].Size = 100 }, "declared 100"},
		{"long", func(e *envelope) { e.Files[0].Size = 2 }, "declared 2"},
		{"negative", func(e *envelope) { e.Files[0].Size = -1 }, "size -1"},
		{"huge size", func(e *envelope) { e.Files[0].Size = 2 << 30 }, "exceeds"},
		{"bomb", func(e *envelope) { e.Files[0].Gzip, e.Files[0].Size = bomb, 1000 }, "declared 1000"},
		{"not gzip", func(e *envelope) { e.Files[0].Gzip = []byte("plain") }, "not gzip"},
		{"too many", func(e *envelope) {
			for i := range MaxFiles {
				f := e.Files[0]
				f.Path = "f/" + strings.Repeat("a", i%7) + string(rune('a'+i%26)) + hex.EncodeToString([]byte{byte(i), byte(i >> 8)})
				e.Files = append(e.Files, f)
			}
		}, "files, over the limit"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode(raw(t, tt.mutate), "claude", handle)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Decode: %v, want ErrInvalid saying %q", err, tt.want)
			}
		})
	}
	for _, b := range [][]byte{nil, []byte("{}"), []byte("not json"), append(raw(t, nil), []byte(" {}")...), []byte(`{"format":"` + Format + `","unknown":1}`)} {
		if _, err := Decode(b, "claude", handle); !errors.Is(err, ErrInvalid) {
			t.Errorf("Decode(%.40q): %v", b, err)
		}
	}
	big := make([]byte, MaxStateBytes+1)
	if _, err := Decode(big, "claude", handle); !errors.Is(err, ErrInvalid) || !errors.Is(err, ErrTooLarge) {
		t.Errorf("an oversized state: %v", err)
	}
}

func TestEncodeRefuses(t *testing.T) {
	s := sample()
	s.Files[0].Path = "../escape"
	if _, err := Encode(s); !errors.Is(err, ErrInvalid) {
		t.Errorf("Encode of a traversal: %v", err)
	}
	if _, err := Encode(State{Agent: "claude", Handle: handle}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Encode of no files: %v", err)
	}
}

func TestWriteFileConfined(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if err := WriteFile(root, "a/b/c.jsonl", []byte("one\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(root, "a/b/c.jsonl", []byte("two\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a/b/c.jsonl")); string(b) != "two\n" {
		t.Errorf("after two writes: %q", b)
	}
	if err := WriteFile(root, "link/x", []byte("escaped"), 0o600); err == nil {
		t.Errorf("a write through a symbolic link out of the root succeeded")
	}
	if err := WriteFile(root, "../x", []byte("escaped"), 0o600); err == nil {
		t.Errorf("a write to ../x succeeded")
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("files were written outside the root: %v", ents)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "a/b")); len(ents) != 1 {
		t.Errorf("temporary files were left: %v", ents)
	}
	if _, _, err := ReadFile(root, "link", 1<<20); err == nil {
		t.Errorf("ReadFile followed a symbolic link")
	}
	if _, _, err := ReadFile(root, "a/b/c.jsonl", 2); !errors.Is(err, ErrTooLarge) {
		t.Errorf("ReadFile over its limit: %v", err)
	}
}

func TestTrimTornTail(t *testing.T) {
	for in, want := range map[string]string{"": "", "a\n": "a\n", "a\nb": "a\n", "ab": "", "a\nb\n": "a\nb\n"} {
		if got := string(TrimTornTail([]byte(in))); got != want {
			t.Errorf("TrimTornTail(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestJSONString(t *testing.T) {
	if got := JSONString(`/home/a b/"q"/<x>&`); got != `/home/a b/\"q\"/<x>&` {
		t.Errorf("JSONString: %s", got)
	}
}

// FuzzDecode: whatever the input, Decode does not panic, and what it
// accepts has only local, clean paths and encodes back to an equal state.
func FuzzDecode(f *testing.F) {
	good, err := Encode(sample())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(raw(f, nil))
	f.Add(raw(f, func(e *envelope) { e.Files[0].Path = "../x" }))
	f.Add([]byte(`{"format":"agenthost-provider-state","version":1,"agent":"claude","handle":"` + handle + `","files":[{"path":"a","mode":384,"size":0,"sha256":"","gzip":""}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Decode(b, "claude", handle)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Decode error without ErrInvalid: %v", err)
			}
			return
		}
		for _, f := range s.Files {
			if !filepath.IsLocal(f.Path) || strings.Contains(f.Path, `\`) || filepath.Clean(f.Path) != f.Path {
				t.Fatalf("Decode accepted path %q", f.Path)
			}
		}
		again, err := Encode(s)
		if err != nil {
			t.Fatalf("Encode of a decoded state: %v", err)
		}
		s2, err := Decode(again, "claude", handle)
		if err != nil || len(s2.Files) != len(s.Files) {
			t.Fatalf("round trip: %v", err)
		}
		for i := range s.Files {
			if s2.Files[i].Path != s.Files[i].Path || !bytes.Equal(s2.Files[i].Data, s.Files[i].Data) || s2.Files[i].Mode != s.Files[i].Mode {
				t.Fatalf("round trip changed file %d", i)
			}
		}
	})
}

// The plugins cannot import the wire package's bound; the SDK refuses a
// larger export, so the two must agree.
func TestLimitMatchesTheWire(t *testing.T) {
	if MaxStateBytes != wire.MaxProviderStateSize {
		t.Errorf("MaxStateBytes = %d, the SDK's wire.MaxProviderStateSize = %d", MaxStateBytes, wire.MaxProviderStateSize)
	}
}
