//go:build linux

package live

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/errs"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/guestbuild"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/internal/vm"
	"github.com/opensubstrate/sandbox/internal/volume"
	"github.com/opensubstrate/sandbox/record"
	"github.com/opensubstrate/sandbox/tier"
)

// addS5 gives h the S5 executors, booting the project's guest image.
func addS5(t testing.TB, h *Manager) {
	t.Helper()
	dir, err := guestbuild.DefaultVMImage()
	if err != nil {
		t.Fatal(err)
	}
	jail, err := guestbuild.S1Helper()
	if err != nil {
		t.Fatal(err)
	}
	ex := vm.New(vm.Config{ImageDir: dir, Accel: "tcg", Jail: jail, StateDir: h.Store.Root()})
	for _, e := range ex {
		h.Executors = append(h.Executors, e)
	}
	seedS5Probe(t, h, ex[0])
}

// s5Probed holds the probe results of the S5 executor live sandboxes use,
// earned once by this test process (one guest booted to earn the rung);
// removed by TestMain.
var s5Probed struct {
	sync.Mutex
	dir string
}

// seedS5Probe gives h's state directory the S5 probe's result this
// process earned, as a host's next process finds it kept (the probe
// cache: boot, kernel and the executor's key must match, or h probes
// again), so a test boots only the guests it is about. The first call
// probes.
func seedS5Probe(t testing.TB, h *Manager, e executor.Executor) {
	t.Helper()
	s5Probed.Lock()
	defer s5Probed.Unlock()
	probes := host.ProbeCache(h.Store.Root())
	if s5Probed.dir == "" {
		if p := h.ProbeOf(context.Background(), e); !p.Available {
			return // the tests that need S5 say why
		}
		dir, err := os.MkdirTemp("", "sandbox-s5-probed-")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.CopyFS(filepath.Join(dir, "probes"), os.DirFS(probes)); err != nil {
			t.Fatalf("keep the S5 probe's result: %v", err)
		}
		s5Probed.dir = dir
		return
	}
	if err := os.CopyFS(probes, os.DirFS(filepath.Join(s5Probed.dir, "probes"))); err != nil {
		t.Fatalf("seed the S5 probe's result: %v", err)
	}
}

