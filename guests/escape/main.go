//go:build linux

// Command escape tries to get out of an S1 sandbox in every way the
// escape battery names, and prints one line per attempt:
//
//	NAME: BLOCKED (how)   or   NAME: ESCAPED (what happened)
//
// It always exits 0 so that a test can read every line. With the single
// argument "euid" it prints its effective user id instead (for the setuid
// check). Environment: ESCAPE_HOSTPID (a host process), ESCAPE_PORT (a
// host loopback listener), ESCAPE_GRANT (a granted directory holding the
// symlinks and the setuid copy).
package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func report(name string, escaped bool, format string, args ...any) {
	verdict := "BLOCKED"
	if escaped {
		verdict = "ESCAPED"
	}
	fmt.Printf("%s: %s (%s)\n", name, verdict, fmt.Sprintf(format, args...))
}

// blockedIf reports an attempt that escaped when err is nil.
func blockedIf(name string, err error) {
	if err == nil {
		report(name, true, "it worked")
		return
	}
	report(name, false, "%v", err)
}

func main() {
	if len(os.Args) == 2 && os.Args[1] == "euid" {
		fmt.Println(os.Geteuid())
		return
	}
	// First, before this program opens anything: descriptors it did not
	// open were inherited from outside (the host, or whoever started
	// sandbox).
	var inherited []string
	for fd := 3; fd < 1024; fd++ {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil {
			inherited = append(inherited, strconv.Itoa(fd))
		}
	}
	report("inherit a descriptor from outside", len(inherited) > 0, "open beyond stdio: %v", inherited)

	grant := os.Getenv("ESCAPE_GRANT")

	_, err := os.ReadFile("/etc/shadow")
	if err == nil {
		b, _ := os.ReadFile("/etc/shadow")
		if len(b) == 0 {
			err = errors.New("masked: empty")
		}
	}
	blockedIf("read /etc/shadow", err)

	for _, p := range []string{"/etc/passwd", "/usr/bin/escape", "/escape", "/root/escape", "/proc/sys/kernel/hostname"} {
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err == nil {
			_, err = f.WriteString("")
			f.Close()
		}
		blockedIf("write "+p, err)
	}
	blockedIf("sysctl kernel.hostname via /proc/sys", os.WriteFile("/proc/sys/kernel/hostname", []byte("escaped"), 0o644))

	for _, l := range []string{"abs", "rel"} {
		_, err := os.ReadFile(filepath.Join(grant, l, "escape-secret"))
		blockedIf("follow symlink "+l+" out of the grant", err)
	}

	procs, _ := filepath.Glob("/proc/[0-9]*")
	hostPid, _ := strconv.Atoi(os.Getenv("ESCAPE_HOSTPID"))
	kerr := unix.Kill(hostPid, 0)
	report("see host processes", len(procs) > 8, "%d processes visible", len(procs))
	blockedIf(fmt.Sprintf("signal host pid %d", hostPid), kerr)

	blockedIf("mount tmpfs", unix.Mount("none", "/tmp", "tmpfs", 0, ""))
	blockedIf("unshare user namespace", unix.Unshare(unix.CLONE_NEWUSER))
	identityAttacks()
	blockedIf("unshare mount namespace", unix.Unshare(unix.CLONE_NEWNS))
	_, _, e := unix.RawSyscall(unix.SYS_PTRACE, unix.PTRACE_ATTACH, 1, 0)
	blockedIf("ptrace pid 1", errnoErr(e))
	initAttacks()
	hostFacts()
	blockedIf("raise the core-dump limit", unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{Cur: 1 << 20, Max: 1 << 20}))
	blockedIf("raise the open-files limit", unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: 1 << 16, Max: 1 << 16}))
	for _, d := range []string{"/dev/vda", "/dev/sda", "/dev/nvme0n1", "/dev/mem", "/dev/kmsg", "/dev/tty"} {
		f, err := os.Open(d)
		if err == nil {
			f.Close()
		}
		blockedIf("open the host's "+d, err)
	}
	_, err = os.Stat("/sys/kernel")
	blockedIf("reach /sys", err)
	blockedIf("chroot", unix.Chroot("/tmp"))
	_, err = os.ReadDir("/proc/1/root")
	blockedIf("/proc/1/root", err)
	_, err = os.Readlink("/proc/1/exe")
	blockedIf("/proc/1/exe", err)

	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP)
	if err == nil {
		unix.Close(fd)
	}
	blockedIf("raw socket", err)
	fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
	if err == nil {
		unix.Close(fd)
	}
	blockedIf("packet socket", err)

	c, err := net.DialTimeout("tcp", "127.0.0.1:"+os.Getenv("ESCAPE_PORT"), time.Second)
	if err == nil {
		c.Close()
	}
	blockedIf("connect to the host's loopback listener", err)
	_, err = net.LookupHost("example.com")
	blockedIf("DNS lookup", err)

	if s := filepath.Join(grant, "suid-escape"); fileExists(s) {
		// Only a program that is set-user-ID tests anything: a setup
		// that failed to make it one fails here. (Its owner, root on the
		// host, reads as the overflow ID in a user namespace that does
		// not map root.)
		var st unix.Stat_t
		if err := unix.Stat(s, &st); err != nil || st.Mode&unix.S_ISUID == 0 {
			report("setuid binary", true, "the test's setuid binary is not set-user-ID (mode %#o, %v): nothing was tried", st.Mode, err)
		}
		out, err := exec.Command(s, "euid").Output()
		euid := strings.TrimSpace(string(out))
		report("setuid binary", err == nil && euid == "0", "it ran as euid %q (%v)", euid, err)
	}

	// Fork bomb: start sleepers until the kernel says no, then end them.
	n := 0
	var ferr error
	var sleepers []*exec.Cmd
	for n < 100000 {
		cmd := exec.Command("/bin/sleep", "30")
		if ferr = cmd.Start(); ferr != nil {
			break
		}
		sleepers = append(sleepers, cmd)
		n++
	}
	for _, c := range sleepers {
		c.Process.Kill()
		c.Wait()
	}
	if ferr != nil {
		report("fork bomb", false, "stopped after %d processes: %v", n, ferr)
	} else {
		report("fork bomb", true, "%d processes started", n)
	}

	// Fill the granted, quota'd directory past its quota.
	if q := os.Getenv("ESCAPE_QUOTA_DIR"); q != "" {
		f, err := os.Create(filepath.Join(q, "fill"))
		written := 0
		if err == nil {
			buf := make([]byte, 1<<16)
			for written < 64<<20 {
				m, werr := f.Write(buf)
				written += m
				if werr != nil {
					err = werr
					break
				}
			}
			f.Close()
		}
		if err != nil {
			report("fill the disk past the quota", false, "stopped at %d bytes: %v", written, err)
		} else {
			report("fill the disk past the quota", true, "wrote %d bytes", written)
		}
	}

	for _, d := range []struct{ env, label string }{{"ESCAPE_RW_DIR", "rw grant"}, {"ESCAPE_QUOTA_DIR", "quota'd grant"}} {
		if dir := os.Getenv(d.env); dir != "" {
			setidAttacks(dir, d.label)
		}
	}

	_, _, e = unix.Syscall(unix.SYS_FINIT_MODULE, 0, uintptr(unsafe.Pointer(&[]byte("\x00")[0])), 0)
	blockedIf("load a kernel module", errnoErr(e))
	_, _, e = unix.Syscall(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, uintptr(0xfffffffd), 0) // KEY_SPEC_SESSION_KEYRING
	blockedIf("keyctl", errnoErr(e))
	_, _, e = unix.Syscall(unix.SYS_BPF, unix.BPF_MAP_CREATE, 0, 0)
	blockedIf("bpf", errnoErr(e))
	attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK}
	attr.Size = uint32(unsafe.Sizeof(attr))
	pfd, err := unix.PerfEventOpen(&attr, 0, -1, -1, 0)
	if err == nil {
		unix.Close(pfd)
	}
	blockedIf("perf_event_open", err)
	tv := unix.Timeval{Sec: 1}
	blockedIf("settimeofday", unix.Settimeofday(&tv))
	ts := unix.Timespec{Sec: 1}
	_, _, e = unix.Syscall(unix.SYS_CLOCK_SETTIME, unix.CLOCK_REALTIME, uintptr(unsafe.Pointer(&ts)), 0)
	blockedIf("clock_settime", errnoErr(e))
	_, _, e = unix.Syscall(unix.SYS_OPEN_BY_HANDLE_AT, 0, 0, 0)
	blockedIf("open_by_handle_at", errnoErr(e))
	fmt.Printf("uid %d euid %d\n", os.Getuid(), os.Geteuid())
	m, _ := os.ReadFile("/proc/self/uid_map")
	fmt.Printf("uid_map %s\n", strings.Join(strings.Fields(string(m)), " "))
}

