package journal

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/leasestore"
)

// FuzzDecodePayload feeds the decoder what a journal or an API client may
// hand it: it never panics, and whatever it accepts encodes again to bytes
// that decode to the same encoding, so a record read back is written back
// unchanged.
func FuzzDecodePayload(f *testing.F) {
	golden, err := filepath.Glob(filepath.Join("testdata", "golden", "*.json"))
	if err != nil {
		f.Fatal(err)
	}
	for _, path := range golden {
		b, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		kind, _, _ := strings.Cut(filepath.Base(path), "-")
		f.Add(kind, b)
	}
	f.Add(string(leasestore.KindLifecycle), []byte(`{"event":"released","fence":2,"claim":"released"}`))
	f.Add(string(leasestore.KindHandle), []byte(`{"event":"handle-changed","handle":"h"}`))
	f.Fuzz(func(t *testing.T, kind string, payload []byte) {
		r, err := DecodePayload(leasestore.EntryKind(kind), payload)
		if err != nil {
			return
		}
		e, err := Encode(r)
		if err != nil {
			return // a record decoded from JSON it cannot write (an update without its update) is refused, not written
		}
		r2, err := DecodePayload(e.Kind, e.Payload)
		if err != nil {
			t.Fatalf("re-decode %s %s: %v", e.Kind, e.Payload, err)
		}
		e2, err := Encode(r2)
		if err != nil || !bytes.Equal(e.Payload, e2.Payload) {
			t.Fatalf("not stable: %s\nthen %s (%v)", e.Payload, e2.Payload, err)
		}
	})
}
