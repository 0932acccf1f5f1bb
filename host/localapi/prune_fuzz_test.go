package localapi

import (
	"strings"
	"testing"
)

// pruneAge takes what a client sends as prune's olderThan: it never
// panics, accepts only durations not negative, and every refusal says
// what to write.
func FuzzPruneAge(f *testing.F) {
	for _, s := range []string{"", "72h", "30m", "0s", "1h30m", "7d", "-1h", "1e9h", "9223372036854775807ns", "h", " 1h", "1µs"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := pruneAge(s)
		if err != nil {
			if !strings.Contains(err.Error(), `"72h"`) {
				t.Errorf("pruneAge(%q): %v does not say what to write", s, err)
			}
			return
		}
		if d < 0 {
			t.Errorf("pruneAge(%q) = %s, negative", s, d)
		}
	})
}
