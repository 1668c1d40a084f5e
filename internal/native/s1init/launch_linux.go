//go:build linux

package s1init

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"syscall"
	"unsafe"

	"github.com/opensubstrate/sandbox/internal/confine"
	"golang.org/x/sys/unix"
)

// A program with a host identity of its own (Exec.HostUID) is started in
// two steps, because no single one can do it: a user namespace is made
// by clone, whose mappings to any host id only a privileged thread of
// the parent may write, while Landlock and the seccomp filter, which
// refuse new namespaces and writes under /proc, must be in force before
// the program's first instruction and are inherited only from the
// creating thread. So init, still root on the starting thread, clones
// this helper (the launcher) into a new user namespace whose maps hold
// one entry, Exec.UID → Exec.HostUID (and the gid likewise), with that
// user's credentials and no capability but, in the new namespace,
// CAP_SYS_CHROOT (to take the run's root, below) and CAP_SETPCAP (to
// empty its bounding set). The launcher confines itself as the program
// must be (bounding set, capabilities, rlimits, no_new_privs, Landlock
// from the ruleset init built, the seccomp filter, exec control's
// listener) and executes the program in place: the program's pid is the
// launcher's.
//
// The launcher's descriptors: 0-2 the program's streams; 3 the Exec, as
// JSON; 4 a SOCK_SEQPACKET socket back to init (LaunchMsg), on which
// init first sends the Landlock ruleset and the run's root (an "fds"
// message, SCM_RIGHTS), which the launcher puts at 5 and 6. A warm
// init starts its run's launcher ahead (Base.Launcher): it waits for
// that message while init waits for its run. All of them but 0-2 close
// on the program's exec, so init reads the end of the socket as
// "executed".

// LaunchMsg is what the launcher tells init before it executes the
// program: "notify" carries exec control's seccomp listener
// (SCM_RIGHTS); "failed" says the program could not be started (Errno
// set when the kernel refused to execute it).
type LaunchMsg struct {
	Op    string `json:"op"`
	Error string `json:"error,omitempty"`
	Errno int    `json:"errno,omitempty"`
}

// selfExe is init's own program, opened before the host's root is
// pivoted away. The launcher is executed from it (through /proc/self/fd),
// from a mount the run's root does not hold and exec control does not
// mark. Where the helper is linked dynamically, hostRoot is a copy of the
// host's mount tree (in no namespace: open_tree), made then too, and the
// launcher is executed with it as its root, so that its ELF loader and
// libraries are the host's, never what the run's root holds (an
// image's, which would otherwise run before anything confines it), and
// on no mount of the run's. Either way the launcher's first act is to
// take the run's root.
//
// Both are reached in the launcher's child by their numbers
// (/proc/self/fd/N) after the child has put the launcher's descriptors
// at 0..6 (and moved any in the way just above them), so each is kept at
// launcherFDFloor or higher (aboveLaunchFDs): a low number would by then
// name another file, the run's root or a socket, and its exec fail
// (EACCES) on a host where init was handed fewer descriptors.
var selfExe, hostRoot *os.File

// launcherFDFloor is the lowest descriptor selfExe and hostRoot may have:
// above the launcher's seven and the seven places the child may move
// them to.
const launcherFDFloor = 64

// aboveLaunchFDs returns f moved to a descriptor at launcherFDFloor or
// above (close-on-exec), closing the one it had; nil for nil.
func aboveLaunchFDs(f *os.File) (*os.File, error) {
	if f == nil {
		return nil, nil
	}
	defer f.Close()
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, launcherFDFloor)
	if err != nil {
		return nil, fmt.Errorf("move %s above the launcher's descriptors: %w", f.Name(), err)
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}

// hasLoader says whether the ELF program open at f names a program
// interpreter (PT_INTERP): whether it is linked dynamically. It reads
// the 64-bit little-endian form this helper is built as; anything else
// says yes, so that the launcher starts in the host's mounts.
func hasLoader(f *os.File) bool {
	if f == nil {
		return false
	}
	var h [64]byte
	if _, err := f.ReadAt(h[:], 0); err != nil || string(h[:4]) != "\x7fELF" || h[4] != 2 || h[5] != 1 {
		return true
	}
	phoff := binary.LittleEndian.Uint64(h[32:])
	size, n := int64(binary.LittleEndian.Uint16(h[54:])), int(binary.LittleEndian.Uint16(h[56:]))
	if size < 4 || n > 1<<12 || phoff > 1<<30 {
		return true
	}
	var typ [4]byte
	for i := range n {
		if _, err := f.ReadAt(typ[:], int64(phoff)+int64(i)*size); err != nil {
			return true
		}
		if binary.LittleEndian.Uint32(typ[:]) == 3 { // PT_INTERP
			return true
		}
	}
	return false
}

