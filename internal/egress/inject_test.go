package egress

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/opensubstrate/sandbox/internal/grant"
)

const leakSecret = "Bearer tok-7f3a9c2e5b1d4086a2f1"

// echoServer answers every request with what it got, in many encodings:
// the injected header as it is, base64 (of the header and of the whole
// request dump, at whatever alignment it falls), hex and URL-encoded, in
// the body and in a response header; gzip'd when the path says so.
func echoServer(t *testing.T, tlsOn bool) *server {
	t.Helper()
	s := &server{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := r.Header.Get("Authorization")
		var dump bytes.Buffer
		r.Header.Write(&dump)
		body := fmt.Sprintf("method %s\nraw %s\nb64 %s\nb64dump x%s\nhex %s\nurl %s\ntoken %s\n", r.Method, v,
			base64.StdEncoding.EncodeToString([]byte(v)), base64.StdEncoding.EncodeToString(dump.Bytes()),
			hex.EncodeToString([]byte(v)), url.QueryEscape(v), strings.TrimPrefix(v, "Bearer "))
		w.Header().Set("X-Echo", v)
		if strings.HasSuffix(r.URL.Path, "/gzip") {
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			io.WriteString(zw, body)
			zw.Close()
			return
		}
		if strings.HasSuffix(r.URL.Path, "/br") {
			w.Header().Set("Content-Encoding", "br")
		}
		io.WriteString(w, body)
	})
	s.start(t, tlsOn, "127.0.0.1:0", h)
	return s
}

// injectedProxy is a proxy with leakSecret injected into requests to s.
func injectedProxy(t *testing.T, s *server, plain bool) (*Proxy, string, *grant.Enforcer) {
	t.Helper()
	g, enf := grants(t, fmt.Sprintf("net:127.0.0.1:%d", s.port()))
	g.Net[0].Inject = []grant.Inject{{Header: "Authorization", Secret: "env:T", Plain: plain}}
	inj, err := Secrets(g, func(string) (string, bool) { return leakSecret, true })
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Enforcer: enf, Inject: inj}
	if s.TLS != nil {
		cfg.UpstreamRoots = caPoolOf(s)
	}
	p, paddr := startProxy(t, cfg)
	return p, paddr, enf
}

func caPoolOf(s *server) *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(s.Certificate())
	return pool
}

// leaks reports the forms of leakSecret a text holds.
func leaks(text string) []string {
	var out []string
	for _, p := range patterns([]Header{{Value: leakSecret}}) {
		if strings.Contains(text, string(p.b)) {
			out = append(out, p.form+" "+string(p.b))
		}
	}
	return out
}

