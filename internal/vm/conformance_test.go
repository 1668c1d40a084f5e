//go:build linux

package vm

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/internal/errs"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/executor/executortest"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/tier"
)

// S5 passes the executor conformance suite: native programs in a QEMU
// microVM booted from the project's guest image, its live sessions (one
// VM, suspended to a memory image and resumed) included. A refusal is
// the VM's egress proxy's: a net grant to one destination, a connection
// to another. (TCG, as the other tests here: the suite checks what the
// contract says, not the accelerator.)
func TestConformance(t *testing.T) {
	im := image(t, "")
	e := New(Config{ImageDir: filepath.Dir(im.Kernel), Accel: "tcg", Jail: jail(t), StateDir: t.TempDir()})[0]
	sh := executortest.Shell{}
	const net = "net:127.0.0.1:9" // a destination the programs never reach: it gives them the proxy
	deny := executortest.Program{
		Job:    sh.Job("cd /; curl -sS -o /dev/null -w '%{http_code}\\n' http://127.0.0.1:1/", net),
		Denied: &executortest.Denial{Kind: grant.KindNet, Target: "127.0.0.1:1"},
	}
	s := sh.Subject(e)
	s.Deny = deny
	s.Unavailable = func(t *testing.T) (executor.Executor, string) {
		return New(Config{ImageDir: t.TempDir(), Accel: "tcg", Jail: jail(t)})[0], "image"
	}
	// What a session's Start leaves running runs from the guest image's
	// own busybox: a process left running from a share (/usr) would hold
	// it, and a VM is suspended only once the guest has let go of its
	// shares.
	own := executortest.Shell{Env: map[string]string{"PATH": "/sandbox/bin:/usr/bin:/bin", "SCRIPT": executortest.StartScript}}
	s.Session = &executortest.SessionPrograms{
		Spec: func(t *testing.T) executor.SessionSpec {
			g, err := grant.ParseArgs([]string{"fs:" + t.TempDir() + ":rw", net}, "/")
			if err != nil {
				t.Fatal(err)
			}
			g.Kernel = true // a live S5 sandbox's grants say it is behind the kernel boundary
			return executor.SessionSpec{Grants: g, Listen: []int{listenPort}}
		},
		Start: executortest.Program{Job: own.Job(`cd /; exec /sandbox/bin/sh -c "$SCRIPT"`, net)},
		Check: executortest.Program{Job: sh.Job(executortest.CheckScript, net), Stdout: executortest.CheckOutput},
		Hang:  executortest.Program{Job: sh.Job("echo ready; exec sleep 1000", net), Ready: "ready"},
		Deny:  deny,
		// The guest image's own nc, greeting each connection, left
		// running off every share (a suspension waits for the guest to
		// let go of them).
		Listen: &executortest.ListenPrograms{Port: listenPort, Greeting: "hello from inside\n",
			Serve: executortest.Program{Job: own.Job(serveScript, net), Stdout: "listening\n"}},
	}
	executortest.Run(t, s)
}

// listenPort is the port the conformance suite's sessions listen on.
const listenPort = 8000

// serveScript leaves a server on listenPort, on every address of the
// guest, that greets each connection; it ends once the server listens.
const serveScript = `cd /
/sandbox/bin/nc -ll -p 8000 -e /sandbox/bin/echo hello from inside </dev/null >/dev/null 2>&1 &
until /sandbox/bin/netstat -ltn | /sandbox/bin/grep -q ':8000 '; do /sandbox/bin/sleep 0.1; done
echo listening`

// The Firecracker executor, over the stand-in VMM the tests use (the
// hardware edge: no Firecracker here), passes the suite with vm units in
// the guest image's own shell. It shares no directory and has no user
// network: its refusal is a storage grant, refused before anything runs.
func TestConformanceFirecrackerStandIn(t *testing.T) {
	f, _ := fakeFirecracker(t)
	manifest, err := os.ReadFile(filepath.Join(f.cfg.ImageDir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	sh := executortest.Shell{Kind: tier.VM, Path: "/sandbox/bin/sh", Image: manifest, Env: map[string]string{"PATH": "/sandbox/bin"}}
	s := sh.Subject(f)
	s.Deny = executortest.Program{Job: sh.Job("echo ran", "fs:"+t.TempDir()+":rw"), Refused: true}
	executortest.Run(t, s)
}

// A live S5 sandbox's ports: a port under 1024 and a port asked twice
// are forwarded (the monitor's namespace lets it bind any, once), and a
// dial of a stilled guest, which never answers what listens, ends by
// its bound whatever the caller's context, and holds nothing.
func TestDialPortBounded(t *testing.T) {
	im := image(t, "")
	e := New(Config{ImageDir: filepath.Dir(im.Kernel), Accel: "tcg", Jail: jail(t), StateDir: t.TempDir()})[0]
	g, err := grant.ParseArgs([]string{"fs:" + t.TempDir() + ":rw"}, "/")
	if err != nil {
		t.Fatal(err)
	}
	g.Kernel = true
	ctx := context.Background()
	if _, err := e.OpenSession(ctx, executor.SessionSpec{Grants: g, Listen: []int{0}}); errs.Of(err) != errs.Invalid {
		t.Fatalf("port 0: %v", err)
	}
	s, err := e.OpenSession(ctx, executor.SessionSpec{Grants: g, Listen: []int{80, 80, 8000}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	d := s.(executor.PortDialer)
	if _, err := d.DialPort(ctx, 80); err == nil || !strings.Contains(err.Error(), "nothing in the guest listens") {
		t.Fatalf("port 80, nothing listening: %v", err)
	}
	defer func(w time.Duration) { dialWait = w }(dialWait)
	dialWait = 500 * time.Millisecond
	f := s.(executor.Freezer)
	if err := f.Freeze(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		c, err := d.DialPort(context.Background(), 8000)
		if c != nil {
			c.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a stilled guest's port was reached")
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("a dial of a stilled guest did not end by its bound")
	}
	if err := f.Thaw(ctx); err != nil {
		t.Fatal(err)
	}
}
