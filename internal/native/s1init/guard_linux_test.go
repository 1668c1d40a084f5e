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

	"golang.org/x/sys/unix"
)

// onThread runs f on a thread of its own that ends with it (locked,
// never unlocked), so that a filter f loads dies with it; with guard,
// the thread first loads threadGuard naming itself. f gets the thread's
// id.
func onThread(t *testing.T, guard bool, f func(tid int)) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
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
	}()
	<-done
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
	run := func(data [6]uint32) uint32 { // nr, arch, args[0] low, args[0] high, args[1] low, args[1] high
		var acc uint32
		for pc := 0; pc < len(p); pc++ {
			in := p[pc]
			switch in.Code {
			case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
				switch in.K {
				case 0:
					acc = data[0]
				case 4:
					acc = data[1]
				case 16:
					acc = data[2]
				case 24:
					acc = data[4]
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
	deny := uint32(unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM))
	for _, c := range taskCalls {
		var d [6]uint32
		d[0], d[1] = c.nr, arch
		d[2+2*c.arg] = tid
		if got := run(d); got != deny {
			t.Errorf("call %d naming the thread in argument %d: %#x, want EPERM", c.nr, c.arg, got)
		}
		d[2+2*c.arg] = tid + 1
		if got := run(d); got != unix.SECCOMP_RET_ALLOW {
			t.Errorf("call %d naming another: %#x, want allow", c.nr, got)
		}
		d[2+2*c.arg], d[2+2*(1-c.arg)] = 0, tid // the id in the other argument
		if got := run(d); got != unix.SECCOMP_RET_ALLOW {
			t.Errorf("call %d with the id in its other argument: %#x, want allow", c.nr, got)
		}
		d[1] = arch + 1 // another ABI: the S1 filter's to refuse
		if got := run(d); got != unix.SECCOMP_RET_ALLOW {
			t.Errorf("call %d through another ABI: %#x, want allow", c.nr, got)
		}
	}
	if got := run([6]uint32{unix.SYS_GETPID, arch, tid, 0, tid, 0}); got != unix.SECCOMP_RET_ALLOW {
		t.Errorf("getpid: %#x, want allow", got)
	}
}
