package cli

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/agenthost/agenthost/internal/agentconfig"
)

// testPKI is a throwaway CA with a server and a client certificate,
// written as PEM files.
type testPKI struct {
	dir                                   string
	caFile, certFile, keyFile             string
	otherKeyFile, expiredCert, expiredKey string
	caCert                                *x509.Certificate
	caKey                                 *ecdsa.PrivateKey
	serverCert                            tls.Certificate
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	p := &testPKI{dir: t.TempDir()}
	now := time.Now()
	caKey := newKey(t)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "agenthost test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	if p.caCert, err = x509.ParseCertificate(caDER); err != nil {
		t.Fatal(err)
	}
	p.caKey = caKey
	p.caFile = p.writePEM(t, "ca.pem", "CERTIFICATE", caDER)

	leaf := func(name string, serial int64, notAfter time.Time, usage x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey) {
		key := newKey(t)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: now.Add(-2 * time.Hour), NotAfter: notAfter, KeyUsage: x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, DNSNames: []string{"localhost"}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, key
	}
	der, key := leaf("host-a", 2, now.Add(time.Hour), x509.ExtKeyUsageClientAuth)
	p.certFile = p.writePEM(t, "host.pem", "CERTIFICATE", der)
	p.keyFile = p.writeKey(t, "host-key.pem", key)
	p.otherKeyFile = p.writeKey(t, "other-key.pem", newKey(t))
	der, key = leaf("host-old", 3, now.Add(-time.Hour), x509.ExtKeyUsageClientAuth)
	p.expiredCert = p.writePEM(t, "old.pem", "CERTIFICATE", der)
	p.expiredKey = p.writeKey(t, "old-key.pem", key)
	der, key = leaf("localhost", 4, now.Add(time.Hour), x509.ExtKeyUsageServerAuth)
	p.serverCert = tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	return p
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func (p *testPKI) writePEM(t *testing.T, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func (p *testPKI) writeKey(t *testing.T, name string, k *ecdsa.PrivateKey) string {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return p.writePEM(t, name, "PRIVATE KEY", der)
}

// parseStore parses args as serve's store flags and resolves them with
// the config file's serve settings.
func parseStore(t *testing.T, file *agentconfig.Serve, args ...string) (storeConfig, error) {
	t.Helper()
	var f storeFlags
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	return f.resolve(func(name string) bool { return fs.Changed(name) }, file, "/state/agenthost.json")
}

func TestStoreFlagsDefaultIsBadger(t *testing.T) {
	sc, err := parseStore(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sc.Etcd || sc.HostID != "local" || sc.TLS != nil || sc.Endpoints != nil {
		t.Errorf("no flags: %+v, want badger with host id local", sc)
	}
	sc, err = parseStore(t, &agentconfig.Serve{Store: "badger"}, "--store", "badger")
	if err != nil || sc.Etcd {
		t.Errorf("--store badger: %+v, %v", sc, err)
	}
}

func TestStoreFlagsEtcdPlaintext(t *testing.T) {
	sc, err := parseStore(t, nil, "--store", "etcd", "--etcd-endpoints", "http://127.0.0.1:2379, http://127.0.0.1:22379",
		"--host-id", "box-1.a_b", "--liveness-ttl", "7s", "--etcd-prefix", "/team/agenthost/")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"http://127.0.0.1:2379", "http://127.0.0.1:22379"}
	if !sc.Etcd || !slices.Equal(sc.Endpoints, want) || sc.TLS != nil || sc.HostID != "box-1.a_b" ||
		sc.LivenessTTL != 7*time.Second || sc.Prefix != "/team/agenthost/" || sc.HostIDSource != "--host-id" {
		t.Errorf("got %+v", sc)
	}
	sc, err = parseStore(t, nil, "--store=etcd", "--etcd-endpoints=http://[::1]:2379", "--host-id=h")
	if err != nil || sc.LivenessTTL != DefaultLivenessTTL || sc.Prefix != DefaultEtcdPrefix {
		t.Errorf("defaults: %+v, %v; want ttl %s, prefix %s", sc, err, DefaultLivenessTTL, DefaultEtcdPrefix)
	}
}

// The config file's serve settings apply where no flag is given; a flag
// given wins.
func TestStoreSettingsFromTheConfigFile(t *testing.T) {
	file := &agentconfig.Serve{Store: "etcd", EtcdEndpoints: []string{"http://10.0.0.1:2379"}, HostID: "from-file",
		LivenessTTL: "9s", EtcdPrefix: "/f/"}
	sc, err := parseStore(t, file)
	if err != nil {
		t.Fatal(err)
	}
	if !sc.Etcd || sc.Endpoints[0] != "http://10.0.0.1:2379" || sc.HostID != "from-file" || sc.LivenessTTL != 9*time.Second || sc.Prefix != "/f/" {
		t.Errorf("from the file: %+v", sc)
	}
	if !strings.Contains(sc.HostIDSource, `"hostId"`) {
		t.Errorf("host id source %q does not name the file's key", sc.HostIDSource)
	}
	sc, err = parseStore(t, file, "--host-id", "from-flag", "--liveness-ttl", "3s")
	if err != nil || sc.HostID != "from-flag" || sc.LivenessTTL != 3*time.Second || sc.Prefix != "/f/" {
		t.Errorf("flags over the file: %+v, %v", sc, err)
	}
	// The file's etcd settings with the flag's badger are a mistake the
	// error names in the file's words.
	_, err = parseStore(t, file, "--store", "badger")
	if err == nil || !strings.Contains(err.Error(), `/state/agenthost.json's "serve" "etcdEndpoints"`) {
		t.Errorf("--store badger over a file with etcd settings: %v", err)
	}
	_, err = parseStore(t, &agentconfig.Serve{Store: "etcd", HostID: "x"})
	if err == nil || !strings.Contains(err.Error(), "--etcd-endpoints") {
		t.Errorf("store etcd without endpoints in the file: %v", err)
	}
}

func TestStoreFlagErrorsSayWhatToDo(t *testing.T) {
	pki := newTestPKI(t)
	etcd := []string{"--store", "etcd", "--host-id", "h"}
	https := append(slices.Clone(etcd), "--etcd-endpoints", "https://127.0.0.1:2379")
	for _, tc := range []struct {
		args  []string
		want  string
		usage bool // exits 2
	}{
		{[]string{"--store", "mysql"}, `--store "mysql": expected badger (this machine's store, the default) or etcd`, true},
		{[]string{"--etcd-endpoints", "http://x:1"}, "--etcd-endpoints is a setting of --store etcd, and the store is badger", true},
		{[]string{"--host-id", "me"}, "--host-id is a setting of --store etcd", true},
		{[]string{"--liveness-ttl", "5s"}, "--liveness-ttl is a setting of --store etcd", true},
		{etcd, "--store etcd needs the etcd cluster's client URLs: give --etcd-endpoints", true},
		{append(slices.Clone(etcd), "--etcd-endpoints", "127.0.0.1:2379"), `"127.0.0.1:2379" is not an etcd client URL: give scheme, host and port`, true},
		{append(slices.Clone(etcd), "--etcd-endpoints", "https://127.0.0.1"), `is not an etcd client URL`, true},
		{append(slices.Clone(etcd), "--etcd-endpoints", "unix:///tmp/s"), `is not an etcd client URL`, true},
		{append(slices.Clone(etcd), "--etcd-endpoints", "http://a:1,https://b:2"), "mixes http:// and https://", true},
		{append(slices.Clone(etcd), "--etcd-endpoints", "http://a:1", "--etcd-ca", pki.caFile), "--etcd-ca needs https:// endpoints", true},
		{append(slices.Clone(etcd), "--etcd-endpoints", "http://a:1", "--liveness-ttl", "1s"), "--liveness-ttl 1s: give whole seconds, at least 2s", true},
		{append(slices.Clone(etcd), "--etcd-endpoints", "http://a:1", "--liveness-ttl", "2500ms"), "give whole seconds", true},
		{append(slices.Clone(etcd), "--etcd-endpoints", "http://a:1", "--etcd-prefix", "agenthost"), `--etcd-prefix "agenthost": give a key prefix that starts and ends with /`, true},
		{[]string{"--store", "etcd", "--etcd-endpoints", "http://a:1", "--host-id", "a/b"}, `--host-id "a/b": give 1 to 64 letters`, true},
		{[]string{"--store", "etcd", "--etcd-endpoints", "http://a:1", "--host-id", "local"}, `"local" names one machine's host`, true},
		{append(slices.Clone(https), "--etcd-ca", filepath.Join(pki.dir, "missing.pem")), "--etcd-ca: read the CA certificate: open " + filepath.Join(pki.dir, "missing.pem"), false},
		{append(slices.Clone(https), "--etcd-ca", pki.keyFile), "holds no PEM certificate: give the CA certificate", false},
		{append(slices.Clone(https), "--etcd-cert", pki.certFile), "--etcd-cert is given without its private key: give --etcd-key too", true},
		{append(slices.Clone(https), "--etcd-key", pki.keyFile), "--etcd-key is given without its certificate: give --etcd-cert too", true},
		{append(slices.Clone(https), "--etcd-cert", pki.certFile, "--etcd-key", pki.otherKeyFile), "are not a certificate and its key: tls: private key does not match public key", false},
		{append(slices.Clone(https), "--etcd-cert", pki.keyFile, "--etcd-key", pki.keyFile), "holds no PEM certificate (-----BEGIN CERTIFICATE-----)", false},
		{append(slices.Clone(https), "--etcd-cert", pki.certFile, "--etcd-key", pki.certFile), "holds no PEM private key (-----BEGIN PRIVATE KEY-----); is it the certificate?", false},
		{append(slices.Clone(https), "--etcd-cert", pki.certFile, "--etcd-key", filepath.Join(pki.dir, "nokey.pem")), "--etcd-key: read the client key", false},
		{append(slices.Clone(https), "--etcd-cert", pki.expiredCert, "--etcd-key", pki.expiredKey), "expired on", false},
	} {
		_, err := parseStore(t, nil, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want an error containing %q", tc.args, err, tc.want)
			continue
		}
		var ee *exitError
		if isUsage := errors.As(err, &ee) && ee.code == 2; isUsage != tc.usage {
			t.Errorf("%q: %v: usage error %v, want %v", tc.args, err, isUsage, tc.usage)
		}
	}
}

// The TLS configuration built from the files is the one a real TLS
// handshake with a server of the test CA that requires client
// certificates accepts, and the client certificate is the given one.
func TestStoreTLSFromRealFiles(t *testing.T) {
	pki := newTestPKI(t)
	sc, err := parseStore(t, nil, "--store", "etcd", "--host-id", "h", "--etcd-endpoints", "https://localhost:2379",
		"--etcd-ca", pki.caFile, "--etcd-cert", pki.certFile, "--etcd-key", pki.keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if sc.TLS == nil || sc.TLS.RootCAs == nil || len(sc.TLS.Certificates) != 1 {
		t.Fatalf("TLS config %+v: want the CA and one client certificate", sc.TLS)
	}
	roots := x509.NewCertPool()
	roots.AddCert(pki.caCert)
	srv, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pki.serverCert},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: roots})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	peer := make(chan string, 1)
	go func() {
		c, err := srv.Accept()
		if err != nil {
			peer <- "accept: " + err.Error()
			return
		}
		defer c.Close()
		tc := c.(*tls.Conn)
		if err := tc.Handshake(); err != nil {
			peer <- "handshake: " + err.Error()
			return
		}
		peer <- tc.ConnectionState().PeerCertificates[0].Subject.CommonName
	}()
	cfg := sc.TLS.Clone()
	cfg.ServerName = "localhost"
	c, err := tls.Dial("tcp", srv.Addr().String(), cfg)
	if err != nil {
		t.Fatalf("dial with the built TLS config: %v", err)
	}
	defer c.Close()
	if got := <-peer; got != "host-a" {
		t.Errorf("the server saw client %q, want host-a", got)
	}
	// https without a CA file: the system's roots, no client certificate.
	sc, err = parseStore(t, nil, "--store", "etcd", "--host-id", "h", "--etcd-endpoints", "https://localhost:2379")
	if err != nil || sc.TLS == nil || sc.TLS.RootCAs != nil || len(sc.TLS.Certificates) != 0 {
		t.Errorf("https without files: %+v, %v", sc.TLS, err)
	}
}

