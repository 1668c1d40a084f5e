//go:build linux

package native

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/guestbuild"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/tier"
)

// hostServer is a real server on the host's loopback, outside every run's
// network namespace, that remembers what it was sent.
type hostServer struct {
	*httptest.Server
	mu   sync.Mutex
	seen []http.Header
}

func newHostServer(t *testing.T, tlsOn bool) *hostServer {
	return newHostServerAt(t, tlsOn, "127.0.0.1:0")
}

func newHostServerAt(t *testing.T, tlsOn bool, at string) *hostServer {
	t.Helper()
	s := &hostServer{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.seen = append(s.seen, r.Header.Clone())
		s.mu.Unlock()
		fmt.Fprintf(w, "reached %s\n", r.URL.Path)
	}))
	ln, err := net.Listen("tcp", at)
	if err != nil {
		t.Fatal(err)
	}
	s.Listener.Close()
	s.Listener = ln
	if tlsOn {
		s.StartTLS()
	} else {
		s.Start()
	}
	t.Cleanup(s.Close)
	return s
}

func (s *hostServer) port() int { return s.Listener.Addr().(*net.TCPAddr).Port }

func (s *hostServer) headers() []http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]http.Header{}, s.seen...)
}

// netRun runs args at S1 with g (plus a CPU budget) on an executor that
// trusts roots upstream, and returns the result and the decision log.
func netRun(t *testing.T, roots *x509.CertPool, g grant.Set, env map[string]string, args ...string) (result, grant.Log) {
	t.Helper()
	return netRunOn(t, roots, false, g, env, args...)
}

func netRunOn(t *testing.T, roots *x509.CertPool, kernelExecOnly bool, g grant.Set, env map[string]string, args ...string) (result, grant.Log) {
	t.Helper()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is missing (scripts/deps installs it)")
	}
	helper, err := guestbuild.S1Helper()
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(Config{StateDir: t.TempDir(), Self: helper, NoWarm: true, EgressRoots: roots})
	if err != nil {
		t.Fatal(err)
	}
	e.kernelExecOnly = kernelExecOnly
	if env == nil {
		env = map[string]string{}
	}
	env["PATH"] = "/usr/bin:/bin"
	u := unit.Unit{Kind: tier.Native, Image: addr.Of([]byte(args[0])), Entry: args[0], Args: args, Env: env}
	enf := grant.NewEnforcer(g)
	var out, errb bytes.Buffer
	// A bound, not a measure: the seeker reads every process's memory,
	// which on a busy machine took over a minute.
	res, err := e.Run(context.Background(), &executor.Job{Unit: u, Grants: g, Enforcer: enf, Stdout: &out, Stderr: &errb, Deadline: 10 * time.Minute})
	return result{res, err, out.String(), errb.String()}, enf.Log()
}

