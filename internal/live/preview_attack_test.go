package live

// Attack tests of port previews at the manager (preview.go) and the S1
// dial (native/port_linux.go): each either reproduces a finding (it
// fails until the finding is fixed) or proves that a defence holds.

import (
	"context"
	"errors"
	"github.com/opensubstrate/sandbox/internal/errs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// guestDaemon runs a python program in sandbox id that binds before it
// forks: the exec returns once it listens.
func guestDaemon(t *testing.T, h *Manager, id, prog string) {
	t.Helper()
	execIn(t, h, id, "/usr/bin/python3", "-c", prog+`
if os.fork():
    os._exit(0)
os.setsid()
fd = os.open("/dev/null", os.O_RDWR)
for i in (0, 1, 2):
    os.dup2(fd, i)
serve()
`)
}

// threads is this process's thread count.
func threads(t *testing.T) int {
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
	t.Fatal("no Threads: line")
	return 0
}

// foreignThreads counts this process's threads whose network namespace
// is not the process's own (its main thread's).
func foreignThreads(t *testing.T) int {
	t.Helper()
	own, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	tasks, _ := filepath.Glob("/proc/self/task/*/ns/net")
	n := 0
	for _, p := range tasks {
		if l, err := os.Readlink(p); err == nil && l != own {
			n++
		}
	}
	return n
}

// netnsFDs counts this process's open descriptors of network namespaces.
func netnsFDs(t *testing.T) int {
	t.Helper()
	fds, _ := filepath.Glob("/proc/self/fd/*")
	n := 0
	for _, p := range fds {
		if l, err := os.Readlink(p); err == nil && strings.HasPrefix(l, "net:[") {
			n++
		}
	}
	return n
}

// FOUND (high), fixed: every dial through a preview held an OS thread
// locked in the sandbox's network namespace until the connect returns,
// and nothing bounded how many ran at once (now: MaxPreviewDials,
// MaxSandboxDials, MaxSandboxConns and native.DialTimeout). A guest whose listen queue
// is full (listen(0), never accept: the kernel drops the SYNs, connect
// retries for ~2 minutes) makes each preview request pin a thread;
// anyone with the URL opening a few thousand requests drives the
// service to Go's 10000-thread limit, a fatal error that ends the
// service and every tenant's live sandbox with it.
func TestAttackPreviewDialsPinUnboundedThreads(t *testing.T) {
	h := newS1Host(t)
	ctx := context.Background()
	const port = 8765
	info, err := h.Create(ctx, SandboxSpec{Grants: grants(t), Listen: []int{port}})
	if err != nil {
		t.Fatal(err)
	}
	guestDaemon(t, h, info.ID, `
import os, socket, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 8765))
s.listen(0)
def serve():
    time.sleep(100000)
`)
	// The probe's connection fills the queue of one; it is never
	// accepted.
	p, err := h.Expose(ctx, info.ID, "", port, 0)
	if err != nil {
		t.Fatal(err)
	}
	before := threads(t)
	const n = 300
	dctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	var wg sync.WaitGroup
	var mu sync.Mutex
	early := 0
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := h.DialPreview(dctx, p.Token)
			if c != nil {
				c.Close()
			}
			if dctx.Err() == nil {
				mu.Lock()
				early++
				mu.Unlock()
				_ = err
			}
		}()
	}
	time.Sleep(3 * time.Second)
	during, inSandbox := threads(t), foreignThreads(t)
	cancel()
	wg.Wait()
	time.Sleep(200 * time.Millisecond)
	after := foreignThreads(t)
	t.Logf("threads: %d before, %d with %d dials held (%d of them in the sandbox's namespace); %d dials ended before the cancel; %d threads left in the sandbox's namespace after",
		before, during, n, inSandbox, early, after)
	if after != 0 {
		t.Errorf("%d threads stay in a sandbox's network namespace after their dials ended", after)
	}
	if during-before > 64 {
		t.Errorf("%d concurrent dials through one preview hold %d more OS threads (no bound on dials or connections per preview): a URL holder can exhaust the runtime's 10000 threads", n, during-before)
	}
}

