//go:build linux

package s1init

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Landlock rights, by what a rule allows.
const (
	llRead  = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR
	llWrite = unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_REMOVE_DIR | unix.LANDLOCK_ACCESS_FS_REMOVE_FILE |
		unix.LANDLOCK_ACCESS_FS_MAKE_DIR | unix.LANDLOCK_ACCESS_FS_MAKE_REG | unix.LANDLOCK_ACCESS_FS_MAKE_SOCK |
		unix.LANDLOCK_ACCESS_FS_MAKE_FIFO | unix.LANDLOCK_ACCESS_FS_MAKE_SYM
	llFileOnly = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_READ_FILE |
		unix.LANDLOCK_ACCESS_FS_TRUNCATE | unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
	// Landlock scopes (ABI 6): no signals to, and no abstract sockets of,
	// processes outside the run's domain.
	scopeAbstractUnix = 1
	scopeSignal       = 2
)

// handledFS returns the file system rights an ABI version knows.
func handledFS(abi int) uint64 {
	h := uint64(llRead | llWrite | unix.LANDLOCK_ACCESS_FS_MAKE_CHAR | unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK) // ABI 1
	if abi >= 2 {
		h |= unix.LANDLOCK_ACCESS_FS_REFER
	}
	if abi >= 3 {
		h |= unix.LANDLOCK_ACCESS_FS_TRUNCATE
	}
	if abi >= 5 {
		h |= unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
	}
	return h
}

// ABI returns the kernel's Landlock ABI version, 0 when it has none.
func ABI() int {
	v, _, e := unix.RawSyscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if e != 0 {
		return 0
	}
	return int(v)
}

// restrictFlags are landlock_restrict_self's flags for a run. From ABI 7
// the kernel can report denials through audit: by default it logs those
// of the program that called restrict_self and not those after an
// execve. Here it is the other way round: init's own are not the run's,
// the program it executes is. (The kernel logs only while audit is
// enabled; the host reads the records, see internal/audit.) The tier
// probe's denials are its purpose, not news: they are not reported.
func restrictFlags(abi int, probe bool) uintptr {
	switch {
	case abi < 7:
		return 0
	case probe:
		return unix.LANDLOCK_RESTRICT_SELF_LOG_SAME_EXEC_OFF
	}
	return unix.LANDLOCK_RESTRICT_SELF_LOG_SAME_EXEC_OFF | unix.LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON
}

// landlockRuleset builds the run's ruleset: read and execute beneath
// ex.ROPaths, everything but device creation beneath ex.RWPaths, read and
// write on ex.RWFiles, read and execute on ex.ROFiles, listing of any
// directory, TCP connect only to ex.ConnectPorts and no bind (ABI 4+), and no signals or abstract sockets
// across the domain's boundary (ABI 6+).
func landlockRuleset(ex *Exec) (int, error) {
	abi := ABI()
	if abi < 1 {
		return -1, fmt.Errorf("landlock: the kernel has no Landlock")
	}
	fs := handledFS(abi)
	attr := unix.LandlockRulesetAttr{Handled_access_fs: fs}
	if abi >= 4 {
		attr.Handled_access_net = unix.LANDLOCK_ACCESS_NET_BIND_TCP | unix.LANDLOCK_ACCESS_NET_CONNECT_TCP
	}
	if abi >= 6 {
		attr.Scoped = scopeAbstractUnix | scopeSignal
	}
	size := unsafe.Offsetof(attr.Quiet_access_fs) // the fields every ABI up to 7 knows
	if abi < 6 {
		size = unsafe.Offsetof(attr.Scoped)
	}
	if abi < 4 {
		size = unsafe.Offsetof(attr.Handled_access_net)
	}
	fd, _, e := unix.RawSyscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), size, 0)
	if e != 0 {
		return -1, fmt.Errorf("landlock: create ruleset: %w", e)
	}
	rw := fs &^ (unix.LANDLOCK_ACCESS_FS_MAKE_CHAR | unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK)
	add := func(paths []string, access uint64, file bool) error {
		for _, p := range paths {
			a := access & fs
			if file {
				a &= llFileOnly
			}
			if err := addRule(int(fd), p, a); err != nil {
				return err
			}
		}
		return nil
	}
	for _, r := range []struct {
		paths  []string
		access uint64
		file   bool
	}{
		{ex.ROPaths, llRead, false},
		{ex.RWPaths, rw, false},
		{ex.RWFiles, unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_TRUNCATE | unix.LANDLOCK_ACCESS_FS_IOCTL_DEV, true},
		{ex.ROFiles, unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_READ_FILE, true},
		{ex.WriteBeneath, unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_TRUNCATE, false},
		{[]string{"/"}, unix.LANDLOCK_ACCESS_FS_READ_DIR, false},
	} {
		if err := add(r.paths, r.access, r.file); err != nil {
			unix.Close(int(fd))
			return -1, err
		}
	}
	if abi >= 4 {
		for _, port := range ex.ConnectPorts {
			rule := netPortAttr{Allowed: unix.LANDLOCK_ACCESS_NET_CONNECT_TCP, Port: uint64(port)}
			if _, _, e := unix.RawSyscall6(unix.SYS_LANDLOCK_ADD_RULE, fd, ruleNetPort, uintptr(unsafe.Pointer(&rule)), 0, 0, 0); e != 0 {
				unix.Close(int(fd))
				return -1, fmt.Errorf("landlock: connect rule for port %d: %w", port, e)
			}
		}
		for _, port := range ex.ListenPorts {
			rule := netPortAttr{Allowed: unix.LANDLOCK_ACCESS_NET_BIND_TCP | unix.LANDLOCK_ACCESS_NET_CONNECT_TCP, Port: uint64(port)}
			if _, _, e := unix.RawSyscall6(unix.SYS_LANDLOCK_ADD_RULE, fd, ruleNetPort, uintptr(unsafe.Pointer(&rule)), 0, 0, 0); e != 0 {
				unix.Close(int(fd))
				return -1, fmt.Errorf("landlock: listen rule for port %d: %w", port, e)
			}
		}
	}
	return int(fd), nil
}

// netPortAttr is struct landlock_net_port_attr (ABI 4).
type netPortAttr struct {
	Allowed uint64
	Port    uint64
}

const ruleNetPort = 2 // LANDLOCK_RULE_NET_PORT

// addRule allows access beneath path; a path that does not exist is
// skipped (a system directory this host lacks).
func addRule(ruleset int, path string, access uint64) error {
	pfd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(pfd)
	rule := unix.LandlockPathBeneathAttr{Allowed_access: access, Parent_fd: int32(pfd)}
	_, _, e := unix.RawSyscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(ruleset), unix.LANDLOCK_RULE_PATH_BENEATH, uintptr(unsafe.Pointer(&rule)), 0, 0, 0)
	if e != 0 {
		return fmt.Errorf("landlock: rule for %s: %w", path, e)
	}
	return nil
}
