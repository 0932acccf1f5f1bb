package cli

import (
	"strings"
	"testing"

	"github.com/agenthost/agenthost/api"
)

// prune says "nothing to prune" only when it found nothing: a session it
// failed to remove was found, and the failure is the answer. Its words name
// every state it prunes.
func TestPruneSaysNothingToPruneOnlyWhenItFoundNothing(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		res     api.PruneResult
		out     string
		failure string
	}{
		{"nothing", api.PruneResult{}, "no stopped, idle or failed session is older than 72h\n", ""},
		{"failed only", api.PruneResult{Failed: map[string]string{"s1": "disk full"}}, "", "1 session(s) not removed:\n  s1: disk full"},
		{"removed and failed", api.PruneResult{Removed: []string{"s2"}, Failed: map[string]string{"s1": "disk full"}}, "removed session s2\n", "s1: disk full"},
		{"dry run", api.PruneResult{Removed: []string{"s2"}, DryRun: true}, "would remove session s2\n", ""},
	} {
		var out strings.Builder
		err := printPruned(&out, c.res, "72h")
		if out.String() != c.out {
			t.Errorf("%s: printed %q, want %q", c.name, out.String(), c.out)
		}
		switch {
		case c.failure == "" && err != nil:
			t.Errorf("%s: %v, want no error", c.name, err)
		case c.failure != "" && (err == nil || !strings.Contains(err.Error(), c.failure)):
			t.Errorf("%s: error %v, want one saying %q", c.name, err, c.failure)
		}
	}
}
