package cli

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/agenthost/agenthost/host"

	"github.com/agenthost/agenthost/internal/agentconfig"
)

// Store settings of agenthost serve (and agenthost acp): which store the
// host opens. The flags and agenthost.json's "serve" carry the same
// settings; a flag given on the command line wins over the file, the file
// over the default.
const (
	// DefaultLivenessTTL is --liveness-ttl's default (host.Config's).
	DefaultLivenessTTL = host.DefaultLivenessTTL
	// minLivenessTTL is the shortest TTL etcd grants with its default
	// timing (1.5 election timeouts, rounded up to whole seconds): a
	// shorter one would be raised silently, and the self-fence bound the
	// host derives from it would be wrong.
	minLivenessTTL = 2 * time.Second
	// DefaultEtcdPrefix is --etcd-prefix's default (etcdstore's).
	DefaultEtcdPrefix = "/agenthost/"
	// localHostID names the host of one machine's store, as it always
	// has: leases recorded by earlier versions name it, and a host of
	// another name would take them for another machine's.
	localHostID = "local"
	// hostIDSalt keys the hash of the machine id into a host id, so the
	// host id reveals nothing of the machine id other programs use
	// (machine-id(5) asks for an application-specific hash).
	hostIDSalt = "agenthost"
)

// The files read, in order, for the default host id (machine-id(5):
// /etc/machine-id, and the D-Bus copy older systems have).
const (
	machineIDFile     = "/etc/machine-id"
	dbusMachineIDFile = "/var/lib/dbus/machine-id"
)

// storeFlags are the store flags of a serve command as parsed.
type storeFlags struct {
	store         string
	etcdEndpoints []string
	etcdCA        string
	etcdCert      string
	etcdKey       string
	etcdPrefix    string
	livenessTTL   time.Duration
	hostID        string
}

func (f *storeFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.store, "store", agentconfig.StoreBadger,
		"the sessions' store: badger (this machine's, in the state directory) or etcd (an etcd cluster several machines' hosts share; needs --etcd-endpoints)")
	fs.StringSliceVar(&f.etcdEndpoints, "etcd-endpoints", nil, "with --store etcd: the etcd cluster's client URLs, comma-separated (https://10.0.0.1:2379,https://10.0.0.2:2379)")
	fs.StringVar(&f.etcdCA, "etcd-ca", "", "with --store etcd: PEM file of the CA that signed the etcd servers' certificates (default: the system's roots, for https endpoints)")
	fs.StringVar(&f.etcdCert, "etcd-cert", "", "with --store etcd: PEM file of this host's client certificate (with --etcd-key)")
	fs.StringVar(&f.etcdKey, "etcd-key", "", "with --store etcd: PEM file of the client certificate's private key (with --etcd-cert)")
	fs.StringVar(&f.etcdPrefix, "etcd-prefix", DefaultEtcdPrefix, "with --store etcd: the key prefix the store lives under (hosts sharing sessions use the same)")
	fs.DurationVar(&f.livenessTTL, "liveness-ttl", DefaultLivenessTTL,
		"with --store etcd: the TTL of this host's liveness lease; another host takes its sessions over this long (plus a drift margin) after it is lost")
	fs.StringVar(&f.hostID, "host-id", "",
		"with --store etcd: this host's id in the cluster, unique per host (default: derived from /etc/machine-id, else the hostname)")
}

// storeConfig is what a host opens its store with, validated.
type storeConfig struct {
	// Etcd is false for this machine's Badger store, where the rest is
	// zero but HostID ("local").
	Etcd        bool
	Endpoints   []string
	TLS         *tls.Config // nil: plaintext
	Prefix      string
	LivenessTTL time.Duration
	HostID      string
	// HostIDSource says where HostID came from, for the log.
	HostIDSource string
}

