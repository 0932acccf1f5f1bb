// Package allowscope decides what an "allow always" answer may honestly
// cover, for the reference plugins' PermissionRequest.AlwaysScope.
//
// The host remembers an allow_always answer per scope, durably with the
// session, and answers every later request of that scope itself: the user
// never sees those requests. A scope is therefore a promise that every
// request sharing it is one the user would have approved on seeing the
// first. The hazard is a scope that names less than the request does: a
// first word ("cd" of `cd /repo && npm test`), a wrapper (sudo, env,
// bash -c) or a shell that runs whatever follows, an edit scope that
// covers files outside the directories the session works in.
//
// The rules, shared by both plugins:
//   - A command is covered only as its exact text (Command). It has no
//     scope (the plugin offers no allow_always) when it contains any of
//     ; & | < > $ ` ( ) or a line break, when a quote or escape does not
//     parse, when its first word assigns a variable (NAME=value) or may
//     expand (glob or brace characters), or when its program is a shell
//     or a wrapper that runs another program (IsWrapper). The exact text
//     is narrow: `git status` and `git status -s` are different scopes,
//     and the program is still named in it.
//   - A command wrapped in a shell's -c/-lc is unwrapped only when the
//     wrapper parses completely (Unwrap, UnwrapArgv); otherwise it has
//     no scope at all.
//   - A file edit is covered by a shared scope only when every path it
//     writes lies inside the workspace or an extra directory of the
//     session (Within), symbolic links resolved as far as they exist.
package allowscope

import (
	"os"
	"path/filepath"
	"strings"
)

// wrappers are the programs whose command line runs another program (or
// any text) the exact command does not show: shells, privilege and
// environment wrappers, runners of downloaded packages.
var wrappers = map[string]bool{
	"sh": true, "bash": true, "zsh": true, "dash": true, "fish": true, "ksh": true, "csh": true, "tcsh": true,
	"busybox": true, "pwsh": true,
	"env": true, "sudo": true, "doas": true, "su": true, "pkexec": true, "run0": true,
	"xargs": true, "nohup": true, "timeout": true, "nice": true, "ionice": true, "time": true, "setsid": true,
	"stdbuf": true, "chrt": true, "taskset": true,
	"npx": true, "pnpx": true, "bunx": true, "uvx": true,
	"exec": true, "command": true, "builtin": true, "eval": true, "source": true, ".": true,
}

// IsWrapper reports whether program (a path or a name) is a shell or a
// wrapper.
func IsWrapper(program string) bool {
	return wrappers[filepath.Base(program)]
}

// Command is the scope text of a shell command an allow-always may cover:
// the command itself, trimmed, or "" when no scope is honest (see the
// package doc).
func Command(cmd string) string {
	cmd = strings.TrimSpace(cmd)
	if cmd == "" || strings.ContainsAny(cmd, ";&|<>$`()\n\r") {
		return ""
	}
	words, firstExpands, ok := split(cmd)
	if !ok || len(words) == 0 || firstExpands {
		return ""
	}
	if strings.Contains(words[0], "=") || IsWrapper(words[0]) {
		return ""
	}
	return cmd
}

// Unwrap undoes a shell wrapper around a command line, as codex reports
// the command it runs (`/bin/bash -lc '<cmd>'`): it returns the inner
// command, or the command itself when it is not wrapped. ok is false when
// the line does not parse or is a shell invocation other than
// `<shell> -c|-lc <one word>`.
func Unwrap(line string) (string, bool) {
	words, _, ok := split(strings.TrimSpace(line))
	if !ok || len(words) == 0 {
		return "", false
	}
	if !IsWrapper(words[0]) {
		return line, true
	}
	return UnwrapArgv(words)
}

// UnwrapArgv is Unwrap of a command as an argument vector: a shell's
// `-c|-lc <cmd>` gives cmd; a vector of plain words (no blanks, quotes or
// shell characters, so joining them loses nothing) gives them joined by
// spaces; anything else fails.
func UnwrapArgv(argv []string) (string, bool) {
	if len(argv) == 0 {
		return "", false
	}
	if IsWrapper(argv[0]) {
		if len(argv) == 3 && (argv[1] == "-c" || argv[1] == "-lc") && isShell(argv[0]) {
			return argv[2], true
		}
		return "", false
	}
	for _, a := range argv {
		if a == "" || strings.ContainsAny(a, " \t\n\r'\"\\;&|<>$`(){}*?[]") {
			return "", false
		}
	}
	return strings.Join(argv, " "), true
}

func isShell(program string) bool {
	switch filepath.Base(program) {
	case "sh", "bash", "zsh", "dash", "ksh":
		return true
	}
	return false
}

// split splits a command into its words as a POSIX shell would, undoing
// quotes and backslashes. ok is false for anything it cannot split
// without running the shell: an unquoted ; & | < > ( ) $ ` or line break,
// a $ or ` inside double quotes, an unterminated quote or a trailing
// backslash. firstExpands reports an unquoted glob or brace character
// (* ? [ ] { } ~) in the first word, which the shell may expand into
// another program.
func split(s string) (words []string, firstExpands, ok bool) {
	var w strings.Builder
	inWord := false
	end := func() {
		if inWord {
			words = append(words, w.String())
			w.Reset()
			inWord = false
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			end()
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, false, false
			}
			w.WriteString(s[i+1 : i+1+j])
			i += 1 + j
			inWord = true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				switch s[i] {
				case '$', '`':
					return nil, false, false
				case '\\':
					if i+1 < len(s) && strings.IndexByte("\"\\", s[i+1]) >= 0 {
						i++
					} else if i+1 < len(s) && s[i+1] == '\n' {
						return nil, false, false
					}
				}
				w.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, false, false
			}
			inWord = true
		case c == '\\':
			if i+1 >= len(s) || s[i+1] == '\n' {
				return nil, false, false
			}
			i++
			w.WriteByte(s[i])
			inWord = true
		case strings.IndexByte(";&|<>()$`\n\r", c) >= 0:
			return nil, false, false
		default:
			if len(words) == 0 && strings.IndexByte("*?[]{}~", c) >= 0 {
				firstExpands = true
			}
			w.WriteByte(c)
			inWord = true
		}
	}
	end()
	return words, firstExpands, true
}

// Within reports whether path (relative to cwd when not absolute) lies
// inside one of roots, symbolic links resolved as far as the path exists,
// so a link in the workspace to ~/.bashrc is outside it.
func Within(path, cwd string, roots []string) bool {
	if path == "" {
		return false
	}
	if !filepath.IsAbs(path) {
		if cwd == "" {
			return false
		}
		path = filepath.Join(cwd, path)
	}
	p := resolve(path)
	for _, r := range roots {
		if r == "" || !filepath.IsAbs(r) {
			continue
		}
		rel, err := filepath.Rel(resolve(r), p)
		if err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return true
		}
	}
	return false
}

// resolve is path cleaned, with the symbolic links of its longest existing
// prefix resolved.
func resolve(path string) string {
	path = filepath.Clean(path)
	var rest []string
	for p := path; ; p = filepath.Dir(p) {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(append([]string{r}, rest...)...)
		} else if _, lerr := os.Lstat(p); lerr == nil {
			// It exists but does not resolve (a dangling link): it could
			// point anywhere once created.
			return string(filepath.Separator) + "\x00unresolvable"
		}
		if filepath.Dir(p) == p {
			return path
		}
		rest = append([]string{filepath.Base(p)}, rest...)
	}
}