// DEFENCE: the network namespace the session holds is let go when the
// sandbox is suspended or removed; a sandbox without listen ports holds
// none; a preview's dial after its sandbox ended is refused.
func TestAttackPreviewNetnsHeldOnlyWhileLive(t *testing.T) {
	h := newS1Host(t)
	ctx := context.Background()
	base := netnsFDs(t)
	plain, err := h.Create(ctx, SandboxSpec{Grants: grants(t)})
	if err != nil {
		t.Fatal(err)
	}
	if got := netnsFDs(t); got != base {
		t.Fatalf("a sandbox without listen ports holds %d namespace descriptors", got-base)
	}
	info, err := h.Create(ctx, SandboxSpec{Grants: grants(t), Listen: []int{8765}})
	if err != nil {
		t.Fatal(err)
	}
	if got := netnsFDs(t); got != base+1 {
		t.Fatalf("%d namespace descriptors, want %d", got, base+1)
	}
	guestDaemon(t, h, info.ID, `
import os, socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 8765))
s.listen(64)
def serve():
    held = []
    while True:
        held.append(s.accept())
`)
	p, err := h.Expose(ctx, info.ID, "", 8765, 0)
	if err != nil {
		t.Fatal(err)
	}
	c, err := h.DialPreview(ctx, p.Token)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if _, err := h.Suspend(ctx, info.ID, ""); err != nil {
		t.Fatal(err)
	}
	if got := netnsFDs(t); got != base {
		t.Fatalf("suspended: %d namespace descriptors left", got-base)
	}
	if _, err := h.Resume(ctx, info.ID, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := h.DialPreview(ctx, p.Token); err == nil {
		t.Fatal("a preview of the last life dials into the resumed sandbox")
	}
	if err := h.Remove(info.ID, ""); err != nil {
		t.Fatal(err)
	}
	if err := h.Remove(plain.ID, ""); err != nil {
		t.Fatal(err)
	}
	if got := netnsFDs(t); got != base {
		t.Fatalf("removed: %d namespace descriptors left", got-base)
	}
}

// DEFENCE: revocation racing dials: no connection handed out through a
// preview survives its revocation, and none is handed out after it.
func TestAttackPreviewRevokeRacesDial(t *testing.T) {
	h := newS1Host(t)
	ctx := context.Background()
	info, err := h.Create(ctx, SandboxSpec{Grants: grants(t), Listen: []int{8765}})
	if err != nil {
		t.Fatal(err)
	}
	guestDaemon(t, h, info.ID, `
import os, socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 8765))
s.listen(1024)
def serve():
    held = []
    while True:
        held.append(s.accept())
`)
	for round := range 8 {
		p, err := h.Expose(ctx, info.ID, "", 8765, 0)
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var conns []interface {
			Read([]byte) (int, error)
			SetReadDeadline(time.Time) error
			Close() error
		}
		revoked := make(chan struct{})
		lateDial := false
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					c, err := h.DialPreview(ctx, p.Token)
					if err != nil {
						// Revoked, or the sandbox's bound on open
						// connections reached (MaxSandboxConns).
						if !errors.Is(err, ErrNoPreview) && errs.Of(err) != errs.Limit {
							t.Errorf("dial: %v", err)
						}
						return
					}
					select {
					case <-revoked:
						// Began before the revocation returned? It must
						// be cut all the same (checked below).
					default:
					}
					mu.Lock()
					conns = append(conns, c)
					mu.Unlock()
				}
			}()
		}
		time.Sleep(30 * time.Millisecond)
		if _, err := h.Unexpose(info.ID, "", 8765); err != nil {
			t.Fatal(err)
		}
		close(revoked)
		wg.Wait()
		if _, err := h.DialPreview(ctx, p.Token); !errors.Is(err, ErrNoPreview) {
			lateDial = true
		}
		live := 0
		for _, c := range conns {
			c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
			_, err := c.Read(make([]byte, 1))
			if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
				live++
			}
			c.Close()
		}
		if live > 0 || lateDial {
			t.Fatalf("round %d: %d of %d connections survive the revocation (late dial: %v)", round, live, len(conns), lateDial)
		}
	}
}
