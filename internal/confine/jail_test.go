//go:build linux

package confine_test

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
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
// directory it was given is writable; its network namespace is its own,
// its loopback alone and up, and the host's listeners out of its reach.
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
	// A listener of the host's, which the jail must not reach.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	hostPort := ln.Addr().(*net.TCPAddr).Port
	script := strings.Join([]string{
		"grep -E '^(CapBnd|NoNewPrivs|Seccomp_filters):' /proc/self/status",
		"(echo x > /etc/sandbox-jail-probe) 2>/dev/null && echo etc written || echo etc refused",
		"(echo x > /proc/sys/kernel/core_pattern) 2>/dev/null && echo core_pattern written || echo core_pattern refused",
		"echo x > " + dir + "/ok && echo dir written",
		"sed -n 's/^ *\\([a-z0-9]*\\):.*/net: \\1/p' /proc/net/dev",
		"perl -MIO::Socket::INET -e 'print IO::Socket::INET->new(Listen => 1, LocalAddr => \"127.0.0.1:0\") ? \"loopback up\\n\" : \"loopback: $@\\n\"'",
		"perl -MIO::Socket::INET -e 'print IO::Socket::INET->new(Listen => 1, LocalAddr => \"127.0.0.1:80\") ? \"port 80 bound\\n\" : \"port 80: $@\\n\"'",
		"perl -MIO::Socket::INET -e 'print IO::Socket::INET->new(PeerAddr => \"127.0.0.1:" + strconv.Itoa(hostPort) + "\") ? \"host reached\\n\" : \"host not reached\\n\"'",
		"sleep 5 & perl -e 'if (syscall(101, 16, $ARGV[0]+0, 0, 0) == -1) { print \"ptrace: $!\\n\" } else { print \"ptrace: attached\\n\" }' $!; kill $!",
	}, "; ")
	out, err := exec.Command(os.Args[0], confine.MonitorJailArg, confine.InsnsText(filter), dir, "--", "/bin/sh", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := "CapBnd:\t000000000000000e\nNoNewPrivs:\t1\nSeccomp_filters:\t1\netc refused\ncore_pattern refused\ndir written\nnet: lo\nloopback up\nport 80 bound\nhost not reached\nptrace: Operation not permitted\n"
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
