package wire

import (
	"slices"
	"testing"
)

// The versions a plugin's environment restricts it to: none set is every
// version, and anything but versions this build speaks is refused.
func TestParseProtocolVersions(t *testing.T) {
	for in, want := range map[string][]int{"": nil, " ": nil, "1": {1}, "2, 1": {2, 1}} {
		if got, err := ParseProtocolVersions(in); err != nil || !slices.Equal(got, want) {
			t.Errorf("ParseProtocolVersions(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"0", "3", "x", "1,", "-1"} {
		if got, err := ParseProtocolVersions(in); err == nil {
			t.Errorf("ParseProtocolVersions(%q) = %v, want an error", in, got)
		}
	}
}

// Whatever the variable holds, the versions accepted are ones this build
// serves (PluginSets then restricts to them), and never an empty set.
func FuzzParseProtocolVersions(f *testing.F) {
	for _, s := range []string{"", "1", "1,2", " 2 ", "3", "1,,2", "٢"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		vs, err := ParseProtocolVersions(s)
		if err != nil {
			return
		}
		sets := PluginSets(nil, vs...)
		for _, v := range vs {
			if _, ok := sets[v]; !ok {
				t.Fatalf("%q: accepted version %d, which PluginSets does not serve", s, v)
			}
		}
		if len(sets) == 0 {
			t.Fatalf("%q: no plugin set left", s)
		}
	})
}
