package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
)

// pki writes a throwaway CA and certificates it signs into dir.
type pki struct {
	t      *testing.T
	dir    string
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
	caFile string
}

func newPKI(t *testing.T, dir, name string) *pki {
	t.Helper()
	p := &pki{t: t, dir: dir}
	p.caKey = genKey(t)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &p.caKey.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	if p.caCert, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	p.caFile = p.write(name+"-ca.pem", "CERTIFICATE", der)
	return p
}

func genKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func (p *pki) write(name, typ string, der []byte) string {
	p.t.Helper()
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		p.t.Fatal(err)
	}
	return path
}

// issue writes a certificate for name (server and client use) and its key.
func (p *pki) issue(name string, serial int64) (certFile, keyFile string) {
	p.t.Helper()
	key := genKey(p.t)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:    []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		p.t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		p.t.Fatal(err)
	}
	return p.write(name+".pem", "CERTIFICATE", der), p.write(name+"-key.pem", "PRIVATE KEY", kder)
}

func freeLoopbackURL(t *testing.T, scheme string) url.URL {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return url.URL{Scheme: scheme, Host: l.Addr().String()}
}

// A host reaches an etcd that requires client certificates with the
// --etcd-ca/--etcd-cert/--etcd-key files; one whose certificate another CA
// signed, or that gives none, is refused and says where it failed.
func TestServeOnEtcdWithClientCertificates(t *testing.T) {
	dir := t.TempDir()
	ca := newPKI(t, dir, "cluster")
	serverCert, serverKey := ca.issue("etcd-server", 2)
	hostCert, hostKey := ca.issue("host-a", 3)
	other := newPKI(t, dir, "other")
	strangerCert, strangerKey := other.issue("stranger", 2)

	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = "tls", filepath.Join(dir, "etcd")
	cfg.LogLevel = "error"
	client, peer := freeLoopbackURL(t, "https"), freeLoopbackURL(t, "http")
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ClientTLSInfo = transport.TLSInfo{CertFile: serverCert, KeyFile: serverKey, TrustedCAFile: ca.caFile, ClientCertAuth: true}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		t.Fatal("the etcd member was not ready in 60s")
	}
	base := []string{"--store", "etcd", "--etcd-endpoints", client.String(), "--host-id", "host-a", "--liveness-ttl", "2s"}

	s := serve(t, stateDir(t), append(base, "--etcd-ca", ca.caFile, "--etcd-cert", hostCert, "--etcd-key", hostKey)...)
	st := mustAH(t, "--state-dir", s.dir, "status")
	if !strings.Contains(st.stdout, "cluster    live") || !strings.Contains(st.stdout, "host-a (this host)") {
		t.Errorf("status of the host on the TLS cluster:\n%s", st.stdout)
	}
	s.stop()

	for _, tc := range []struct {
		name  string
		flags []string
		want  string
	}{
		{"a client certificate another CA signed", []string{"--etcd-ca", ca.caFile, "--etcd-cert", strangerCert, "--etcd-key", strangerKey},
			"refused this host's client certificate"},
		{"no client certificate", []string{"--etcd-ca", ca.caFile}, "refused this host's client certificate"},
		{"a server certificate this CA did not sign", []string{"--etcd-ca", other.caFile, "--etcd-cert", hostCert, "--etcd-key", hostKey},
			"the TLS handshake with " + client.String() + " failed: tls: failed to verify certificate"},
	} {
		r := ah(t, append([]string{"--state-dir", stateDir(t), "serve"}, append(base, tc.flags...)...)...)
		if r.code != 1 || !strings.Contains(r.stderr, "open the store on etcd at "+client.String()) || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%s: %s\nwant exit 1 saying the store on etcd could not be opened and %q", tc.name, r, tc.want)
		} else {
			t.Logf("%s: %s", tc.name, strings.TrimSpace(r.stderr))
		}
	}
}
