package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/internal/grant"
)

// server is a real HTTP server on loopback that remembers the headers
// of every request it got.
type server struct {
	*httptest.Server
	mu   sync.Mutex
	seen []http.Header
}

func newServer(t testing.TB, tlsOn bool, addr string) *server {
	t.Helper()
	s := &server{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s %s", r.Host, r.URL.Path)
	})
	s.start(t, tlsOn, addr, h)
	return s
}

// start serves h on addr, with TLS or not, until the test ends, keeping
// the headers of every request it gets.
func (s *server) start(t testing.TB, tlsOn bool, addr string, h http.Handler) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	record := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.seen = append(s.seen, r.Header.Clone())
		s.mu.Unlock()
		h.ServeHTTP(w, r)
	})
	s.Server = &httptest.Server{Listener: ln, Config: &http.Server{Handler: record}}
	if tlsOn {
		s.StartTLS()
	} else {
		s.Start()
	}
	t.Cleanup(s.Close)
}

func (s *server) headers() []http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]http.Header{}, s.seen...)
}

func (s *server) port() int { return s.Listener.Addr().(*net.TCPAddr).Port }

func grants(t testing.TB, args ...string) (grant.Set, *grant.Enforcer) {
	t.Helper()
	var s grant.Set
	for _, a := range args {
		if err := s.Parse(a, "/"); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Normalize(); err != nil {
		t.Fatal(err)
	}
	return s, grant.NewEnforcer(s)
}

// startProxy serves a proxy on loopback and returns its address.
func startProxy(t testing.TB, cfg Config) (*Proxy, string) {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go p.Serve(ln)
	t.Cleanup(func() { p.Close() })
	return p, ln.Addr().String()
}

func client(proxyAddr string, roots *x509.CertPool) *http.Client {
	u, _ := url.Parse("http://" + proxyAddr)
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u), TLSClientConfig: &tls.Config{RootCAs: roots}, DisableKeepAlives: false}, Timeout: 10 * time.Second}
}

func get(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func decisions(e *grant.Enforcer) string {
	var b strings.Builder
	for _, d := range e.Log().Decisions {
		fmt.Fprintf(&b, "%s %s %s %v %s\n", d.Kind, d.Op, d.Target, d.Allow, d.Rule)
	}
	return b.String()
}

func TestGrantedReachableOtherRefused(t *testing.T) {
	a := newServer(t, false, "127.0.0.1:0")
	b := newServer(t, false, "127.0.0.1:0")
	_, enf := grants(t, fmt.Sprintf("net:127.0.0.1:%d", a.port()))
	_, paddr := startProxy(t, Config{Enforcer: enf})
	c := client(paddr, nil)
	if code, body := get(t, c, a.URL+"/x"); code != 200 || !strings.HasPrefix(body, "hello from") {
		t.Fatalf("granted: %d %q", code, body)
	}
	code, body := get(t, c, b.URL+"/y")
	if code != http.StatusForbidden || !strings.Contains(body, "no net grant") {
		t.Fatalf("not granted: %d %q", code, body)
	}
	if len(b.headers()) != 0 {
		t.Fatal("the refused server got a request")
	}
	log := decisions(enf)
	if !strings.Contains(log, fmt.Sprintf("net connect 127.0.0.1:%d true", a.port())) || !strings.Contains(log, fmt.Sprintf("net connect 127.0.0.1:%d false no net grant", b.port())) {
		t.Fatalf("decision log:\n%s", log)
	}
}

func TestConnectTunnel(t *testing.T) {
	a := newServer(t, true, "127.0.0.1:0")
	b := newServer(t, true, "127.0.0.1:0")
	_, enf := grants(t, fmt.Sprintf("net:127.0.0.1:%d", a.port()))
	_, paddr := startProxy(t, Config{Enforcer: enf})
	roots := x509.NewCertPool()
	roots.AddCert(a.Certificate())
	c := client(paddr, roots)
	if code, body := get(t, c, a.URL+"/tls"); code != 200 || !strings.Contains(body, "/tls") {
		t.Fatalf("granted over CONNECT: %d %q", code, body)
	}
	if code, body := get(t, c, b.URL+"/tls"); code != 0 || !strings.Contains(body, "Forbidden") {
		t.Fatalf("refused CONNECT: %d %q", code, body)
	}
}

func TestRebindingRefused(t *testing.T) {
	a := newServer(t, false, "127.0.0.1:0")
	// localhost resolves (from /etc/hosts) to loopback; only the name was granted.
	_, enf := grants(t, fmt.Sprintf("net:localhost:%d", a.port()))
	_, paddr := startProxy(t, Config{Enforcer: enf})
	code, body := get(t, client(paddr, nil), fmt.Sprintf("http://localhost:%d/", a.port()))
	if code != http.StatusForbidden || !strings.Contains(body, "DNS rebinding") {
		t.Fatalf("a name resolving to loopback: %d %q", code, body)
	}
	if len(a.headers()) != 0 {
		t.Fatal("the loopback server was reached through a name")
	}
	if log := decisions(enf); !strings.Contains(log, "false localhost resolves only to 127.0.0.1 (a loopback address)") {
		t.Fatalf("decision log:\n%s", log)
	}
}

// fakeResolver is DNS at the edge: fixed answers.
type fakeResolver map[string][]netip.Addr

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := f[host]; ok {
		return a, nil
	}
	return nil, fmt.Errorf("no such host %s", host)
}