// resolve merges the flags given (changed reports which) with the config
// file's serve settings and validates the result. Its errors say what to
// give instead.
func (f *storeFlags) resolve(changed func(name string) bool, file *agentconfig.Serve, configPath string) (storeConfig, error) {
	if file == nil {
		file = &agentconfig.Serve{}
	}
	// from is where a setting came from, for the errors; given is
	// whether it was given at all (flag or file).
	from, given := map[string]string{}, map[string]bool{}
	pick := func(flag string, fileSet bool) (fromFile bool) {
		from[flag], given[flag] = "--"+flag, changed(flag)
		if !given[flag] && fileSet {
			from[flag], given[flag] = fmt.Sprintf("%s's \"serve\" %q", configPath, fileKey(flag)), true
			return true
		}
		return false
	}
	f2 := *f
	if pick("store", file.Store != "") {
		f2.store = file.Store
	}
	if pick("etcd-endpoints", len(file.EtcdEndpoints) > 0) {
		f2.etcdEndpoints = file.EtcdEndpoints
	}
	if pick("etcd-ca", file.EtcdCA != "") {
		f2.etcdCA = file.EtcdCA
	}
	if pick("etcd-cert", file.EtcdCert != "") {
		f2.etcdCert = file.EtcdCert
	}
	if pick("etcd-key", file.EtcdKey != "") {
		f2.etcdKey = file.EtcdKey
	}
	if pick("etcd-prefix", file.EtcdPrefix != "") {
		f2.etcdPrefix = file.EtcdPrefix
	}
	if pick("liveness-ttl", file.LivenessTTL != "") {
		d, err := time.ParseDuration(file.LivenessTTL)
		if err != nil {
			return storeConfig{}, fmt.Errorf("%s: %w", from["liveness-ttl"], err)
		}
		f2.livenessTTL = d
	}
	if pick("host-id", file.HostID != "") {
		f2.hostID = file.HostID
	}
	switch f2.store {
	case agentconfig.StoreBadger:
		for _, flag := range []string{"etcd-endpoints", "etcd-ca", "etcd-cert", "etcd-key", "etcd-prefix", "liveness-ttl", "host-id"} {
			if given[flag] {
				return storeConfig{}, usageErrorf("%s is a setting of --store etcd, and the store is badger (this machine's): add --store etcd, or remove it", from[flag])
			}
		}
		return storeConfig{HostID: localHostID, HostIDSource: "one machine's store"}, nil
	case agentconfig.StoreEtcd:
	default:
		return storeConfig{}, usageErrorf("%s %q: expected badger (this machine's store, the default) or etcd (shared by several machines, with --etcd-endpoints)", from["store"], f2.store)
	}

	cfg := storeConfig{Etcd: true, Prefix: f2.etcdPrefix, LivenessTTL: f2.livenessTTL}
	var err error
	if cfg.Endpoints, err = checkEndpoints(f2.etcdEndpoints, from["etcd-endpoints"]); err != nil {
		return storeConfig{}, err
	}
	secure := strings.HasPrefix(cfg.Endpoints[0], "https://")
	if !secure {
		for _, flag := range []string{"etcd-ca", "etcd-cert", "etcd-key"} {
			if given[flag] {
				return storeConfig{}, usageErrorf("%s needs https:// endpoints, and %s are http:// (plaintext): give the https:// URLs the etcd servers listen on", from[flag], from["etcd-endpoints"])
			}
		}
	} else {
		if cfg.TLS, err = clientTLS(f2.etcdCA, f2.etcdCert, f2.etcdKey, from, time.Now()); err != nil {
			return storeConfig{}, err
		}
	}
	if !strings.HasPrefix(cfg.Prefix, "/") || !strings.HasSuffix(cfg.Prefix, "/") || strings.Contains(cfg.Prefix, "//") {
		return storeConfig{}, usageErrorf("%s %q: give a key prefix that starts and ends with / such as %q (every host sharing sessions uses the same)", from["etcd-prefix"], cfg.Prefix, DefaultEtcdPrefix)
	}
	if cfg.LivenessTTL < minLivenessTTL || cfg.LivenessTTL%time.Second != 0 {
		return storeConfig{}, usageErrorf("%s %s: give whole seconds, at least %s (etcd grants leases in seconds; %s is the default)", from["liveness-ttl"], cfg.LivenessTTL, minLivenessTTL, DefaultLivenessTTL)
	}
	if given["host-id"] {
		if err := checkHostID(f2.hostID); err != nil {
			return storeConfig{}, usageErrorf("%s %q: %v", from["host-id"], f2.hostID, err)
		}
		cfg.HostID, cfg.HostIDSource = f2.hostID, from["host-id"]
	} else {
		id, src, err := defaultHostID([]string{machineIDFile, dbusMachineIDFile}, os.ReadFile, os.Hostname)
		if err != nil {
			return storeConfig{}, fmt.Errorf("%w; give this host an id with --host-id", err)
		}
		cfg.HostID, cfg.HostIDSource = id, src
	}
	return cfg, nil
}

// fileKey names a flag's key in agenthost.json's "serve".
func fileKey(flag string) string {
	switch flag {
	case "etcd-ca":
		return "etcdCA"
	case "liveness-ttl":
		return "livenessTTL"
	}
	// etcd-endpoints → etcdEndpoints, host-id → hostId
	parts := strings.Split(flag, "-")
	for i := 1; i < len(parts); i++ {
		parts[i] = strings.ToUpper(parts[i][:1]) + parts[i][1:]
	}
	return strings.Join(parts, "")
}

