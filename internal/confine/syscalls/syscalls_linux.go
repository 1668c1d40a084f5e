//go:build linux

package syscalls

import (
	"fmt"
	"maps"
	"runtime"
	"slices"
	"sync"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/opensubstrate/sandbox/internal/confine"
)

// Denied lists the system calls the S1 filter refuses with EPERM, each
// with the reason (docs/s1.md is generated from the same list).
var Denied = []struct {
	Names []string
	Why   string
}{
	{[]string{"mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr"},
		"changing the file system view would undo the run's root and its read-only binds"},
	{[]string{"unshare", "setns"},
		"new or other namespaces are a way out of the ones the run was given"},
	{[]string{"ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd"},
		"reading or steering other processes' memory and descriptors"},
	{[]string{"init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load"},
		"loading kernel code"},
	{[]string{"bpf", "perf_event_open", "userfaultfd"},
		"large kernel attack surfaces and side channels a confined program never needs"},
	{[]string{"io_uring_setup", "io_uring_enter", "io_uring_register"},
		"io_uring performs I/O outside the system call path this filter sees"},
	{[]string{"keyctl", "add_key", "request_key"},
		"the kernel keyring is not namespaced"},
	{[]string{"settimeofday", "clock_settime", "clock_adjtime", "adjtimex"},
		"setting the host's clock"},
	{[]string{"reboot", "swapon", "swapoff", "acct", "quotactl", "quotactl_fd", "syslog", "vhangup", "sethostname", "setdomainname"},
		"administering the host"},
	{[]string{"iopl", "ioperm"},
		"direct hardware port I/O"},
	{[]string{"open_by_handle_at", "name_to_handle_at"},
		"file handles bypass path-based checks (the 'shocker' escape)"},
	{[]string{"fanotify_init", "lookup_dcookie", "uselib"},
		"obsolete or privileged interfaces"},
}

// Restricted lists the system calls the S1 filter refuses with EPERM only
// for some arguments, each with when and why (docs/s1.md lists them).
// The kernel lets a process lower the priority or change the limits of
// any process of its own user: the run's init, rootless; as root, every
// process of a live sandbox shares its host id, a launcher waiting for
// the next exec among them.
var Restricted = []struct {
	Names []string
	When  string
	Why   string
	rules []seccomp.NameWithConditions
}{
	{[]string{"chmod", "fchmod", "fchmodat", "fchmodat2", "open", "openat", "creat", "mknod", "mknodat"},
		"a mode with the setuid or setgid bit", "no setuid or setgid file is made in a grant, which would be the host's (docs/s1.md: no setuid file leaves a run)",
		modeRules(map[string]uint32{"chmod": 1, "fchmod": 1, "fchmodat": 2, "fchmodat2": 2, "open": 2, "openat": 3, "creat": 1, "mknod": 1, "mknodat": 2})},
	{[]string{"setpriority", "ioprio_set"},
		"any process but the caller (which or who not 0)", "a process of the guest's own user (the run's init rootless; as root, a live sandbox's launcher waiting for the next exec, or that exec's program) is not the guest's to lower",
		[]seccomp.NameWithConditions{
			{Name: "setpriority", Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.NotEqual, Value: 0}}},
			{Name: "setpriority", Conditions: seccomp.ArgumentConditions{{Argument: 1, Operation: seccomp.NotEqual, Value: 0}}},
			{Name: "ioprio_set", Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.NotEqual, Value: 1}}}, // IOPRIO_WHO_PROCESS
			{Name: "ioprio_set", Conditions: seccomp.ArgumentConditions{{Argument: 1, Operation: seccomp.NotEqual, Value: 0}}},
		}},
	{[]string{"prlimit64", "sched_setaffinity", "sched_setscheduler", "sched_setparam", "sched_setattr", "migrate_pages", "move_pages"},
		"a pid other than 0 (the caller); prlimit64 only when it sets", "the same: their limits, CPUs and scheduling are not the guest's to change (limits set on a launcher would be the next exec's program's)",
		append(pidRules("sched_setaffinity", "sched_setscheduler", "sched_setparam", "sched_setattr", "migrate_pages", "move_pages"),
			seccomp.NameWithConditions{Name: "prlimit64", Conditions: seccomp.ArgumentConditions{
				{Argument: 0, Operation: seccomp.NotEqual, Value: 0}, {Argument: 2, Operation: seccomp.NotEqual, Value: 0}}})},
}

// setIDBits are S_ISUID and S_ISGID.
const setIDBits = unix.S_ISUID | unix.S_ISGID

// modeRules refuse each call whose mode argument (by position) carries a
// set-id bit. The kernel reads the mode as a 16-bit umode_t, so only the
// low word is tested.
func modeRules(pos map[string]uint32) []seccomp.NameWithConditions {
	var out []seccomp.NameWithConditions
	for _, n := range existing(slices.Sorted(maps.Keys(pos))) {
		out = append(out, seccomp.NameWithConditions{Name: n, Conditions: seccomp.ArgumentConditions{{Argument: pos[n], Operation: seccomp.BitsSet, Value: setIDBits}}})
	}
	return out
}