func TestResolvedAddresses(t *testing.T) {
	a := newServer(t, false, "127.0.0.1:0")
	p := a.port()
	res := fakeResolver{
		"mixed.test":   {netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::ffff:192.168.1.1")},
		"granted.test": {netip.MustParseAddr("127.0.0.1")},
		"private.test": {netip.MustParseAddr("10.0.0.7"), netip.MustParseAddr("fd00::1")},
	}
	_, enf := grants(t, fmt.Sprintf("net:mixed.test:%d", p), fmt.Sprintf("net:granted.test:%d", p), fmt.Sprintf("net:127.0.0.1:%d", p), fmt.Sprintf("net:private.test:%d", p))
	_, paddr := startProxy(t, Config{Enforcer: enf, Resolver: res})
	c := client(paddr, nil)
	// The internal address was itself granted: allowed.
	if code, body := get(t, c, fmt.Sprintf("http://granted.test:%d/", p)); code != 200 {
		t.Fatalf("granted.test: %d %q", code, body)
	}
	// 127.0.0.1 is granted too, so mixed.test may use it; 10.1.2.3 and
	// the mapped 192.168.1.1 are dropped.
	if code, body := get(t, c, fmt.Sprintf("http://mixed.test:%d/", p)); code != 200 {
		t.Fatalf("mixed.test: %d %q", code, body)
	}
	code, body := get(t, c, fmt.Sprintf("http://private.test:%d/", p))
	if code != http.StatusForbidden || !strings.Contains(body, "10.0.0.7 (a private address), fd00::1 (a unique local address)") {
		t.Fatalf("private.test: %d %q", code, body)
	}
}

func TestInternalAddresses(t *testing.T) {
	for _, tc := range []struct {
		a   string
		bad bool
	}{
		{"127.0.0.1", true}, {"127.8.9.10", true}, {"10.0.0.1", true}, {"172.16.5.4", true}, {"172.32.0.1", false},
		{"192.168.0.1", true}, {"169.254.169.254", true}, {"100.64.0.1", true}, {"0.0.0.0", true}, {"224.0.0.1", true},
		{"255.255.255.255", true}, {"8.8.8.8", false}, {"93.184.216.34", false}, {"::1", true}, {"::", true},
		{"fe80::1", true}, {"fd12::1", true}, {"::ffff:127.0.0.1", true}, {"::ffff:8.8.8.8", false},
		{"64:ff9b::a00:1", true}, {"64:ff9b::808:808", false}, {"2002:c0a8:101::1", true}, {"2606:4700::1111", false},
		{"::127.0.0.1", true}, {"ff02::1", true},
	} {
		if bad, what := internal(netip.MustParseAddr(tc.a)); bad != tc.bad {
			t.Errorf("%s: internal %v (%s), want %v", tc.a, bad, what, tc.bad)
		}
	}
}

func caPool(t *testing.T, p *Proxy) *x509.CertPool {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(p.CACertPEM()) {
		t.Fatal("no CA certificate")
	}
	return pool
}

func TestInjectHTTPS(t *testing.T) {
	a := newServer(t, true, "127.0.0.1:0")
	b := newServer(t, true, "127.0.0.1:0")
	s, enf := grants(t, fmt.Sprintf("net:127.0.0.1:%d", a.port()), fmt.Sprintf("net:127.0.0.1:%d", b.port()))
	if s.Net[0].Port != a.port() {
		s.Net[0], s.Net[1] = s.Net[1], s.Net[0]
	}
	s.Net[0].Inject = []grant.Inject{{Header: "X-Api-Key", Secret: "env:TEST_TOKEN"}}
	const secret = "s3cr3t-value-that-must-not-leak"
	inj, err := Secrets(s, func(k string) (string, bool) { return secret, k == "TEST_TOKEN" })
	if err != nil {
		t.Fatal(err)
	}
	up := x509.NewCertPool()
	up.AddCert(a.Certificate())
	up.AddCert(b.Certificate())
	p, paddr := startProxy(t, Config{Enforcer: enf, Inject: inj, UpstreamRoots: up})
	// The run trusts its own authority (for the injected host) and the
	// servers' own certificates (for the host it reaches end to end).
	roots := caPool(t, p)
	roots.AddCert(b.Certificate())
	c := client(paddr, roots)
	if code, body := get(t, c, a.URL+"/with"); code != 200 || strings.Contains(body, secret) {
		t.Fatalf("injected host: %d %q", code, body)
	}
	if code, body := get(t, c, b.URL+"/without"); code != 200 {
		t.Fatalf("other host: %d %q", code, body)
	}
	if h := a.headers(); len(h) != 1 || h[0].Get("X-Api-Key") != secret {
		t.Fatalf("the injected host got %v", h)
	}
	for _, h := range b.headers() {
		for k, vs := range h {
			for _, v := range vs {
				if strings.Contains(v, secret) || strings.EqualFold(k, "X-Api-Key") {
					t.Fatalf("the other host got a trace of the secret: %s: %s", k, v)
				}
			}
		}
	}
	log := decisions(enf)
	if !strings.Contains(log, fmt.Sprintf("net inject 127.0.0.1:%d true X-Api-Key from env:TEST_TOKEN", a.port())) || strings.Contains(log, secret) {
		t.Fatalf("decision log:\n%s", log)
	}
}

func TestInjectPlainHTTPOverridesGuestHeader(t *testing.T) {
	a := newServer(t, false, "127.0.0.1:0")
	s, enf := grants(t, fmt.Sprintf("net:127.0.0.1:%d", a.port()))
	s.Net[0].Inject = []grant.Inject{{Header: "Authorization", Secret: "env:T", Plain: true}}
	inj, err := Secrets(s, func(string) (string, bool) { return "Bearer real", true })
	if err != nil {
		t.Fatal(err)
	}
	_, paddr := startProxy(t, Config{Enforcer: enf, Inject: inj})
	req, _ := http.NewRequest("GET", a.URL+"/", nil)
	req.Header.Set("Authorization", "Bearer guess")
	resp, err := client(paddr, nil).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if h := a.headers(); len(h) != 1 || h[0].Values("Authorization")[0] != "Bearer real" || len(h[0].Values("Authorization")) != 1 {
		t.Fatalf("headers: %v", h)
	}
}

func TestAuthorityConstrained(t *testing.T) {
	ca, err := newAuthority([]string{"api.example.com", "127.0.0.1"}, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	for _, tc := range []struct {
		host string
		ok   bool
	}{{"api.example.com", true}, {"v2.api.example.com", true}, {"127.0.0.1", true}, {"example.com", false}, {"bank.test", false}, {"127.0.0.2", false}, {"::1", false}} {
		leaf, err := ca.leaf(tc.host) // minted outside the proxy's policy on purpose
		if err != nil {
			t.Fatal(err)
		}
		cert, _ := x509.ParseCertificate(leaf.Certificate[0])
		_, err = cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: tc.host})
		if (err == nil) != tc.ok {
			t.Errorf("%s: verify err %v, want ok=%v", tc.host, err, tc.ok)
		}
	}
	block, _ := pem.Decode(ca.pem)
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatal("PEM")
	}
}

