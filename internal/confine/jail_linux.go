//go:build linux

package confine

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/opensubstrate/sandbox/internal/hostpath"
)

// MonitorKeeps are the capabilities an S5 VM's monitor keeps: those its
// 9p server needs on the files of the grants (whoever owns them: read
// them, write them, set the extended attributes a guest's owners and
// modes are kept in). Every other is out of its bounding set, so QEMU,
// though it runs as root, cannot mount, load a module, trace or signal
// a process of higher privilege, change its user or open raw devices.
var MonitorKeeps = []uintptr{unix.CAP_DAC_OVERRIDE, unix.CAP_DAC_READ_SEARCH, unix.CAP_FOWNER}

// RunMonitorJail starts an S5 VM's monitor confined, as the helper's
// arguments (MonitorJailArg) say; it returns only on failure, with the
// exit code. In a network namespace of its own (its loopback alone, up)
// and a mount namespace of its own every mount is made read-only, then
// each WRITABLE directory (the VM's own: its shares come to QEMU by
// descriptor) is walked without following a link and bound on itself
// read-write; the capabilities but MonitorKeeps leave the
// bounding set, no_new_privs is set, the seccomp FILTER (InsnsText) is
// installed, and PROGRAM is executed. A monitor that escapes its guest
// then cannot write the host's files outside those directories (not
// /etc, not /proc/sys), act as root on the kernel, nor trace another
// sandbox's monitor.
func RunMonitorJail() int {
	args := os.Args[2:]
	i := slices.Index(args, "--")
	if i < 1 || i == len(args)-1 {
		fmt.Fprintln(os.Stderr, "sandbox VM jail: want FILTER WRITABLE... -- PROGRAM ARG...")
		return 2
	}
	filter, err := ParseInsns(args[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "sandbox VM jail: %v\n", err)
		return 2
	}
	if err := monitorJail(filter, args[1:i], args[i+1:]); err != nil {
		fmt.Fprintf(os.Stderr, "sandbox VM jail: %v\n", err)
		return 126
	}
	return 0 // not reached: monitorJail executes the program
}

func monitorJail(filter []Insn, writable, argv []string) error {
	// Namespaces, capabilities and no_new_privs are the calling
	// thread's; the program is executed from this one.
	runtime.LockOSThread()
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return err
	}
	// A network namespace of its own, with only its loopback: QEMU's
	// user network reaches the host through Unix sockets alone (the
	// egress proxy's), and its forwards to the guest's listen ports
	// listen on this loopback, which only the host reaches, by entering
	// the namespace (internal/confine/netns). A monitor that escapes its
	// guest reaches no network.
	if err := unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("a mount and a network namespace: %w", err)
	}
	if err := loopbackUp(); err != nil {
		return err
	}
	// Its forwards may listen on any port of that loopback (a sandbox
	// made to listen on 80, say), though it keeps no capability to bind
	// one under 1024: the setting is this namespace's alone.
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_unprivileged_port_start", []byte("0"), 0); err != nil {
		return fmt.Errorf("the network namespace's unprivileged ports: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("make / a slave: %w", err)
	}
	if err := unix.MountSetattr(-1, "/", unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
		return fmt.Errorf("make every mount read-only: %w", err)
	}
	for _, w := range writable {
		if err := bindWritable(w); err != nil {
			return err
		}
	}
	last := 0
	for c := 0; c <= 63; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0); err != nil {
			break
		}
		last = c
	}
	for c := 0; c <= last; c++ {
		if slices.Contains(MonitorKeeps, uintptr(c)) {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return fmt.Errorf("drop capability %d: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if err := LoadFilter(filter); err != nil {
		return err
	}
	return syscall.Exec(path, argv, os.Environ())
}

// bindWritable binds the directory at w, reached without following a
// link (hostpath.Open), on itself, writable: the very directory walked,
// whatever its path names by the time it is mounted.
func bindWritable(w string) error {
	o, err := hostpath.Open(w)
	if err != nil {
		return fmt.Errorf("writable %s: %w", w, err)
	}
	defer o.Close()
	if !o.IsDir() {
		return fmt.Errorf("writable %s: not a directory", w)
	}
	tree, err := unix.OpenTree(o.FD(), "", unix.OPEN_TREE_CLONE|unix.AT_EMPTY_PATH|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("bind %s: %w", w, err)
	}
	defer unix.Close(tree)
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_clr: unix.MOUNT_ATTR_RDONLY}); err != nil {
		return fmt.Errorf("make %s writable: %w", w, err)
	}
	if err := unix.MoveMount(tree, "", o.FD(), "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("bind %s: %w", w, err)
	}
	return nil
}

// loopbackUp brings up the loopback of the calling thread's network
// namespace (a new one has it down, without 127.0.0.1).
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("the loopback: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("the loopback: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring the loopback up: %w", err)
	}
	return nil
}
