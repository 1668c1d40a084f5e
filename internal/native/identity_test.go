//go:build linux

package native

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
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

// intruderAttempts are the lines guests/intruder prints, one per attempt
// on a sandbox's process from outside it.
var intruderAttempts = []string{
	"signal it (kill 0)", "stop it (SIGSTOP)", "signal it through a pidfd", "take its descriptor 0 (pidfd_getfd)",
	"ptrace it (PTRACE_SEIZE)", "ptrace it (PTRACE_ATTACH)", "read its environment", "open its memory",
	"read its memory (process_vm_readv)", "list its descriptors", "list its root (/proc/PID/root)",
	"list its working directory (/proc/PID/cwd)", "renice it", "set its limits (prlimit)",
	"move it to another CPU (sched_setaffinity)", "set its I/O priority", "kill it (SIGKILL)",
}

// intrude runs guests/intruder on the host as uid:uid (no supplementary
// groups) against pid, trying to write each of paths inside the target
// through /proc/PID/root, and fails the test for every attempt that got
// through or is missing.
func intrude(t *testing.T, who string, uid, pid int, paths ...string) {
	t.Helper()
	// A copy every user may execute (the build cache is root's).
	dir, err := os.MkdirTemp("", "intruder-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	prog := filepath.Join(dir, "intruder")
	guestbuild.Install(t, guestbuild.Native, "intruder", prog, 0o755)
	cmd := exec.Command(prog, append([]string{strconv.Itoa(pid)}, paths...)...)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("intruder as %s: %v: %s", who, err, errb.String())
	}
	text := out.String()
	if !strings.Contains(text, fmt.Sprintf("intruder uid %d gid %d\n", uid, uid)) {
		t.Fatalf("the intruder did not run as %s (%d): %s", who, uid, text)
	}
	want := append([]string{}, intruderAttempts...)
	for _, p := range paths {
		want = append(want, "write "+p+" in its root (/proc/PID/root)")
	}
	lines := strings.Split(strings.TrimSpace(text), "\n")
	for _, w := range want {
		found := false
		for _, l := range lines {
			if strings.HasPrefix(l, w+": ") {
				found = true
				if !strings.HasPrefix(l, w+": BLOCKED") {
					t.Errorf("as %s (uid %d): %s", who, uid, l)
				}
			}
		}
		if !found {
			t.Errorf("as %s: no line for %q in:\n%s", who, w, text)
		}
	}
	t.Logf("the intruder as %s (uid %d):\n%s", who, uid, text)
}

// findProc waits for the host process whose command line is argv and
// returns its pid.
func findProc(t *testing.T, argv ...string) int {
	t.Helper()
	want := []byte(strings.Join(argv, "\x00") + "\x00")
	deadline := time.Now().Add(30 * time.Second)
	for {
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil && bytes.Equal(b, want) {
				return pid
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no process %q appeared", argv)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// hostUIDs are a host process's real, effective, saved and file system
// uids.
func hostUIDs(t *testing.T, pid int) []uint64 {
	t.Helper()
	uids, _, err := procCreds(filepath.Join("/proc", strconv.Itoa(pid)))
	if err != nil {
		t.Fatal(err)
	}
	return uids
}

// stillRunning checks the target came through: alive, not stopped, its
// command line unchanged.
func stillRunning(t *testing.T, pid int, argv ...string) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || string(b) != strings.Join(argv, "\x00")+"\x00" {
		t.Errorf("the target %d is gone or changed: %q %v", pid, b, err)
		return
	}
	st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+1:])); len(f) == 0 || f[0] != "S" {
		t.Errorf("the target %d is in state %v, not sleeping", pid, f)
	}
}

// leasedID checks id is one of S1's host ids, not nobody's.
func leasedID(t *testing.T, what string, id int) {
	t.Helper()
	if id < IDBase || id >= IDBase+IDCount {
		t.Errorf("%s runs as host id %d, not one of S1's (%d..%d)", what, id, IDBase, IDBase+IDCount-1)
	}
}