func TestSecrets(t *testing.T) {
	dir := t.TempDir()
	write := func(name, v string) string {
		p := dir + "/" + name
		if err := writeFile(p, v); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("k", "abc\n")
	crlf := write("crlf", "a\r\nb")
	empty := write("empty", "\n")
	env := func(k string) (string, bool) { v, ok := map[string]string{"A": "x", "NL": "a\nb"}[k]; return v, ok }
	for _, tc := range []struct {
		ref, want, err string
	}{
		{"env:A", "x", ""}, {"env:MISSING", "", "not set"}, {"env:NL", "", "line break"},
		{"file:" + good, "abc", ""}, {"file:" + crlf, "", "line break"}, {"file:" + empty, "", "empty"}, {"file:" + dir + "/none", "", "no such file"},
	} {
		s := grant.Set{Net: []grant.Net{{Host: "h.test", Port: 443, Inject: []grant.Inject{{Header: "K", Secret: tc.ref}}}}}
		m, err := Secrets(s, env)
		if tc.err != "" {
			var se *SecretError
			if err == nil || !strings.Contains(err.Error(), tc.err) || strings.Contains(err.Error(), "a\nb") || !errors.As(err, &se) || !se.Invalid() {
				t.Errorf("%s: %v", tc.ref, err)
			}
			continue
		}
		if err != nil || m["h.test:443"][0].Value != tc.want {
			t.Errorf("%s: %v %v", tc.ref, m, err)
		}
	}
}

// socks5 connects through the proxy with a minimal SOCKS5 client.
func socks5(t *testing.T, paddr, host string, port int) (net.Conn, byte) {
	t.Helper()
	c, err := net.Dial("tcp", paddr)
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte{5, 1, 0})
	var r [2]byte
	io.ReadFull(c, r[:])
	if r != [2]byte{5, 0} {
		t.Fatalf("greeting reply %v", r)
	}
	req := []byte{5, 1, 0, 3, byte(len(host))}
	req = append(req, host...)
	req = binary.BigEndian.AppendUint16(req, uint16(port))
	c.Write(req)
	var rep [10]byte
	if _, err := io.ReadFull(c, rep[:]); err != nil {
		t.Fatal(err)
	}
	return c, rep[1]
}