// checkEndpoints checks the etcd client URLs: at least one, each http:// or
// https:// with a host and port and nothing else, all of one scheme (etcd's
// client takes one TLS setting for all).
func checkEndpoints(eps []string, from string) ([]string, error) {
	var out []string
	for _, e := range eps {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	if len(out) == 0 {
		return nil, usageErrorf("--store etcd needs the etcd cluster's client URLs: give --etcd-endpoints https://10.0.0.1:2379,https://10.0.0.2:2379 (or \"etcdEndpoints\" in agenthost.json's \"serve\")")
	}
	scheme := ""
	for _, e := range out {
		u, err := url.Parse(e)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Port() == "" ||
			(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
			return nil, usageErrorf("%s: %q is not an etcd client URL: give scheme, host and port, such as https://10.0.0.1:2379 (or http:// for a plaintext cluster)", from, e)
		}
		if scheme != "" && u.Scheme != scheme {
			return nil, usageErrorf("%s mixes http:// and https:// URLs: the cluster's members serve clients one way; give them all as it serves them", from)
		}
		scheme = u.Scheme
	}
	return out, nil
}

// clientTLS builds the TLS configuration for https endpoints: the CA file
// (else the system's roots) verifies the servers, and the certificate and
// key, given together, are this host's client certificate. Each error names
// the file and what is wrong with it.
func clientTLS(caFile, certFile, keyFile string, from map[string]string, now time.Time) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		b, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("%s: read the CA certificate: %w", from["etcd-ca"], err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("%s %s holds no PEM certificate: give the CA certificate (-----BEGIN CERTIFICATE-----) that signed the etcd servers' certificates", from["etcd-ca"], caFile)
		}
		cfg.RootCAs = pool
	}
	switch {
	case certFile == "" && keyFile == "":
		return cfg, nil
	case certFile == "":
		return nil, usageErrorf("%s is given without its certificate: give --etcd-cert too", from["etcd-key"])
	case keyFile == "":
		return nil, usageErrorf("%s is given without its private key: give --etcd-key too", from["etcd-cert"])
	}
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("%s: read the client certificate: %w", from["etcd-cert"], err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("%s: read the client key: %w", from["etcd-key"], err)
	}
	if pemType(certPEM) != "CERTIFICATE" {
		return nil, fmt.Errorf("%s %s holds no PEM certificate (-----BEGIN CERTIFICATE-----)", from["etcd-cert"], certFile)
	}
	if t := pemType(keyPEM); t == "" || !strings.Contains(t, "PRIVATE KEY") {
		return nil, fmt.Errorf("%s %s holds no PEM private key (-----BEGIN PRIVATE KEY-----); is it the certificate?", from["etcd-key"], keyFile)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%s %s and %s %s are not a certificate and its key: %w", from["etcd-cert"], certFile, from["etcd-key"], keyFile, err)
	}
	leaf := pair.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, fmt.Errorf("%s %s: %w", from["etcd-cert"], certFile, err)
		}
	}
	if now.After(leaf.NotAfter) {
		return nil, fmt.Errorf("%s %s expired on %s: renew it", from["etcd-cert"], certFile, leaf.NotAfter.UTC().Format(time.DateTime))
	}
	if now.Before(leaf.NotBefore) {
		return nil, fmt.Errorf("%s %s is valid only from %s (is this machine's clock right?)", from["etcd-cert"], certFile, leaf.NotBefore.UTC().Format(time.DateTime))
	}
	cfg.Certificates = []tls.Certificate{pair}
	return cfg, nil
}

// pemType is the type of the first PEM block in b, or "".
func pemType(b []byte) string {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return ""
	}
	return blk.Type
}

// checkHostID accepts a host id fit for leases and etcd keys: 1 to 64
// letters, digits, '.', '_' or '-'.
func checkHostID(id string) error {
	if id == "" || len(id) > 64 || strings.Trim(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != "" {
		return errors.New("give 1 to 64 letters, digits, '.', '_' or '-', unique to this host")
	}
	if id == localHostID {
		return fmt.Errorf("%q names one machine's host, whose leases no other machine may judge: give this host a name of its own", localHostID)
	}
	return nil
}

// defaultHostID is the host id of a host that names none: the first 16 hex
// digits of HMAC-SHA256(key "agenthost", the machine id) — stable across
// reboots and reinstalls of agenthost, distinct per machine, and not the
// machine id itself — or, on a machine without a machine id, the hostname
// (reduced to checkHostID's characters). files are the machine id files to
// try in order; readFile and hostname are os.ReadFile and os.Hostname but
// in tests.
func defaultHostID(files []string, readFile func(string) ([]byte, error), hostname func() (string, error)) (id, source string, err error) {
	for _, path := range files {
		b, err := readFile(path)
		if err != nil {
			continue
		}
		mid := strings.TrimSpace(string(b))
		// machine-id(5): 32 lowercase hex digits; "uninitialized" on a
		// first boot not finished yet, which is not an id.
		if len(mid) != 32 || strings.Trim(mid, "0123456789abcdef") != "" {
			continue
		}
		mac := hmac.New(sha256.New, []byte(hostIDSalt))
		mac.Write([]byte(mid))
		return hex.EncodeToString(mac.Sum(nil))[:16], "the machine id in " + path, nil
	}
	name, err := hostname()
	if err != nil {
		return "", "", fmt.Errorf("no machine id (%s) and no hostname: %w", strings.Join(files, ", "), err)
	}
	var b strings.Builder
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	id = b.String()
	if len(id) > 64 {
		id = id[:64]
	}
	if checkHostID(id) != nil {
		return "", "", fmt.Errorf("no machine id (%s) and the hostname %q makes no host id", strings.Join(files, ", "), name)
	}
	return id, "the hostname", nil
}
