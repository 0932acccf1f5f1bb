// Package agentconfig owns agenthost.json, the optional file in the state
// directory where an operator configures agents: third-party plugins (an
// entry with a path), the built-ins' environment, and whether an agent
// inherits the host's provider credentials; and, under "serve", the store
// `agenthost serve` opens (this machine's Badger store, or an etcd cluster
// several machines share), with the same settings as serve's flags. The CLI
// reads it; programs that set a host up (the real-CLI tests, make
// demo-real, benchrun) write it from these types.
//
// The "serve" settings are read when serve starts (a change needs a
// restart); the agents are watched while it runs. Flags given on the
// command line win over the file.
//
// # Hazards
//
// Unknown members are errors, not ignored: a misspelt "credentials" must
// not silently leave an agent without the key the operator meant to give
// it, nor give it one the operator meant to withhold.
package agentconfig

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Name is the file's name in the state directory.
const Name = "agenthost.json"

// File is the shape of agenthost.json.
type File struct {
	Agents map[string]Agent `json:"agents"`
	// Serve is what `agenthost serve` reads besides its flags; nil
	// leaves every setting at its flag's default.
	Serve *Serve `json:"serve,omitempty"`

	path string // where it was read from, for errors
}

// Agent is one entry of agenthost.json. An entry with a path is a
// third-party plugin; one without configures the built-in of its name
// (its env and credentials; a built-in names its own credential
// variables).
type Agent struct {
	Path   string   `json:"path,omitempty"`
	Args   []string `json:"args,omitempty"`
	Env    []string `json:"env,omitempty"`
	SHA256 string   `json:"sha256,omitempty"`
	// Credentials is the operator's choice for the agent's provider
	// credentials: CredentialsStrip (the default) or CredentialsInherit.
	Credentials string `json:"credentials,omitempty"`
	// CredentialVariables name a third-party agent's credential
	// variables: stripped by default, passed from the host's own
	// environment when Credentials is CredentialsInherit.
	CredentialVariables []string `json:"credentialVariables,omitempty"`
}

// Serve is agenthost.json's "serve": the store settings of `agenthost
// serve`, each named after its flag (--etcd-endpoints is "etcdEndpoints").
// The CLI validates their combination, as it does its flags'; Read checks
// each value's form.
type Serve struct {
	// Store is "badger" (this machine's store, the default) or "etcd".
	Store string `json:"store,omitempty"`
	// EtcdEndpoints are the etcd cluster's client URLs.
	EtcdEndpoints []string `json:"etcdEndpoints,omitempty"`
	// EtcdCA, EtcdCert and EtcdKey are absolute paths of PEM files: the
	// CA that signed the etcd servers' certificates, and this host's
	// client certificate and its key.
	EtcdCA   string `json:"etcdCA,omitempty"`
	EtcdCert string `json:"etcdCert,omitempty"`
	EtcdKey  string `json:"etcdKey,omitempty"`
	// EtcdPrefix is where in etcd's key space the store lives.
	EtcdPrefix string `json:"etcdPrefix,omitempty"`
	// LivenessTTL is the host's liveness lease TTL, a Go duration ("5s").
	LivenessTTL string `json:"livenessTTL,omitempty"`
	// HostID names this host in the cluster.
	HostID string `json:"hostId,omitempty"`
}

// The values of Serve's "store".
const (
	StoreBadger = "badger"
	StoreEtcd   = "etcd"
)

// The values of an agent entry's "credentials".
const (
	// CredentialsStrip keeps the agent's credential variables from its
	// plugin (the default).
	CredentialsStrip = "strip"
	// CredentialsInherit passes the agent's credential variables from the
	// host's own environment to its plugin, and allows credentials in
	// every session, so the plugin passes them on to its CLI.
	CredentialsInherit = "inherit"
)

// Path is where the file was read from.
func (f File) Path() string { return f.path }

