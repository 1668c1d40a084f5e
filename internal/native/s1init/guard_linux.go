//go:build linux

package s1init

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The thread that starts a program directly (startConfined, without the
// launcher) confines itself first, so the program inherits its
// credentials and Landlock domain: for as long as that thread lives, it
// is a thread of init that the program may name by its id and that
// neither its user nor Landlock's signal scope keeps out of reach (the
// same user, the same domain). A signal to a thread's id is a signal to
// its process, init; and prlimit, renice or re-scheduling by a thread id
// change init. The thread ends once the program has started, but not
// before the program runs: on a busy machine the program could find it
// (the escape battery's "signal a thread of init" did, once, under
// load). So the thread loads threadGuard, naming itself, before it
// starts the program, which inherits it:
//
//   - every call that names a task by id (taskCalls) is refused (EPERM)
//     when the id is that thread's;
//   - so is making that thread the owner of a descriptor's signals
//     (SIGIO, or any signal F_SETSIG names, sent with the owner's
//     permission when I/O is ready): fcntl F_SETOWN naming it, and,
//     since the id they take is in memory a filter cannot read, fcntl
//     F_SETOWN_EX and ioctl FIOSETOWN and SIOCSPGRP for any id (F_SETOWN
//     with a pid, how most programs ask for SIGIO, still works);
//   - renicing by process group or user (setpriority, ioprio_set), which
//     reaches that thread without naming it, is refused outright.
//
// The filter stays with the program and what it starts for the whole
// run: once the thread has ended its id may be another process's, whose
// siblings are then refused those calls on it (pids wrap after
// pid_max; a long-lived live sandbox that starts millions of processes
// could meet it).

// taskCalls are the system calls that act on a task they name by its
// id, each with the argument that names it.
var taskCalls = []struct {
	nr  uint32
	arg uint32
}{
	{unix.SYS_KILL, 0}, {unix.SYS_TKILL, 0}, {unix.SYS_TGKILL, 1},
	{unix.SYS_RT_SIGQUEUEINFO, 0}, {unix.SYS_RT_TGSIGQUEUEINFO, 1}, {unix.SYS_PIDFD_OPEN, 0},
	{unix.SYS_PRLIMIT64, 0},
	{unix.SYS_SCHED_SETAFFINITY, 0}, {unix.SYS_SCHED_SETSCHEDULER, 0}, {unix.SYS_SCHED_SETPARAM, 0},
	{unix.SYS_SCHED_SETATTR, 0}, {unix.SYS_MIGRATE_PAGES, 0}, {unix.SYS_MOVE_PAGES, 0},
}

// Calls the guard looks into, by an argument other than an id.
const (
	fioSetOwn        = 0x8901 // FIOSETOWN (asm-generic/sockios.h)
	ioprioWhoProcess = 1      // IOPRIO_WHO_PROCESS
)

// auditArch is this architecture's AUDIT_ARCH, as seccomp_data has it.
func auditArch() (uint32, error) {
	switch runtime.GOARCH {
	case "amd64":
		return unix.AUDIT_ARCH_X86_64, nil
	case "arm64":
		return unix.AUDIT_ARCH_AARCH64, nil
	}
	return 0, fmt.Errorf("no seccomp filter for %s", runtime.GOARCH)
}

// insn is a classic BPF instruction whose jumps name labels ("" falls
// through), for asm to place.
type insn struct {
	label  string // this instruction's, if a jump lands here
	code   uint16
	k      uint32
	jt, jf string
}

// asm lays out p, resolving each jump's label to an offset.
func asm(p []insn) ([]unix.SockFilter, error) {
	at := map[string]int{}
	for i, in := range p {
		if in.label != "" {
			at[in.label] = i
		}
	}
	off := func(i int, l string) (uint8, error) {
		if l == "" {
			return 0, nil
		}
		t, ok := at[l]
		if !ok || t <= i || t-i-1 > 255 {
			return 0, fmt.Errorf("seccomp: jump from %d to %q", i, l)
		}
		return uint8(t - i - 1), nil
	}
	out := make([]unix.SockFilter, len(p))
	for i, in := range p {
		jt, err := off(i, in.jt)
		if err != nil {
			return nil, err
		}
		jf, err := off(i, in.jf)
		if err != nil {
			return nil, err
		}
		out[i] = unix.SockFilter{Code: in.code, K: in.k, Jt: jt, Jf: jf}
	}
	return out, nil
}

// threadGuard is the filter (above) naming thread tid: ids are compared
// by their low 32 bits, as the kernel reads a pid_t. A call through
// another architecture's ABI is left to the S1 filter, which refuses
// them all.
func threadGuard(tid int) ([]unix.SockFilter, error) {
	arch, err := auditArch()
	if err != nil {
		return nil, err
	}
	const (
		ld  = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		ret = unix.BPF_RET | unix.BPF_K
	)
	arg := func(i uint32) uint32 { return 16 + 8*i } // seccomp_data.args[i], its low word
	id := uint32(tid)
	p := []insn{
		{code: ld, k: 4},
		{code: jeq, k: arch, jf: "allow"},
		{code: ld, k: 0},
	}
	for _, c := range taskCalls {
		p = append(p, insn{code: jeq, k: c.nr, jt: fmt.Sprintf("id%d", c.arg)})
	}
	p = append(p,
		insn{code: jeq, k: unix.SYS_FCNTL, jt: "fcntl"},
		insn{code: jeq, k: unix.SYS_IOCTL, jt: "ioctl"},
		insn{code: jeq, k: unix.SYS_SETPRIORITY, jt: "setpriority"},
		insn{code: jeq, k: unix.SYS_IOPRIO_SET, jt: "ioprio"},
		insn{code: ret, k: unix.SECCOMP_RET_ALLOW},
		// fcntl(fd, cmd, arg)
		insn{label: "fcntl", code: ld, k: arg(1)},
		insn{code: jeq, k: unix.F_SETOWN_EX, jt: "deny"},
		insn{code: jeq, k: unix.F_SETOWN, jf: "allow"},
		insn{code: ld, k: arg(2)},
		insn{code: jeq, k: id, jt: "deny", jf: "allow"},
		// ioctl(fd, request, &id)
		insn{label: "ioctl", code: ld, k: arg(1)},
		insn{code: jeq, k: fioSetOwn, jt: "deny"},
		insn{code: jeq, k: unix.SIOCSPGRP, jt: "deny", jf: "allow"},
		// setpriority(which, who, prio), ioprio_set(which, who, prio)
		insn{label: "setpriority", code: ld, k: arg(0)},
		insn{code: jeq, k: unix.PRIO_PROCESS, jt: "id1", jf: "deny"},
		insn{label: "ioprio", code: ld, k: arg(0)},
		insn{code: jeq, k: ioprioWhoProcess, jt: "id1", jf: "deny"},
		// a call naming a task by argument 0 or 1
		insn{label: "id0", code: ld, k: arg(0)},
		insn{code: jeq, k: id, jt: "deny", jf: "allow"},
		insn{label: "id1", code: ld, k: arg(1)},
		insn{code: jeq, k: id, jt: "deny", jf: "allow"},
		insn{label: "deny", code: ret, k: unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)},
		insn{label: "allow", code: ret, k: unix.SECCOMP_RET_ALLOW},
	)
	return asm(p)
}

// loadThreadGuard installs threadGuard, naming the calling thread, on
// the calling thread (which must be locked to its goroutine); what it
// then starts inherits it.
func loadThreadGuard() error {
	f, err := threadGuard(unix.Gettid())
	if err != nil {
		return err
	}
	prog := unix.SockFprog{Len: uint16(len(f)), Filter: &f[0]}
	_, _, e := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&prog)))
	runtime.KeepAlive(f)
	if e != 0 {
		return fmt.Errorf("seccomp: the starting thread's guard: %w", e)
	}
	return nil
}
