//go:build linux

package native

import (
	"fmt"
	"runtime"
	"sync"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/opensubstrate/sandbox/internal/native/s1init"
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

// cloneNewFlags are clone(2)'s namespace flags; clone with any of them is
// refused like unshare.
const cloneNewFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWTIME

func errnoAction(e unix.Errno) seccomp.Action {
	return seccomp.Action(uint32(seccomp.ActionErrno) | uint32(e))
}

var (
	filterOnce sync.Once
	filterInsn []s1init.Insn
	filterErr  error
)

// filterProgram returns the S1 filter, assembled once per process.
func filterProgram() ([]s1init.Insn, error) {
	filterOnce.Do(func() { filterInsn, filterErr = assembleFilter() })
	return filterInsn, filterErr
}

// assembleFilter assembles the S1 filter: a deny list with an allow
// default, refusing every system call made through another architecture's
// ABI (i386 int 0x80, x32) first, so the deny list cannot be bypassed.
func assembleFilter() ([]s1init.Insn, error) {
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		return nil, fmt.Errorf("the S1 seccomp filter supports amd64 and arm64, not %s", runtime.GOARCH)
	}
	var groups []seccomp.SyscallGroup
	for _, d := range Denied {
		groups = append(groups, seccomp.SyscallGroup{Names: existing(d.Names), Action: errnoAction(unix.EPERM)})
	}
	groups = append(groups,
		seccomp.SyscallGroup{Names: []string{"clone3"}, Action: errnoAction(unix.ENOSYS)},
		seccomp.SyscallGroup{
			NamesWithCondtions: []seccomp.NameWithConditions{{
				Name:       "clone",
				Conditions: []seccomp.Condition{{Argument: 0, Operation: seccomp.BitsSet, Value: cloneNewFlags}},
			}},
			Action: errnoAction(unix.EPERM),
		})
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
	out := make([]s1init.Insn, len(raw))
	for i, r := range raw {
		out[i] = s1init.Insn{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
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