// identityAttacks tries to take another identity than the run's: write
// its user namespace's maps (to map the host's root, or any host user,
// into it), or change user or groups outright.
func identityAttacks() {
	for _, f := range []string{"uid_map", "gid_map", "setgroups"} {
		data := "0 0 1\n"
		if f == "setgroups" {
			data = "allow"
		}
		err := os.WriteFile("/proc/self/"+f, []byte(data), 0)
		blockedIf("write /proc/self/"+f, err)
	}
	other := 0
	if os.Getuid() == 0 {
		other = 1
	}
	_, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(other), uintptr(other), uintptr(other))
	blockedIf(fmt.Sprintf("become uid %d", other), errnoErr(e))
	_, _, e = unix.RawSyscall(unix.SYS_SETRESGID, uintptr(other), uintptr(other), uintptr(other))
	blockedIf(fmt.Sprintf("become gid %d", other), errnoErr(e))
	groups := []uint32{0}
	_, _, e = unix.RawSyscall(unix.SYS_SETGROUPS, 1, uintptr(unsafe.Pointer(&groups[0])), 0)
	blockedIf("join group 0", errnoErr(e))
}

// initAttacks tries to reach the run's init (pid 1): signal it (as kill
// does, and with a queued SIGSEGV that looks like a fault to a Go
// runtime), signal any of its threads, renice it, change its limits,
// read its environment and descriptors, and write a forged exit status
// into its status pipe.
func initAttacks() {
	blockedIf("signal pid 1 (init)", unix.Kill(1, unix.SIGQUIT))
	var info [128]byte // siginfo_t: si_signo, si_errno, si_code
	binary.LittleEndian.PutUint32(info[0:], uint32(unix.SIGSEGV))
	binary.LittleEndian.PutUint32(info[8:], uint32(0xffffffff)) // SI_QUEUE (-1)
	_, _, e := unix.RawSyscall(unix.SYS_RT_SIGQUEUEINFO, 1, uintptr(unix.SIGSEGV), uintptr(unsafe.Pointer(&info[0])))
	blockedIf("queue a SIGSEGV to pid 1 (init)", errnoErr(e))
	// A thread of init is a pid this process may signal but not see.
	var hidden []int
	for p := 2; p < 2000; p++ {
		if p == os.Getpid() {
			continue
		}
		if unix.Kill(p, 0) == nil {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", p)); err != nil {
				// Still signalable, still unlisted: not a process that
				// ended between the two looks (a child of this battery).
				if unix.Kill(p, 0) == nil {
					if _, err := os.Stat(fmt.Sprintf("/proc/%d", p)); err != nil {
						hidden = append(hidden, p)
					}
				}
			}
		}
	}
	report("signal a thread of init", len(hidden) > 0, "signalable but unlisted pids: %v", hidden)
	blockedIf("renice pid 1 (init)", unix.Setpriority(unix.PRIO_PROCESS, 1, 19))
	// Every process of this user that it can name: init too, if init were
	// of this user. getpriority needs no permission: read init's after.
	before, _ := unix.Getpriority(unix.PRIO_PROCESS, 1)
	perr := unix.Setpriority(unix.PRIO_USER, os.Getuid(), 19)
	after, _ := unix.Getpriority(unix.PRIO_PROCESS, 1)
	report("renice init through its user", after != before, "setpriority(PRIO_USER): %v; init's priority %d then %d", perr, before, after)
	blockedIf("set pid 1's limits (init)", unix.Prlimit(1, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: 1, Max: 1}, nil))
	_, err := os.ReadFile("/proc/1/environ")
	blockedIf("read init's environment", err)
	_, err = os.ReadDir("/proc/1/fd")
	blockedIf("list init's descriptors", err)
	f, err := os.OpenFile("/proc/1/fd/4", os.O_WRONLY, 0)
	if err == nil {
		_, err = f.WriteString(`{"started":true,"exited":true,"code":0}` + "\n")
		f.Close()
	}
	blockedIf("write init's status pipe", err)
}

