//go:build linux

package confine_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/internal/confine"
	"github.com/opensubstrate/sandbox/internal/confine/syscalls"
)

// TestMain makes the test binary the helper the jail runs in, when its
// arguments say so.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == confine.MonitorJailArg {
		os.Exit(confine.RunMonitorJail())
	}
	os.Exit(m.Run())
}

// TestMonitorJail runs a shell in the monitor jail QEMU starts through: its
// bounding set is the jail's three capabilities, no_new_privs is set, one
// seccomp filter (QEMU adds its own) refuses ptrace even of its own
// child, the host's files and /proc/sys are read-only, and only the
// directory it was given is writable.
func TestMonitorJail(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the VM jail is for a monitor started as root")
	}
	if runtime.GOARCH != "amd64" {
		t.Skip("the ptrace attempt calls system call 101 (amd64)")
	}
	filter, err := syscalls.MonitorFilter()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	script := strings.Join([]string{
		"grep -E '^(CapBnd|NoNewPrivs|Seccomp_filters):' /proc/self/status",
		"(echo x > /etc/sandbox-jail-probe) 2>/dev/null && echo etc written || echo etc refused",
		"(echo x > /proc/sys/kernel/core_pattern) 2>/dev/null && echo core_pattern written || echo core_pattern refused",
		"echo x > " + dir + "/ok && echo dir written",
		"sleep 5 & perl -e 'if (syscall(101, 16, $ARGV[0]+0, 0, 0) == -1) { print \"ptrace: $!\\n\" } else { print \"ptrace: attached\\n\" }' $!; kill $!",
	}, "; ")
	out, err := exec.Command(os.Args[0], confine.MonitorJailArg, confine.InsnsText(filter), dir, "--", "/bin/sh", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := "CapBnd:\t000000000000000e\nNoNewPrivs:\t1\nSeccomp_filters:\t1\netc refused\ncore_pattern refused\ndir written\nptrace: Operation not permitted\n"
	if string(out) != want {
		t.Fatalf("in the jail:\n%s\nwant:\n%s", out, want)
	}
	if _, err := os.Stat("/etc/sandbox-jail-probe"); err == nil {
		os.Remove("/etc/sandbox-jail-probe")
		t.Fatal("a write to /etc reached the host")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "ok")); string(b) != "x\n" {
		t.Fatalf("the writable directory: %q", b)
	}
	// A writable directory named through a link is refused, naming it,
	// before anything is executed.
	link := filepath.Join(t.TempDir(), "link")
	os.Symlink(dir, link)
	if out, err := exec.Command(os.Args[0], confine.MonitorJailArg, confine.InsnsText(filter), link, "--", "/bin/true").CombinedOutput(); err == nil || !strings.Contains(string(out), link+" is a symbolic link") {
		t.Fatalf("a writable directory through a link: %v %s", err, out)
	}
	// A bad filter argument is refused before anything is executed.
	if out, err := exec.Command(os.Args[0], confine.MonitorJailArg, "xyz", dir, "--", "/bin/true").CombinedOutput(); err == nil || !strings.Contains(string(out), "hex digits") {
		t.Fatalf("a bad filter: %v %s", err, out)
	}
}