// launcherHint says why the launcher could not be executed where the
// cause is plain: the helper is not executable by other users (a copy
// made under umask 077, say), and the launcher runs as an unprivileged
// user.
func launcherHint(err error) string {
	if !errors.Is(err, syscall.EACCES) || selfExe == nil {
		return ""
	}
	fi, serr := selfExe.Stat()
	if serr != nil || fi.Mode().Perm()&0o001 != 0 {
		return ""
	}
	return fmt.Sprintf(" (the S1 helper's mode is %04o: the launcher runs as an unprivileged user and needs it executable by others; chmod 755 it)", fi.Mode().Perm())
}

// launcher is a launcher started, waiting for the run's Landlock
// ruleset and root (an "fds" message on its socket) and then its Exec
// (on its spec pipe).
type launcher struct {
	pid   int
	specW *os.File
	sock  int // init's end of its socket
}

// ahead is the launcher a warm init started before its run was known
// (Base.Launcher), nil if none: the run's program starts in it; init
// ends it first where it is not the run's (runInit: the host does not
// say it may, Spec.LauncherReady, or the run's identity or streams are
// not the ones it was started with).
var ahead *launcher

// startAhead starts the launcher of a run not yet known, as the host
// identity hostID, from a thread of its own: in a cgroup namespace rooted
// at init's group, as the run's program must be (the host placed init
// in the run's group before it sent the base, or says the launcher may
// not be used). Where it cannot, the run starts its own.
func startAhead(hostID int) {
	// The user namespace's maps are written through /proc/PID, PID as
	// init's pid namespace numbers it: until the run's root is taken,
	// init's /proc is the host's, so one of init's own goes over it
	// while the launcher starts (init's mounts alone), and then away:
	// the run's grants are reached through the host's.
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return
	}
	defer unix.Unmount("/proc", unix.MNT_DETACH)
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread ends with it
		if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
			return
		}
		if l, err := startLauncher(Nobody, Nobody, hostID, hostID, stdio); err == nil {
			ahead = l
		}
	}()
	<-done
}

// dropAhead ends the launcher started ahead, if there is one.
func dropAhead() {
	if ahead != nil {
		ahead.kill()
		ahead = nil
	}
}

// kill ends a launcher that did not start a program, and reaps it.
func (l *launcher) kill() {
	unix.Kill(l.pid, unix.SIGKILL)
	for {
		if _, err := unix.Wait4(l.pid, nil, 0, nil); err != unix.EINTR {
			break
		}
	}
	l.specW.Close()
	unix.Close(l.sock)
}

// startLauncher starts the launcher, from the calling (locked, root)
// thread, in a user namespace of its own that maps uid and gid alone, to
// hostUID and hostGID, with files as its standard streams.
func startLauncher(uid, gid, hostUID, hostGID int, files []uintptr) (*launcher, error) {
	if selfExe == nil {
		return nil, errors.New("init could not open its own program to start the launcher from")
	}
	if uid == 0 || gid == 0 || hostUID <= 0 || hostGID <= 0 {
		return nil, fmt.Errorf("a program's own host identity must map an unprivileged user to an unprivileged host id (uid %d → %d, gid %d → %d)", uid, hostUID, gid, hostGID)
	}
	// The user namespace refuses setgroups (its gid map is written that
	// way), so the launcher keeps the supplementary groups of this
	// thread: none. Raw, so only this thread changes.
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); e != 0 {
		return nil, fmt.Errorf("setgroups: %w", e)
	}
	specR, specW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		specR.Close()
		specW.Close()
		return nil, err
	}
	fds := append(append([]uintptr{}, files[:3]...), specR.Fd(), uintptr(pair[1]))
	if selfExe.Fd() < uintptr(2*launchFDs) || hostRoot != nil && hostRoot.Fd() < uintptr(2*launchFDs) {
		specR.Close()
		specW.Close()
		unix.Close(pair[0])
		unix.Close(pair[1])
		return nil, fmt.Errorf("init's own program (descriptor %d) is where the launcher's descriptors go: it would execute another file", selfExe.Fd())
	}
	attr := &syscall.ProcAttr{
		Dir:   "/",
		Env:   []string{"GOMAXPROCS=1", "GOGC=off"},
		Files: fds,
		Sys: &syscall.SysProcAttr{
			Cloneflags:                 unix.CLONE_NEWUSER,
			UidMappings:                []syscall.SysProcIDMap{{ContainerID: uid, HostID: hostUID, Size: 1}},
			GidMappings:                []syscall.SysProcIDMap{{ContainerID: gid, HostID: hostGID, Size: 1}},
			GidMappingsEnableSetgroups: false,
			Credential:                 &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)},
			AmbientCaps:                []uintptr{unix.CAP_SYS_CHROOT, unix.CAP_SETPCAP},
			// No Pdeathsig: the thread that starts it ends at once. The
			// pid namespace ends with init instead.
			Setpgid: true,
		},
	}
	if hostRoot != nil {
		attr.Sys.Chroot = fmt.Sprintf("/proc/self/fd/%d", hostRoot.Fd())
	}
	pid, err := syscall.ForkExec(fmt.Sprintf("/proc/self/fd/%d", selfExe.Fd()), []string{"sandbox-s1-launch", LaunchArg}, attr)
	specR.Close()
	unix.Close(pair[1])
	if err != nil {
		specW.Close()
		unix.Close(pair[0])
		return nil, fmt.Errorf("start the program's launcher: %w%s", err, launcherHint(err))
	}
	return &launcher{pid: pid, specW: specW, sock: pair[0]}, nil
}

