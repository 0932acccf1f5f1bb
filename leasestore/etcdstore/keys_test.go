package etcdstore

import (
	"strings"
	"testing"
)

// FuzzSessionIDKeys: every id escapes to a key segment without '/' that
// decodes back to it, and decoding any segment never panics.
func FuzzSessionIDKeys(f *testing.F) {
	for _, s := range []string{"s", "a/b", "\x00", "x/\x00é", "\x00\x01", "\x00\x02/", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		enc := encodeID(id)
		if strings.Contains(enc, "/") {
			t.Fatalf("encodeID(%q) = %q holds a '/'", id, enc)
		}
		back, err := decodeID(enc)
		if err != nil || back != id {
			t.Fatalf("decodeID(encodeID(%q)) = %q, %v", id, back, err)
		}
		if dec, err := decodeID(id); err == nil && encodeID(dec) != id {
			t.Fatalf("decodeID(%q) = %q, which encodes to %q", id, dec, encodeID(dec))
		}
	})
}