// hostFacts looks for what the host would rather not tell a run: its
// boot id, the kernel's command line and configuration, its block
// devices, its keys and the host's paths of the run's cgroups.
func hostFacts() {
	b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	host := os.Getenv("ESCAPE_HOST_BOOT_ID")
	report("see the host's boot id", host != "" && strings.TrimSpace(string(b)) == host, "boot id %q", strings.TrimSpace(string(b)))
	for _, p := range []string{"/proc/cmdline", "/proc/config.gz", "/proc/partitions", "/proc/diskstats", "/proc/keys", "/proc/sched_debug", "/proc/swaps"} {
		b, err := os.ReadFile(p)
		report("read host facts in "+p, err == nil && len(b) > 0, "%d bytes (%v)", len(b), err)
	}
	ks, _ := os.ReadFile("/proc/kallsyms")
	nonzero := 0
	for _, l := range strings.Split(string(ks), "\n") {
		if f := strings.Fields(l); len(f) > 0 && strings.Trim(f[0], "0") != "" {
			nonzero++
		}
	}
	report("read kernel addresses in /proc/kallsyms", nonzero > 0, "%d non-zero addresses", nonzero)
	blockedIf("write a masked /proc file", os.WriteFile("/proc/cmdline", []byte("x"), 0o644))
	ents, _ := os.ReadDir("/proc/acpi")
	report("list /proc/acpi", len(ents) > 0, "%d entries", len(ents))
	cg, _ := os.ReadFile("/proc/self/cgroup")
	paths := false
	for _, l := range strings.Split(strings.TrimSpace(string(cg)), "\n") {
		if f := strings.SplitN(l, ":", 3); len(f) == 3 && f[2] != "/" {
			paths = true
		}
	}
	report("see host cgroup paths", paths, "%q", cg)
}

