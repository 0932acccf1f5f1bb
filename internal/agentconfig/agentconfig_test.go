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

// "serve" reads back as written, and a malformed value is an error naming
// the file, "serve" and the key.
func TestServeSettings(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, Name)
	want := &Serve{Store: StoreEtcd, EtcdEndpoints: []string{"https://10.0.0.1:2379"}, EtcdCA: "/etc/ah/ca.pem",
		EtcdCert: "/etc/ah/host.pem", EtcdKey: "/etc/ah/host-key.pem", EtcdPrefix: "/agenthost/", LivenessTTL: "5s", HostID: "box-1"}
	b, err := json.Marshal(File{Serve: want})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := Read(path)
	if err != nil || !reflect.DeepEqual(got.Serve, want) {
		t.Errorf("read back %+v, %v; want %+v", got.Serve, err, want)
	}
	for _, tc := range []struct{ config, want string }{
		{`{"serve": {"store": "sql"}}`, `"serve": "store" must be "badger" (the default) or "etcd", got "sql"`},
		{`{"serve": {"livenessTTL": "5"}}`, `"serve": "livenessTTL" must be a duration such as "5s", got "5"`},
		{`{"serve": {"etcdCA": "ca.pem"}}`, `"serve": "etcdCA" must be an absolute path, got "ca.pem"`},
		{`{"serve": {"etcdEndpoints": [""]}}`, `"etcdEndpoints" entries must be URLs`},
		{`{"serve": {"etcd-endpoints": ["http://a:1"]}}`, `unknown field "etcd-endpoints"`},
	} {
		if err := os.WriteFile(path, []byte(tc.config), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Read(path)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
			t.Errorf("config %s: %v; want an error naming the file and %q", tc.config, err, tc.want)
		}
	}
}