// TestNoHostUserReachesAnS1Run: a one-shot S1 run's processes are a host
// uid of their own, so that neither a host process running as nobody nor
// one running as another live sandbox's host uid can signal, trace,
// read or write into them.
func TestNoHostUserReachesAnS1Run(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("as root, S1 guests run as a host id of their own (rootless, they are the invoking user's)")
	}
	e := testExecutor(t)
	other, err := e.Open(context.Background(), grant.Set{}, unit.Limits{}, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	rw := t.TempDir()
	os.Chmod(rw, 0o777)
	argv := []string{"sleep", fmt.Sprintf("3600.%d", time.Now().UnixNano()%1e9)}
	g := mustGrants(t, "fs:"+rw+":rw")
	u := unit.Unit{Kind: tier.Native, Image: addr.Of([]byte("sleep")), Entry: "/bin/sleep", Args: argv,
		Env: map[string]string{"RUN_SECRET": "do-not-read-me"}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan *executor.Result, 1)
	go func() {
		res, err := e.Run(ctx, &executor.Job{Unit: u, Grants: g, Enforcer: grant.NewEnforcer(g), Stdout: io.Discard, Stderr: io.Discard, Deadline: 5 * time.Minute})
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	pid := findProc(t, argv...)
	uids := hostUIDs(t, pid)
	leasedID(t, "the run", int(uids[0]))
	if int(uids[0]) == other.HostID() {
		t.Errorf("the run and a live sandbox share host id %d", uids[0])
	}
	intrude(t, "nobody", 65534, pid, rw+"/intruder", "/tmp/intruder")
	intrude(t, "another sandbox's host uid", other.HostID(), pid, rw+"/intruder", "/tmp/intruder")
	stillRunning(t, pid, argv...)
	if _, err := os.Stat(filepath.Join(rw, "intruder")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the intruder wrote into the run's grant: %v", err)
	}
	cancel()
	if res := <-done; res == nil || res.Outcome.Status != attest.Killed {
		t.Errorf("the run, interrupted: %+v", res)
	}
}

// TestNoHostUserReachesAnS1Sandbox: the same for a live sandbox, whose
// processes (here one an exec left in the background) keep its host id
// for its whole life; two live sandboxes never share one.
func TestNoHostUserReachesAnS1Sandbox(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("as root, S1 guests run as a host id of their own (rootless, they are the invoking user's)")
	}
	e := testExecutor(t)
	ws := t.TempDir()
	target, err := e.Open(context.Background(), mustGrants(t, "fs:"+ws+":rw"), unit.Limits{}, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	other, err := e.Open(context.Background(), grant.Set{}, unit.Limits{}, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	leasedID(t, "a live sandbox", target.HostID())
	leasedID(t, "another live sandbox", other.HostID())
	if target.HostID() == other.HostID() {
		t.Fatalf("two live sandboxes share host id %d", target.HostID())
	}
	argv := []string{"sleep", fmt.Sprintf("3600.%d", time.Now().UnixNano()%1e9)}
	var out bytes.Buffer
	res, err := target.Run(context.Background(), &executor.Job{Unit: unit.Unit{Kind: tier.Native, Entry: "/bin/sh",
		Args: []string{"sh", "-c", strings.Join(argv, " ") + " </dev/null >/dev/null 2>&1 & echo > " + ws + "/mine; cat /proc/self/uid_map"},
		Env:  map[string]string{"PATH": "/usr/bin:/bin", "SANDBOX_SECRET": "do-not-read-me"}}, Stdout: &out, Stderr: io.Discard, Deadline: time.Minute})
	if err != nil || res.Outcome.Status != attest.Exited || *res.Outcome.ExitCode != 0 {
		t.Fatalf("%v %+v", err, res)
	}
	if f := strings.Fields(out.String()); len(f) != 3 || f[0] != "65534" || f[1] != strconv.Itoa(target.HostID()) || f[2] != "1" {
		t.Errorf("the exec's uid_map: %q, want 65534 → %d alone", out.String(), target.HostID())
	}
	// What the guest made in its grant belongs to the grant's owner.
	var dirSt, st syscall.Stat_t
	syscall.Stat(ws, &dirSt)
	if err := syscall.Stat(filepath.Join(ws, "mine"), &st); err != nil || st.Uid != dirSt.Uid || st.Gid != dirSt.Gid {
		t.Errorf("the guest's file in its grant: %v, owned by %d:%d, want the grant's owner %d:%d", err, st.Uid, st.Gid, dirSt.Uid, dirSt.Gid)
	}
	pid := findProc(t, argv...)
	if uids := hostUIDs(t, pid); int(uids[0]) != target.HostID() {
		t.Errorf("the sandbox's background process runs as %v, not its host id %d", uids, target.HostID())
	}
	intrude(t, "nobody", 65534, pid, ws+"/intruder", "/tmp/intruder")
	intrude(t, "another sandbox's host uid", other.HostID(), pid, ws+"/intruder", "/tmp/intruder")
	stillRunning(t, pid, argv...)
	if _, err := os.Stat(filepath.Join(ws, "intruder")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the intruder wrote into the sandbox's grant: %v", err)
	}
	// While both live, one-shot runs get ids of their own too.
	for range 3 {
		r := runNative(t, nil, time.Minute, "/bin/cat", "/proc/self/uid_map")
		f := strings.Fields(r.stdout)
		if r.err != nil || len(f) != 3 {
			t.Fatalf("%v %q %s", r.err, r.stdout, r.stderr)
		}
		id, _ := strconv.Atoi(f[1])
		leasedID(t, "a run", id)
		if id == target.HostID() || id == other.HostID() {
			t.Errorf("a run got host id %d, held by a live sandbox", id)
		}
	}
}

// TestProgramThatCannotStart: a program the kernel will not execute, or
// a working directory the guest cannot enter, is reported with the
// kernel's error number, from a run and from a live sandbox's exec
// alike: the launcher, which executes the program, says why not.
func TestProgramThatCannotStart(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("as root the launcher executes the program (rootless, init's thread does, as it always did)")
	}
	// Init's own directory in the run's root: root's, 0700, and root is
	// not mapped into the guest's user namespace.
	const closed = "/.sandbox"
	tests := []struct {
		name  string
		entry string
		dir   string
		errno syscall.Errno
	}{
		{"missing", "/nonexistent/program", "", syscall.ENOENT},
		{"not executable", "/etc/passwd", "", syscall.EACCES},
		{"a directory", "/usr", "", syscall.EACCES},
		{"a working directory it cannot enter", "/bin/true", closed, syscall.EACCES},
	}
	e := testExecutor(t)
	s, err := e.Open(context.Background(), grant.Set{}, unit.Limits{}, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, tc := range tests {
		g := mustGrants(t)
		u := unit.Unit{Kind: tier.Native, Image: addr.Of([]byte(tc.entry)), Entry: tc.entry, Args: []string{tc.entry}, Dir: tc.dir}
		res, err := e.Run(context.Background(), &executor.Job{Unit: u, Grants: g, Enforcer: grant.NewEnforcer(g), Stdout: io.Discard, Stderr: io.Discard, Deadline: time.Minute})
		if err != nil || res.Outcome.Status != attest.Failed || res.ExecErrno != tc.errno {
			t.Errorf("run, %s: %v %+v, want errno %v", tc.name, err, res, tc.errno)
		}
		res, err = s.Run(context.Background(), &executor.Job{Unit: u, Stdout: io.Discard, Stderr: io.Discard, Deadline: time.Minute})
		if err != nil || res.Outcome.Status != attest.Failed || res.ExecErrno != tc.errno {
			t.Errorf("live sandbox, %s: %v %+v, want errno %v", tc.name, err, res, tc.errno)
		}
	}
	// The sandbox is still there for the next exec.
	var out strings.Builder
	if res, err := s.Run(context.Background(), &executor.Job{Unit: unit.Unit{Kind: tier.Native, Entry: "/bin/echo", Args: []string{"echo", "still"}}, Stdout: &out, Stderr: io.Discard, Deadline: time.Minute}); err != nil || out.String() != "still\n" {
		t.Fatalf("after the failed execs: %v %+v %q", err, res, out.String())
	}
}

// TestImageLoaderNeverRunsUnconfined: where the S1 helper is linked
// dynamically, its ELF loader is the host's even in an image's root
// filesystem: the launcher starts in a copy of the host's mounts, so an
// image's /lib64/ld-linux-x86-64.so.2 (here a program of the image's)
// never runs before the program is confined.
func TestImageLoaderNeverRunsUnconfined(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("as root the launcher executes the program (rootless, init's thread does)")
	}
	root, err := guestbuild.Root()
	if err != nil {
		t.Fatal(err)
	}
	helper := filepath.Join(t.TempDir(), "sandbox-s1")
	build := exec.Command("go", "build", "-ldflags=-linkmode=external", "-o", helper, "./cmd/sandbox-s1")
	build.Dir, build.Env = root, append(os.Environ(), "CGO_ENABLED=1")
	if out, err := build.CombinedOutput(); err != nil {
		t.Skipf("no dynamically linked helper can be built here (cgo): %v %s", err, out)
	}
	if b, _ := os.ReadFile(helper); !bytes.Contains(b, []byte("/lib64/ld-linux-x86-64.so.2")) {
		t.Skip("the helper did not come out dynamically linked against /lib64/ld-linux-x86-64.so.2")
	}
	prog := guestBytes(t, "escape")
	img := t.TempDir()
	for _, d := range []string{"bin", "lib64", "etc"} {
		os.MkdirAll(filepath.Join(img, d), 0o755)
	}
	os.WriteFile(filepath.Join(img, "bin", "prog"), prog, 0o755)
	// The image's "loader": a program that would run in its place.
	os.WriteFile(filepath.Join(img, "lib64", "ld-linux-x86-64.so.2"), prog, 0o755)
	e, err := New(Config{StateDir: t.TempDir(), Memory: 256 << 20, Pids: 64, Self: helper})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	g := mustGrants(t)
	u := unit.Unit{Kind: tier.Native, Image: addr.Of(prog), Entry: "/bin/prog", Args: []string{"prog", "euid"}}
	var out, errb bytes.Buffer
	res, err := e.Run(context.Background(), &executor.Job{Unit: u, Grants: g, Enforcer: grant.NewEnforcer(g), Stdout: &out, Stderr: &errb, Deadline: time.Minute, RootDir: img})
	if err != nil || res.Outcome.Status != attest.Exited || *res.Outcome.ExitCode != 0 || out.String() != "65534\n" {
		t.Fatalf("%v %+v stdout %q stderr %q", err, res, out.String(), errb.String())
	}
}

func guestBytes(t *testing.T, name string) []byte {
	t.Helper()
	p, err := guestbuild.Native(name)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