// TestInjectedSecretDoesNotComeBack: a server that echoes the request in
// every encoding (and gzip'd) never hands the secret back to the run;
// each redaction is logged. A response in an encoding the proxy cannot
// read is refused.
func TestInjectedSecretDoesNotComeBack(t *testing.T) {
	s := echoServer(t, true)
	p, paddr, enf := injectedProxy(t, s, false)
	c := client(paddr, caPool(t, p))
	for _, path := range []string{"/plain", "/gzip"} {
		resp, err := c.Get(s.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var hdr bytes.Buffer
		resp.Header.Write(&hdr)
		if l := leaks(string(b) + hdr.String()); len(l) > 0 || resp.StatusCode != 200 || !strings.Contains(string(b), "method GET") {
			t.Errorf("%s: %d, the run got back %v:\n%s%s", path, resp.StatusCode, l, hdr.String(), b)
		}
	}
	if h := s.headers(); len(h) != 2 || h[0].Get("Authorization") != leakSecret {
		t.Fatalf("the server got %v", h)
	}
	log := decisions(enf)
	for _, form := range []string{"as it is", "base64", "hex", "URL-encoded"} {
		if !strings.Contains(log, "the response held the injected secret ("+form+"); redacted") {
			t.Errorf("no redaction of the %s form logged:\n%s", form, log)
		}
	}
	if strings.Contains(log, "tok-7f3a") {
		t.Fatalf("the log holds the secret:\n%s", log)
	}
	resp, err := c.Get(s.URL + "/br")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || len(leaks(string(b))) > 0 {
		t.Errorf("a br response: %d %q", resp.StatusCode, b)
	}
}

// TestInjectRefusesTraceAndPlainHTTP: TRACE (which would echo the
// secret) and any method an API does not need are refused; the secret
// is never sent in clear: not to an absolute http:// URL, and not as
// plain HTTP inside a CONNECT tunnel to the TLS port (curl -p). With the
// injection marked plain, plain HTTP is allowed.
func TestInjectRefusesTraceAndPlainHTTP(t *testing.T) {
	s := echoServer(t, true)
	p, paddr, enf := injectedProxy(t, s, false)
	c := client(paddr, caPool(t, p))
	for _, m := range []string{"TRACE", "TRACK", "PROPFIND"} {
		req, _ := http.NewRequest(m, s.URL+"/", nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", m, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed || len(leaks(string(b))) > 0 {
			t.Errorf("%s: %d %q", m, resp.StatusCode, b)
		}
	}
	if len(s.headers()) != 0 {
		t.Fatalf("a refused method reached the server: %v", s.headers())
	}
	hostport := strings.TrimPrefix(s.URL, "https://")
	// Plain HTTP to the TLS port, absolute form.
	if code, body := get(t, c, "http://"+hostport+"/"); code != http.StatusForbidden || len(leaks(body)) > 0 {
		t.Errorf("plain http to the injected host: %d %q", code, body)
	}
	// Plain HTTP inside a CONNECT tunnel (curl -p http://host:TLSPORT/).
	conn, err := net.Dial("tcp", paddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\nGET / HTTP/1.1\r\nHost: %s\r\n\r\n", hostport, hostport, hostport)
	br := bufio.NewReader(conn)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusForbidden || len(leaks(string(b))) > 0 {
		t.Errorf("plain HTTP in a tunnel: %d %q", resp.StatusCode, b)
	}
	if len(s.headers()) != 0 {
		t.Fatalf("the secret went out: %v", s.headers())
	}
	if log := decisions(enf); !strings.Contains(log, "method TRACE is not forwarded") || !strings.Contains(log, "goes only over TLS") {
		t.Errorf("decision log:\n%s", log)
	}

	// Marked plain (a loopback test server): allowed, still scrubbed.
	ps := echoServer(t, false)
	_, paddr, _ = injectedProxy(t, ps, true)
	if code, body := get(t, client(paddr, nil), ps.URL+"/"); code != 200 || len(leaks(body)) > 0 || len(ps.headers()) != 1 {
		t.Errorf("plain injection: %d %q %v", code, body, ps.headers())
	}
}

// TestRedactorStreams: a body read a byte at a time is redacted as the
// whole body is, whatever the chunk boundaries.
func TestRedactorStreams(t *testing.T) {
	pats := patterns([]Header{{Value: leakSecret}})
	for _, text := range []string{
		"", "no secret here", leakSecret, "x" + leakSecret + "y" + leakSecret,
		strings.Repeat("a", 70000) + hex.EncodeToString([]byte(leakSecret)) + strings.Repeat("b", 3),
		base64.StdEncoding.EncodeToString([]byte("zz" + leakSecret + "zz")),
	} {
		want := []byte(text)
		redactBytes(want, pats)
		r := newRedactor(iotest.OneByteReader(strings.NewReader(text)), pats, func(string) {})
		got, err := io.ReadAll(r)
		if err != nil || !bytes.Equal(got, want) || len(got) != len(text) {
			t.Errorf("%.40q: streamed %.60q, want %.60q (%v)", text, got, want, err)
		}
		if l := leaks(string(got)); len(l) > 0 {
			t.Errorf("%.40q: still holds %v", text, l)
		}
	}
}

// FuzzRedactor: streaming never differs from redacting the whole body,
// and never changes its length.
func FuzzRedactor(f *testing.F) {
	f.Add([]byte("ab"+leakSecret+"cd"), uint8(3))
	f.Add([]byte(base64.StdEncoding.EncodeToString([]byte(leakSecret))), uint8(1))
	pats := patterns([]Header{{Value: leakSecret}})
	f.Fuzz(func(t *testing.T, body []byte, chunk uint8) {
		want := append([]byte(nil), body...)
		redactBytes(want, pats)
		var src io.Reader = bytes.NewReader(body)
		if chunk%2 == 1 {
			src = iotest.HalfReader(src)
		} else {
			src = iotest.OneByteReader(src)
		}
		got, err := io.ReadAll(newRedactor(src, pats, func(string) {}))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("streamed %q, want %q (%v)", got, want, err)
		}
	})
}
