// Package portable is the encoding the reference plugins give their
// provider state in (sdk.StateExporter, sdk.StateImporter): the files a
// CLI keeps of one conversation (claude's session transcript, codex's
// rollout), so that a host on another machine can put them in place and
// resume the conversation there.
//
// # The model
//
// A State is a small, versioned, self-describing JSON envelope:
//
//	{"format":"agenthost-provider-state","version":1,"agent":"claude",
//	 "handle":"<session id>","meta":{"configDir":"/home/a/.claude",…},
//	 "files":[{"path":"projects/-home-a-work/<id>.jsonl","mode":384,
//	           "size":141635,"sha256":"…","gzip":"<base64 of gzip>"}]}
//
// Each file's path is relative to the agent's root directory (claude's
// config directory, CODEX_HOME), slash-separated; its bytes are gzip
// compressed (the CLIs' JSON lines shrink about tenfold) and checked by
// size and SHA-256 on decode. Meta is the plugin's own (the exporting
// machine's root, to rewrite the paths that name it).
//
// Decode is written for input from elsewhere: it refuses a state over
// its byte limit, an unknown format or version, another agent's state,
// paths that are absolute, climb out (".."), are not clean or hold a
// backslash or NUL, duplicate paths, too many files, a file that
// decompresses to more than its declared size or the total limit
// (a gzip bomb), and a size or digest that does not match. Write puts
// files in place through an os.Root, so a symbolic link inside the root
// cannot lead a write outside it, each file written to a temporary name
// and renamed over the old one.
//
// # Hazards
//
//   - The state is as large as the conversation: a long session's
//     transcript is megabytes. Encode fails past MaxStateBytes (the
//     store's own bound), and the session then stays resumable only on
//     its own machine.
//   - A CLI may be appending while a plugin exports. TrimTornTail drops
//     a last line without its newline, so an export never carries half
//     a JSON line.
package portable

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"slices"
	"strings"
	"time"
)

// Format is the envelope's format name.
const Format = "agenthost-provider-state"

// Version is the envelope version Encode writes and Decode reads.
const Version = 1

// Limits. MaxStateBytes matches the SDK's bound on an export
// (wire.MaxProviderStateSize) and the store's (leasestore.MaxProviderStateBytes),
// which a plugin does not import.
const (
	MaxStateBytes = 64 << 20
	// MaxFiles bounds the files of one state.
	MaxFiles = 4096
	// MaxTotalBytes bounds the files' decompressed bytes together.
	MaxTotalBytes = 1 << 30
	// MaxPathBytes bounds one file's path.
	MaxPathBytes = 1024
)

// ErrInvalid is wrapped by every error Decode and Validate return for a
// state they refuse.
var ErrInvalid = errors.New("invalid provider state")

// ErrTooLarge is wrapped by Encode's error for a conversation whose state
// exceeds MaxStateBytes, and by Decode's for input over its limit.
var ErrTooLarge = errors.New("provider state too large")

// A State is one conversation's files.
type State struct {
	// Agent names the plugin that exported it ("claude", "codex").
	Agent string
	// Handle is the provider handle the files belong to.
	Handle string
	// Meta is the plugin's own information (string values only).
	Meta map[string]string
	// Files are the conversation's files, each path relative to the
	// agent's root.
	Files []File
}

// A File is one file of a State.
type File struct {
	// Path is slash-separated and relative to the agent's root.
	Path string
	// Mode is the file's permission bits (only 0o777 is kept).
	Mode fs.FileMode
	// Data is the file's content.
	Data []byte
}

type envelope struct {
	Format  string            `json:"format"`
	Version int               `json:"version"`
	Agent   string            `json:"agent"`
	Handle  string            `json:"handle"`
	Created string            `json:"created,omitempty"`
	Meta    map[string]string `json:"meta,omitempty"`
	Files   []fileEnvelope    `json:"files"`
}