// launchFDs is how many descriptors the launcher has: 0-2, the spec,
// the socket, and the ruleset and root it is sent.
const launchFDs = 7

// sendRun sends the launcher the run's Landlock ruleset ll and the
// run's root (init's, now).
func (l *launcher) sendRun(ll int) error {
	runRoot, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the run's root: %w", err)
	}
	defer unix.Close(runRoot)
	if err := unix.Sendmsg(l.sock, []byte(`{"op":"fds"}`), unix.UnixRights(ll, runRoot), nil, 0); err != nil {
		return fmt.Errorf("send the program's launcher its root: %w", err)
	}
	return nil
}

// sendSpec gives the launcher its program's spec, before its run's root:
// written whole at once where the pipe holds it, so that the launcher,
// once it has the root, reads it without waiting (init runs one P, and a
// goroutine would wait for it to be handed off from a thread blocked in
// a system call); else from a goroutine as the launcher reads it.
func (l *launcher) sendSpec(spec []byte) {
	if n, err := unix.FcntlInt(l.specW.Fd(), unix.F_GETPIPE_SZ, 0); err == nil && len(spec) <= n {
		l.specW.Write(spec)
		l.specW.Close()
		return
	}
	go func() {
		l.specW.Write(spec)
		l.specW.Close()
	}()
}

// startInUserns starts ex's program through the launcher, from the
// calling (locked, root) thread: the one started ahead where it may, else
// a new one, in a user namespace of its own; ll is the run's Landlock
// ruleset. It returns once the program was executed (or the launcher
// failed), with its pid.
func startInUserns(ex *Exec, xc *execCtl, files []uintptr, ll int) (int, error) {
	spec, err := json.Marshal(ex)
	if err != nil {
		return 0, fmt.Errorf("the program's spec: %w", err)
	}
	l := ahead
	ahead = nil
	if l != nil {
		l.sendSpec(spec)
	}
	if l != nil && l.sendRun(ll) != nil {
		l.kill() // gone
		l = nil
	}
	if l == nil {
		if l, err = startLauncher(ex.UID, ex.GID, ex.HostUID, ex.HostGID, files); err != nil {
			return 0, err
		}
		l.sendSpec(spec)
		if err := l.sendRun(ll); err != nil {
			l.kill()
			return 0, err
		}
	}
	defer unix.Close(l.sock)
	pid := l.pid
	buf := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(4))
	for {
		n, oobn, _, _, err := unix.Recvmsg(l.sock, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("the program's launcher: %w", err)
		}
		fds := ReceivedFDs(oob[:oobn])
		if n == 0 && len(fds) == 0 {
			// Its end closed: on the program's exec (close-on-exec), or
			// because it died, which its exit status then says.
			return pid, nil
		}
		var m LaunchMsg
		if err := json.Unmarshal(buf[:n], &m); err != nil {
			CloseFDs(fds)
			return 0, fmt.Errorf("the program's launcher sent %q: %w", buf[:n], err)
		}
		switch {
		case m.Op == "notify" && len(fds) == 1 && xc != nil:
			go xc.serveNotify(fds[0])
		case m.Op == "failed" && m.Errno != 0:
			CloseFDs(fds)
			e := syscall.Errno(m.Errno)
			return 0, execError{ex.Path, e, e}
		case m.Op == "failed":
			CloseFDs(fds)
			return 0, errors.New(m.Error)
		default:
			CloseFDs(fds)
			return 0, fmt.Errorf("the program's launcher sent %q", buf[:n])
		}
	}
}

