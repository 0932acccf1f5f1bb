package cliproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Override is an executable the user named (a session option, an
// environment variable). From names where it was set, for messages.
type Override struct {
	Path, From string
}

// Lookup says where a CLI's executable may be. Name is required; the zero
// value of every other field works.
type Lookup struct {
	// Name is the executable's name on PATH ("claude").
	Name string
	// Overrides are the paths the user set, most binding first. The first
	// non-empty one is the answer: if it is not a usable executable, Find
	// fails rather than look elsewhere, since the user asked for it. A
	// bare name is looked up on PATH.
	Overrides []Override
	// PATH is the search path. Default: the plugin's $PATH.
	PATH string
	// Home is the directory relative Fallbacks are in. Default: the
	// plugin's home directory; without one they are skipped.
	Home string
	// Fallbacks are the usual install locations, tried in order after
	// PATH; relative ones are relative to Home.
	Fallbacks []string
}

// Errors of Find, in an *UnusableError's Err.
var (
	// ErrNotOnPATH: an override's bare name is not on PATH.
	ErrNotOnPATH = errors.New("not on PATH")
	// ErrIsDirectory: an override names a directory.
	ErrIsDirectory = errors.New("is a directory")
	// ErrNotExecutable: an override names a file without execute
	// permission.
	ErrNotExecutable = errors.New("is not executable")
)

// UnusableError is an override that is not a usable executable. Err is
// ErrNotOnPATH, ErrIsDirectory, ErrNotExecutable, or os.Stat's error
// (errors.Is(err, fs.ErrNotExist) for a missing file).
type UnusableError struct {
	Path, From string // the path (absolute when it could be made so) and where it was set
	Err        error
}

func (e *UnusableError) Error() string {
	return fmt.Sprintf("%s (from %s): %v", e.Path, e.From, e.Err)
}

func (e *UnusableError) Unwrap() error { return e.Err }

// NotFoundError says that no override was set and the executable is
// neither on PATH nor in a fallback location.
type NotFoundError struct {
	Name   string
	PATH   string   // the search path
	Looked []string // the fallback locations tried, in order
}

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("%s not found on PATH (%s) nor in %s", e.Name, e.PATH, strings.Join(e.Looked, ", "))
}

// Find returns the absolute path of the executable: the first override
// set, else Name on PATH, else the first fallback that is an executable
// file. The errors are *UnusableError and *NotFoundError.
func (l Lookup) Find() (string, error) {
	pathVar := l.PATH
	if pathVar == "" {
		pathVar = os.Getenv("PATH")
	}
	for _, o := range l.Overrides {
		if o.Path != "" {
			return override(o, pathVar)
		}
	}
	if p, ok := onPath(l.Name, pathVar); ok {
		return p, nil
	}
	home := l.Home
	if home == "" {
		home, _ = os.UserHomeDir()
	}
	var looked []string
	for _, p := range l.Fallbacks {
		if !filepath.IsAbs(p) {
			if home == "" {
				continue
			}
			p = filepath.Join(home, p)
		}
		looked = append(looked, p)
		if CheckExecutable(p) == nil {
			return p, nil
		}
	}
	return "", &NotFoundError{Name: l.Name, PATH: pathVar, Looked: looked}
}

func override(o Override, pathVar string) (string, error) {
	p := o.Path
	if !strings.ContainsRune(p, filepath.Separator) {
		found, ok := onPath(p, pathVar)
		if !ok {
			return "", &UnusableError{Path: p, From: o.From, Err: ErrNotOnPATH}
		}
		p = found
	}
	if abs, err := filepath.Abs(p); err == nil {
		p = abs
	}
	if err := CheckExecutable(p); err != nil {
		return "", &UnusableError{Path: p, From: o.From, Err: err}
	}
	return p, nil
}

// onPath looks name up in the directories of pathVar.
func onPath(name, pathVar string) (string, bool) {
	for _, dir := range filepath.SplitList(pathVar) {
		if dir == "" {
			continue
		}
		p, err := filepath.Abs(filepath.Join(dir, name))
		if err == nil && CheckExecutable(p) == nil {
			return p, true
		}
	}
	return "", false
}

// CheckExecutable returns nil when p is an executable file, else
// ErrIsDirectory, ErrNotExecutable or os.Stat's error.
func CheckExecutable(p string) error {
	st, err := os.Stat(p)
	switch {
	case err != nil:
		return err
	case st.IsDir():
		return ErrIsDirectory
	case st.Mode()&0o111 == 0:
		return ErrNotExecutable
	}
	return nil
}

// Version is a CLI's MAJOR.MINOR.PATCH release number.
type Version struct {
	Major, Minor, Patch int
}

