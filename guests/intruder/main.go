//go:build linux

// Command intruder runs on the host, as a user other than a sandbox's
// (nobody, say, or another sandbox's host id), and tries to reach a
// process of the sandbox: signal it, trace it, read its environment and
// memory, take its descriptors, change its priority and limits, and
// write into its root through /proc/PID/root. It prints one line per
// attempt, as the escape battery does:
//
//	NAME: BLOCKED (how)   or   NAME: ESCAPED (what happened)
//
// and always exits 0. Usage: intruder PID [PATH...], where each PATH
// is a path inside the sandbox to create a file at (through
// /proc/PID/root). The signal that would end the target (SIGKILL) is
// tried last.
package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"

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

// refused says whether err is the kernel refusing permission (rather
// than, say, a bad address after the permission check passed).
func refused(err error) bool {
	return errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES)
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: intruder PID [PATH...]")
		os.Exit(2)
	}
	pid, err := strconv.Atoi(os.Args[1])
	if err != nil || pid <= 1 {
		fmt.Fprintf(os.Stderr, "intruder: bad pid %q\n", os.Args[1])
		os.Exit(2)
	}
	proc := "/proc/" + strconv.Itoa(pid)
	fmt.Printf("intruder uid %d gid %d\n", os.Getuid(), os.Getgid())

	blockedIf("signal it (kill 0)", unix.Kill(pid, 0))
	blockedIf("stop it (SIGSTOP)", unix.Kill(pid, unix.SIGSTOP))
	unix.Kill(pid, unix.SIGCONT)
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		report("signal it through a pidfd", false, "pidfd_open: %v", err)
	} else {
		blockedIf("signal it through a pidfd", unix.PidfdSendSignal(pidfd, 0, nil, 0))
		fd, err := unix.PidfdGetfd(pidfd, 0, 0)
		if err == nil {
			unix.Close(fd)
		}
		blockedIf("take its descriptor 0 (pidfd_getfd)", err)
		unix.Close(pidfd)
	}

	// A tracee is let go only from a stop: each success is followed by
	// one, so that the next attempt is not refused for the wrong reason.
	err = unix.PtraceSeize(pid)
	if err == nil {
		unix.PtraceInterrupt(pid)
		unix.Wait4(pid, nil, unix.WALL, nil)
		unix.PtraceDetach(pid)
	}
	blockedIf("ptrace it (PTRACE_SEIZE)", err)
	err = unix.PtraceAttach(pid)
	if err == nil {
		unix.Wait4(pid, nil, unix.WALL, nil)
		unix.PtraceDetach(pid)
	}
	blockedIf("ptrace it (PTRACE_ATTACH)", err)

	env, err := os.ReadFile(proc + "/environ")
	if err == nil && len(env) == 0 {
		err = errors.New("read, but empty")
	}
	if err == nil {
		report("read its environment", true, "%d bytes: %.60q", len(env), env)
	} else {
		report("read its environment", false, "%v", err)
	}
	f, err := os.Open(proc + "/mem")
	if err == nil {
		f.Close()
	}
	blockedIf("open its memory", err)
	var buf [8]byte
	local := []unix.Iovec{{Base: &buf[0], Len: uint64(len(buf))}}
	remote := []unix.RemoteIovec{{Base: uintptr(0x400000), Len: len(buf)}}
	_, err = unix.ProcessVMReadv(pid, local, remote, 0)
	if refused(err) || errors.Is(err, unix.ESRCH) {
		report("read its memory (process_vm_readv)", false, "%v", err)
	} else {
		report("read its memory (process_vm_readv)", true, "past the permission check: %v", err)
	}
	_, err = os.ReadDir(proc + "/fd")
	blockedIf("list its descriptors", err)
	_, err = os.ReadDir(proc + "/root/")
	blockedIf("list its root (/proc/PID/root)", err)
	_, err = os.ReadDir(proc + "/cwd/")
	blockedIf("list its working directory (/proc/PID/cwd)", err)
	for _, p := range os.Args[2:] {
		err := os.WriteFile(proc+"/root"+p, []byte("intruder was here\n"), 0o666)
		blockedIf("write "+p+" in its root (/proc/PID/root)", err)
	}

	blockedIf("renice it", unix.Setpriority(unix.PRIO_PROCESS, pid, 19))
	lim := unix.Rlimit{Cur: 1, Max: 1}
	blockedIf("set its limits (prlimit)", unix.Prlimit(pid, unix.RLIMIT_NOFILE, &lim, nil))
	var set unix.CPUSet
	set.Set(0)
	blockedIf("move it to another CPU (sched_setaffinity)", unix.SchedSetaffinity(pid, &set))
	_, _, e := unix.Syscall(unix.SYS_IOPRIO_SET, 1 /* IOPRIO_WHO_PROCESS */, uintptr(pid), uintptr(3<<13) /* idle class */)
	if e == 0 {
		blockedIf("set its I/O priority", nil)
	} else {
		blockedIf("set its I/O priority", e)
	}
	blockedIf("kill it (SIGKILL)", syscall.Kill(pid, syscall.SIGKILL))
}
