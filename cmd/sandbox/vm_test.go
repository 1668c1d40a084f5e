//go:build linux

package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/internal/guestbuild"
	"github.com/opensubstrate/sandbox/internal/host"
)

// vmImage points this test's sandbox at the S5 guest image the project
// builds (scripts/vm-image fetches its kernel).
func vmImage(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("S5 as tested here runs as root (the CI machines' user): QEMU is placed in the run's cgroup")
	}
	dir, err := guestbuild.DefaultVMImage()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("SANDBOX_VM_IMAGE", dir)
}

// s5Deadline is the wall-clock limit of an S5 run whose subject is not
// the deadline. A run's deadline covers its guest's boot (docs/s5.md),
// and a TCG boot that takes 6 s on a quiet machine took over a minute,
// sandbox run's default, on a busy CI machine: the limit is the TCG
// boot's own bound, so no test depends on how fast the machine is.
const s5Deadline = "5m"

// probed is the state directory where this test process's first S5 test
// had the S5 probe boot its guest; removed by TestMain.
var probed struct {
	sync.Mutex
	home string
}

// s5Home is a fresh state directory for a test whose subject is not the
// S5 probe: it holds the probes' results this process earned once (the
// cache a host keeps for its next process, docs/cli.md), so the test
// boots only the guests it is about, not a probe's first. Call it after
// vmImage.
func s5Home(t *testing.T) string {
	t.Helper()
	probed.Lock()
	defer probed.Unlock()
	if probed.home == "" {
		dir, err := os.MkdirTemp("", "sandbox-s5-probed-")
		if err != nil {
			t.Fatal(err)
		}
		if out, errOut, code := sandbox(t, dir, "run", "-q", "--grant", "kernel", "--", "/bin/true"); code != 0 {
			os.RemoveAll(dir)
			t.Fatalf("the S5 run that probes: exit %d\n%s\n%s", code, out, errOut)
		}
		probed.home = dir
	}
	home := t.TempDir()
	if err := os.CopyFS(host.ProbeCache(home), os.DirFS(host.ProbeCache(probed.home))); err != nil {
		t.Fatalf("copy the probes' results: %v", err)
	}
	return home
}

// TestS5RunSealed runs a native program under a guest kernel of its own
// through sandbox run: its grants at the same paths (read-write reaches
// the host, read-only refuses), sealed, verified, and the accelerator
// said — TCG here, never shown as KVM.
func TestS5RunSealed(t *testing.T) {
	vmImage(t)
	home, ro, rw := s5Home(t), t.TempDir(), t.TempDir()
	os.Chmod(rw, 0o777)
	os.WriteFile(filepath.Join(ro, "given"), []byte("from the host\n"), 0o644)
	out, errOut, code := sandbox(t, home, "run", "-q", "--deadline", s5Deadline, "--memory", "300MiB", "--cpus", "2", "--grant", "kernel", "--grant", "fs:"+ro+":ro", "--grant", "fs:"+rw+":rw", "--",
		"/bin/sh", "-c", "uname -r; cat "+ro+"/given; echo made > "+rw+"/made; echo no > "+ro+"/no || echo refused; id -u; nproc; awk '/MemTotal/{print int($2/1024)}' /proc/meminfo")
	// (awk is reached through /etc/alternatives, which guests share.)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	host, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	if len(lines) != 6 || lines[0] == strings.TrimSpace(string(host)) || lines[1] != "from the host" || lines[2] != "refused" || lines[3] != "65534" || lines[4] != "2" {
		t.Fatalf("stdout %q (host kernel %s)", out, host)
	}
	// The guest's memory is the unit's limit (less what its kernel keeps).
	if mib, _ := strconv.Atoi(lines[5]); mib < 200 || mib > 300 {
		t.Fatalf("stdout %q (host kernel %s)", out, host)
	}
	if b, _ := os.ReadFile(filepath.Join(rw, "made")); string(b) != "made\n" {
		t.Fatalf("rw grant: %q", b)
	}
	if _, err := os.Stat(filepath.Join(ro, "no")); err == nil {
		t.Fatal("a write reached the read-only grant")
	}
	vout, _, vcode := sandbox(t, home, "verify", "--trust-host", "last")
	if vcode != 0 || !strings.Contains(vout, "exited at S5 (required S5)") || !strings.Contains(vout, "qemu-microvm/") || !strings.Contains(vout, "+tcg") {
		t.Fatalf("verify: %d\n%s", vcode, vout)
	}
	show, _, _ := sandbox(t, home, "show", "last")
	if !strings.Contains(show, "S5 accelerator: TCG") || strings.Contains(show, "+kvm") || !strings.Contains(show, "CPU from cgroup") {
		t.Fatalf("show:\n%s", show)
	}
}