// setidAttacks tries to leave a setuid or setgid file, or one with file
// capabilities, in a writable grant, every way a program can set a mode:
// chmod, fchmod, fchmodat, open and mknod with the bits, and the
// security.capability attribute; and checks the grant is nosuid, nodev.
func setidAttacks(dir, label string) {
	self, _ := os.ReadFile("/proc/self/exe")
	p := filepath.Join(dir, "suid-"+strings.ReplaceAll(label, " ", "-"))
	os.WriteFile(p, self, 0o755)
	escapedIf := func(name string, err error, path string) {
		var st unix.Stat_t
		bits := uint32(0)
		if unix.Stat(path, &st) == nil {
			bits = st.Mode & (unix.S_ISUID | unix.S_ISGID)
		}
		report(name+" in a "+label, err == nil || bits != 0, "%v; set-id bits now %#o", err, bits)
	}
	escapedIf("chmod 6755", unix.Chmod(p, 0o6755), p)
	escapedIf("chmod g+s", unix.Fchmodat(unix.AT_FDCWD, p, 0o2755, 0), p)
	if f, err := os.Open(p); err == nil {
		escapedIf("fchmod 4755", unix.Fchmod(int(f.Fd()), 0o4755), p)
		f.Close()
	}
	q := p + "-created"
	fd, err := unix.Open(q, unix.O_CREAT|unix.O_WRONLY|unix.O_EXCL, 0o4755)
	if err == nil {
		unix.Close(fd)
	}
	escapedIf("create with mode 4755", err, q)
	n := p + "-mknod"
	escapedIf("mknod with mode 4755", unix.Mknod(n, unix.S_IFREG|0o4755, 0), n)
	// A file capability: cap_setuid+ep (version 2 header, permitted bit 7).
	capv := []byte{0x01, 0x00, 0x00, 0x02, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	blockedIf("set security.capability in a "+label, unix.Setxattr(p, "security.capability", capv, 0))
	var sfs unix.Statfs_t
	if err := unix.Statfs(dir, &sfs); err == nil {
		report("a "+label+" mounted without nosuid or nodev", sfs.Flags&unix.ST_NOSUID == 0 || sfs.Flags&unix.ST_NODEV == 0, "mount flags %#x", sfs.Flags)
	}
}

func errnoErr(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
