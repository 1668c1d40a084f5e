//go:build linux

package s1init

import (
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// onThread runs f on a thread of its own that ends with it (locked,
// never unlocked), so that a filter f loads dies with it; with guard,
// the thread first loads threadGuard naming itself. f gets the thread's
// id.
func onThread(t *testing.T, guard bool, f func(tid int)) {
	t.Helper()
	done := make(chan struct{})
	go onThreadOf(t, guard, f, done)
	<-done
}

func onThreadOf(t *testing.T, guard bool, f func(tid int), done chan struct{}) {
	runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
	if unix.Gettid() == os.Getpid() {
		// The main thread, which does not end, and whose id is the
		// process's: on another thread (this one is held meanwhile, so
		// the goroutine cannot land here), and this one given back
		// untouched.
		inner := make(chan struct{})
		go onThreadOf(t, guard, f, inner)
		<-inner
		runtime.UnlockOSThread()
		close(done)
		return
	}
	defer close(done)
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		t.Error(err)
		return
	}
	if guard {
		if err := loadThreadGuard(); err != nil {
			t.Error(err)
			return
		}
	}
	f(unix.Gettid())
}

// TestThreadGuard: a program started by a thread that loaded the guard
// can neither signal nor re-limit that thread by its id (a shell's kill
// and prlimit, as a guest would), while one started by a thread without
// it can, and so can the guarded thread's process: the guard names the
// thread, nothing else.
func TestThreadGuard(t *testing.T) {
	sh := func(tid int, script string) (string, error) {
		cmd := exec.Command("/bin/sh", "-c", script)
		cmd.Env = append(os.Environ(), "TID="+strconv.Itoa(tid))
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	// (prlimit reads the limits only: a thread's are its process's.)
	const probe = `kill -0 "$TID" && echo signalled; prlimit --pid "$TID" --nofile >/dev/null && echo limited; true`
	onThread(t, false, func(tid int) {
		if out, err := sh(tid, probe); err != nil || out != "signalled\nlimited" {
			t.Errorf("without the guard, the started program could not signal its starter: %q %v", out, err)
		}
	})
	onThread(t, true, func(tid int) {
		out, err := sh(tid, probe)
		if err != nil || strings.Contains(out, "signalled") || strings.Contains(out, "limited") {
			t.Errorf("with the guard, the started program reached its starter: %q %v", out, err)
		}
		// In this thread too: each call that names it, refused.
		for name, call := range map[string]func() error{
			"kill":      func() error { return unix.Kill(tid, 0) },
			"tgkill":    func() error { return unix.Tgkill(os.Getpid(), tid, 0) },
			"tkill":     func() error { _, _, e := unix.RawSyscall(unix.SYS_TKILL, uintptr(tid), 0, 0); return errnoErr(e) },
			"prlimit":   func() error { var r unix.Rlimit; return unix.Prlimit(tid, unix.RLIMIT_NOFILE, nil, &r) },
			"renice":    func() error { return unix.Setpriority(unix.PRIO_PROCESS, tid, 0) },
			"affinity":  func() error { var s unix.CPUSet; s.Set(0); return unix.SchedSetaffinity(tid, &s) },
			"pidfdopen": func() error { _, err := unix.PidfdOpen(tid, 0); return err },
		} {
			if err := call(); !errors.Is(err, unix.EPERM) {
				t.Errorf("%s of the guarded thread: %v, want EPERM", name, err)
			}
		}
		// Nor can it be made the owner of a descriptor's signals.
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fds[0])
		defer unix.Close(fds[1])
		if _, err := unix.FcntlInt(uintptr(fds[0]), unix.F_SETOWN, tid); !errors.Is(err, unix.EPERM) {
			t.Errorf("F_SETOWN to the guarded thread: %v, want EPERM", err)
		}
		owner := struct{ typ, pid int32 }{0, int32(tid)} // struct f_owner_ex: F_OWNER_TID is 0
		if _, _, e := unix.RawSyscall(unix.SYS_FCNTL, uintptr(fds[0]), unix.F_SETOWN_EX, uintptr(unsafe.Pointer(&owner))); e != unix.EPERM {
			t.Errorf("F_SETOWN_EX: %v, want EPERM", e)
		}
		if _, err := unix.FcntlInt(uintptr(fds[0]), unix.F_SETOWN, os.Getpid()); err != nil {
			t.Errorf("F_SETOWN to the process: %v", err)
		}
		// Other ids are not its business: init's own, this process's.
		if err := unix.Kill(os.Getpid(), 0); err != nil {
			t.Errorf("kill of the process: %v", err)
		}
		var r unix.Rlimit
		if err := unix.Prlimit(0, unix.RLIMIT_NOFILE, nil, &r); err != nil {
			t.Errorf("prlimit of the caller: %v", err)
		}
	})
}