// runLaunch is the launcher: it confines itself and executes the
// program (see startInUserns). Its main goroutine is on the main thread
// (lock_linux.go), which is the one that executes the program.
func runLaunch() int {
	// Its name until the program's replaces it (the kernel would name it
	// after the last part of /proc/self/fd/N).
	if name, err := unix.BytePtrFromString("sandbox-launch"); err == nil {
		unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(name)), 0, 0, 0)
	}
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		for fd := 3; fd < 1<<16; fd++ {
			unix.CloseOnExec(fd)
		}
	}
	const specFD, initFD, rulesetFD, rootFD = 3, 4, 5, 6
	say := func(m LaunchMsg, fds ...int) {
		b, _ := json.Marshal(m)
		var oob []byte
		if len(fds) > 0 {
			oob = unix.UnixRights(fds...)
		}
		unix.Sendmsg(initFD, b, oob, nil, 0)
	}
	fail := func(err error) int {
		m := LaunchMsg{Op: "failed", Error: err.Error()}
		var xe execError
		if errors.As(err, &xe) {
			m.Errno = int(xe.errno)
		}
		say(m)
		return 127
	}
	// Reading an Exec costs a cold process its decoder for the type
	// (reflection over every field, about 0.3 ms here): paid before it
	// waits, not on the run's path.
	json.Unmarshal([]byte(`{}`), new(Exec))
	// The run's ruleset and root, once init has them (a launcher started
	// ahead of its run waits here).
	if err := takeRunFDs(initFD, rulesetFD, rootFD); err != nil {
		return fail(fmt.Errorf("launcher: %w", err))
	}
	// Back into the run's root, from the host's (see hostRoot); nothing
	// before this reads a file.
	if err := unix.Fchdir(rootFD); err != nil {
		return fail(fmt.Errorf("launcher: enter the run's root: %w", err))
	}
	if err := unix.Chroot("."); err != nil {
		return fail(fmt.Errorf("launcher: enter the run's root: %w", err))
	}
	unix.Close(rootFD)
	b, err := io.ReadAll(os.NewFile(specFD, "spec"))
	if err != nil {
		return fail(fmt.Errorf("launcher: read the spec: %w", err))
	}
	var ex Exec
	if err := json.Unmarshal(b, &ex); err != nil {
		return fail(fmt.Errorf("launcher: read the spec: %w", err))
	}
	if err := unix.Chdir(ex.Dir); err != nil {
		var e syscall.Errno
		errors.As(err, &e)
		return fail(execError{ex.Path, e, fmt.Errorf("chdir %s: %w", ex.Dir, err)})
	}
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fail(fmt.Errorf("drop capability %d from the bounding set: %w", c, err))
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fail(fmt.Errorf("clear ambient capabilities: %w", err))
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fail(fmt.Errorf("capset: %w", err))
	}
	if err := unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{}); err != nil {
		return fail(fmt.Errorf("setrlimit core: %w", err))
	}
	if ex.NoFile > 0 {
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: ex.NoFile, Max: ex.NoFile}); err != nil {
			return fail(fmt.Errorf("setrlimit nofile: %w", err))
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fail(fmt.Errorf("no_new_privs: %w", err))
	}
	if _, _, e := unix.RawSyscall(unix.SYS_LANDLOCK_RESTRICT_SELF, rulesetFD, restrictFlags(ABI(), ex.Probe), 0); e != 0 {
		return fail(fmt.Errorf("landlock: %w", e))
	}
	unix.Close(rulesetFD)
	if err := confine.LoadFilter(ex.Seccomp); err != nil {
		return fail(err)
	}
	if ex.ExecControl && !ex.KernelExecOnly {
		nfd, err := loadExecNotify()
		if err != nil {
			return fail(err)
		}
		say(LaunchMsg{Op: "notify"}, nfd)
		unix.Close(nfd)
	}
	err = syscall.Exec(ex.Path, ex.Args, ex.Env)
	e, _ := err.(syscall.Errno)
	return fail(execError{ex.Path, e, err})
}

// takeRunFDs waits for init's "fds" message on sock and puts the two
// descriptors it carries at ruleset and root (close-on-exec).
func takeRunFDs(sock, ruleset, root int) error {
	buf := make([]byte, 64)
	oob := make([]byte, unix.CmsgSpace(2*4))
	for {
		n, oobn, _, _, err := unix.Recvmsg(sock, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("wait for the run: %w", err)
		}
		fds := ReceivedFDs(oob[:oobn])
		if string(buf[:n]) != `{"op":"fds"}` || len(fds) != 2 {
			CloseFDs(fds)
			return fmt.Errorf("init sent %q and %d descriptors, not the run's ruleset and root", buf[:n], len(fds))
		}
		// Above both places first: a descriptor received may be at one.
		var high []int
		for _, fd := range fds {
			h, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, max(ruleset, root)+1)
			if err != nil {
				CloseFDs(fds)
				CloseFDs(high)
				return fmt.Errorf("place the run's descriptors: %w", err)
			}
			high = append(high, h)
		}
		CloseFDs(fds)
		defer CloseFDs(high)
		for i, to := range []int{ruleset, root} {
			if err := unix.Dup3(high[i], to, unix.O_CLOEXEC); err != nil {
				return fmt.Errorf("place the run's descriptors: %w", err)
			}
		}
		return nil
	}
}
