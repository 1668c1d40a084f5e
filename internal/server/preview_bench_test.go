package server

import (
	"bufio"
	"crypto/tls"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
)

// hostServer is a server of the same kind as the guest's (Python's
// threading HTTP/1.1 server, a short body), on the host's loopback: the
// direct connection a preview is compared with.
const hostServer = `
import http.server
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        body = b"HOST|" + self.path.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
`

// BenchmarkPreview: what a port preview adds to a request (issue 32),
// side by side. direct: a GET from the host to a Python server on the
// host's loopback, a new connection each time (as a preview dials the
// sandbox's port anew for each request). preview: the same GET through a
// preview's URL on the service's TLS listener, to the same kind of
// server in an S1 sandbox, the browser's connection to the service kept
// alive. preview-new-tls: each request on a new TLS connection (a first
// visit). The added latency is preview's time less direct's.
func BenchmarkPreview(b *testing.B) {
	r := newPreviewRig(b, 3600)
	cmd := exec.Command("python3", "-c", hostServer)
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Skip("no python3:", err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	port, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatal(err)
	}
	get := func(b *testing.B, c *http.Client, url, want string) {
		resp, err := c.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || !strings.HasPrefix(string(body), want) {
			b.Fatalf("GET %s: %d %q %v", url, resp.StatusCode, body, err)
		}
	}
	b.Run("direct", func(b *testing.B) {
		c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		url := "http://127.0.0.1:" + strings.TrimSpace(port) + "/x"
		for b.Loop() {
			get(b, c, url, "HOST|/x")
		}
	})
	url := "https://" + r.addr + "/preview/" + r.p.Token + "/x"
	b.Run("preview", func(b *testing.B) {
		c := r.ts.Client()
		for b.Loop() {
			get(b, c, url, "GUEST8000|/x")
		}
	})
	b.Run("preview-new-tls", func(b *testing.B) {
		c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		for b.Loop() {
			get(b, c, url, "GUEST8000|/x")
		}
	})
}