// TestS5EscapeBattery runs the S1 escape battery inside an S5 guest:
// every attempt on the host fails, the guest's own kernel facts are all
// it sees, and the host is intact afterwards.
func TestS5EscapeBattery(t *testing.T) {
	vmImage(t)
	home, g, rw := s5Home(t), t.TempDir(), t.TempDir()
	os.Chmod(g, 0o755)
	os.Chmod(rw, 0o777)
	guestbuild.Install(t, guestbuild.Native, "escape", filepath.Join(g, "escape"), 0o755)
	// Set-user-ID root (os.ModeSetuid: os.Chmod drops a bare 0o4000).
	guestbuild.Install(t, guestbuild.Native, "escape", filepath.Join(g, "suid-escape"), os.ModeSetuid|0o755)
	passwd := sum(t, "/etc/passwd")
	out, errOut, code := sandbox(t, home, "run", "-q", "--tier", "S5", "--escalate", "--pids", "64", "--deadline", s5Deadline,
		"--grant", "fs:"+g+":ro", "--grant", "fs:"+rw+":rw",
		"--env", "ESCAPE_GRANT="+g, "--env", "ESCAPE_RW_DIR="+rw, "--env", "ESCAPE_PORT=1",
		"--env", "ESCAPE_HOSTPID="+strconv.Itoa(os.Getpid()), "--", filepath.Join(g, "escape"))
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	// What a guest kernel shows its own programs: its command line, its
	// swap, its /sys and ACPI, its own cgroup and keyrings: facts of the
	// VM, not of the host (the battery names them as S1 would).
	// A file made set-id in a read-write grant keeps that mode only in
	// the share's extended attributes (the guest's view, and its mount is
	// nosuid): the host's file is checked below.
	guestOwn := []string{"create with mode 4755 in a rw grant", "mknod with mode 4755 in a rw grant", "see host processes", "read host facts in /proc/cmdline", "read host facts in /proc/swaps", "list /proc/acpi", "see host cgroup paths", "reach /sys", "raise the core-dump limit", "keyctl"}
	for _, line := range strings.Split(out, "\n") {
		if !strings.Contains(line, ": ESCAPED") {
			continue
		}
		own := false
		for _, p := range guestOwn {
			own = own || strings.HasPrefix(line, p+":")
		}
		if !own {
			t.Errorf("escaped: %s", line)
		}
	}
	for _, want := range []string{"signal host pid " + strconv.Itoa(os.Getpid()) + ": BLOCKED", "ptrace pid 1: BLOCKED", "setuid binary: BLOCKED", "fork bomb: BLOCKED",
		"connect to the host's loopback listener: BLOCKED", "see the host's boot id: BLOCKED", "write /etc/passwd: BLOCKED", "write /escape: BLOCKED"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	if sum(t, "/etc/passwd") != passwd {
		t.Fatal("the host's /etc/passwd changed")
	}
	seen := 0
	filepath.Walk(rw, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			seen++
		}
		if err == nil && fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
			t.Errorf("a set-id file reached the host: %s %v", p, fi.Mode())
		}
		return nil
	})
	if seen == 0 {
		t.Fatal("the battery made no file in the read-write grant: the set-id check saw nothing")
	}
	if ents, _ := os.ReadDir(g); len(ents) != 2 {
		t.Fatalf("the read-only grant changed: %d entries", len(ents))
	}
	if vout, _, vcode := sandbox(t, home, "verify", "--trust-host", "last"); vcode != 0 || !strings.Contains(vout, "exited at S5") {
		t.Fatalf("verify: %d\n%s", vcode, vout)
	}
}

