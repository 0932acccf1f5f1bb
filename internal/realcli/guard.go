package realcli

import (
	"bufio"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// A Guard keeps a CLI on loopback: it is the HTTP(S) proxy the CLI's
// environment names, and it refuses every request, recording where it was
// headed. A CLI that honours the proxy variables (both do) therefore
// reaches nothing but the model server, which NO_PROXY exempts, and a test
// sees what the CLI tried to reach instead of reaching it.
type Guard struct {
	ln   net.Listener
	wg   sync.WaitGroup
	mu   sync.Mutex
	seen []string
}

// StartGuard listens on a free loopback port.
func StartGuard() (*Guard, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	g := &Guard{ln: ln}
	g.wg.Add(1)
	go g.serve()
	return g, nil
}

func (g *Guard) serve() {
	defer g.wg.Done()
	for {
		c, err := g.ln.Accept()
		if err != nil {
			return
		}
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			defer c.Close()
			// A client that connects and says nothing must not hold up
			// Close.
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			req, err := http.ReadRequest(bufio.NewReader(c))
			if err != nil {
				return
			}
			target := req.Host
			if req.Method != http.MethodConnect && req.URL != nil && req.URL.Host != "" {
				target = req.URL.Host
			}
			g.mu.Lock()
			g.seen = append(g.seen, req.Method+" "+target)
			g.mu.Unlock()
			_, _ = c.Write([]byte("HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
		}()
	}
}

// Env is the proxy environment that sends every request but loopback's
// to the guard.
func (g *Guard) Env() []string {
	proxy := "http://" + g.ln.Addr().String()
	const local = "127.0.0.1,localhost,::1"
	return []string{
		"HTTP_PROXY=" + proxy, "HTTPS_PROXY=" + proxy, "ALL_PROXY=" + proxy,
		"http_proxy=" + proxy, "https_proxy=" + proxy, "all_proxy=" + proxy,
		"NO_PROXY=" + local, "no_proxy=" + local,
	}
}

// Attempts lists the requests refused so far, as "METHOD host:port", in
// arrival order.
func (g *Guard) Attempts() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.seen)
}

// Hosts lists the distinct hosts of Attempts, sorted.
func (g *Guard) Hosts() []string {
	var out []string
	for _, a := range g.Attempts() {
		_, h, _ := strings.Cut(a, " ")
		if !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	slices.Sort(out)
	return out
}

// Close stops the guard and waits for its connections to end.
func (g *Guard) Close() error {
	err := g.ln.Close()
	g.wg.Wait()
	return err
}