// Read reads and validates the agenthost.json at path; a missing file is
// an empty configuration. Its errors name the file and what to write.
func Read(path string) (File, error) {
	cfg := File{path: path}
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return cfg, nil
	}
	if err != nil {
		return cfg, fmt.Errorf("read %s: %w", path, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return cfg, fmt.Errorf(`%s: %w; expected {"agents": {"NAME": {"path": "/abs/path", "args": [], "env": ["K=V"], "sha256": "hex", "credentials": "strip|inherit", "credentialVariables": ["KEY"]}}, `+
			`"serve": {"store": "badger|etcd", "etcdEndpoints": ["https://host:2379"], "etcdCA": "/abs/ca.pem", "etcdCert": "/abs/cert.pem", "etcdKey": "/abs/key.pem", "etcdPrefix": "/agenthost/", "livenessTTL": "5s", "hostId": "ID"}}`, path, err)
	}
	if err := cfg.Serve.check(); err != nil {
		return cfg, fmt.Errorf(`%s: "serve": %w`, path, err)
	}
	for name, a := range cfg.Agents {
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%s: agent %q: %s", path, name, fmt.Sprintf(format, args...))
		}
		switch {
		case name == "" || strings.ContainsAny(name, "/\x00") || strings.TrimSpace(name) != name:
			return cfg, fmt.Errorf("%s: %q is not a usable agent name", path, name)
		case a.Credentials != "" && a.Credentials != CredentialsStrip && a.Credentials != CredentialsInherit:
			return cfg, bad(`"credentials" must be %q (the default) or %q, got %q`, CredentialsStrip, CredentialsInherit, a.Credentials)
		case a.Path == "" && (len(a.Args) > 0 || a.SHA256 != ""):
			return cfg, bad(`"args" and "sha256" need a "path"; an entry without one configures a built-in's "env" and "credentials"`)
		case a.Path == "" && len(a.CredentialVariables) > 0:
			return cfg, bad(`"credentialVariables" need a "path": a built-in names its own credential variables`)
		case a.Path != "" && !filepath.IsAbs(a.Path):
			return cfg, bad(`"path" must be absolute, got %q`, a.Path)
		case a.SHA256 != "" && !isHexDigest(a.SHA256):
			return cfg, bad(`"sha256" must be 64 hex digits, got %q`, a.SHA256)
		}
		for _, kv := range a.Env {
			if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
				return cfg, bad(`"env" entries must be KEY=VALUE, got %q`, kv)
			}
		}
		for _, k := range a.CredentialVariables {
			if k == "" || strings.ContainsAny(k, "=\x00") {
				return cfg, bad(`"credentialVariables" entries must be variable names, got %q`, k)
			}
		}
	}
	return cfg, nil
}

// check checks the form of each value (nil is fine); what they mean
// together is the CLI's to judge, with its flags.
func (s *Serve) check() error {
	if s == nil {
		return nil
	}
	if s.Store != "" && s.Store != StoreBadger && s.Store != StoreEtcd {
		return fmt.Errorf(`"store" must be %q (the default) or %q, got %q`, StoreBadger, StoreEtcd, s.Store)
	}
	for _, e := range s.EtcdEndpoints {
		if strings.TrimSpace(e) == "" {
			return fmt.Errorf(`"etcdEndpoints" entries must be URLs such as "https://10.0.0.1:2379", got %q`, e)
		}
	}
	for _, f := range []struct{ key, path string }{{"etcdCA", s.EtcdCA}, {"etcdCert", s.EtcdCert}, {"etcdKey", s.EtcdKey}} {
		if f.path != "" && !filepath.IsAbs(f.path) {
			return fmt.Errorf("%q must be an absolute path, got %q", f.key, f.path)
		}
	}
	if s.LivenessTTL != "" {
		if _, err := time.ParseDuration(s.LivenessTTL); err != nil {
			return fmt.Errorf(`"livenessTTL" must be a duration such as "5s", got %q`, s.LivenessTTL)
		}
	}
	return nil
}

func isHexDigest(s string) bool {
	return len(s) == 64 && strings.Trim(strings.ToLower(s), "0123456789abcdef") == ""
}