// TestS5Doctor: doctor shows S5 available after its probe boots a guest,
// with the accelerator; and unavailable, naming what is missing, without
// an image.
func TestS5Doctor(t *testing.T) {
	vmImage(t)
	out, _, code := sandbox(t, t.TempDir(), "doctor")
	if code != 0 || !strings.Contains(out, "S5") || !strings.Contains(out, "a TCG microVM booted") || !strings.Contains(out, "firecracker        S5 vm     no   no firecracker binary") {
		t.Fatalf("doctor: %d\n%s", code, out)
	}
	t.Setenv("SANDBOX_VM_IMAGE", t.TempDir())
	out, _, _ = sandbox(t, t.TempDir(), "doctor")
	if !strings.Contains(out, "sandbox vm build") {
		t.Fatalf("doctor without an image:\n%s", out)
	}
	_, errOut, code := sandbox(t, t.TempDir(), "run", "--grant", "kernel", "--", "/bin/true")
	if code != 125 || !strings.Contains(errOut, "S5") || !strings.Contains(errOut, "sandbox vm build") {
		t.Fatalf("run without an image: %d %s", code, errOut)
	}
}

// TestS5Egress: a guest with a net grant reaches its grant only through
// the run's egress proxy (the same decision log as S1); an ungranted
// destination is refused by the proxy, and nothing but the proxy is
// reachable from the guest's network at all. Without a net grant the
// guest has no network device.
func TestS5Egress(t *testing.T) {
	vmImage(t)
	granted := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "granted\n") }))
	defer granted.Close()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "LEAKED\n") }))
	defer other.Close()
	home := s5Home(t)
	script := strings.Join([]string{
		"curl -sS " + granted.URL + "/",
		"curl -sS -o /dev/null -w '%{http_code}\\n' " + other.URL + "/",
		"curl -sS --noproxy '*' --max-time 3 " + other.URL + "/ || echo direct refused",
		"curl -sS --noproxy '*' --max-time 3 http://10.0.2.2:" + strings.Split(other.URL, ":")[2] + "/ || echo gateway refused",
	}, "; ")
	out, errOut, code := sandbox(t, home, "run", "-q", "--deadline", s5Deadline, "--grant", "kernel", "--grant", "net:"+strings.TrimPrefix(granted.URL, "http://"), "--", "/bin/sh", "-c", script)
	if code != 0 || strings.Contains(out, "LEAKED") || !strings.HasPrefix(out, "granted\n403\n") || !strings.Contains(out, "direct refused") || !strings.Contains(out, "gateway refused") {
		t.Fatalf("exit %d\nstdout %q\nstderr %s", code, out, errOut)
	}
	show, _, _ := sandbox(t, home, "show", "last")
	if !strings.Contains(show, "allow net connect "+strings.TrimPrefix(granted.URL, "http://")) || !strings.Contains(show, "DENY  net connect "+strings.TrimPrefix(other.URL, "http://")) {
		t.Fatalf("show:\n%s", show)
	}
	out, _, code = sandbox(t, home, "run", "-q", "--deadline", s5Deadline, "--grant", "kernel", "--", "/bin/sh", "-c", "ls /sys/class/net")
	if code != 0 || strings.TrimSpace(out) != "lo" {
		t.Fatalf("without a net grant: %d %q", code, out)
	}
}

// TestS5VMImageUnit runs a vm unit: the unit's image is the guest's
// boot manifest (by content), its program the guest's own, with nothing
// of the host's /usr; sealed at S5 and verified. A manifest naming a
// kernel this host does not have is refused before any boot.
func TestS5VMImageUnit(t *testing.T) {
	vmImage(t)
	home := s5Home(t)
	manifest := filepath.Join(os.Getenv("SANDBOX_VM_IMAGE"), "manifest.json")
	out, errOut, code := sandbox(t, home, "run", "-q", "--deadline", s5Deadline, "--", manifest, "/sandbox/bin/sh", "-c", "ls /usr | wc -l; id -u")
	if code != 0 || out != "0\n65534\n" {
		t.Fatalf("exit %d stdout %q stderr %s", code, out, errOut)
	}
	vout, _, vcode := sandbox(t, home, "verify", "--trust-host", "last")
	if vcode != 0 || !strings.Contains(vout, "exited at S5 (required S5)") {
		t.Fatalf("verify: %d\n%s", vcode, vout)
	}
	b, _ := os.ReadFile(manifest)
	other := filepath.Join(t.TempDir(), "manifest.json")
	fixed := strings.Replace(string(b), `"kernel": "b3:`+strings.Split(strings.Split(string(b), `"kernel": "b3:`)[1], `"`)[0], `"kernel": "b3:`+strings.Repeat("1", 64), 1)
	os.WriteFile(other, []byte(fixed), 0o644)
	_, errOut, code = sandbox(t, home, "run", "-q", "--", other, "/sandbox/bin/true")
	if code == 0 || !strings.Contains(errOut, "the kernel b3:"+strings.Repeat("1", 64)+" is not here") {
		t.Fatalf("a manifest naming a missing kernel: %d %s", code, errOut)
	}
}

