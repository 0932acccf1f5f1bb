package realcli

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// The guard refuses what a proxy-honouring client sends it, plain HTTP and
// HTTPS tunnels alike, and records where each was headed.
func TestGuardRefusesAndRecords(t *testing.T) {
	g, err := StartGuard()
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	var proxy string
	for _, kv := range g.Env() {
		if v, ok := strings.CutPrefix(kv, "HTTPS_PROXY="); ok {
			proxy = v
		}
	}
	u, err := url.Parse(proxy)
	if err != nil || u.Hostname() != "127.0.0.1" {
		t.Fatalf("the guard's proxy is %q; want one on loopback", proxy)
	}
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u)}}
	defer client.CloseIdleConnections()
	resp, err := client.Get("http://outside.invalid/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a plain request through the guard got %s; want 403", resp.Status)
	}
	if _, err := client.Get("https://elsewhere.invalid/"); err == nil {
		t.Error("an HTTPS request through the guard got through")
	}
	want := []string{"GET outside.invalid", "CONNECT elsewhere.invalid:443"}
	if got := g.Attempts(); !slices.Equal(got, want) {
		t.Errorf("attempts %q; want %q", got, want)
	}
	if got := g.Hosts(); !slices.Equal(got, []string{"elsewhere.invalid:443", "outside.invalid"}) {
		t.Errorf("hosts %q", got)
	}
}