func mustGrants(t *testing.T, args ...string) grant.Set {
	t.Helper()
	s, err := grant.ParseArgs(append([]string{"cpu:10J"}, args...), "/")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func logText(l grant.Log) string {
	var b strings.Builder
	for _, d := range l.Decisions {
		fmt.Fprintf(&b, "%s %s %s %v %s\n", d.Kind, d.Op, d.Target, d.Allow, d.Rule)
	}
	return b.String()
}

func TestEgressGrantedAndRefused(t *testing.T) {
	a, b := newHostServer(t, false), newHostServer(t, false)
	g := mustGrants(t, fmt.Sprintf("net:127.0.0.1:%d", a.port()))
	script := fmt.Sprintf(`curl -sS http://127.0.0.1:%d/granted
curl -sS -o /dev/null -w 'refused %%{http_code}\n' http://127.0.0.1:%d/other
curl -sS --noproxy '*' --max-time 5 http://127.0.0.1:%d/direct || echo "direct: no route"
curl -sS -o /dev/null -w 'socks %%{http_code}\n' --proxy socks5h://127.0.0.1:3128 http://127.0.0.1:%d/socks`, a.port(), b.port(), a.port(), a.port())
	r, log := netRun(t, nil, g, nil, "/bin/sh", "-c", script)
	if r.err != nil {
		t.Fatal(r.err)
	}
	want := "reached /granted\nrefused 403\ndirect: no route\nsocks 200\n"
	if r.stdout != want {
		t.Fatalf("stdout %q, want %q; stderr %s", r.stdout, want, r.stderr)
	}
	if len(b.headers()) != 0 {
		t.Fatal("the refused server was reached")
	}
	lt := logText(log)
	if !strings.Contains(lt, fmt.Sprintf("net connect 127.0.0.1:%d true", a.port())) || !strings.Contains(lt, fmt.Sprintf("net connect 127.0.0.1:%d false no net grant", b.port())) {
		t.Fatalf("decision log:\n%s", lt)
	}
}

func TestEgressRebindingRefused(t *testing.T) {
	a := newHostServer(t, false)
	// Only the name was granted; it resolves (by the host's /etc/hosts) to loopback.
	g := mustGrants(t, fmt.Sprintf("net:localhost:%d", a.port()))
	r, log := netRun(t, nil, g, nil, "/usr/bin/curl", "-sS", "-w", "%{http_code}", fmt.Sprintf("http://localhost:%d/", a.port()))
	if r.err != nil || !strings.Contains(r.stdout, "DNS rebinding") || !strings.HasSuffix(r.stdout, "403") {
		t.Fatalf("%v %+v stdout %q stderr %s", r.err, r.res, r.stdout, r.stderr)
	}
	if len(a.headers()) != 0 {
		t.Fatal("the loopback server was reached through a name")
	}
	if lt := logText(log); !strings.Contains(lt, "resolves only to 127.0.0.1 (a loopback address)") {
		t.Fatalf("decision log:\n%s", lt)
	}
}

func TestEgressInjectedCredential(t *testing.T) {
	a, b := newHostServer(t, true), newHostServerAt(t, true, "127.0.0.2:0")
	roots := x509.NewCertPool()
	roots.AddCert(a.Certificate())
	roots.AddCert(b.Certificate())
	const secret = "tok-5d1c0a8e9b7f4e62a3c1"
	t.Setenv("SANDBOX_TEST_TOKEN", secret)
	g := mustGrants(t, fmt.Sprintf("net:127.0.0.1:%d", a.port()), fmt.Sprintf("net:127.0.0.2:%d", b.port()))
	// b is another host (127.0.0.2); its test certificate names only
	// 127.0.0.1, hence curl -k there.
	if err := g.Inject("127.0.0.1:X-Api-Key=env:SANDBOX_TEST_TOKEN"); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`curl -sS https://127.0.0.1:%d/with-key
curl -sS -o /dev/null -w 'other %%{http_code}\n' -k https://127.0.0.2:%d/without`, a.port(), b.port())
	r, log := netRun(t, roots, g, nil, "/bin/sh", "-c", script)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.stdout != "reached /with-key\nother 200\n" {
		t.Fatalf("stdout %q stderr %s", r.stdout, r.stderr)
	}
	if h := a.headers(); len(h) != 1 || h[0].Get("X-Api-Key") != secret {
		t.Fatalf("the granted server got %v", h)
	}
	for _, h := range b.headers() {
		for k, vs := range h {
			if strings.EqualFold(k, "X-Api-Key") || strings.Contains(strings.Join(vs, ","), secret) {
				t.Fatalf("the other host got a trace of the secret: %s", k)
			}
		}
	}
	if lt := logText(log); strings.Contains(lt, secret) || !strings.Contains(lt, "X-Api-Key from env:SANDBOX_TEST_TOKEN") {
		t.Fatalf("decision log:\n%s", lt)
	}
}

