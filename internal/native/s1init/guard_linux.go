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
// starts the program: every call that names a task by id is refused
// (EPERM) when the id is that thread's.

// taskCalls are the system calls that act on a task they name by its
// id, each with the argument that names it.
var taskCalls = []struct {
	nr  uint32
	arg uint32
}{
	{unix.SYS_KILL, 0}, {unix.SYS_TKILL, 0}, {unix.SYS_TGKILL, 1},
	{unix.SYS_RT_SIGQUEUEINFO, 0}, {unix.SYS_RT_TGSIGQUEUEINFO, 1}, {unix.SYS_PIDFD_OPEN, 0},
	{unix.SYS_PRLIMIT64, 0}, {unix.SYS_SETPRIORITY, 1}, {unix.SYS_IOPRIO_SET, 1},
	{unix.SYS_SCHED_SETAFFINITY, 0}, {unix.SYS_SCHED_SETSCHEDULER, 0}, {unix.SYS_SCHED_SETPARAM, 0},
	{unix.SYS_SCHED_SETATTR, 0}, {unix.SYS_MIGRATE_PAGES, 0}, {unix.SYS_MOVE_PAGES, 0},
}

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

// threadGuard is a filter refusing (EPERM) each of taskCalls whose task
// argument is tid (its low 32 bits: the kernel reads a pid_t). A call
// through another architecture's ABI is left to the S1 filter, which
// refuses them all.
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
	n := len(taskCalls)
	// 0 arch; 1 not native: allow; 2 nr; 3..3+n-1 each call to its
	// argument's check; 3+n allow; then for argument 0 and 1 a load and
	// a test (deny or allow); then deny; then allow.
	checkAt := func(arg uint32) int { return 3 + n + 1 + 2*int(arg) }
	deny, allow := 3+n+1+4, 3+n+1+4+1
	p := []unix.SockFilter{
		{Code: ld, K: 4},
		{Code: jeq, K: arch, Jt: 0, Jf: uint8(allow - 2)},
		{Code: ld, K: 0},
	}
	for i, c := range taskCalls {
		at := 3 + i
		p = append(p, unix.SockFilter{Code: jeq, K: c.nr, Jt: uint8(checkAt(c.arg) - at - 1)})
	}
	p = append(p, unix.SockFilter{Code: ret, K: unix.SECCOMP_RET_ALLOW})
	for arg := range uint32(2) {
		at := checkAt(arg)
		p = append(p,
			unix.SockFilter{Code: ld, K: 16 + 8*arg}, // seccomp_data.args[arg], its low word
			unix.SockFilter{Code: jeq, K: uint32(tid), Jt: uint8(deny - at - 2), Jf: uint8(allow - at - 2)},
		)
	}
	p = append(p,
		unix.SockFilter{Code: ret, K: unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)},
		unix.SockFilter{Code: ret, K: unix.SECCOMP_RET_ALLOW},
	)
	return p, nil
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
