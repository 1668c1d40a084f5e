//go:build linux

package native

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/opensubstrate/sandbox/internal/cgroup"
	"github.com/opensubstrate/sandbox/internal/guestbuild"
	"github.com/opensubstrate/sandbox/internal/native/s1init"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/tier"
)

func TestMain(m *testing.M) {
	if code, ok := Helper(); ok {
		os.Exit(code)
	}
	if os.Getenv("SANDBOX_TEST_ID_DIR") != "" {
		os.Exit(m.Run()) // TestHostIDHolderHelper, which makes nothing to clean up
	}
	dir, err := os.MkdirTemp("", "native-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testState = dir
	code := m.Run()
	if testExec != nil {
		testExec.Close()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

var (
	testExec  *Executor
	testState string
)

func testExecutor(t *testing.T) *Executor {
	t.Helper()
	if testExec == nil {
		helper, err := guestbuild.S1Helper()
		if err != nil {
			t.Fatal(err)
		}
		e, err := New(Config{StateDir: testState, Memory: 256 << 20, Pids: 64, Self: helper})
		if err != nil {
			t.Fatal(err)
		}
		testExec = e
	}
	return testExec
}

type result struct {
	res            *executor.Result
	err            error
	stdout, stderr string
}

func runNative(t *testing.T, grants []string, deadline time.Duration, args ...string) result {
	t.Helper()
	g := mustGrants(t, grants...)
	u := unit.Unit{Kind: tier.Native, Image: addr.Of([]byte(args[0])), Entry: args[0], Args: args,
		Env: map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin"}}
	var out, errb bytes.Buffer
	res, err := testExecutor(t).Run(context.Background(), &executor.Job{Unit: u, Grants: g, Enforcer: grant.NewEnforcer(g), Stdout: &out, Stderr: &errb, Deadline: deadline})
	return result{res, err, out.String(), errb.String()}
}

func TestTrue(t *testing.T) {
	r := runNative(t, nil, time.Minute, "/bin/true")
	if r.err != nil || r.res.Outcome.Status != attest.Exited || *r.res.Outcome.ExitCode != 0 {
		t.Fatalf("%v %+v %s", r.err, r.res, r.stderr)
	}
}

func TestShell(t *testing.T) {
	r := runNative(t, nil, time.Minute, "/bin/sh", "-c", "echo hello; id; hostname; exit 3")
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.stdout != "hello\nuid=65534(nobody) gid=65534(nogroup) groups=65534(nogroup)\nsandbox\n" || r.res.Outcome.Status != attest.Exited || *r.res.Outcome.ExitCode != 3 {
		t.Fatalf("stdout %q stderr %q outcome %+v", r.stdout, r.stderr, r.res.Outcome)
	}
}

func TestProbe(t *testing.T) {
	p := testExecutor(t).Probe(context.Background())
	for _, l := range p.Layers {
		t.Logf("%s %v %s", l.Name, l.OK, l.Detail)
	}
	if !p.Available {
		t.Fatalf("S1 probe: %s", p.Reason)
	}
}

func TestEscapeBattery(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the battery runs as root, where the guest becomes nobody")
	}
	g := t.TempDir()
	os.Chmod(g, 0o755)
	secret := t.TempDir()
	os.WriteFile(filepath.Join(secret, "escape-secret"), []byte("host secret"), 0o644)
	os.Symlink(secret, filepath.Join(g, "abs"))
	rel, _ := filepath.Rel(g, secret)
	os.Symlink(rel, filepath.Join(g, "rel"))
	guestbuild.Install(t, guestbuild.Native, "escape", filepath.Join(g, "escape"), 0o755)
	b, err := os.ReadFile(filepath.Join(g, "escape"))
	if err != nil {
		t.Fatal(err)
	}
	// Set-user-ID root (os.ModeSetuid: os.Chmod drops a bare 0o4000).
	guestbuild.Install(t, guestbuild.Native, "escape", filepath.Join(g, "suid-escape"), os.ModeSetuid|0o755)
	q := t.TempDir()
	rw := t.TempDir()
	os.Chmod(rw, 0o777)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	passwd := sum(t, "/etc/passwd")

	gr, _ := grant.ParseArgs([]string{"cpu:10J", "fs:" + g + ":ro", "fs:" + q + ":rw:quota=1MiB", "fs:" + rw + ":rw"}, "/")
	u := unit.Unit{Kind: tier.Native, Image: addr.Of(b), Entry: filepath.Join(g, "escape"), Args: []string{"escape"},
		Env: map[string]string{"ESCAPE_GRANT": g, "ESCAPE_QUOTA_DIR": q, "ESCAPE_RW_DIR": rw, "ESCAPE_PORT": port, "ESCAPE_HOST_BOOT_ID": bootID(t), "ESCAPE_HOSTPID": strconv.Itoa(os.Getpid()), "PATH": "/usr/bin:/bin"}}
	cg := newGroup(t)
	var out, errb bytes.Buffer
	res, err := testExecutor(t).Run(context.Background(), &executor.Job{Unit: u, Grants: gr, Enforcer: grant.NewEnforcer(gr), Stdout: &out, Stderr: &errb, Deadline: 2 * time.Minute, Cgroup: cg})
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome.Status != attest.Exited || *res.Outcome.ExitCode != 0 {
		t.Fatalf("escape guest: %+v\n%s\n%s", res.Outcome, out.String(), errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := []string{"inherit a descriptor from outside", "read /etc/shadow", "write /etc/passwd", "write /usr/bin/escape", "write /escape", "write /root/escape",
		"sysctl kernel.hostname", "follow symlink abs", "follow symlink rel", "see host processes", "signal host pid",
		"mount tmpfs", "unshare user namespace", "write /proc/self/uid_map", "write /proc/self/gid_map", "write /proc/self/setgroups",
		"become uid 0", "become gid 0", "join group 0", "unshare mount namespace", "ptrace pid 1",
		"signal pid 1 (init)", "queue a SIGSEGV to pid 1 (init)", "signal a thread of init", "renice pid 1 (init)", "set pid 1's limits (init)",
		"read init's environment", "list init's descriptors", "write init's status pipe", "chroot",
		"see the host's boot id", "read host facts in /proc/cmdline", "read host facts in /proc/partitions", "see host cgroup paths",
		"read kernel addresses in /proc/kallsyms", "write a masked /proc file", "raise the core-dump limit", "raise the open-files limit", "open the host's /dev/vda", "open the host's /dev/mem", "reach /sys", "/proc/1/root", "/proc/1/exe",
		"raw socket", "packet socket", "connect to the host's loopback listener", "DNS lookup", "fork bomb",
		"fill the disk past the quota", "setuid binary", "load a kernel module", "keyctl", "bpf", "perf_event_open",
		"settimeofday", "clock_settime", "open_by_handle_at"}
	for _, l := range []string{"rw grant", "quota'd grant"} {
		for _, a := range []string{"chmod 6755", "chmod g+s", "fchmod 4755", "create with mode 4755", "mknod with mode 4755", "set security.capability"} {
			want = append(want, a+" in a "+l)
		}
		want = append(want, "a "+l+" mounted without nosuid or nodev")
	}
	for _, w := range want {
		found := false
		for _, l := range lines {
			if strings.HasPrefix(l, w) {
				found = true
				if strings.Contains(l, ": ESCAPED") {
					t.Errorf("escaped: %s", l)
				}
			}
		}
		if !found {
			t.Errorf("no line for %q", w)
		}
	}
	t.Logf("battery:\n%s", out.String())
	if !strings.Contains(out.String(), "uid 65534 euid 65534") {
		t.Errorf("the guest did not run as nobody")
	}
	// Nobody inside, a host id of the run's own outside.
	for _, l := range lines {
		if m, ok := strings.CutPrefix(l, "uid_map "); ok {
			f := strings.Fields(m)
			if len(f) != 3 || f[0] != "65534" || f[2] != "1" {
				t.Errorf("the guest's uid_map: %q, want 65534 mapped alone", m)
				continue
			}
			id, _ := strconv.Atoi(f[1])
			leasedID(t, "the guest", id)
		}
	}
	// The host is intact.
	if accepted.Load() != 0 {
		t.Error("the host's loopback listener accepted a connection from the sandbox")
	}
	if sum(t, "/etc/passwd") != passwd {
		t.Error("/etc/passwd changed")
	}
	if b, _ := os.ReadFile(filepath.Join(secret, "escape-secret")); string(b) != "host secret" {
		t.Error("the secret changed")
	}
	if fi, err := os.Stat(filepath.Join(q, "fill")); err != nil || fi.Size() > 1<<20+1<<16 {
		t.Errorf("quota: %v %v", fi, err)
	}
	if err := exec.Command("/bin/true").Run(); err != nil {
		t.Errorf("the host cannot fork after the fork bomb: %v", err)
	}
	noSetID(t, rw, q)
	// The rw grant is id mapped: what the guest (nobody) made there
	// belongs on disk to the directory's owner.
	var dirSt syscall.Stat_t
	syscall.Stat(rw, &dirSt)
	ents, _ := os.ReadDir(rw)
	if len(ents) == 0 {
		t.Error("the guest made nothing in its rw grant")
	}
	for _, e := range ents {
		var st syscall.Stat_t
		if syscall.Lstat(filepath.Join(rw, e.Name()), &st) == nil && (st.Uid != dirSt.Uid || st.Gid != dirSt.Gid) {
			t.Errorf("%s is owned by %d:%d on the host, not by the grant's owner %d:%d", e.Name(), st.Uid, st.Gid, dirSt.Uid, dirSt.Gid)
		}
	}
}

// bootID is the host's boot id.
func bootID(t *testing.T) string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// noSetID checks that nothing under dirs is setuid, setgid or carries
// file capabilities.
func noSetID(t *testing.T, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		filepath.Walk(d, func(p string, fi os.FileInfo, err error) error {
			if err != nil {
				return nil
			}
			if fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
				t.Errorf("%s left the run with mode %v", p, fi.Mode())
			}
			if n, err := unix.Lgetxattr(p, "security.capability", make([]byte, 64)); err == nil && n > 0 {
				t.Errorf("%s left the run with file capabilities", p)
			}
			return nil
		})
	}
}

func sum(t *testing.T, p string) addr.Addr {
	a, err := addr.OfFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func newGroup(t *testing.T) *cgroup.Group {
	t.Helper()
	h, err := cgroup.Detect("/sys/fs/cgroup")
	if err != nil {
		t.Skipf("no cgroups: %v", err)
	}
	g, err := h.Create(fmt.Sprintf("test-%d-%d", os.Getpid(), time.Now().UnixNano()), "cpuacct", "cpu", "memory", "pids", "freezer")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Remove() })
	return g
}

func TestMemoryBomb(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for the run's cgroup")
	}
	g, _ := grant.ParseArgs([]string{"cpu:10J"}, "/")
	u := unit.Unit{Kind: tier.Native, Image: addr.Of([]byte("py")), Entry: "/usr/bin/python3",
		Args: []string{"python3", "-c", "a=[]\nwhile True: a.append(bytearray(10**7))"}}
	var out, errb bytes.Buffer
	res, err := testExecutor(t).Run(context.Background(), &executor.Job{Unit: u, Grants: g, Enforcer: grant.NewEnforcer(g), Stdout: &out, Stderr: &errb, Deadline: time.Minute, Cgroup: newGroup(t)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome.Status != attest.OutOfMem {
		t.Fatalf("memory bomb: %+v %s", res.Outcome, errb.String())
	}
}

func TestFreezeThawDetachedWriter(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for the run's cgroup")
	}
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	g, _ := grant.ParseArgs([]string{"cpu:10J", "fs:" + dir + ":rw"}, "/")
	script := "(while :; do date +%s%N >> " + log + "; sleep 0.01; done) </dev/null >/dev/null 2>&1 & sleep 60"
	u := unit.Unit{Kind: tier.Native, Image: addr.Of([]byte("sh")), Entry: "/bin/sh", Args: []string{"sh", "-c", script}, Env: map[string]string{"PATH": "/usr/bin:/bin"}}
	ctl := make(chan executor.Control, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan *executor.Result, 1)
	go func() {
		res, err := testExecutor(t).Run(ctx, &executor.Job{Unit: u, Grants: g, Enforcer: grant.NewEnforcer(g), Stdout: io.Discard, Stderr: io.Discard,
			Deadline: time.Minute, Cgroup: newGroup(t), OnStart: func(c executor.Control) { ctl <- c }})
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	c := <-ctl
	size := func() int64 {
		fi, err := os.Stat(log)
		if err != nil {
			return 0
		}
		return fi.Size()
	}
	waitGrow := func(from int64) {
		for i := 0; i < 500 && size() <= from; i++ {
			time.Sleep(10 * time.Millisecond)
		}
		if size() <= from {
			t.Fatalf("the writer did not write (size %d)", size())
		}
	}
	waitGrow(0)
	if err := c.Freeze(); err != nil {
		t.Fatal(err)
	}
	frozen := size()
	time.Sleep(300 * time.Millisecond)
	if size() != frozen {
		t.Fatalf("the detached writer kept writing while frozen: %d then %d", frozen, size())
	}
	if err := c.Thaw(); err != nil {
		t.Fatal(err)
	}
	waitGrow(frozen)
	cancel()
	res := <-done
	if res == nil || res.Outcome.Status != attest.Killed {
		t.Fatalf("after cancel: %+v", res)
	}
}

// readyWriter keeps what is written and closes ready at the first
// "ready\n": the guest has set its trap, so an interrupt from then on
// meets it, however slow the machine.
type readyWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	ready chan struct{}
}

func newReadyWriter() *readyWriter { return &readyWriter{ready: make(chan struct{})} }

func (w *readyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	was := strings.Contains(w.buf.String(), "ready\n")
	w.buf.Write(p)
	if !was && strings.Contains(w.buf.String(), "ready\n") {
		close(w.ready)
	}
	return len(p), nil
}

func (w *readyWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// cancelWhenReady cancels once the guest said it is ready (or after a
// bound: the run then fails the test's checks).
func cancelWhenReady(w *readyWriter, cancel func()) {
	select {
	case <-w.ready:
	case <-time.After(time.Minute):
	}
	cancel()
}

// TestInterruptReachesTheGuest: an interrupt (the caller's context
// ending) reaches the guest as SIGINT, which a guest that traps it
// handles, exiting as it likes; one that ignores it is killed after the
// grace period.
func TestInterruptReachesTheGuest(t *testing.T) {
	g, _ := grant.ParseArgs([]string{"cpu:10J"}, "/")
	u := unit.Unit{Kind: tier.Native, Image: addr.Of([]byte("sh")), Entry: "/bin/sh",
		Args: []string{"sh", "-c", `trap 'echo got INT; exit 7' INT; echo ready; sleep 30 & wait`}, Env: map[string]string{"PATH": "/usr/bin:/bin"}}
	ctx, cancel := context.WithCancel(context.Background())
	out := newReadyWriter()
	go cancelWhenReady(out, cancel)
	res, err := testExecutor(t).Run(ctx, &executor.Job{Unit: u, Grants: g, Enforcer: grant.NewEnforcer(g), Stdout: out, Stderr: io.Discard, Deadline: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome.Status != attest.Exited || *res.Outcome.ExitCode != 7 || out.String() != "ready\ngot INT\n" {
		t.Fatalf("interrupt: %+v %q", res.Outcome, out.String())
	}
	// A program that ignores it is killed after the grace period.
	u.Args = []string{"sh", "-c", `trap '' INT; echo ready; sleep 30`}
	ctx2, cancel2 := context.WithCancel(context.Background())
	out2 := newReadyWriter()
	go cancelWhenReady(out2, cancel2)
	res, err = testExecutor(t).Run(ctx2, &executor.Job{Unit: u, Grants: g, Enforcer: grant.NewEnforcer(g), Stdout: out2, Stderr: io.Discard, Deadline: time.Minute})
	if err != nil || res.Outcome.Status != attest.Killed {
		t.Fatalf("ignored interrupt: %+v %v", res, err)
	}
}

func TestDeadline(t *testing.T) {
	g, _ := grant.ParseArgs([]string{"cpu:10J"}, "/")
	u := unit.Unit{Kind: tier.Native, Image: addr.Of([]byte("sleep")), Entry: "/bin/sleep", Args: []string{"sleep", "30"}}
	res, err := testExecutor(t).Run(context.Background(), &executor.Job{Unit: u, Grants: g, Enforcer: grant.NewEnforcer(g), Stdout: io.Discard, Stderr: io.Discard, Deadline: 300 * time.Millisecond})
	if err != nil || res.Outcome.Status != attest.Deadline {
		t.Fatalf("deadline: %+v %v", res, err)
	}
}

func TestKernelPathGrantRefused(t *testing.T) {
	for _, p := range []string{"/proc/self", "/dev", "/sys/kernel"} {
		r := runNative(t, []string{"fs:" + p + ":ro"}, time.Minute, "/bin/true")
		if r.err == nil || !strings.Contains(r.err.Error(), "not grantable") {
			t.Errorf("grant of %s: %v", p, r.err)
		}
	}
}

// TestWarmInit checks that a run takes the init started ahead for its
// base, and that an init built for another base is not used.
func TestWarmInit(t *testing.T) {
	e, b := warmTest(t, nil)
	e.refill(b)
	e.waitWarm()
	ready := e.warm.ready
	if ready == nil {
		t.Fatal("no warm init after refill")
	}
	p, _, err := e.claim(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p != ready {
		t.Errorf("claim started a new init (pid %d) while one was ready (pid %d)", p.cmd.Process.Pid, ready.cmd.Process.Pid)
	}
	p.discard()

	e.refill(b)
	e.waitWarm()
	ready = e.warm.ready
	other := b
	other.TmpSize++
	p, _, err = e.claim(other, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.discard()
	if p == ready {
		t.Error("claim used an init built for another base")
	}
	if ready.cmd.ProcessState == nil { // claim reaps what it discards
		t.Error("the init of the other base was not ended")
	}
}

// warmTest is an executor for the warm init's tests (groups made in h,
// if not nil), closed when t ends, and the base of its runs.
func warmTest(t *testing.T, h *cgroup.Hierarchy) (*Executor, s1init.Base) {
	t.Helper()
	helper, err := guestbuild.S1Helper()
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(Config{StateDir: t.TempDir(), Self: helper, Cgroups: h})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	b, err := e.base("")
	if err != nil {
		t.Fatal(err)
	}
	return e, b
}

// TestWarmInitPlacedAhead: with the host's cgroups, once a group's
// controllers were asked for, the warm init is placed ahead in a group
// of its own; PlacedGroup hands that group out and the run given it
// starts in that init; a group handed out and not run is ended with its
// init by Unplace; a group of other controllers is not handed out.
func TestWarmInitPlacedAhead(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make cgroups")
	}
	h, err := cgroup.Detect("/sys/fs/cgroup")
	if err != nil {
		t.Skipf("no cgroup hierarchy: %v", err)
	}
	e, b := warmTest(t, h)
	ctls := []string{"cpuacct", "cpu", "memory", "pids", "freezer", "devices"}
	warm := func() *initProc {
		t.Helper()
		e.refill(b)
		e.waitWarm()
		if e.warm.ready == nil {
			t.Fatal("no warm init after refill")
		}
		return e.warm.ready
	}
	if g := e.PlacedGroup(ctls); g != nil {
		t.Fatalf("a group handed out before its controllers were known: %s", g.Name)
	}
	ready := warm()
	if ready.group == nil {
		t.Fatal("the warm init was not placed ahead")
	}
	in := func(p *initProc, g *cgroup.Group) bool {
		cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", p.cmd.Process.Pid))
		return err == nil && strings.Contains(string(cg), "/"+cgroup.Parent+"/"+g.Name+"\n")
	}
	if !in(ready, ready.group) {
		t.Fatalf("the warm init is not in its group %s", ready.group.Name)
	}
	g := e.PlacedGroup(ctls)
	if g != ready.group {
		t.Fatalf("PlacedGroup: %v, want the warm init's group", g)
	}
	p, placed, err := e.claim(b, g)
	if err != nil {
		t.Fatal(err)
	}
	if p != ready || !placed {
		t.Fatalf("the run given the placed group did not start in the init placed in it (placed: %v)", placed)
	}
	p.discard()
	if err := g.Remove(); err != nil {
		t.Errorf("the run's group, its init ended: %v", err)
	}

	// A run of another base (an image's root) given the placed group:
	// a new init, which the run moves into that group, kept for it.
	ready = warm()
	g = e.PlacedGroup(ctls)
	other := b
	other.TmpSize++
	p, placed, err = e.claim(other, g)
	if err != nil {
		t.Fatal(err)
	}
	if p == ready || placed || ready.cmd.ProcessState == nil {
		t.Fatalf("a run of another base: the init placed for another (%v), placed %v, ended %v", p == ready, placed, ready.cmd.ProcessState != nil)
	}
	if err := g.AddProc(p.cmd.Process.Pid); err != nil {
		t.Fatalf("the run's group, after the init placed in it for another base ended: %v", err)
	}
	p.discard()
	if err := g.Remove(); err != nil {
		t.Errorf("the run's group, its init ended: %v", err)
	}

	ready = warm()
	g = e.PlacedGroup(ctls)
	e.Unplace(g)
	if ready.cmd.ProcessState == nil {
		t.Error("Unplace left the init running")
	}
	if err := g.Remove(); err != nil {
		t.Errorf("the group Unplace emptied: %v", err)
	}

	ready = warm()
	if g := e.PlacedGroup([]string{"cpuacct"}); g != nil {
		t.Fatalf("a group of other controllers handed out: %v", g.V1)
	}
	if e.warm.ready != ready {
		t.Fatal("the warm init not handed out was not kept for the next run")
	}
	if p, _, err := e.claim(b, nil); err != nil || p != ready {
		t.Fatalf("claim after the group was not handed out: %v", err)
	}
	ready.discard()
	if ready = warm(); ready.group == nil || !slices.Equal(ready.ctls, []string{"cpuacct"}) {
		t.Fatalf("the next warm init is not placed with the controllers asked for last: %+v", ready.ctls)
	}

	// A warm init that died waiting: not handed out, its group removed,
	// and nothing waits for it (this hung: its one exit was taken twice).
	ctls = []string{"cpuacct"}
	ready.cmd.Process.Kill()
	<-ready.exited
	dead := ready.group
	if g := e.PlacedGroup(ctls); g != nil {
		t.Fatal("the group of a dead init handed out")
	}
	if dir := dead.V1["cpuacct"]; dir != "" {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("the group of a dead init is left: %v", err)
		}
	}

	// Closed with a group handed out: the group is its host's, left for
	// it to remove; the init in it is ended.
	ready = warm()
	g = e.PlacedGroup(ctls)
	if g == nil {
		t.Fatal("no group handed out")
	}
	e.Close()
	if ready.cmd.ProcessState == nil {
		t.Error("Close left the init of a group handed out running")
	}
	if err := g.Remove(); err != nil {
		t.Errorf("the group handed out, after Close: %v", err)
	}
}

// TestInitReport trusts init's report only when the kernel says init
// ended as it should: a crashed or killed init, a missing, malformed or
// doubled report is a failure, never the success it may claim.
func TestInitReport(t *testing.T) {
	state := func(script string) *os.ProcessState {
		cmd := exec.Command("/bin/sh", "-c", script)
		cmd.Run()
		return cmd.ProcessState
	}
	ok, one, two, killed := state("exit 0"), state("exit 1"), state("exit 2"), state("kill -9 $$")
	good := `{"started":true,"exited":true,"code":0}`
	tests := []struct {
		name   string
		report string
		ps     *os.ProcessState
		end    ending
		exited bool   // the program's exit is believed
		err    string // else the failure says this
	}{
		{"clean", good + "\n", ok, ending{}, true, ""},
		{"setup error", `{"error":"init: build root: x"}` + "\n", one, ending{}, false, "init: build root: x"},
		{"crashed after a good report", good, two, ending{}, false, "ended abnormally"},
		{"killed after a good report", good, killed, ending{}, false, "was killed"},
		{"exit 1 claiming success", good, one, ending{}, false, "ended abnormally"},
		{"no report", "", ok, ending{}, false, "without a report"},
		{"two reports", good + "\n" + good + "\n", ok, ending{}, false, "malformed"},
		{"trailing bytes", good + "x", ok, ending{}, false, "malformed"},
		{"not JSON", "exited 0", ok, ending{}, false, "malformed"},
		{"deadline", "", killed, ending{deadline: true}, false, ""},
	}
	for _, tc := range tests {
		st := initReport([]byte(tc.report), tc.ps, tc.end)
		if tc.exited != (st.Exited && st.Error == "") {
			t.Errorf("%s: %+v", tc.name, st)
		}
		if tc.err != "" && !strings.Contains(st.Error, tc.err) {
			t.Errorf("%s: error %q, want %q", tc.name, st.Error, tc.err)
		}
		if o := outcomeOf(st, nil, tc.end); tc.err != "" && o.Status != attest.Failed {
			t.Errorf("%s: sealed as %s, want failed", tc.name, o.Status)
		}
	}
}

// TestQuotaCountsRealBlocks: a quota bounds what a run leaves on the
// host's disk, not what it claims: a 300 MB sparse file stays sparse,
// fifty names of one file are one file, and a commit that would need
// more blocks than the quota (here, directories) commits nothing.
func TestQuotaCountsRealBlocks(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("quota'd grants are tested as root")
	}
	q := t.TempDir()
	os.Chmod(q, 0o777)
	r := runNative(t, []string{"fs:" + q + ":rw:quota=1MiB"}, time.Minute, "/bin/sh", "-c",
		"cd "+q+" && truncate -s 300M sparse && head -c 600000 /dev/urandom > data && "+
			"for i in $(seq 1 50); do ln data link$i || exit 1; done && echo written")
	if r.err != nil || r.stdout != "written\n" {
		t.Fatalf("%v %q %s", r.err, r.stdout, r.stderr)
	}
	var used int64
	seen := map[uint64]bool{}
	filepath.Walk(q, func(p string, fi os.FileInfo, err error) error {
		st := fi.Sys().(*syscall.Stat_t)
		if !fi.IsDir() && !seen[st.Ino] {
			seen[st.Ino] = true
			used += st.Blocks * 512
		}
		return nil
	})
	if used > 1<<20 {
		t.Errorf("the run left %d bytes of blocks on the host, over its 1 MiB quota", used)
	}
	if fi, err := os.Stat(filepath.Join(q, "sparse")); err != nil || fi.Size() != 300<<20 {
		t.Errorf("the sparse file: %v %v", fi, err)
	}
	a, _ := os.Stat(filepath.Join(q, "data"))
	b, _ := os.Stat(filepath.Join(q, "link50"))
	if !os.SameFile(a, b) {
		t.Error("hard links were committed as copies")
	}

	d := t.TempDir()
	os.Chmod(d, 0o777)
	r = runNative(t, []string{"fs:" + d + ":rw:quota=1MiB"}, time.Minute, "/bin/sh", "-c",
		"cd "+d+" && for i in $(seq 1 400); do mkdir d$i || exit 1; done && echo made")
	// The host's note goes to the caller, not into what the run wrote.
	if r.err != nil || r.stdout != "made\n" || !strings.Contains(strings.Join(r.res.Notes, "\n"), "nothing was committed") ||
		strings.Contains(r.stderr, "committed") {
		t.Fatalf("%v %q notes %q stderr %q", r.err, r.stdout, r.res.Notes, r.stderr)
	}
	if ents, _ := os.ReadDir(d); len(ents) != 0 {
		t.Errorf("%d entries committed past the quota", len(ents))
	}
}

// TestStartersUmaskDoesNotReachTheRun: the umask is the whole process's,
// and whatever it is when init forks (a service listening on its socket
// under 0177 once made every directory init built for a bind 0600, and
// the probe's write into its grant was refused) the root is built and
// the program runs under 022.
func TestStartersUmaskDoesNotReachTheRun(t *testing.T) {
	helper, err := guestbuild.S1Helper()
	if err != nil {
		t.Fatal(err)
	}
	old := syscall.Umask(0o177)
	defer syscall.Umask(old)
	e, err := New(Config{StateDir: t.TempDir(), Memory: 256 << 20, Pids: 64, Self: helper})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if p := e.Probe(context.Background()); !p.Available {
		t.Fatalf("the probe under umask 0177: %s", p.Reason)
	}
	dir := filepath.Join(t.TempDir(), "a", "b")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dir, filepath.Dir(dir), filepath.Dir(filepath.Dir(dir))} {
		os.Chmod(d, 0o777)
	}
	g := mustGrants(t, "fs:"+dir+":rw")
	u := unit.Unit{Kind: tier.Native, Image: addr.Of([]byte("/bin/sh")), Entry: "/bin/sh",
		Args: []string{"/bin/sh", "-c", "umask; echo x > " + dir + "/f"}, Env: map[string]string{"PATH": "/usr/bin:/bin"}}
	var out, errb bytes.Buffer
	res, err := e.Run(context.Background(), &executor.Job{Unit: u, Grants: g, Enforcer: grant.NewEnforcer(g), Stdout: &out, Stderr: &errb, Deadline: time.Minute})
	if err != nil || res.Outcome.Status != attest.Exited || *res.Outcome.ExitCode != 0 {
		t.Fatalf("%v %+v: %s", err, res, errb.String())
	}
	if got := strings.TrimSpace(out.String()); got != "0022" {
		t.Errorf("the program's umask is %s, want 0022", got)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "f")); err != nil || string(b) != "x\n" {
		t.Errorf("the write through the nested grant: %q %v", b, err)
	}
}
