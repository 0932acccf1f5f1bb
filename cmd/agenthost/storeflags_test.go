package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Bad store settings stop serve before it opens anything, exit 2, and say
// what to give.
func TestServeStoreSettingsAreCheckedFirst(t *testing.T) {
	dir := stateDir(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--store", "etcd"}, "--store etcd needs the etcd cluster's client URLs: give --etcd-endpoints"},
		{[]string{"--store", "zk"}, `--store "zk": expected badger`},
		{[]string{"--etcd-endpoints", "http://127.0.0.1:2379"}, "--etcd-endpoints is a setting of --store etcd"},
		{[]string{"--store", "etcd", "--etcd-endpoints", "https://127.0.0.1:2379", "--etcd-cert", "/nonexistent.pem"}, "--etcd-cert is given without its private key"},
	} {
		r := ah(t, append([]string{"--state-dir", dir, "serve"}, tc.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("serve %q: %s\nwant exit 2 and %q", tc.args, r, tc.want)
		}
	}
	write := func(content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, "agenthost.json"), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"serve": {"store": "etcd", "livenessTTL": "soon"}}`)
	if r := ah(t, "--state-dir", dir, "serve"); r.code == 0 || !strings.Contains(r.stderr, `"livenessTTL" must be a duration`) {
		t.Errorf("a bad agenthost.json serve setting: %s", r)
	}
}
