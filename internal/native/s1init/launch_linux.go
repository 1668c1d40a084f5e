//go:build linux

package s1init

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
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
// JSON; 4 a SOCK_SEQPACKET socket back to init (LaunchMsg); 5 the
// Landlock ruleset; 6 the run's root. All of them but 0-2 close on the
// program's exec, so init reads the end of the socket as "executed".

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

// startInUserns starts ex's program through the launcher, from the
// calling (locked, root) thread, in a user namespace of its own; ll is
// the run's Landlock ruleset. It returns once the program was executed
// (or the launcher failed), with its pid.
func startInUserns(ex *Exec, xc *execCtl, files []uintptr, ll int) (int, error) {
	if selfExe == nil {
		return 0, errors.New("init could not open its own program to start the launcher from")
	}
	if ex.UID == 0 || ex.GID == 0 || ex.HostUID <= 0 || ex.HostGID <= 0 {
		return 0, fmt.Errorf("a program's own host identity must map an unprivileged user to an unprivileged host id (uid %d → %d, gid %d → %d)", ex.UID, ex.HostUID, ex.GID, ex.HostGID)
	}
	// The user namespace refuses setgroups (its gid map is written that
	// way), so the launcher keeps the supplementary groups of this
	// thread: none. Raw, so only this thread changes.
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); e != 0 {
		return 0, fmt.Errorf("setgroups: %w", e)
	}
	specR, specW, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		specR.Close()
		specW.Close()
		return 0, err
	}
	// The run's root, for the launcher to return to.
	runRoot, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		specR.Close()
		specW.Close()
		unix.Close(pair[0])
		unix.Close(pair[1])
		return 0, fmt.Errorf("open the run's root: %w", err)
	}
	defer unix.Close(runRoot)
	fds := append(append([]uintptr{}, files[:3]...), specR.Fd(), uintptr(pair[1]), uintptr(ll), uintptr(runRoot))
	if selfExe.Fd() < uintptr(2*len(fds)) || hostRoot != nil && hostRoot.Fd() < uintptr(2*len(fds)) {
		specR.Close()
		specW.Close()
		unix.Close(pair[0])
		unix.Close(pair[1])
		return 0, fmt.Errorf("init's own program (descriptor %d) is where the launcher's descriptors go: it would execute another file", selfExe.Fd())
	}
	attr := &syscall.ProcAttr{
		Dir:   "/",
		Env:   []string{"GOMAXPROCS=1", "GOGC=off"},
		Files: fds,
		Sys: &syscall.SysProcAttr{
			Cloneflags:                 unix.CLONE_NEWUSER,
			UidMappings:                []syscall.SysProcIDMap{{ContainerID: ex.UID, HostID: ex.HostUID, Size: 1}},
			GidMappings:                []syscall.SysProcIDMap{{ContainerID: ex.GID, HostID: ex.HostGID, Size: 1}},
			GidMappingsEnableSetgroups: false,
			Credential:                 &syscall.Credential{Uid: uint32(ex.UID), Gid: uint32(ex.GID)},
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
		return 0, fmt.Errorf("start the program's launcher: %w%s", err, launcherHint(err))
	}
	defer unix.Close(pair[0])
	go func() {
		json.NewEncoder(specW).Encode(ex)
		specW.Close()
	}()
	buf := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(4))
	for {
		n, oobn, _, _, err := unix.Recvmsg(pair[0], buf, oob, unix.MSG_CMSG_CLOEXEC)
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
