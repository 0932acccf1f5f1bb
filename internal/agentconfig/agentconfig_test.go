package agentconfig

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestIsHexDigest(t *testing.T) {
	if isHexDigest(strings.Repeat("G", 64)) || !isHexDigest(strings.Repeat("F", 64)) || isHexDigest("ab") {
		t.Error("isHexDigest")
	}
}

// A File written from these types reads back as it was: the programs that
// write agenthost.json and the CLI that reads it agree on its shape.
func TestWrittenFileReadsBack(t *testing.T) {
	want := File{Agents: map[string]Agent{
		"claude": {Env: []string{"A=B"}, Credentials: CredentialsInherit},
		"mine":   {Path: "/opt/mine", Args: []string{"--x"}, SHA256: strings.Repeat("a", 64), CredentialVariables: []string{"MY_KEY"}},
	}}
	b, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), Name)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.Path() != path {
		t.Errorf("Path() = %q, want %q", got.Path(), path)
	}
	want.path = path
	if !reflect.DeepEqual(got, want) {
		t.Errorf("read back %+v\nwant %+v", got, want)
	}
}

// A missing file is an empty configuration; a bad one is an error naming
// the file and the problem.
func TestRead(t *testing.T) {
	dir := t.TempDir()
	if f, err := Read(filepath.Join(dir, Name)); err != nil || len(f.Agents) != 0 {
		t.Errorf("a missing file: %+v, %v", f, err)
	}
	for _, tc := range []struct{ config, want string }{
		{`{"agents": {"x": {"path": "/p", "credential": "inherit"}}}`, `unknown field "credential"`},
		{`{"agents": {"x": {"credentials": "yes"}}}`, `"credentials" must be "strip" (the default) or "inherit", got "yes"`},
		{`{"agents": {"x": {"path": "rel"}}}`, `"path" must be absolute`},
	} {
		path := filepath.Join(dir, Name)
		if err := os.WriteFile(path, []byte(tc.config), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Read(path)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
			t.Errorf("config %s: %v; want an error naming the file and %q", tc.config, err, tc.want)
		}
	}
}
