package codex

import "testing"

// Codex reports a command as the login shell it runs it in; the title is
// the command the model asked for.
func TestCommandTitle(t *testing.T) {
	for in, want := range map[string]string{
		`/bin/bash -lc 'printf made > made.txt && echo wrote-it'`: "printf made > made.txt && echo wrote-it",
		`/bin/bash -lc 'echo it'\''s'`:                            "echo it's",
		`/bin/bash -lc ls`:                                        "ls",
		`/bin/bash -lc 'unterminated`:                             "/bin/bash -lc 'unterminated",
		`/bin/bash -lc ''`:                                        "/bin/bash -lc ''",
		`git status`:                                              "git status",
		``:                                                        "run a command",
	} {
		if got := commandTitle(in); got != want {
			t.Errorf("commandTitle(%q) = %q, want %q", in, got, want)
		}
	}
}