// pidRules refuse each call whose first argument, a pid, is not 0. A pid
// with stray high bits is refused too (it is not 0 as 64 bits).
func pidRules(names ...string) []seccomp.NameWithConditions {
	var out []seccomp.NameWithConditions
	for _, n := range existing(names) {
		out = append(out, seccomp.NameWithConditions{Name: n, Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.NotEqual, Value: 0}}})
	}
	return out
}

// cloneNewFlags are clone(2)'s namespace flags; clone with any of them is
// refused like unshare.
const cloneNewFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWTIME

func errnoAction(e unix.Errno) seccomp.Action {
	return seccomp.Action(uint32(seccomp.ActionErrno) | uint32(e))
}

var (
	filterOnce sync.Once
	filterInsn []confine.Insn
	filterErr  error
)

// S1Filter is the S1 filter, the same for a run as root or rootless,
// assembled once per process.
func S1Filter() ([]confine.Insn, error) {
	filterOnce.Do(func() { filterInsn, filterErr = assembleFilter() })
	return filterInsn, filterErr
}

// assembleFilter assembles the S1 filter: a deny list with an allow
// default, refusing every system call made through another architecture's
// ABI (i386 int 0x80, x32) first, so the deny list cannot be bypassed.
func assembleFilter() ([]confine.Insn, error) {
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		return nil, fmt.Errorf("the S1 seccomp filter supports amd64 and arm64, not %s", runtime.GOARCH)
	}
	var groups []seccomp.SyscallGroup
	for _, d := range Denied {
		groups = append(groups, seccomp.SyscallGroup{Names: existing(d.Names), Action: errnoAction(unix.EPERM)})
	}
	var conditional []seccomp.NameWithConditions
	for _, r := range Restricted {
		conditional = append(conditional, r.rules...)
	}
	groups = append(groups,
		seccomp.SyscallGroup{NamesWithCondtions: conditional, Action: errnoAction(unix.EPERM)},
		// openat2 takes its mode in memory, which a filter cannot read:
		// ENOSYS, so that callers fall back to openat, which is checked.
		seccomp.SyscallGroup{Names: []string{"clone3", "openat2"}, Action: errnoAction(unix.ENOSYS)},
		seccomp.SyscallGroup{
			NamesWithCondtions: []seccomp.NameWithConditions{{
				Name:       "clone",
				Conditions: []seccomp.Condition{{Argument: 0, Operation: seccomp.BitsSet, Value: cloneNewFlags}},
			}},
			Action: errnoAction(unix.EPERM),
		})
	return denyFilter(groups)
}

// MonitorDenied are the groups of Denied an S5 VM's monitor (QEMU, in
// its jail) is refused too, by their first names: it needs none of
// them, and each is a way from an escaped monitor to other processes
// (another sandbox's QEMU), to the kernel, or around the jail's
// read-only view (open_by_handle_at through a writable grant's mount).
// io_uring is left to QEMU, which may poll with it.
var MonitorDenied = []string{"mount", "unshare", "ptrace", "init_module", "bpf", "keyctl", "settimeofday", "reboot", "iopl", "open_by_handle_at", "fanotify_init"}

var (
	monitorOnce sync.Once
	monitorInsn []confine.Insn
	monitorErr  error
)

// MonitorFilter is the seccomp filter the VM jail installs before it
// executes QEMU: MonitorDenied's groups refused with EPERM, every other
// architecture's ABI refused, the rest allowed (QEMU's own -sandbox
// filter stacks on it).
func MonitorFilter() ([]confine.Insn, error) {
	monitorOnce.Do(func() {
		var groups []seccomp.SyscallGroup
		for _, d := range Denied {
			if slices.Contains(MonitorDenied, d.Names[0]) {
				groups = append(groups, seccomp.SyscallGroup{Names: existing(d.Names), Action: errnoAction(unix.EPERM)})
			}
		}
		if len(groups) != len(MonitorDenied) {
			monitorErr = fmt.Errorf("seccomp: MonitorDenied names %d groups, Denied has %d of them", len(MonitorDenied), len(groups))
			return
		}
		monitorInsn, monitorErr = denyFilter(groups)
	})
	return monitorInsn, monitorErr
}

// denyFilter assembles groups with an allow default, refusing every
// system call made through another architecture's ABI (i386 int 0x80,
// x32) first, so the groups cannot be bypassed.
func denyFilter(groups []seccomp.SyscallGroup) ([]confine.Insn, error) {
	policy := seccomp.Policy{DefaultAction: seccomp.ActionAllow, Syscalls: groups}
	insts, err := policy.Assemble()
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	native, err := arch.GetInfo("")
	if err != nil {
		return nil, err
	}
	// Refuse any other architecture before the library's program, whose
	// own architecture check falls through to the default (allow).
	head := []bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4}, // seccomp_data.arch
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(native.ID), SkipTrue: 1},
		bpf.RetConstant{Val: uint32(errnoAction(unix.EPERM))},
	}
	raw, err := bpf.Assemble(append(head, insts...))
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	out := make([]confine.Insn, len(raw))
	for i, r := range raw {
		out[i] = confine.Insn{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return out, nil
}

// existing keeps the names this architecture's table knows.
func existing(names []string) []string {
	info, err := arch.GetInfo("")
	if err != nil {
		return names
	}
	var out []string
	for _, n := range names {
		if _, ok := info.SyscallNames[n]; ok {
			out = append(out, n)
		}
	}
	return out
}