// TestS5LiveSandboxThroughTheService: sandbox create --tier S5, execs in
// its one VM, suspend (its memory image stored), resume: the process an
// exec left running and what it kept in the guest's memory are there,
// and the record verifies.
func TestS5LiveSandboxThroughTheService(t *testing.T) {
	vmImage(t)
	home := s5Home(t)
	startServe(t, home)
	id := strings.TrimSpace(cliOK(t, home, "create", "--tier", "S5"))
	if out := cliOK(t, home, "exec", id, "--", "/bin/sh", "-c",
		"echo kept > file; cd /; /sandbox/bin/sh -c 'echo resident > /tmp/state; /sandbox/bin/sleep 1000 >/dev/null 2>&1 & echo $! > /tmp/pid'; uname -r"); strings.TrimSpace(out) == "" {
		t.Fatal("exec: no kernel release")
	}
	cliOK(t, home, "suspend", id)
	cliOK(t, home, "resume", id)
	if out := cliOK(t, home, "exec", id, "--", "/bin/sh", "-c", "cat /tmp/state; kill -0 $(cat /tmp/pid) && echo alive; cat file"); out != "resident\nalive\nkept\n" {
		t.Fatalf("after resume: %q", out)
	}
	cliOK(t, home, "rm", id)
	if out := cliOK(t, home, "record", "verify", id); !strings.Contains(out, "closed") {
		t.Fatalf("record verify: %s", out)
	}
}

// cliOK runs sandbox args against home and is its output; a non-zero
// exit fails the test.
func cliOK(t *testing.T, home string, args ...string) string {
	t.Helper()
	out, errOut, code := runCLI(t, home, "", args...)
	if code != 0 {
		t.Fatalf("sandbox %s: exit %d: %s", strings.Join(args, " "), code, errOut)
	}
	return out
}

// TestVMBuildAndCheck: sandbox vm build makes the image into the state
// directory (the default S5 image), printing its address; vm check
// re-hashes it, and names a file that no longer matches.
func TestVMBuildAndCheck(t *testing.T) {
	k, err := guestbuild.VMKernel()
	if err != nil {
		t.Fatal(err)
	}
	agent, err := guestbuild.VMAgent()
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	t.Setenv("SANDBOX_VM_IMAGE", "")
	if _, errOut, code := sandbox(t, home, "vm", "build"); code != 2 || !strings.Contains(errOut, "--kernel") {
		t.Fatalf("no --kernel: %d %s", code, errOut)
	}
	out, errOut, code := sandbox(t, home, "vm", "build", "--kernel", k, "--agent", agent, "--busybox", filepath.Join(filepath.Dir(k), "busybox", "bin", "busybox"))
	if code != 0 || !strings.HasPrefix(out, "b3:") || !strings.Contains(out, filepath.Join(home, "vm")) {
		t.Fatalf("build: %d %q %s", code, out, errOut)
	}
	addr := strings.Fields(out)[0]
	if out, _, code := sandbox(t, home, "vm", "check"); code != 0 || !strings.HasPrefix(out, addr+" ok") {
		t.Fatalf("check: %d %q", code, out)
	}
	// Alter the initramfs, named by the address build printed.
	initrd := strings.TrimPrefix(strings.Fields(strings.Split(out, "initramfs ")[1])[0], "b3:")
	os.WriteFile(filepath.Join(home, "vm", initrd), []byte("altered"), 0o644)
	if _, errOut, code := sandbox(t, home, "vm", "check"); code == 0 || !strings.Contains(errOut, "the initramfs at") {
		t.Fatalf("check of an altered image: %d %s", code, errOut)
	}
}

