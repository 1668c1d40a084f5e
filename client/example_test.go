package client_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/internal/builtin"
	"github.com/opensubstrate/sandbox/internal/guestbuild"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/live"
	"github.com/opensubstrate/sandbox/internal/server"
)

// agent is what an agent harness does with a live sandbox: make it,
// start a server in one exec, talk to it from the next, exchange files,
// remove it. Every exec is a sealed run.
func agent(ctx context.Context, c *client.Client, out io.Writer) error {
	sb, err := c.Create(ctx, client.SandboxSpec{Grants: []string{"cpu:100J"}, Listen: []int{8000}})
	if err != nil {
		return err
	}
	defer c.Remove(ctx, sb.ID)
	if _, err := c.Upload(ctx, sb.ID, sb.Workspace+"/index.html", strings.NewReader("hello from the workspace\n"), 0o644); err != nil {
		return err
	}
	if _, err := c.Exec(ctx, sb.ID, client.ExecSpec{Args: []string{"sh", "-c", "python3 -m http.server -b 127.0.0.1 8000 >/dev/null 2>&1 &"}}, out, out); err != nil {
		return err
	}
	r, err := c.Exec(ctx, sb.ID, client.ExecSpec{Args: []string{"sh", "-c", "for i in $(seq 50); do curl -sf --noproxy '*' http://127.0.0.1:8000/index.html && exit; sleep 0.1; done; exit 1"}}, out, out)
	if err != nil {
		return err
	}
	if r.ExitStatus != 0 {
		return fmt.Errorf("curl: %s", r.Outcome.Status)
	}
	fmt.Fprintf(out, "sealed as %s, %s\n", r.Run[:9], r.Outcome.Status)
	return nil
}

// Example: an agent harness's session with a live sandbox, against the
// service $SANDBOX_HOST names (or `sandbox serve`'s default socket).
func Example() {
	addr := os.Getenv("SANDBOX_HOST")
	if addr == "" {
		home, _ := os.UserHomeDir()
		addr = filepath.Join(home, ".local/state/sandbox", client.SocketName)
	}
	// An https:// service's certificate is checked against the system's
	// roots here (tls.Dialer's Config holds others).
	c, err := client.Dial(addr, client.Options{Token: os.Getenv("SANDBOX_TOKEN"), DialTLS: (&tls.Dialer{}).DialContext})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	if err := agent(context.Background(), c, os.Stdout); err != nil {
		fmt.Println(err)
	}
}

// The example, run against a real service.
func TestExampleAgainstAService(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("live S1 sandboxes need root here")
	}
	helper, err := guestbuild.S1Helper()
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	h, err := host.New(host.Config{Home: home, Warm: true, Executors: builtin.Config{S1Helper: helper}.Executors})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	s := &server.Server{Live: live.New(h)}
	sock := filepath.Join(home, client.SocketName)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := s.UnixServer()
	go srv.Serve(ln)
	defer srv.Close()
	c, err := client.Dial("unix:"+sock, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var out strings.Builder
	if err := agent(context.Background(), c, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "hello from the workspace") || !strings.Contains(out.String(), "sealed as b3:") {
		t.Fatalf("the example's output:\n%s", out.String())
	}
	if l, _ := c.List(context.Background()); len(l) != 0 {
		t.Fatalf("left: %+v", l)
	}
	if _, err := client.Dial("ftp://x", client.Options{}); err == nil {
		t.Fatal("a bad address was taken")
	}
}