func TestDefaultHostID(t *testing.T) {
	files := map[string]string{}
	read := func(p string) ([]byte, error) {
		if s, ok := files[p]; ok {
			return []byte(s), nil
		}
		return nil, os.ErrNotExist
	}
	host := func() (string, error) { return "build box#7", nil }
	list := []string{"/etc/machine-id", "/var/lib/dbus/machine-id"}

	files["/var/lib/dbus/machine-id"] = "0123456789abcdef0123456789abcdef\n"
	id, src, err := defaultHostID(list, read, host)
	if err != nil {
		t.Fatal(err)
	}
	// HMAC-SHA256(key "agenthost", machine id), first 16 hex digits,
	// computed independently (python3 hmac): the README documents it,
	// so it must not change.
	if id != "6b692637b8f910ad" {
		t.Errorf("id %q, want 6b692637b8f910ad", id)
	}
	if strings.Contains(id, "0123456789abcdef") || checkHostID(id) != nil || !strings.Contains(src, "/var/lib/dbus/machine-id") {
		t.Errorf("from the D-Bus machine id: %q (%s)", id, src)
	}
	again, _, _ := defaultHostID(list, read, host)
	files["/etc/machine-id"] = "fedcba9876543210fedcba9876543210"
	other, src, _ := defaultHostID(list, read, host)
	if again != id || other == id || !strings.Contains(src, "/etc/machine-id") {
		t.Errorf("stable %q = %q, and another machine's %q differs, from %s", id, again, other, src)
	}
	files["/etc/machine-id"] = "uninitialized\n"
	if got, _, _ := defaultHostID(list, read, host); got != id {
		t.Errorf("an uninitialized /etc/machine-id is skipped: %q, want %q", got, id)
	}
	delete(files, "/etc/machine-id")
	delete(files, "/var/lib/dbus/machine-id")
	id, src, err = defaultHostID(list, read, host)
	if err != nil || id != "build-box-7" || src != "the hostname" {
		t.Errorf("without a machine id: %q (%s), %v; want build-box-7 from the hostname", id, src, err)
	}
	_, _, err = defaultHostID(list, read, func() (string, error) { return "", errors.New("no uts") })
	if err == nil || !strings.Contains(err.Error(), "no machine id") {
		t.Errorf("nothing to go by: %v", err)
	}
	// This machine's: whatever it has, a valid id.
	if id, src, err := defaultHostID(list, os.ReadFile, os.Hostname); err != nil || checkHostID(id) != nil {
		t.Errorf("this machine: %q (%s), %v", id, src, err)
	} else {
		t.Logf("this machine's default host id: %s (from %s)", id, src)
	}
}