// TestS5LiveSandboxAfterAKilledService: a service killed (-9) with a live
// S5 sandbox takes its VM with it (no QEMU outlives it); the next service
// parks the sandbox from its workspace as it was left (there is no
// memory image: resident state is gone, and said so), and resume boots
// a fresh VM on that workspace; the record verifies.
func TestS5LiveSandboxAfterAKilledService(t *testing.T) {
	vmImage(t)
	home := s5Home(t)
	sv := startServe(t, home)
	id := strings.TrimSpace(cliOK(t, home, "create", "--tier", "S5"))
	cliOK(t, home, "exec", id, "--", "/bin/sh", "-c", "echo kept > file; echo resident > /tmp/state")
	killTakesQEMU(t, sv)
	startServe(t, home)
	if out := cliOK(t, home, "ps", "--json"); !strings.Contains(out, id) || !strings.Contains(out, "suspended") {
		t.Fatalf("after the kill: %s", out)
	}
	cliOK(t, home, "resume", id)
	if out := cliOK(t, home, "exec", id, "--", "/bin/sh", "-c", "cat file; cat /tmp/state 2>/dev/null || echo gone"); out != "kept\ngone\n" {
		t.Fatalf("after resume: %q", out)
	}
	cliOK(t, home, "rm", id)
	cliOK(t, home, "record", "verify", id)
}

// TestS5KilledRunEnds: sandbox killed (-9) while its S5 guest runs takes
// the VM with it, and the next gc leaves nothing behind.
func TestS5KilledRunEnds(t *testing.T) {
	vmImage(t)
	home, shared := s5Home(t), t.TempDir()
	os.Chmod(shared, 0o777)
	cmd := cliCmd(t, home, nil, "run", "-q", "--grant", "kernel", "--grant", "fs:"+shared+":rw", "--deadline", "2m",
		"--", "/bin/sh", "-c", "echo up > "+shared+"/up; exec sleep 600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	for i := 0; ; i++ {
		if _, err := os.Stat(filepath.Join(shared, "up")); err == nil {
			break
		}
		if i == 1200 {
			t.Fatal("the guest's program never started")
		}
		time.Sleep(50 * time.Millisecond)
	}
	killTakesQEMU(t, cmd)
	// Its VM's directory (QEMU's sockets, the console) is named by its
	// lease, and collected.
	dry, _, _ := sandbox(t, home, "gc", "-n")
	if !strings.Contains(dry, "VM directory") {
		t.Fatalf("gc -n does not find the VM's directory:\n%s", dry)
	}
	if out, errOut, code := sandbox(t, home, "gc"); code != 0 {
		t.Fatalf("gc: %d %s %s", code, out, errOut)
	}
	if out, _, _ := sandbox(t, home, "gc", "-n"); out != "nothing left behind\n" {
		t.Fatalf("after gc:\n%s", out)
	}
}

// killTakesQEMU kills cmd (-9), which has one QEMU child, and fails the
// test unless that QEMU ends with it.
func killTakesQEMU(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	vms := childrenNamed(cmd.Process.Pid, "qemu-system")
	if len(vms) != 1 {
		t.Fatalf("sandbox has %d QEMU children, want 1", len(vms))
	}
	cmd.Process.Kill()
	cmd.Wait()
	// Gone, or dead and not yet reaped (a zombie, whose reaping is its
	// new parent's business): a bound on the kernel delivering the
	// death signal, not a measure.
	for i := 0; ; i++ {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(vms[0]) + "/stat")
		if err != nil {
			return
		}
		if f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:])); len(f) > 0 && (f[0] == "Z" || f[0] == "X") {
			return
		}
		if i == 1200 {
			t.Fatalf("QEMU (pid %d) outlived the killed sandbox by a minute", vms[0])
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// childrenNamed are the pids of pid's children whose command starts
// with name.
func childrenNamed(pid int, name string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		f := strings.Fields(s[i+1:])
		cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		argv0, _, _ := strings.Cut(string(cmd), "\x00")
		if len(f) > 1 && f[1] == strconv.Itoa(pid) && strings.HasPrefix(filepath.Base(argv0), name) {
			out = append(out, n)
		}
	}
	return out
}