// TestLiveS5SandboxKeepsResidentStateAcrossSuspend: a live S5 sandbox is
// one VM for all its execs; a suspension writes its memory image into
// the store, named in the record, and a resumption boots nothing: the
// process an exec left running, and what it held in the guest's memory,
// are there after it. A suspension while a process holds a file of a
// share is refused, naming it, and the sandbox runs on; one that fails
// after storing the memory image removes it; the idle fence parks it.
func TestLiveS5SandboxKeepsResidentStateAcrossSuspend(t *testing.T) {
	t.Parallel()
	h := newS1Host(t)
	addS5(t, h)
	ctx := context.Background()
	info, err := h.Create(ctx, SandboxSpec{Tier: tier.S5, Grants: grants(t)})
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	r, out := execIn(t, h, info.ID, "/bin/sh", "-c", "uname -r; echo kept > file; cd /; /sandbox/bin/sh -c 'echo resident > /tmp/state; /sandbox/bin/sleep 1000 >/dev/null 2>&1 & echo $! > /tmp/pid'")
	if strings.TrimSpace(out) == "" || strings.TrimSpace(out) == strings.TrimSpace(string(host)) || r.Attestation.Claim.Tier.Chosen != tier.S5 || !strings.Contains(r.Attestation.Claim.Executor, "+tcg") {
		t.Fatalf("first exec: %q %+v %s", out, r.Attestation.Claim.Tier, r.Attestation.Claim.Executor)
	}
	// A process whose working directory is the workspace holds its share.
	execIn(t, h, info.ID, "/bin/sh", "-c", "/sandbox/bin/sleep 1000 >/dev/null 2>&1 & echo $! > /tmp/busy")
	_, err = h.Suspend(ctx, info.ID, "")
	var be *vm.BusyError
	if !errors.As(err, &be) || !strings.Contains(err.Error(), info.Workspace) {
		t.Fatalf("suspend with the workspace held: %v", err)
	}
	if _, out := execIn(t, h, info.ID, "/bin/sh", "-c", "cat file; kill $(cat /tmp/busy)"); out != "kept\n" {
		t.Fatalf("after a refused suspension: %q", out)
	}
	// A suspension that fails after the memory image was stored (here its
	// gate refuses it) removes the image, which no record names, and the
	// VM runs on where it was.
	sb, err := h.sandbox(info.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	var stored addr.Addr
	_, err = h.suspendGated(sb, func(s record.Snapshot) error {
		if s.Memory == nil || !h.Store.HasBlob(*s.Memory) {
			t.Errorf("the gate saw %+v: no memory image stored", s)
		} else {
			stored = *s.Memory
		}
		return errors.New("refused by the test's gate")
	})
	if err == nil || !strings.Contains(err.Error(), "refused by the test's gate") {
		t.Fatalf("gated suspension: %v", err)
	}
	if stored != (addr.Addr{}) && h.Store.HasBlob(stored) {
		t.Errorf("the failed suspension left its memory image %s in the store", stored)
	}
	if _, out := execIn(t, h, info.ID, "/bin/sh", "-c", "cat /tmp/state; kill -0 $(cat /tmp/pid) && echo alive"); out != "resident\nalive\n" {
		t.Fatalf("after a failed suspension: %q", out)
	}
	snap, err := h.Suspend(ctx, info.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if snap.Memory == nil || !h.Store.HasBlob(*snap.Memory) {
		t.Fatalf("snapshot %+v: no memory image in the store", snap)
	}
	if _, err := h.Resume(ctx, info.ID, ""); err != nil {
		t.Fatal(err)
	}
	_, out = execIn(t, h, info.ID, "/bin/sh", "-c", "cat /tmp/state; kill -0 $(cat /tmp/pid) && echo alive; cat file")
	if out != "resident\nalive\nkept\n" {
		t.Fatalf("after resume: %q", out)
	}
	// At its idle deadline the fence parks it too: its VM's run state,
	// read back from QEMU, is the witness of quiescence; the workspace is
	// checkpointed, the memory image kept, and a resumption finds the
	// guest's processes.
	h.StartIdle(300 * time.Millisecond)
	waitIdle(t, h, 1, 0)
	h.stopIdle()
	if p := recordPhase(t, h, info.ID); p != record.Parked {
		t.Fatalf("after the idle deadline the record is %s", p)
	}
	if cp := h.readLifecycle(info.ID).Checkpoint(); cp == nil {
		t.Fatal("parked by the fence with no checkpoint in its lifecycle record")
	}
	if _, err := h.Resume(ctx, info.ID, ""); err != nil {
		t.Fatal(err)
	}
	if _, out = execIn(t, h, info.ID, "/bin/sh", "-c", "cat /tmp/state; kill -0 $(cat /tmp/pid) && echo alive; cat file"); out != "resident\nalive\nkept\n" {
		t.Fatalf("after the fence parked it and it was resumed: %q", out)
	}
	if err := h.Remove(info.ID, ""); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkLiveS5 measures, in a live S5 sandbox through the host (each
// exec sealed): one exec (/usr/bin/true), and the suspension and
// resumption of a 512 MiB guest with 200 MiB of its memory written.
//
//	go test -run '^$' -bench LiveS5 -benchtime 3x ./internal/host/
func BenchmarkLiveS5(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("live sandboxes with their own cgroups need root")
	}
	h := newBenchHost(b)
	lease, err := h.Store.Dir.Lease()
	if err != nil {
		b.Fatal(err)
	}
	h.Store.Lease = lease
	addS5(b, h)
	b.Cleanup(func() { h.Close(); lease.Close() })
	ctx := context.Background()
	info, err := h.Create(ctx, SandboxSpec{Tier: tier.S5, Grants: grants(b), Limits: unit.Limits{MemoryBytes: 512 << 20}})
	if err != nil {
		b.Fatal(err)
	}
	exec := func(args ...string) {
		if _, err := h.Exec(ctx, info.ID, "", ExecRequest{Args: args, Deadline: time.Minute}); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("exec", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			exec("/usr/bin/true")
		}
	})
	exec("/bin/sh", "-c", "cd /; /sandbox/bin/dd if=/dev/urandom of=/tmp/fill bs=1M count=200 2>/dev/null")
	b.Run("suspend-resume-512MiB", func(b *testing.B) {
		var sus, res time.Duration
		defer func() {
			b.ReportMetric(float64(sus.Milliseconds())/float64(b.N), "ms/suspend")
			b.ReportMetric(float64(res.Milliseconds())/float64(b.N), "ms/resume")
		}()
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			if _, err := h.Suspend(ctx, info.ID, ""); err != nil {
				b.Fatal(err)
			}
			sus += time.Since(t0)
			t0 = time.Now()
			if _, err := h.Resume(ctx, info.ID, ""); err != nil {
				b.Fatal(err)
			}
			res += time.Since(t0)
		}
	})
}

// TestLiveS5SandboxEgress: a live S5 sandbox with a net grant reaches
// the granted host through its own egress proxy from every exec, before
// and after a suspension (a resumed VM reaches a new proxy at the same
// guest address), and nothing else; each exec's decision log holds the
// connections made while it ran.
func TestLiveS5SandboxEgress(t *testing.T) {
	t.Parallel()
	h := newS1Host(t)
	addS5(t, h)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "from the granted host\n") }))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	ctx := context.Background()
	// Emulated (TCG) on a busy machine, an exec of curl costs more CPU
	// time than the tests' usual 20 J buys: the budget is not under test.
	g, err := grant.ParseArgs([]string{"cpu:2000J", fmt.Sprintf("net:127.0.0.1:%d", port)}, "/")
	if err != nil {
		t.Fatal(err)
	}
	info, err := h.Create(ctx, SandboxSpec{Tier: tier.S5, Grants: g})
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/", port)
	for i := 0; i < 2; i++ {
		if i == 1 {
			if _, err := h.Suspend(ctx, info.ID, ""); err != nil {
				t.Fatal(err)
			}
			if _, err := h.Resume(ctx, info.ID, ""); err != nil {
				t.Fatal(err)
			}
		}
		r, out := execIn(t, h, info.ID, "/bin/sh", "-c", "cd /; curl -sS "+url)
		if out != "from the granted host\n" || r.Result.Outcome.ExitCode == nil || *r.Result.Outcome.ExitCode != 0 {
			t.Fatalf("exec %d: %q %+v", i, out, r.Result.Outcome)
		}
		db, _ := os.ReadFile(filepath.Join(r.Dir, "decisions.json"))
		if !strings.Contains(string(db), fmt.Sprintf(`"target":"127.0.0.1:%d"`, port)) || !strings.Contains(string(db), `"allow":true`) {
			t.Fatalf("exec %d's decision log does not hold its connection:\n%s", i, db)
		}
	}
	// Two curls under TCG on a busy machine may take longer than
	// execIn's 20 s, and the direct one may wait out its 60 s: the
	// deadline is a bound past both, not a measure.
	var ob bytes.Buffer
	r, err := h.Exec(ctx, info.ID, "", ExecRequest{Args: []string{"/bin/sh", "-c", "cd /; curl -sS -o /dev/null -w '%{http_code}\\n' http://127.0.0.1:1/; curl -sS --noproxy '*' --max-time 60 " + url + " || echo direct refused"}, Stdout: &ob, Deadline: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	out := ob.String()
	db, _ := os.ReadFile(filepath.Join(r.Dir, "decisions.json"))
	if !strings.HasPrefix(out, "403\n") || !strings.Contains(out, "direct refused") || !strings.Contains(string(db), `"target":"127.0.0.1:1"`) || !strings.Contains(string(db), `"allow":false`) {
		t.Fatalf("an ungranted destination: %q (outcome %+v); decision log:\n%s", out, r.Result.Outcome, db)
	}
	if err := h.Remove(info.ID, ""); err != nil {
		t.Fatal(err)
	}
}

// TestS5WorkspaceBoundHoldsOverItsShare: an S5 guest writes its
// workspace through a 9p share of the host directory, which is the
// mount point of the workspace's own filesystem: a write past the bound
// fails in the guest at the write (the host's ENOSPC, through 9p), the
// host's disk holds no more than the bound, and the exec's attestation
// says the workspace is at its bound.
func TestS5WorkspaceBoundHoldsOverItsShare(t *testing.T) {
	t.Parallel()
	h := newS1Host(t)
	if err := volume.Probe(); err != nil {
		t.Skipf("this host cannot make a bounded workspace: %v", err)
	}
	addS5(t, h)
	ctx := context.Background()
	const bound = 32 << 20
	info, err := h.Create(ctx, SandboxSpec{Tier: tier.S5, Grants: grants(t), Limits: unit.Limits{WorkspaceBytes: bound}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Remove(info.ID, "")
	r, out := execIn(t, h, info.ID, "/bin/sh", "-c", "dd if=/dev/zero of=big bs=1M count=64 2>&1; echo dd=$?")
	if !strings.Contains(out, "dd=1") || !strings.Contains(strings.ToLower(out), "no space left") {
		t.Fatalf("a guest writing past the bound: %q", out)
	}
	if fi, err := os.Stat(filepath.Join(info.Workspace, "big")); err != nil || fi.Size() > bound {
		t.Fatalf("the workspace holds %v bytes under a bound of %d (%v)", fi, bound, err)
	}
	found := false
	for _, n := range r.Attestation.Claim.Notes {
		found = found || strings.Contains(n, "workspace is at its bound")
	}
	if !found {
		t.Fatalf("the exec's attestation does not say the workspace is at its bound: %q", r.Attestation.Claim.Notes)
	}
}

// TestPreviewOfAnS5ListenPort: a live S5 sandbox made with a listen port
// (and no net grant) is reached on it through a preview, from the
// loopback of its VM monitor's own network namespace, once a server in
// the guest listens on the guest's address: before that, and while one
// listens on the guest's loopback alone, the preview is refused saying
// why. A suspension ends the preview; the server, resumed with the
// guest's memory, is reached again through a new one (a new monitor, in
// a new namespace).
func TestPreviewOfAnS5ListenPort(t *testing.T) {
	t.Parallel()
	h := newS1Host(t)
	addS5(t, h)
	ctx := context.Background()
	// Emulated (TCG), an exec costs more CPU time than the tests' usual
	// 20 J buys: the budget is not under test.
	g, err := grant.ParseArgs([]string{"cpu:2000J"}, "/")
	if err != nil {
		t.Fatal(err)
	}
	const port = 8000
	info, err := h.Create(ctx, SandboxSpec{Tier: tier.S5, Grants: g, Listen: []int{port}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Remove(info.ID, "")
	if _, err := h.Expose(ctx, info.ID, "", port, 0); errs.Of(err) != errs.Unavailable || !strings.Contains(err.Error(), "nothing in the guest listens") {
		t.Fatalf("nothing listening yet: %v", err)
	}
	// On the guest's loopback alone: the monitor's forwarding does not
	// reach it, and the refusal says where to listen instead.
	execIn(t, h, info.ID, "/bin/sh", "-c", `cd /; python3 -c '
import os, socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 8000))
s.listen()
if os.fork():
    open("/tmp/loopback.pid", "w").write(str(os.getpid() + 0))
    os._exit(0)
os.setsid()
os.close(1)
s.accept()
' </dev/null; sleep 0.2`)
	if _, err := h.Expose(ctx, info.ID, "", port, 0); errs.Of(err) != errs.Unavailable || !strings.Contains(err.Error(), "loopback alone") || !strings.Contains(err.Error(), "0.0.0.0") {
		t.Fatalf("a server on the guest's loopback: %v", err)
	}
	execIn(t, h, info.ID, "/bin/sh", "-c", "cd /; /sandbox/bin/kill $(/sandbox/bin/ps -o pid,args | /sandbox/bin/grep '[p]ython3 -c' | /sandbox/bin/sed 's/^ *\\([0-9]*\\).*/\\1/'); "+
		"/sandbox/bin/nc -ll -p 8000 -e /sandbox/bin/echo hello from inside </dev/null >/dev/null 2>&1 & "+
		"until /sandbox/bin/netstat -ltn | /sandbox/bin/grep -q ':8000 .*LISTEN'; do /sandbox/bin/sleep 0.1; done")
	greeting := func(what string) {
		t.Helper()
		p, err := h.Expose(ctx, info.ID, "", port, time.Hour)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		c, err := h.DialPreview(ctx, p.Token)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(30 * time.Second))
		if b, err := io.ReadAll(c); err != nil || string(b) != "hello from inside\n" {
			t.Fatalf("%s: read %q (%v)", what, b, err)
		}
		if _, err := h.Suspend(ctx, info.ID, ""); err != nil {
			t.Fatal(err)
		}
		if _, err := h.DialPreview(ctx, p.Token); err == nil {
			t.Fatalf("%s: the preview outlived its sandbox's suspension", what)
		}
		if _, err := h.Resume(ctx, info.ID, ""); err != nil {
			t.Fatal(err)
		}
	}
	greeting("booted")
	greeting("resumed")
	seg := lastSegments(t, h, info.ID, 3)
	if seg[0].Kind != record.Exposed || seg[0].Port != port || seg[1].Kind != record.Suspended || seg[2].Kind != record.Resumed {
		t.Fatalf("the record's last segments: %+v", seg)
	}
	r, _ := execIn(t, h, info.ID, "/bin/sh", "-c", "cd /; true")
	notes, _ := os.ReadFile(filepath.Join(r.Dir, "attestation.json"))
	if !strings.Contains(string(notes), "VM monitor's own network namespace") {
		t.Fatalf("the exec's attestation does not say how its ports are reached:\n%s", notes)
	}
}