// TestSecretNeverEntersTheUnit has a guest search its environment,
// arguments, every file written since the secret existed, and the
// memory of every process it can read, after a request that got the
// secret injected. A control run, given the secret on purpose, shows the
// search finds it where it is.
func TestSecretNeverEntersTheUnit(t *testing.T) {
	bin := t.TempDir()
	os.Chmod(bin, 0o755)
	guestbuild.Install(t, guestbuild.Native, "seeker", filepath.Join(bin, "seeker"), 0o755)

	since := time.Now().Add(-time.Second)
	raw := make([]byte, 16)
	rand.Read(raw)
	const mark = "SBXSECRET-"
	secret := mark + hex.EncodeToString(raw)
	sum := sha256.Sum256([]byte(secret))
	env := map[string]string{"SEEK_MARK": mark, "SEEK_SHA256": hex.EncodeToString(sum[:]), "SEEK_SINCE": strconv.FormatInt(since.UnixNano(), 10)}

	a := newHostServer(t, true)
	roots := x509.NewCertPool()
	roots.AddCert(a.Certificate())
	t.Setenv("SANDBOX_TEST_SECRET", secret)
	g := mustGrants(t, fmt.Sprintf("net:127.0.0.1:%d", a.port()), "fs:"+bin+":ro")
	if err := g.Inject("127.0.0.1:Authorization=env:SANDBOX_TEST_SECRET"); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf("curl -sS https://127.0.0.1:%d/ >/dev/null && %s/seeker", a.port(), bin)
	r, _ := netRun(t, roots, g, env, "/bin/sh", "-c", script)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if h := a.headers(); len(h) != 1 || h[0].Get("Authorization") != secret {
		t.Fatalf("the secret did not reach the server: %v", h)
	}
	if o := r.res.Outcome; o.Status != attest.Exited {
		t.Fatalf("the seeker did not finish its search: %+v\n%s\n%s", o, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, "found 0\n") || !strings.Contains(r.stdout, "searched:") {
		t.Fatalf("the guest found the secret:\n%s\n%s", r.stdout, r.stderr)
	}
	t.Log(strings.TrimSpace(r.stdout))

	// Control: the same search, given the secret in a variable and a file.
	data := t.TempDir()
	os.Chmod(data, 0o755)
	os.WriteFile(filepath.Join(data, "leak"), []byte("x "+secret+" y"), 0o644)
	env["SEEK_CONTROL"] = secret
	g = mustGrants(t, "fs:"+bin+":ro", "fs:"+data+":ro")
	r, _ = netRun(t, nil, g, env, filepath.Join(bin, "seeker"))
	if r.err != nil || !strings.Contains(r.stdout, "FOUND in environment") || !strings.Contains(r.stdout, "FOUND in file "+data+"/leak") || !strings.Contains(r.stdout, "/mem ") {
		t.Fatalf("the control search missed the secret:\n%s\n%s", r.stdout, r.stderr)
	}
}

// TestInjectedCredentialCannotBeCopiedOut: the guest tries to get the
// injected secret back through the proxy: TRACE, plain HTTP to the TLS
// port inside a tunnel (curl -p) and as an absolute URL, and a server
// that echoes the request in base64, hex and URL encoding, gzip'd or not.
// Nothing it gets back holds the secret in any of those forms.
func TestInjectedCredentialCannotBeCopiedOut(t *testing.T) {
	const secret = "tok-91c2e7a4d5b8f3061e"
	echo := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := r.Header.Get("X-Api-Key")
		fmt.Fprintf(w, "%s %s %s %s %s\n", r.Method, v, base64.StdEncoding.EncodeToString([]byte("k="+v)), hex.EncodeToString([]byte(v)), url.QueryEscape(v))
	}))
	echo.StartTLS()
	defer echo.Close()
	port := echo.Listener.Addr().(*net.TCPAddr).Port
	roots := x509.NewCertPool()
	roots.AddCert(echo.Certificate())
	t.Setenv("SANDBOX_TEST_TOKEN", secret)
	g := mustGrants(t, fmt.Sprintf("net:127.0.0.1:%d", port))
	if err := g.Inject("127.0.0.1:X-Api-Key=env:SANDBOX_TEST_TOKEN"); err != nil {
		t.Fatal(err)
	}
	u := fmt.Sprintf("127.0.0.1:%d", port)
	script := fmt.Sprintf(`curl -sS https://%[1]s/echo; echo
curl -sS -X TRACE https://%[1]s/; echo
curl -sS -p http://%[1]s/; echo
curl -sS http://%[1]s/; echo
curl -sS --compressed https://%[1]s/; echo`, u)
	r, log := netRun(t, roots, g, nil, "/bin/sh", "-c", script)
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Logf("\n%s", r.stdout)
	for _, form := range []string{secret, base64.StdEncoding.EncodeToString([]byte("k=" + secret))[4:20], hex.EncodeToString([]byte(secret)), url.QueryEscape(secret)} {
		if strings.Contains(r.stdout+r.stderr, form) {
			t.Errorf("the guest got the secret back (%s)", form)
		}
	}
	if !strings.Contains(r.stdout, "GET ****") {
		t.Errorf("the echo did not run: %q", r.stdout)
	}
	lt := logText(log)
	for _, want := range []string{"method TRACE is not forwarded", "goes only over TLS", "redacted"} {
		if !strings.Contains(lt, want) {
			t.Errorf("decision log lacks %q:\n%s", want, lt)
		}
	}
}