func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// Compare returns -1, 0 or 1 as v is older than, the same as, or newer
// than w.
func (v Version) Compare(w Version) int {
	for _, d := range [3]int{v.Major - w.Major, v.Minor - w.Minor, v.Patch - w.Patch} {
		switch {
		case d < 0:
			return -1
		case d > 0:
			return 1
		}
	}
	return 0
}

// Less reports whether v is older than w.
func (v Version) Less(w Version) bool { return v.Compare(w) < 0 }

// ParseVersion reads a version from what `cli --version` printed:
// [v]MAJOR.MINOR.PATCH right after prefix and blanks when prefix is set
// ("codex-cli 0.171.0"), anywhere in out; with no prefix, at the start of
// out after blanks ("2.1.332 (Claude Code)"). What follows the number is
// ignored.
func ParseVersion(out, prefix string) (Version, bool) {
	re := `^\s*`
	if prefix != "" {
		re = regexp.QuoteMeta(prefix) + `\s+`
	}
	m := regexp.MustCompile(re + `v?([0-9]+)\.([0-9]+)\.([0-9]+)`).FindStringSubmatch(out)
	if m == nil {
		return Version{}, false
	}
	var n [3]int
	for i := range n {
		var err error
		if n[i], err = strconv.Atoi(m[i+1]); err != nil {
			return Version{}, false
		}
	}
	return Version{n[0], n[1], n[2]}, true
}

// VersionQuery says how to ask a CLI its version. The zero value runs
// `path --version` in the plugin's environment and expects the version at
// the start of the output.
type VersionQuery struct {
	// Args are the arguments. Default: --version.
	Args []string
	// Env is the environment; nil means the plugin's.
	Env []string
	// Prefix is what the CLI prints before the number (see ParseVersion).
	Prefix string
	// Timeout bounds the run, within ctx. Default: DefaultVersionTimeout.
	Timeout time.Duration
}

// DefaultVersionTimeout is VersionQuery.Timeout when it is zero: a cold,
// large binary on a slow disk takes seconds to print its version.
const DefaultVersionTimeout = 15 * time.Second

// ErrNoVersion is a VersionError's Err when the CLI ran but printed no
// version ParseVersion reads.
var ErrNoVersion = errors.New("no version in its output")

// VersionError is a failed QueryVersion: the CLI did not start, failed,
// did not answer in time, or printed no version (Err is ErrNoVersion).
type VersionError struct {
	Path   string
	Args   []string
	Err    error
	Stdout string // what it printed, trimmed, at most 500 bytes
	Stderr string // the last lines of its stderr, joined by newlines
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("`%s %s`: %v", e.Path, strings.Join(e.Args, " "), e.Err)
}

func (e *VersionError) Unwrap() error { return e.Err }

// QueryVersion runs the CLI at path to read its version, as a child bound
// to the plugin's life like any other. Errors are *VersionError.
func QueryVersion(ctx context.Context, path string, q VersionQuery) (Version, error) {
	if q.Args == nil {
		q.Args = []string{"--version"}
	}
	if q.Timeout <= 0 {
		q.Timeout = DefaultVersionTimeout
	}
	verr := &VersionError{Path: path, Args: q.Args}
	qctx, cancel := context.WithTimeout(ctx, q.Timeout)
	defer cancel()
	p, err := Start(qctx, Config{Path: path, Args: q.Args, Env: q.Env})
	if err != nil {
		verr.Err = err
		return Version{}, verr
	}
	out := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(p.Stdout(), 64<<10))
		out <- b
	}()
	killed := false
	select {
	case <-p.Exited():
	case <-qctx.Done():
		killed = true
		if err := p.Kill(); err != nil {
			// Not reaped: Done may never close, and the output readers
			// were ended by Kill; report rather than wait.
			verr.Err = err
			verr.Stderr = strings.Join(p.Stderr().Last(8), "\n")
			return Version{}, verr
		}
	}
	<-p.Done()
	verr.Stdout = Clip(strings.TrimSpace(ansi.ReplaceAllString(string(<-out), "")), 500)
	verr.Stderr = strings.Join(p.Stderr().Last(8), "\n")
	switch {
	case killed && ctx.Err() != nil:
		verr.Err = ctx.Err()
	case killed:
		verr.Err = fmt.Errorf("no answer within %s: %w", q.Timeout, context.DeadlineExceeded)
	case p.ExitErr() != nil:
		verr.Err = p.ExitErr()
	}
	if verr.Err != nil {
		return Version{}, verr
	}
	v, ok := ParseVersion(verr.Stdout, q.Prefix)
	if !ok {
		verr.Err = ErrNoVersion
		return Version{}, verr
	}
	return v, nil
}
