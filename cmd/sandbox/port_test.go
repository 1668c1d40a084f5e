package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/client"
)

// echoServer is a server for a sandbox's port 8000 that answers each GET
// with what it was asked: the path, the Authorization and Host headers.
const echoServer = `cd "$HOME" 2>/dev/null; /usr/bin/python3 -c '
import http.server, os, socket, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("%s|%s|%s" % (self.path, self.headers.get("Authorization", "-"), self.headers.get("Host", "-"))).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Set-Cookie", "s=1; Path=/")
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
s = http.server.HTTPServer(("127.0.0.1", 8000), H)
if os.fork():
    os._exit(0)
os.setsid()
s.serve_forever()
' </dev/null >/dev/null 2>&1`

// A user previews a sandbox's port as the CLI and API offer it: the URL
// reaches the port through the service's TLS listener with no bearer
// token, passes the path and query but never the caller's credentials,
// gives the page an origin of its own, is the owner's alone to make,
// list and revoke, and is 404 once revoked, 410 once its sandbox ended.
func TestPortPreview(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("live S1 sandboxes need root here")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	home := t.TempDir()
	certFile, keyFile, pool := selfSigned(t)
	const tokA, tokB = "port-token-aaaaaaaaaaaaaaa", "port-token-bbbbbbbbbbbbbbb"
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte(tokA+"\n"+tokB+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := ln.Addr().String()
	ln.Close()
	serveLog := &syncBuffer{}
	cmd := cliCmd(t, home, nil, "serve", "--listen", listen, "--tls-cert", certFile, "--tls-key", keyFile, "--token-file", tokens)
	cmd.Stderr = serveLog
	startServeCmd(t, home, cmd)
	tlsConf := &tls.Config{RootCAs: pool}
	a, err := client.Dial("https://"+listen, client.Options{Token: tokA, DialTLS: (&tls.Dialer{Config: tlsConf}).DialContext})
	if err != nil {
		t.Fatal(err)
	}
	b, err := client.Dial("https://"+listen, client.Options{Token: tokB, DialTLS: (&tls.Dialer{Config: tlsConf}).DialContext})
	if err != nil {
		t.Fatal(err)
	}
	waitHealthy(t, ctx, a, listen)
	web := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConf}, Timeout: time.Minute,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	fetch := func(u string, header ...string) (int, string, http.Header) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, "GET", u, nil)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := web.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), resp.Header
	}

	sb, err := a.Create(ctx, client.SandboxSpec{Listen: []int{8000}})
	if err != nil {
		t.Fatal(err)
	}
	// Nothing listens yet: no URL is made.
	if _, err := a.Expose(ctx, sb.ID, client.PreviewSpec{Port: 8000}); status(err) != 503 {
		t.Fatalf("nothing listening: %v", err)
	}
	startEcho(t, ctx, a, sb.ID)
	// Another token's caller cannot expose, list or revoke it.
	if _, err := b.Expose(ctx, sb.ID, client.PreviewSpec{Port: 8000}); status(err) != 404 {
		t.Fatalf("another token exposes: %v", err)
	}
	p, err := a.Expose(ctx, sb.ID, client.PreviewSpec{Port: 8000, TTLSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	want := "https://" + listen + "/preview/" + p.Token + "/"
	if p.URL != want || p.Port != 8000 || p.Sandbox != sb.ID || time.Until(p.Expires) > 600*time.Second || time.Until(p.Expires) < 500*time.Second {
		t.Fatalf("preview %+v, want the URL %s", p, want)
	}
	if _, err := b.Previews(ctx, sb.ID); status(err) != 404 {
		t.Fatalf("another token lists: %v", err)
	}
	if _, err := b.Unexpose(ctx, sb.ID, 8000); status(err) != 404 {
		t.Fatalf("another token revokes: %v", err)
	}

	// Through the URL, with no token; the caller's credentials stay out.
	code, body, hdr := fetch(p.URL+"some/page?q=1", "Authorization", "Bearer "+tokA)
	if code != 200 || body != "/some/page?q=1|-|localhost" {
		t.Fatalf("GET through the preview: %d %q", code, body)
	}
	if csp := strings.Join(hdr.Values("Content-Security-Policy"), ";"); !strings.Contains(csp, "sandbox allow-scripts") || strings.Contains(csp, "allow-same-origin") {
		t.Fatalf("the page's Content-Security-Policy: %q", csp)
	}
	if c := hdr.Get("Set-Cookie"); c != "sbp_s=1; Path=/preview/"+p.Token+"/" {
		t.Fatalf("the sandbox's cookie is not kept to its preview: %q", c)
	}
	if hdr.Get("Referrer-Policy") != "no-referrer" {
		t.Fatalf("Referrer-Policy %q", hdr.Get("Referrer-Policy"))
	}
	if code, _, hdr := fetch("https://" + listen + "/preview/" + p.Token); code != 301 || hdr.Get("Location") != "/preview/"+p.Token+"/" {
		t.Fatalf("the token without its slash: %d %q", code, hdr.Get("Location"))
	}
	for _, u := range []string{"/preview/", "/preview/x/", "/preview/" + strings.Repeat("A", 43) + "/", "/preview/" + p.Token + "A/"} {
		if code, body, _ := fetch("https://" + listen + u); code != 404 || !strings.Contains(body, "no such preview") {
			t.Fatalf("%s: %d %q", u, code, body)
		}
	}
	// The API still asks its token beside the previews.
	if code, _, _ := fetch("https://" + listen + "/v1/sandboxes"); code != 401 {
		t.Fatalf("the API without a token: %d", code)
	}

	// The CLI: the host's own user on the socket does not see a token's
	// sandbox; the token's holder, over TLS, lists, makes and revokes.
	if _, _, rc := sandbox(t, home, "port", sb.ID); rc != 3 {
		t.Fatalf("the host's own user lists a token's previews: exit %d, want 3", rc)
	}
	if _, errOut, rc := sandbox(t, home, "port", sb.ID, "8000", "--ttl", "30h"); rc != 2 || !strings.Contains(errOut, "--ttl") {
		t.Fatalf("--ttl 30h: %d %s", rc, errOut)
	}
	if _, errOut, rc := sandbox(t, home, "port", sb.ID, "--revoke"); rc != 2 || !strings.Contains(errOut, "--revoke needs the PORT") {
		t.Fatalf("--revoke without a port: %d %s", rc, errOut)
	}
	asA := func(args ...string) (string, string) {
		t.Helper()
		cmd := cliCmd(t, home, []string{"SANDBOX_HOST=https://" + listen, "SANDBOX_TOKEN=" + tokA, "SSL_CERT_FILE=" + certFile}, args...)
		var o, e strings.Builder
		cmd.Stdout, cmd.Stderr = &o, &e
		if err := cmd.Run(); err != nil {
			t.Fatalf("sandbox %s: %v: %s", strings.Join(args, " "), err, e.String())
		}
		return o.String(), e.String()
	}
	out, _ := asA("port", sb.ID, "--json")
	var list client.Previews
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list.Previews) != 1 || list.Previews[0].ID != p.ID || list.Previews[0].Token != "" {
		t.Fatalf("port --json: %s %v", out, err)
	}
	out, errOut := asA("port", sb.ID, "8000", "--ttl", "2m")
	url := strings.TrimSpace(out)
	if !strings.HasPrefix(url, "https://"+listen+"/preview/") || !strings.Contains(errOut, "port 8000 of "+sb.ID) {
		t.Fatalf("port 8000: %q %q", out, errOut)
	}
	if code, body, _ := fetch(url + "x"); code != 200 || !strings.HasPrefix(body, "/x|") {
		t.Fatalf("the CLI's preview: %d %q", code, body)
	}
	if out, _ := asA("port", sb.ID, "8000", "--revoke"); !strings.Contains(out, "revoked 2 preview(s) of port 8000") {
		t.Fatalf("port --revoke: %q", out)
	}
	for _, u := range []string{url, p.URL} {
		if code, _, _ := fetch(u); code != 404 {
			t.Fatalf("a revoked preview %s: %d", u, code)
		}
	}
	if _, err := a.Unexpose(ctx, sb.ID, 8000); status(err) != 404 {
		t.Fatalf("revoke with none open: %v", err)
	}

	// Listed by the API without tokens.
	p1, err := a.Expose(ctx, sb.ID, client.PreviewSpec{Port: 8000})
	if err != nil {
		t.Fatal(err)
	}
	ps, err := a.Previews(ctx, sb.ID)
	if err != nil || len(ps) != 1 || ps[0].Token != "" || ps[0].URL != "" || ps[0].ID != p1.ID {
		t.Fatalf("previews %+v %v", ps, err)
	}
	if n, err := a.Unexpose(ctx, sb.ID, 8000); n != 1 || err != nil {
		t.Fatalf("revoke: %d %v", n, err)
	}

	// The service's log never holds a token.
	if log := serveLog.String(); strings.Contains(log, p.Token) || strings.Contains(log, p1.Token) || !strings.Contains(log, "/preview/"+p.ID) {
		t.Fatal("the service's log holds a preview's token, or not its address")
	}

	// A preview ends with its sandbox.
	p2, err := a.Expose(ctx, sb.ID, client.PreviewSpec{Port: 8000})
	if err != nil {
		t.Fatal(err)
	}
	if code, _, _ := fetch(p2.URL); code != 200 {
		t.Fatalf("a new preview: %d", code)
	}
	if err := a.Remove(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if code, body, _ := fetch(p2.URL); code != 410 || !strings.Contains(body, "no longer live") {
		t.Fatalf("its sandbox removed: %d %q", code, body)
	}
}

// status is an API error's HTTP status (0: none).
func status(err error) int {
	var ae *client.APIError
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}

// With --preview-listen, previews are served on an origin of their own:
// the URL names that listener's port, the API's listener serves none,
// and the preview listener serves nothing but previews.
func TestPortPreviewOnItsOwnOrigin(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("live S1 sandboxes need root here")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	home := t.TempDir()
	certFile, keyFile, pool := selfSigned(t)
	const tok = "port-token-apart-aaaaaaaaaa"
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, ln.Addr().String())
		ln.Close()
	}
	api, previews := addrs[0], addrs[1]
	startServeWith(t, home, nil, "--listen", api, "--preview-listen", previews, "--tls-cert", certFile, "--tls-key", keyFile, "--token-file", tokens, "--ui")
	tlsConf := &tls.Config{RootCAs: pool}
	a, err := client.Dial("https://"+api, client.Options{Token: tok, DialTLS: (&tls.Dialer{Config: tlsConf}).DialContext})
	if err != nil {
		t.Fatal(err)
	}
	waitHealthy(t, ctx, a, api)
	web := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConf}, Timeout: time.Minute}
	fetch := func(u string) (int, string) {
		t.Helper()
		resp, err := web.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	sb, err := a.Create(ctx, client.SandboxSpec{Listen: []int{8000}})
	if err != nil {
		t.Fatal(err)
	}
	startEcho(t, ctx, a, sb.ID)
	p, err := a.Expose(ctx, sb.ID, client.PreviewSpec{Port: 8000})
	if err != nil {
		t.Fatal(err)
	}
	if want := "https://" + previews + "/preview/" + p.Token + "/"; p.URL != want {
		t.Fatalf("URL %s, want %s", p.URL, want)
	}
	if code, body := fetch(p.URL + "x"); code != 200 || !strings.HasPrefix(body, "/x|") {
		t.Fatalf("through the preview listener: %d %q", code, body)
	}
	if code, _ := fetch("https://" + api + "/preview/" + p.Token + "/x"); code != 401 {
		t.Fatalf("the API's listener served a preview: %d", code)
	}
	for _, path := range []string{"/v1/sandboxes", "/ui/", "/v1/health"} {
		if code, _ := fetch("https://" + previews + path); code != 404 {
			t.Fatalf("the preview listener served %s: %d", path, code)
		}
	}
	if _, errOut, code := sandbox(t, t.TempDir(), "serve", "--preview-listen", "127.0.0.1:0"); code != 2 || !strings.Contains(errOut, "--preview-listen needs --listen") {
		t.Fatalf("--preview-listen alone: %d %s", code, errOut)
	}
}

// startEcho starts echoServer in sandbox id and waits until it listens.
func startEcho(t *testing.T, ctx context.Context, a *client.Client, id string) {
	t.Helper()
	if _, err := a.Exec(ctx, id, client.ExecSpec{Args: []string{"sh", "-c", echoServer + "; for i in $(seq 100); do /usr/bin/python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 8000))' 2>/dev/null && exit 0; sleep 0.1; done; exit 1"}}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
}

// waitHealthy waits until the service answers a on addr (it listens on
// TCP a moment after its socket).
func waitHealthy(t *testing.T, ctx context.Context, a *client.Client, addr string) {
	t.Helper()
	for i := 0; ; i++ {
		if err := a.Health(ctx); err == nil {
			return
		} else if i > 200 {
			t.Fatalf("the service does not answer on %s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
