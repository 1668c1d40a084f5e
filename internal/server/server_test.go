package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	stdlog "log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/internal/builtin"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/guestbuild"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/live"
)

// serve starts a real service on a unix socket in a new state directory
// and returns a client of it.
func serve(t testing.TB, tokens ...string) (*live.Manager, *Server, *client.Client) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the service's S1 sandboxes need root here")
	}
	helper, err := guestbuild.S1Helper()
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	ho, err := host.New(host.Config{Home: home, Warm: true, Executors: builtin.Config{S1Helper: helper, Memory: 256 << 20, Pids: 128}.Executors})
	if err != nil {
		t.Fatal(err)
	}
	h := live.New(ho)
	s := &Server{Live: h, Tokens: tokens}
	sock := filepath.Join(home, client.SocketName)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := s.UnixServer()
	go srv.Serve(ln)
	t.Cleanup(func() {
		srv.Close()
		h.Close()
	})
	c, err := client.Dial(sock, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return h, s, c
}

func status(err error) int {
	var ae *client.APIError
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}

// signalWriter says when it has seen a string.
type signalWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
	once sync.Once
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

func TestServiceLiveSandbox(t *testing.T) {
	h, _, c := serve(t)
	ctx := context.Background()
	sb, err := c.Create(ctx, client.SandboxSpec{Grants: []string{"cpu:100J"}})
	if err != nil {
		t.Fatal(err)
	}
	// Output streams as it comes: "first" arrives while the exec still runs.
	w := &signalWriter{want: "first", seen: make(chan struct{})}
	done := make(chan *client.Result, 1)
	go func() {
		r, err := c.Exec(ctx, sb.ID, client.ExecSpec{Args: []string{"sh", "-c", "echo first; sleep 2; echo second"}}, w, io.Discard)
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	select {
	case <-w.seen:
	case <-done:
		t.Fatal("the exec ended before its first line arrived: output was not streamed")
	case <-time.After(10 * time.Second):
		t.Fatal("no output")
	}
	select {
	case <-done:
		t.Fatal("the exec ended at once")
	default:
	}
	r := <-done
	if r == nil || r.Outcome.Status != "exited" || w.buf.String() != "first\nsecond\n" {
		t.Fatalf("%+v %q", r, w.buf.String())
	}
	// Stdin.
	var out bytes.Buffer
	if r, err := c.Exec(ctx, sb.ID, client.ExecSpec{Args: []string{"cat"}, Stdin: []byte("abc")}, &out, nil); err != nil || out.String() != "abc" || r.ExitStatus != 0 {
		t.Fatalf("stdin: %v %q %+v", err, out.String(), r)
	}
	// Files: up, down, list; within the grants only.
	if _, err := c.Upload(ctx, sb.ID, sb.Workspace+"/in.txt", strings.NewReader("uploaded\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if _, err := c.Exec(ctx, sb.ID, client.ExecSpec{Args: []string{"sh", "-c", "cat in.txt; echo made > out.txt; mkdir sub"}}, &out, nil); err != nil || out.String() != "uploaded\n" {
		t.Fatalf("the exec did not see the upload: %v %q", err, out.String())
	}
	out.Reset()
	if _, err := c.Download(ctx, sb.ID, sb.Workspace+"/out.txt", &out); err != nil || out.String() != "made\n" {
		t.Fatalf("download: %v %q", err, out.String())
	}
	l, err := c.ListFiles(ctx, sb.ID, sb.Workspace)
	if err != nil || len(l) != 3 || l[0].Name != "in.txt" || l[2].Name != "sub" || !l[2].Dir {
		t.Fatalf("list: %v %+v", err, l)
	}
	if _, err := c.Upload(ctx, sb.ID, "/etc/evil", strings.NewReader("x"), 0o644); status(err) != 403 {
		t.Fatalf("an upload outside the grants: %v", err)
	}
	if _, err := c.Download(ctx, sb.ID, "/etc/passwd", io.Discard); status(err) != 403 {
		t.Fatalf("a download outside the grants: %v", err)
	}
	// A guest plants links; the host follows none of them.
	if _, err := c.Exec(ctx, sb.ID, client.ExecSpec{Args: []string{"sh", "-c", "ln -s /etc/shadow evil; ln -s / root; ln -s /etc dir"}}, nil, nil); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/evil", "/root/etc/shadow", "/dir/passwd"} {
		if _, err := c.Download(ctx, sb.ID, sb.Workspace+p, io.Discard); status(err) != 403 {
			t.Errorf("download %s through a planted link: %v", p, err)
		}
	}
	if _, err := c.Upload(ctx, sb.ID, sb.Workspace+"/dir/evil", strings.NewReader("x"), 0o644); status(err) != 403 {
		t.Errorf("an upload through a planted link: %v", err)
	}
	if _, err := os.Stat("/etc/evil"); err == nil {
		t.Fatal("an upload went through a planted link")
	}
	// The runs are sealed in the host's state directory.
	runs, err := h.Runs()
	if err != nil || len(runs) < 4 {
		t.Fatalf("runs: %d %v", len(runs), err)
	}
	if err := c.Remove(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, sb.ID); status(err) != 404 {
		t.Fatalf("after rm: %v", err)
	}
}

// A client that goes away mid-exec leaves no orphan: the exec is ended,
// sealed as interrupted, and the sandbox goes on.
func TestServiceClientGoneMidExec(t *testing.T) {
	h, _, c := serve(t)
	sb, err := c.Create(context.Background(), client.SandboxSpec{})
	if err != nil {
		t.Fatal(err)
	}
	// Gone: the connection drops mid-exec (no interrupt asked for).
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://sandbox/v1/sandboxes/"+sb.ID+"/exec", strings.NewReader(`{"args": ["sh", "-c", "echo up; exec sleep 63"]}`))
	resp, err := rawClient(h).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if l, _ := bufio.NewReader(resp.Body).ReadString('\n'); !strings.Contains(l, "stdout") {
		t.Fatalf("first frame %q", l)
	}
	cancel()
	resp.Body.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		runs, _ := h.Runs()
		if len(runs) == 1 && runs[0].Status == "killed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the interrupted exec was not sealed as killed: %+v", runs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	out, _ := exec.Command("pgrep", "-f", "sleep 63").Output()
	if len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("the exec's process outlived its caller: %s", out)
	}
	var o bytes.Buffer
	if _, err := c.Exec(context.Background(), sb.ID, client.ExecSpec{Args: []string{"echo", "still here"}}, &o, nil); err != nil || o.String() != "still here\n" {
		t.Fatalf("%v %q", err, o.String())
	}
}