// errnoErr is e as an error, nil for 0.
func errnoErr(e unix.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// TestThreadGuardProgram: the guard's jumps land where they should, for
// every call it names and one it does not (checked by the instructions,
// without loading them).
func TestThreadGuardProgram(t *testing.T) {
	const tid = 4242
	p, err := threadGuard(tid)
	if err != nil {
		t.Fatal(err)
	}
	arch, _ := auditArch()
	type call struct {
		nr   uint32
		arch uint32
		args [3]uint32 // the low words of args[0..2]
	}
	run := func(c call) uint32 {
		t.Helper()
		var acc uint32
		for pc := 0; pc < len(p); pc++ {
			in := p[pc]
			switch in.Code {
			case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
				switch {
				case in.K == 0:
					acc = c.nr
				case in.K == 4:
					acc = c.arch
				case in.K >= 16 && in.K <= 32 && in.K%8 == 0:
					acc = c.args[(in.K-16)/8]
				default:
					t.Fatalf("a load at offset %d", in.K)
				}
			case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K:
				if acc == in.K {
					pc += int(in.Jt)
				} else {
					pc += int(in.Jf)
				}
			case unix.BPF_RET | unix.BPF_K:
				return in.K
			default:
				t.Fatalf("instruction %d: code %#x", pc, in.Code)
			}
		}
		t.Fatal("ran off the end")
		return 0
	}
	const deny, allow = uint32(unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)), uint32(unix.SECCOMP_RET_ALLOW)
	for _, c := range taskCalls {
		d := call{nr: c.nr, arch: arch}
		d.args[c.arg] = tid
		if got := run(d); got != deny {
			t.Errorf("call %d naming the thread in argument %d: %#x, want EPERM", c.nr, c.arg, got)
		}
		d.args[c.arg] = tid + 1
		if got := run(d); got != allow {
			t.Errorf("call %d naming another: %#x, want allow", c.nr, got)
		}
		d.args[c.arg], d.args[1-c.arg] = 0, tid // the id in the other argument
		if got := run(d); got != allow {
			t.Errorf("call %d with the id in its other argument: %#x, want allow", c.nr, got)
		}
		d.arch = arch + 1 // another ABI: the S1 filter's to refuse
		if got := run(d); got != allow {
			t.Errorf("call %d through another ABI: %#x, want allow", c.nr, got)
		}
	}
	for _, c := range []struct {
		what string
		call call
		want uint32
	}{
		{"getpid", call{unix.SYS_GETPID, arch, [3]uint32{tid, tid, tid}}, allow},
		{"F_SETOWN to the thread", call{unix.SYS_FCNTL, arch, [3]uint32{3, unix.F_SETOWN, tid}}, deny},
		{"F_SETOWN to another", call{unix.SYS_FCNTL, arch, [3]uint32{3, unix.F_SETOWN, tid + 1}}, allow},
		{"F_SETOWN_EX", call{unix.SYS_FCNTL, arch, [3]uint32{3, unix.F_SETOWN_EX, 0}}, deny},
		{"F_GETFL", call{unix.SYS_FCNTL, arch, [3]uint32{tid, unix.F_GETFL, tid}}, allow},
		{"FIOSETOWN", call{unix.SYS_IOCTL, arch, [3]uint32{3, fioSetOwn, 0}}, deny},
		{"SIOCSPGRP", call{unix.SYS_IOCTL, arch, [3]uint32{3, unix.SIOCSPGRP, 0}}, deny},
		{"FIONREAD", call{unix.SYS_IOCTL, arch, [3]uint32{3, 0x541b, tid}}, allow}, // FIONREAD,
		{"renice the thread", call{unix.SYS_SETPRIORITY, arch, [3]uint32{unix.PRIO_PROCESS, tid, 19}}, deny},
		{"renice itself", call{unix.SYS_SETPRIORITY, arch, [3]uint32{unix.PRIO_PROCESS, 0, 19}}, allow},
		{"renice a user", call{unix.SYS_SETPRIORITY, arch, [3]uint32{unix.PRIO_USER, 0, 19}}, deny},
		{"renice a group", call{unix.SYS_SETPRIORITY, arch, [3]uint32{unix.PRIO_PGRP, 0, 19}}, deny},
		{"ioprio of the thread", call{unix.SYS_IOPRIO_SET, arch, [3]uint32{ioprioWhoProcess, tid, 0}}, deny},
		{"ioprio of itself", call{unix.SYS_IOPRIO_SET, arch, [3]uint32{ioprioWhoProcess, 0, 0}}, allow},
		{"ioprio of a user", call{unix.SYS_IOPRIO_SET, arch, [3]uint32{3, 0, 0}}, deny},
		{"F_SETOWN_EX through another ABI", call{unix.SYS_FCNTL, arch + 1, [3]uint32{3, unix.F_SETOWN_EX, 0}}, allow},
	} {
		if got := run(c.call); got != c.want {
			t.Errorf("%s: %#x, want %#x", c.what, got, c.want)
		}
	}
}