type fileEnvelope struct {
	Path   string `json:"path"`
	Mode   uint32 `json:"mode"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	Gzip   []byte `json:"gzip"` // base64 in JSON
}

// Encode validates s and encodes it. It fails with ErrTooLarge when the
// encoding would exceed MaxStateBytes.
func Encode(s State) ([]byte, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	env := envelope{Format: Format, Version: Version, Agent: s.Agent, Handle: s.Handle,
		Created: time.Now().UTC().Format(time.RFC3339), Meta: s.Meta, Files: make([]fileEnvelope, 0, len(s.Files))}
	// Base64 grows the compressed bytes by a third.
	budget := MaxStateBytes * 3 / 4
	for _, f := range s.Files {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		if _, err := zw.Write(f.Data); err != nil {
			return nil, fmt.Errorf("compress %s: %w", f.Path, err)
		}
		if err := zw.Close(); err != nil {
			return nil, fmt.Errorf("compress %s: %w", f.Path, err)
		}
		if budget -= b.Len(); budget < 0 {
			return nil, fmt.Errorf("%w: the conversation's files compress to more than %d bytes", ErrTooLarge, MaxStateBytes)
		}
		sum := sha256.Sum256(f.Data)
		env.Files = append(env.Files, fileEnvelope{Path: f.Path, Mode: uint32(f.Mode.Perm()), Size: int64(len(f.Data)),
			SHA256: hex.EncodeToString(sum[:]), Gzip: b.Bytes()})
	}
	out, err := json.Marshal(env)
	if err != nil {
		return nil, fmt.Errorf("encode provider state: %w", err)
	}
	if len(out) > MaxStateBytes {
		return nil, fmt.Errorf("%w: %d bytes, over the limit of %d", ErrTooLarge, len(out), MaxStateBytes)
	}
	return out, nil
}

// Decode decodes and validates a state that agent exported for handle.
func Decode(b []byte, agent, handle string) (State, error) {
	if len(b) > MaxStateBytes {
		return State{}, fmt.Errorf("%w: %w: %d bytes, over the limit of %d", ErrInvalid, ErrTooLarge, len(b), MaxStateBytes)
	}
	var env envelope
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&env); err != nil {
		return State{}, fmt.Errorf("%w: not a provider state envelope: %v", ErrInvalid, err)
	}
	if dec.More() {
		return State{}, fmt.Errorf("%w: data after the envelope", ErrInvalid)
	}
	if env.Format != Format {
		return State{}, fmt.Errorf("%w: format %q, want %q", ErrInvalid, env.Format, Format)
	}
	if env.Version != Version {
		return State{}, fmt.Errorf("%w: version %d of the format; this plugin reads version %d", ErrInvalid, env.Version, Version)
	}
	if env.Agent != agent {
		return State{}, fmt.Errorf("%w: the state is %q's, not %q's", ErrInvalid, env.Agent, agent)
	}
	if env.Handle != handle {
		return State{}, fmt.Errorf("%w: the state is of conversation %q, not %q", ErrInvalid, env.Handle, handle)
	}
	if len(env.Files) > MaxFiles {
		return State{}, fmt.Errorf("%w: %d files, over the limit of %d", ErrInvalid, len(env.Files), MaxFiles)
	}
	s := State{Agent: env.Agent, Handle: env.Handle, Meta: env.Meta}
	var total int64
	for _, f := range env.Files {
		if err := checkPath(f.Path); err != nil {
			return State{}, err
		}
		if f.Mode&^0o777 != 0 {
			return State{}, fmt.Errorf("%w: file %s: mode %#o has more than permission bits", ErrInvalid, f.Path, f.Mode)
		}
		if f.Size < 0 || f.Size > MaxTotalBytes-total {
			return State{}, fmt.Errorf("%w: file %s: size %d exceeds what is left of the limit of %d bytes", ErrInvalid, f.Path, f.Size, MaxTotalBytes)
		}
		data, err := gunzip(f.Gzip, f.Size)
		if err != nil {
			return State{}, fmt.Errorf("%w: file %s: %v", ErrInvalid, f.Path, err)
		}
		sum := sha256.Sum256(data)
		if hex.EncodeToString(sum[:]) != f.SHA256 {
			return State{}, fmt.Errorf("%w: file %s: its SHA-256 does not match", ErrInvalid, f.Path)
		}
		total += f.Size
		s.Files = append(s.Files, File{Path: f.Path, Mode: fs.FileMode(f.Mode), Data: data})
	}
	if err := s.Validate(); err != nil {
		return State{}, err
	}
	return s, nil
}

// gunzip decompresses exactly size bytes: more, less, or trailing data
// is an error.
func gunzip(z []byte, size int64) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(z))
	if err != nil {
		return nil, fmt.Errorf("not gzip: %v", err)
	}
	zr.Multistream(false)
	out := make([]byte, 0, min(size, 1<<20))
	buf := bytes.NewBuffer(out)
	n, err := io.Copy(buf, io.LimitReader(zr, size+1))
	if err != nil {
		return nil, fmt.Errorf("decompress: %v", err)
	}
	if n != size {
		return nil, fmt.Errorf("decompresses to %d bytes or more, declared %d", n, size)
	}
	return buf.Bytes(), nil
}

// Validate checks what Encode and Decode require of a State: an agent
// and a handle, and at least one file, every path local, clean and
// unique, within the limits.
func (s State) Validate() error {
	if s.Agent == "" || s.Handle == "" {
		return fmt.Errorf("%w: no agent or handle", ErrInvalid)
	}
	if len(s.Files) == 0 {
		return fmt.Errorf("%w: no files", ErrInvalid)
	}
	if len(s.Files) > MaxFiles {
		return fmt.Errorf("%w: %d files, over the limit of %d", ErrInvalid, len(s.Files), MaxFiles)
	}
	seen := make(map[string]bool, len(s.Files))
	var total int64
	for _, f := range s.Files {
		if err := checkPath(f.Path); err != nil {
			return err
		}
		if seen[f.Path] {
			return fmt.Errorf("%w: file %s appears twice", ErrInvalid, f.Path)
		}
		seen[f.Path] = true
		if total += int64(len(f.Data)); total > MaxTotalBytes {
			return fmt.Errorf("%w: the files hold more than %d bytes", ErrInvalid, MaxTotalBytes)
		}
	}
	for _, p := range slices.Sorted(maps.Keys(seen)) {
		// A file cannot also be a directory of another.
		for dir := path.Dir(p); dir != "."; dir = path.Dir(dir) {
			if seen[dir] {
				return fmt.Errorf("%w: %s is a file and the directory of %s", ErrInvalid, dir, p)
			}
		}
	}
	return nil
}

// checkPath refuses a path that is not a clean, relative, slash-separated
// path inside the root.
func checkPath(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("%w: an empty file path", ErrInvalid)
	case len(p) > MaxPathBytes:
		return fmt.Errorf("%w: a file path of %d bytes, over the limit of %d", ErrInvalid, len(p), MaxPathBytes)
	case strings.ContainsAny(p, "\\\x00"):
		return fmt.Errorf("%w: file path %q holds a backslash or NUL", ErrInvalid, p)
	case path.IsAbs(p):
		return fmt.Errorf("%w: file path %q is absolute", ErrInvalid, p)
	case path.Clean(p) != p:
		return fmt.Errorf("%w: file path %q is not clean", ErrInvalid, p)
	case p == ".." || strings.HasPrefix(p, "../"):
		return fmt.Errorf("%w: file path %q leads out of the directory", ErrInvalid, p)
	case p == ".":
		return fmt.Errorf("%w: file path %q names the directory itself", ErrInvalid, p)
	}
	return nil
}

// CheckPath is checkPath for the plugins' own path rules.
func CheckPath(p string) error { return checkPath(p) }

// TrimTornTail returns b without a last line that has no newline: a
// line its writer had not finished.
func TrimTornTail(b []byte) []byte {
	i := bytes.LastIndexByte(b, '\n')
	return b[:i+1]
}

// ReadFile reads the regular file name inside root, refusing symbolic
// links and anything larger than max bytes.
func ReadFile(root *os.Root, name string, max int64) ([]byte, fs.FileMode, error) {
	fi, err := root.Lstat(name)
	if err != nil {
		return nil, 0, err
	}
	if !fi.Mode().IsRegular() {
		return nil, 0, fmt.Errorf("%s is not a regular file", name)
	}
	if fi.Size() > max {
		return nil, 0, fmt.Errorf("%w: %s holds %d bytes, over the limit of %d", ErrTooLarge, name, fi.Size(), max)
	}
	f, err := root.Open(name)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, 0, err
	}
	if int64(len(b)) > max {
		return nil, 0, fmt.Errorf("%w: %s grew over the limit of %d bytes", ErrTooLarge, name, max)
	}
	return b, fi.Mode().Perm(), nil
}

// WriteFile writes data to name inside root: its parent directories
// made (0o700), the data written to a temporary file beside it, synced,
// and renamed over name. The root confines every step, symbolic links
// included.
func WriteFile(root *os.Root, name string, data []byte, mode fs.FileMode) error {
	if err := checkPath(name); err != nil {
		return err
	}
	if mode == 0 {
		mode = 0o600
	}
	if dir := path.Dir(name); dir != "." {
		if err := root.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("make the directory of %s: %w", name, err)
		}
	}
	if fi, err := root.Lstat(name); err == nil && !fi.Mode().IsRegular() {
		return fmt.Errorf("%s exists and is not a regular file", name)
	}
	tmp := fmt.Sprintf("%s.agenthost-import-%d", name, time.Now().UnixNano())
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode.Perm())
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Rename(tmp, name)
	}
	if err != nil {
		_ = root.Remove(tmp)
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

// JSONString is s as it appears inside a JSON string (without the
// quotes), for finding a path in JSON lines.
func JSONString(s string) string {
	// The CLIs (JSON.stringify, serde_json) leave <, > and & as they are.
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	out := strings.TrimSuffix(b.String(), "\n")
	return out[1 : len(out)-1]
}

// Target is what CheckTarget decided about an imported conversation file.
type Target struct {
	// Write says the import must write the file: it is missing, or the
	// import extends it, or this machine's copy was moved aside.
	Write bool
	// Aside is where this machine's copy went when the import does not
	// extend it (it has turns the import lacks): kept, never deleted.
	Aside string
}

// CheckTarget decides whether the imported conversation file b may replace
// the file at name under root: never if that file is another
// conversation's (same reports why, and the error names what, e.g. "the
// transcript"), no need if it holds b already, and a copy of this
// conversation that b does not extend is moved aside first. max bounds the
// read of the existing file.
func CheckTarget(root *os.Root, name string, b []byte, max int64, what string, same func(old []byte) error) (Target, error) {
	old, _, err := ReadFile(root, name, max)
	if errors.Is(err, fs.ErrNotExist) {
		return Target{Write: true}, nil
	}
	if err != nil {
		return Target{}, err
	}
	if err := same(old); err != nil {
		return Target{}, fmt.Errorf("%s holds another conversation's %s, not overwritten: it %w", name, what, err)
	}
	switch {
	case bytes.Equal(old, b):
		return Target{}, nil
	case bytes.HasPrefix(b, old):
		return Target{Write: true}, nil
	}
	aside := fmt.Sprintf("%s.displaced-%d", name, time.Now().UnixNano())
	if err := root.Rename(name, aside); err != nil {
		return Target{}, fmt.Errorf("move this machine's diverging copy of the %s aside: %w", what, err)
	}
	return Target{Write: true, Aside: aside}, nil
}