// rawClient talks HTTP to h's service socket, for requests the client
// package would not make.
func rawClient(h *live.Manager) *http.Client {
	sock := filepath.Join(h.Store.Root(), client.SocketName)
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
}

// A client that cancels its call interrupts it by its key, and still
// gets its sealed result; a key names one call in flight.
func TestServiceInterruptByKey(t *testing.T) {
	_, _, c := serve(t)
	sb, err := c.Create(context.Background(), client.SandboxSpec{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &signalWriter{want: "up", seen: make(chan struct{})}
	key := "a-key-of-sixteen-or-more"
	go func() {
		<-w.seen
		x := client.ExecSpec{Args: []string{"true"}, InterruptKey: key}
		if _, err := c.Exec(context.Background(), sb.ID, x, nil, nil); status(err) != 400 || !strings.Contains(err.Error(), "interrupt_key") {
			t.Errorf("a second call with the key in flight: %v", err)
		}
		cancel()
	}()
	x := client.ExecSpec{Args: []string{"sh", "-c", "echo up; exec sleep 64"}, InterruptKey: key}
	res, err := c.Exec(ctx, sb.ID, x, w, nil)
	if err != nil || res == nil || res.Outcome.Status != "killed" || !res.Sealed || res.ExitStatus != 130 {
		t.Fatalf("an interrupted exec: %+v %v\n%+v", res.Outcome, err, res)
	}
	if err := c.Interrupt(context.Background(), key); status(err) != 404 {
		t.Fatalf("interrupting a call that ended: %v", err)
	}
}

// Stdin streams: the program answers a line before the next is written,
// and a program that stops reading ends its call while its caller still
// holds stdin open.
func TestServiceStreamedStdin(t *testing.T) {
	_, _, c := serve(t)
	sb, err := c.Create(context.Background(), client.SandboxSpec{})
	if err != nil {
		t.Fatal(err)
	}
	for _, call := range []struct {
		name string
		do   func(client.ExecSpec, io.Writer) (*client.Result, error)
	}{
		{"run", func(x client.ExecSpec, w io.Writer) (*client.Result, error) {
			return c.Run(context.Background(), x, w, nil)
		}},
		{"exec", func(x client.ExecSpec, w io.Writer) (*client.Result, error) {
			return c.Exec(context.Background(), sb.ID, x, w, nil)
		}},
	} {
		t.Run(call.name, func(t *testing.T) {
			pr, pw := io.Pipe()
			w := &signalWriter{want: "got one", seen: make(chan struct{})}
			done := make(chan error, 1)
			go func() {
				res, err := call.do(client.ExecSpec{Args: []string{"sh", "-c", `read a; echo "got $a"; read b; echo "got $b"`}, StdinStream: pr}, w)
				if err == nil && res.ExitStatus != 0 {
					err = fmt.Errorf("exit status %d", res.ExitStatus)
				}
				done <- err
			}()
			io.WriteString(pw, "one\n")
			select {
			case <-w.seen:
			case <-time.After(15 * time.Second):
				t.Fatal("the answer to the first line did not come before the second was written: stdin is not streamed")
			}
			io.WriteString(pw, "two\n")
			pw.Close()
			if err := <-done; err != nil || w.buf.String() != "got one\ngot two\n" {
				t.Fatalf("%v %q", err, w.buf.String())
			}

			// head reads three bytes and exits; stdin stays open.
			pr, pw = io.Pipe()
			defer pw.Close()
			go io.WriteString(pw, "abcdef")
			var out bytes.Buffer
			res, err := call.do(client.ExecSpec{Args: []string{"head", "-c", "3"}, StdinStream: pr}, &out)
			if err != nil || res.ExitStatus != 0 || out.String() != "abc" {
				t.Fatalf("%+v %v %q", res, err, out.String())
			}
		})
	}
}

// Bad input gets a status from the one category map, naming what.
func TestServiceBadInput(t *testing.T) {
	h, srv, c := serve(t)
	h.MaxLive(1)
	raw := rawClient(h)
	var inj grant.Set
	if err := inj.Parse("net:example.com:443", "/"); err != nil {
		t.Fatal(err)
	}
	if err := inj.Inject("example.com:X-Key=env:HOME"); err != nil {
		t.Fatal(err)
	}
	b, _, err := inj.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	injected := string(b)
	ctype := "application/json"
	do := func(method, path, body string) (int, string) {
		req, _ := http.NewRequest(method, "http://sandbox"+path, strings.NewReader(body))
		req.Header.Set("Content-Type", ctype)
		resp, err := raw.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct {
		method, path, body string
		code               int
		says               string
	}{
		{"POST", "/v1/sandboxes", `{"tier": 1}`, 400, `field \"tier\"`},
		{"POST", "/v1/sandboxes", `{"tier": "S1", "colour": "red"}`, 400, `unknown field \"colour\"`},
		{"POST", "/v1/sandboxes", `{"tier": `, 400, "malformed JSON"},
		{"POST", "/v1/sandboxes", ``, 400, "empty"},
		{"POST", "/v1/sandboxes", `{} {}`, 400, "more than one"},
		{"POST", "/v1/sandboxes", `{"tier": "S9"}`, 400, `field \"tier\"`},
		{"POST", "/v1/sandboxes", `{"tier": "S4"}`, 400, "S2 (WebAssembly modules) or S5 (native programs in a microVM), not S4"},
		{"POST", "/v1/sandboxes", `{"grants": ["fs:relative:rw"]}`, 400, `field \"grants\"`},
		{"POST", "/v1/sandboxes", `{"grants": ["exec:deny:b3:` + strings.Repeat("ab", 32) + `"]}`, 400, "exec grants"},
		{"POST", "/v1/sandboxes", `{"grants": ["fs:` + h.Store.Root() + `:ro"]}`, 400, "state directory"},
		{"POST", "/v1/sandboxes", `{"listen": [70000]}`, 400, "listen port"},
		{"POST", "/v1/sandboxes", `{"pids": -1}`, 400, "pids"},
		{"POST", "/v1/sandboxes", `{"env": {"A": 1}}`, 400, `field \"env\"`},
		{"POST", "/v1/sandboxes", `{"grants": ["` + strings.Repeat("x", MaxBody) + `"]}`, 429, "at most"},
		{"GET", "/v1/sandboxes/sb-000000000000", ``, 404, "no such sandbox"},
		{"DELETE", "/v1/sandboxes/sb-000000000000", ``, 404, "no such sandbox"},
		{"POST", "/v1/sandboxes/sb-000000000000/exec", `{"args": ["true"]}`, 404, "no such sandbox"},
		{"GET", "/v1/sandboxes/sb-000000000000/files?path=/tmp", ``, 404, "no such sandbox"},
		{"POST", "/v1/sandboxes/sb-000000000000/fork", `{"count": 2}`, 404, "no such sandbox"},
		{"POST", "/v1/sandboxes/sb-000000000000/fork", `{"count": "2"}`, 400, `field \"count\"`},
		{"POST", "/v1/sandboxes/sb-000000000000/fork", `{"count": 2, "colour": "red"}`, 400, `unknown field \"colour\"`},
		{"POST", "/v1/sandboxes/sb-000000000000/fork", ``, 400, "empty"},
		{"POST", "/v1/sandboxes/sb-000000000000/ports", `{"port": 8000}`, 503, "serve --listen"},
		{"POST", "/v1/sandboxes/sb-000000000000/ports", `{"port": "8000"}`, 400, `field \"port\"`},
		{"POST", "/v1/sandboxes/sb-000000000000/ports", `{"port": 8000, "ttl": 5}`, 400, `unknown field \"ttl\"`},
		{"GET", "/v1/sandboxes/sb-000000000000/ports", ``, 404, "no such sandbox"},
		{"DELETE", "/v1/sandboxes/sb-000000000000/ports/8000", ``, 404, "no such sandbox"},
		{"DELETE", "/v1/sandboxes/sb-000000000000/ports/http", ``, 400, `port \"http\"`},
		{"DELETE", "/v1/sandboxes/sb-000000000000/ports/0", ``, 400, "1 to 65535"},
		{"DELETE", "/v1/sandboxes/sb-000000000000/ports/65536", ``, 400, "1 to 65535"},
		{"GET", "/v1/sandboxes?here=maybe", ``, 400, `query parameter \"here\"`},
		{"GET", "/v1/sandboxes/sb-000000000000/watch", ``, 400, `query parameter \"path\"`},
		{"GET", "/v1/sandboxes/sb-000000000000/watch?path=/tmp&recursive=maybe", ``, 400, `query parameter \"recursive\"`},
		{"GET", "/v1/sandboxes/sb-000000000000/watch?path=/tmp", ``, 404, "no such sandbox"},
		{"POST", "/v1/runs", `{"args": []}`, 400, `field \"args\"`},
		{"POST", "/v1/runs", `{"args": ["/no/such/program"]}`, 400, "no such file"},
		{"POST", "/v1/runs", `{"args": ["true"], "limits": {"pids": 1}}`, 400, `field \"limits.pids\"`},
		{"POST", "/v1/runs", `{"args": ["true"], "limits": {"memory_bytes": 4096}}`, 400, `field \"limits.memory_bytes\"`},
		{"POST", "/v1/runs", `{"args": ["true"], "limits": {"memory_pages": 70000}}`, 400, `field \"limits.memory_pages\"`},
		{"POST", "/v1/runs", `{"args": ["true"], "limits": {"cpus": 1}}`, 400, `unknown field \"cpus\"`},
		{"POST", "/v1/runs", `{"args": ["true"], "interrupt_key": "short"}`, 400, `field \"interrupt_key\"`},
		{"POST", "/v1/runs", `{"args": ["true"], "dir": "app"}`, 400, `field \"dir\": \"app\" is not an absolute, clean path`},
		{"POST", "/v1/runs", `{"args": ["true"], "dir": "/tmp/../etc"}`, 400, `field \"dir\"`},
		{"POST", "/v1/sandboxes/sb-000000000000/exec", `{"args": ["true"], "dir": "/tmp/"}`, 400, `field \"dir\"`},
		{"POST", "/v1/runs", `{"args": ["true"], "limits": {"cpu_millis": -1}}`, 400, `field \"limits.cpu_millis\"`},
		{"POST", "/v1/runs", `{"args": ["true"], "grants_json": {"colour": 1}}`, 400, `field \"grants_json\"`},
		// One relative-path rule (grant.Input), for grants and sets alike.
		{"POST", "/v1/runs", `{"args": ["true"], "grants": ["fs:work:rw"]}`, 400, `field \"grants\": grant \"fs:work:rw\": field path: a relative path, and there is no directory of yours`},
		{"POST", "/v1/runs", `{"args": ["true"], "grants_json": {"storage": [{"path": "work", "mode": "rw"}]}}`, 400, `field \"grants_json\": grant \"fs:work\": field path: a relative path`},
		{"POST", "/v1/sandboxes", `{"grants": ["fs:rel:ro"]}`, 400, "no directory of yours"},
		{"POST", "/v1/runs", `{"args": ["true"], "grants_json": ` + injected + `}`, 400, "injected credentials"},
		{"POST", "/v1/interrupts/no-such-call-in-flight", ``, 404, "no call of yours"},
	} {
		code, body := do(tc.method, tc.path, tc.body)
		if code != tc.code || !strings.Contains(body, tc.says) {
			t.Errorf("%s %s %.60q: %d %s; want %d saying %s", tc.method, tc.path, tc.body, code, body, tc.code, tc.says)
		}
	}
	sb, err := c.Create(context.Background(), client.SandboxSpec{Listen: []int{8000}})
	if err != nil {
		t.Fatal(err)
	}
	srv.previewAddr = "127.0.0.1:1" // as if it served --listen
	if _, err := c.Create(context.Background(), client.SandboxSpec{}); status(err) != 429 {
		t.Fatalf("over the limit of live sandboxes: %v", err)
	}
	for _, tc := range []struct {
		method, path, body string
		code               int
		says               string
	}{
		{"POST", "/v1/sandboxes/" + sb.ID + "/exec", `{"args": ["true"], "grants": ["cpu:1J"]}`, 400, "given when it is created"},
		{"POST", "/v1/sandboxes/" + sb.ID + "/exec", `{"args": ["true"], "limits": {"pids": 9}}`, 400, "given when it is created"},
		{"POST", "/v1/sandboxes/" + sb.ID + "/exec", `{"args": "true"}`, 400, `field \"args\"`},
		{"POST", "/v1/sandboxes/" + sb.ID + "/fork", `{"count": 0}`, 400, `field \"count\": 0: a fork makes 1 to 64 sandboxes`},
		{"POST", "/v1/sandboxes/" + sb.ID + "/fork", `{}`, 400, `field \"count\": 0`},
		{"POST", "/v1/sandboxes/" + sb.ID + "/fork", `{"count": 65}`, 400, `field \"count\": 65`},
		{"POST", "/v1/sandboxes/" + sb.ID + "/fork", `{"count": 1e3}`, 400, `field \"count\"`},
		{"POST", "/v1/sandboxes/" + sb.ID + "/ports", `{"port": 0}`, 400, "port 0: want 1 to 65535"},
		{"POST", "/v1/sandboxes/" + sb.ID + "/ports", `{"port": 70000}`, 400, "port 70000"},
		{"POST", "/v1/sandboxes/" + sb.ID + "/ports", `{"port": 9000}`, 400, "not one sandbox"},
		{"POST", "/v1/sandboxes/" + sb.ID + "/ports", `{"port": 8000, "ttl_seconds": -1}`, 400, `field \"ttl_seconds\"`},
		{"POST", "/v1/sandboxes/" + sb.ID + "/ports", `{"port": 8000, "ttl_seconds": 86401}`, 400, `field \"ttl_seconds\"`},
		{"POST", "/v1/sandboxes/" + sb.ID + "/ports", `{"port": 8000}`, 503, "answers on port 8000"},
		{"DELETE", "/v1/sandboxes/" + sb.ID + "/ports/8000", ``, 404, "no open preview"},
		{"PUT", "/v1/sandboxes/" + sb.ID + "/files?path=" + sb.Workspace + "/x&mode=999", `x`, 400, "mode"},
		{"PUT", "/v1/sandboxes/" + sb.ID + "/files?path=" + sb.Workspace + "/../etc/x", `x`, 400, "clean path"},
		{"PUT", "/v1/sandboxes/" + sb.ID + "/files?path=" + sb.Workspace, `x`, 400, "grant's directory itself"},
		{"GET", "/v1/sandboxes/" + sb.ID + "/files?path=" + sb.Workspace, ``, 400, "not a regular file"},
		{"GET", "/v1/sandboxes/" + sb.ID + "/files?path=" + sb.Workspace + "/none", ``, 404, "no such file"},
		{"PUT", "/v1/sandboxes/" + sb.ID + "/files?path=" + sb.Workspace + "/a%00b", `x`, 400, `path \"` + sb.Workspace + `/a\\x00b\": a NUL byte`},
		{"GET", "/v1/sandboxes/" + sb.ID + "/files?path=" + sb.Workspace + "/a%00b", ``, 400, "a NUL byte"},
		{"GET", "/v1/sandboxes/" + sb.ID + "/files?list=1&path=" + sb.Workspace + "/a%00b", ``, 400, "a NUL byte"},
	} {
		code, body := do(tc.method, tc.path, tc.body)
		if code != tc.code || !strings.Contains(body, tc.says) {
			t.Errorf("%s %s %.60q: %d %s; want %d saying %s", tc.method, tc.path, tc.body, code, body, tc.code, tc.says)
		}
	}
	// A fork with no room for its child (one live sandbox at most) is
	// answered whole, the child's error said in its place.
	f, err := c.Fork(context.Background(), sb.ID, client.ForkSpec{Count: 1})
	if err != nil || len(f.Children) != 1 || f.Children[0].Sandbox != nil || f.Children[0].Error == nil || f.Children[0].Error.Category != "limit" || !strings.Contains(f.Children[0].Error.Message, "at most 1 live sandboxes") {
		t.Fatalf("a fork with no room for its child: %+v %v", f, err)
	}
	ctype = client.StdinStreamType
	for _, tc := range []struct{ body, says string }{
		{`{"args": ["true"]}`, "without a newline"},
		{`{"args": ["true"], "stdin": "aGk="}` + "\n", `field \"stdin\"`},
		{`{"args": ["true"]} {}` + "\n", "more than one JSON value"},
		{`{"args": [1]}` + "\nstdin", `field \"args`},
		{strings.Repeat(" ", MaxBody+2) + "\n", "at most"},
	} {
		if code, body := do("POST", "/v1/runs", tc.body); code/100 != 4 || !strings.Contains(body, tc.says) {
			t.Errorf("streamed %.60q: %d %s; want a 4xx saying %s", tc.body, code, body, tc.says)
		}
	}
	ctype = "application/json"
	if code, body := do("GET", "/metrics", ""); code != 200 || !strings.Contains(body, `sandbox_http_requests_total{code="400"}`) || !strings.Contains(body, "sandbox_live_sandboxes 1") {
		t.Errorf("metrics: %d %s", code, body)
	}
	if code, body := do("GET", "/v1/openapi.json", ""); code != 200 || !strings.Contains(body, `"openapi": "3.1.0"`) {
		t.Errorf("openapi: %d %.100s", code, body)
	}
	// A closed sandbox is not forked: its run ended.
	if err := c.Remove(context.Background(), sb.ID); err != nil {
		t.Fatal(err)
	}
	if code, body := do("POST", "/v1/sandboxes/"+sb.ID+"/fork", `{"count": 1}`); code != 400 || !strings.Contains(body, "is closed: its run ended") {
		t.Errorf("fork of a closed sandbox: %d %s", code, body)
	}
}

// Uploads are bounded, and one over the bound leaves nothing behind.
func TestServiceUploadBound(t *testing.T) {
	_, s, c := serve(t)
	s.MaxUpload = 1 << 10
	sb, err := c.Create(context.Background(), client.SandboxSpec{Tier: "S2"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Upload(context.Background(), sb.ID, sb.Workspace+"/big", bytes.NewReader(make([]byte, 2<<10)), 0o644); status(err) != 429 {
		t.Fatalf("got %v", err)
	}
	if l, err := c.ListFiles(context.Background(), sb.ID, sb.Workspace); err != nil || len(l) != 0 {
		t.Fatalf("left behind: %+v %v", l, err)
	}
}

// Over TCP a token is required, and each token sees only its own.
func TestServiceTokens(t *testing.T) {
	h, s, _ := serve(t, "token-aaaaaaaaaaaaaaaa", "token-bbbbbbbbbbbbbbbb")
	_ = h
	ts := httptest.NewTLSServer(s.TCP(s.Handler()))
	defer ts.Close()
	tlsConf := &tls.Config{RootCAs: ts.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs}
	a, _ := client.Dial(ts.URL, client.Options{Token: "token-aaaaaaaaaaaaaaaa", DialTLS: (&tls.Dialer{Config: tlsConf}).DialContext})
	b, _ := client.Dial(ts.URL, client.Options{Token: "token-bbbbbbbbbbbbbbbb", DialTLS: (&tls.Dialer{Config: tlsConf}).DialContext})
	none, _ := client.Dial(ts.URL, client.Options{DialTLS: (&tls.Dialer{Config: tlsConf}).DialContext})
	bad, _ := client.Dial(ts.URL, client.Options{Token: "token-cccccccccccccccc", DialTLS: (&tls.Dialer{Config: tlsConf}).DialContext})
	ctx := context.Background()
	sb, err := a.Create(ctx, client.SandboxSpec{Tier: "S2"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(ctx, sb.ID); status(err) != 404 {
		t.Fatalf("another token's sandbox: %v", err)
	}
	if l, err := b.List(ctx); err != nil || len(l) != 0 {
		t.Fatalf("another token lists %+v %v", l, err)
	}
	if err := b.Remove(ctx, sb.ID); status(err) != 404 {
		t.Fatalf("another token removed it: %v", err)
	}
	if _, err := b.Fork(ctx, sb.ID, client.ForkSpec{Count: 1}); status(err) != 404 {
		t.Fatalf("another token forked it: %v", err)
	}
	for _, c := range []*client.Client{none, bad} {
		if _, err := c.List(ctx); status(err) != 401 {
			t.Fatalf("without a valid token: %v", err)
		}
	}
	if l, err := a.List(ctx); err != nil || len(l) != 1 {
		t.Fatalf("its own: %+v %v", l, err)
	}
	// A token's one-shot run and its exec's run are its own to see and
	// fetch, not another token's.
	res, err := a.Run(ctx, client.ExecSpec{Args: []string{"/bin/echo", "mine"}}, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	s1, err := a.Create(ctx, client.SandboxSpec{})
	if err != nil {
		t.Fatal(err)
	}
	xres, err := a.Exec(ctx, s1.ID, client.ExecSpec{Args: []string{"true"}}, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Remove(ctx, s1.ID); err != nil { // its exec's run stays its own to see
		t.Fatal(err)
	}
	for _, id := range []string{res.Run, xres.Run} {
		if _, err := a.RunReport(ctx, id); err != nil {
			t.Fatalf("its own run %s: %v", id, err)
		}
		if err := a.RunBundle(ctx, id, io.Discard); err != nil {
			t.Fatalf("its own run's bundle %s: %v", id, err)
		}
		if _, err := b.RunReport(ctx, id); status(err) != 404 {
			t.Fatalf("another token sees run %s: %v", id, err)
		}
	}
	// Health counts a token's own sandboxes, not the host's.
	for tok, want := range map[string]int{"token-aaaaaaaaaaaaaaaa": 1, "token-bbbbbbbbbbbbbbbb": 0} {
		req, _ := http.NewRequest("GET", ts.URL+"/v1/health", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var hl struct{ Sandboxes int }
		json.NewDecoder(resp.Body).Decode(&hl)
		resp.Body.Close()
		if hl.Sandboxes != want {
			t.Fatalf("health for %s: %d sandboxes, want %d", tok, hl.Sandboxes, want)
		}
	}
}

// On the unix socket, only the service's user (or root) is served, by
// the peer's credentials, even when the socket's mode would let others
// connect.
func TestServiceSocketPeer(t *testing.T) {
	h, _, _ := serve(t)
	sock := filepath.Join(h.Store.Root(), client.SocketName)
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	for d := h.Store.Root(); d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("no curl")
	}
	cmd := exec.Command(curl, "-s", "-w", "%{http_code}", "--unix-socket", sock, "http://sandbox/v1/sandboxes")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1000, Gid: 1000}}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("curl as uid 1000: %v %s", err, out)
	}
	if !strings.HasSuffix(string(out), "403") || !strings.Contains(string(out), "only the service's own user") {
		t.Fatalf("another user was served: %s", out)
	}
}

// The OpenAPI document served is the one committed in docs/.
func TestOpenAPIIsCommitted(t *testing.T) {
	b, err := os.ReadFile("../../docs/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, OpenAPI) {
		t.Fatal("docs/openapi.json and internal/server/openapi.json differ: copy one over the other")
	}
}

// TestStreamedStdinRefusedEarlyKeepsTheConnectionSound: an exec whose
// stdin streams (full duplex) refused before it starts (no such
// sandbox), again and again on one client, never trips net/http's
// "invalid concurrent Body.Read call" (golang/go#68560): the service
// closes such a connection after its answer.
func TestStreamedStdinRefusedEarlyKeepsTheConnectionSound(t *testing.T) {
	h, s, _ := serve(t)
	_ = h
	var log bytes.Buffer
	var mu sync.Mutex
	srv := s.UnixServer()
	srv.ErrorLog = stdlog.New(lockedWriter{&mu, &log}, "", 0)
	sock := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()
	c, err := client.Dial(sock, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := 0; i < 50; i++ {
		_, err := c.Exec(context.Background(), "sb-000000000000", client.ExecSpec{Args: []string{"cat"}, StdinStream: strings.NewReader("some input\n")}, io.Discard, io.Discard)
		if status(err) != 404 {
			t.Fatalf("#%d: %v", i, err)
		}
	}
	time.Sleep(100 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if strings.Contains(log.String(), "panic") {
		t.Fatalf("the server panicked:\n%s", log.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
