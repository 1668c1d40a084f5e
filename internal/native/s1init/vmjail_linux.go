//go:build linux

package s1init

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"syscall"

	"golang.org/x/sys/unix"
)

// VMJailKeeps are the capabilities an S5 VM's monitor keeps: those its
// 9p server needs on the files of the grants (whoever owns them: read
// them, write them, set the extended attributes a guest's owners and
// modes are kept in). Every other is out of its bounding set, so QEMU,
// though it runs as root, cannot mount, load a module, trace or signal
// a process of higher privilege, change its user or open raw devices.
var VMJailKeeps = []uintptr{unix.CAP_DAC_OVERRIDE, unix.CAP_DAC_READ_SEARCH, unix.CAP_FOWNER}

// runVMJail starts an S5 VM's monitor confined:
//
//	HELPER __sandbox-vm-jail FILTER WRITABLE... -- PROGRAM ARG...
//
// In a mount namespace of its own every mount is made read-only, then
// each WRITABLE directory (the VM's own, the read-write grants) is bound
// on itself read-write; the capabilities but VMJailKeeps leave the
// bounding set, no_new_privs is set, the seccomp FILTER (InsnsText) is
// installed, and PROGRAM is executed. A monitor that escapes its guest
// then cannot write the host's files outside those directories (not
// /etc, not /proc/sys), act as root on the kernel, nor trace another
// sandbox's monitor.
func runVMJail() int {
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
	if err := vmJail(filter, args[1:i], args[i+1:]); err != nil {
		fmt.Fprintf(os.Stderr, "sandbox VM jail: %v\n", err)
		return 126
	}
	return 0 // not reached: vmJail executes the program
}

func vmJail(filter []Insn, writable, argv []string) error {
	// Namespaces, capabilities and no_new_privs are the calling
	// thread's; the program is executed from this one.
	runtime.LockOSThread()
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return err
	}
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("a mount namespace: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("make / a slave: %w", err)
	}
	if err := unix.MountSetattr(-1, "/", unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
		return fmt.Errorf("make every mount read-only: %w", err)
	}
	for _, w := range writable {
		if err := unix.Mount(w, w, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s: %w", w, err)
		}
		if err := unix.MountSetattr(-1, w, 0, &unix.MountAttr{Attr_clr: unix.MOUNT_ATTR_RDONLY}); err != nil {
			return fmt.Errorf("make %s writable: %w", w, err)
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
		if slices.Contains(VMJailKeeps, uintptr(c)) {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return fmt.Errorf("drop capability %d: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if err := loadFilter(filter); err != nil {
		return err
	}
	return syscall.Exec(path, argv, os.Environ())
}