func TestSOCKS5(t *testing.T) {
	a := newServer(t, false, "127.0.0.1:0")
	_, enf := grants(t, fmt.Sprintf("net:127.0.0.1:%d", a.port()))
	_, paddr := startProxy(t, Config{Enforcer: enf})
	c, code := socks5(t, paddr, "127.0.0.1", a.port())
	defer c.Close()
	if code != socksOK {
		t.Fatalf("granted: reply %d", code)
	}
	fmt.Fprintf(c, "GET /socks HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %v", resp, err)
	}
	c2, code := socks5(t, paddr, "127.0.0.1", a.port()+1)
	c2.Close()
	if code != socksNotAllowed {
		t.Fatalf("not granted: reply %d", code)
	}
}

func TestMalformedRequests(t *testing.T) {
	_, enf := grants(t)
	_, paddr := startProxy(t, Config{Enforcer: enf})
	for _, in := range []string{
		"GET /relative HTTP/1.1\r\nHost: x\r\n\r\n",
		"CONNECT nohostport HTTP/1.1\r\n\r\n",
		"CONNECT :0 HTTP/1.1\r\n\r\n",
		"garbage\r\n\r\n",
		"GET https://x/ HTTP/1.1\r\nHost: x\r\n\r\n",
	} {
		c, err := net.Dial("tcp", paddr)
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte(in))
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		c.Close()
		if err != nil || resp.StatusCode/100 != 4 {
			t.Errorf("%q: %v %v", in, resp, err)
		}
	}
}
