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
	"sync"
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
//
// A live sandbox's init keeps a launcher started ahead for its next
// exec (nextLauncher), so that an exec waits for no Go runtime to start.
// It is started before the exec's streams and CPU group are known, so
// its "fds" message carries them too (launchRun): the launcher enters
// the exec's groups (each group's tasks file, opened by the host, written
// "0"), takes a cgroup namespace rooted there, as the program's must be
// (for which, alone of launchers, it holds CAP_SYS_ADMIN in its own user
// namespace until it confines itself), and puts the streams at 0-2.

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
	pidfd int // -1 where the kernel gave none
	specW *os.File
	sock  int // init's end of its socket
}

// launchRun is init's "fds" message to a launcher: the descriptors it
// carries are the run's Landlock ruleset and root, then, for a live
// sandbox's launcher started ahead, the exec's three streams (Streams)
// and the tasks files of its groups (Groups of them).
type launchRun struct {
	Op      string `json:"op"`
	Streams bool   `json:"streams,omitempty"`
	Groups  int    `json:"groups,omitempty"`
}

// maxLaunchGroups bounds the groups one exec's launcher is sent.
const maxLaunchGroups = 16

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
		if l, err := startLauncher(Nobody, Nobody, hostID, hostID, stdio, false); err == nil {
			ahead = l
		}
	}()
	<-done
}

// nextLauncher is the launcher a live sandbox's init starts ahead for
// its next exec, as the sandbox's program identity, from a thread of its
// own in the sandbox's groups: the exec sends it the exec's groups and
// streams (startInNext). One at a time; every exec of a sandbox has its
// identity.
type nextLauncher struct {
	mu       sync.Mutex
	ch       chan *launcher // the one started, nil where it could not be
	pending  bool
	closed   bool           // the sandbox is ending: none is started
	starting sync.WaitGroup // starts in flight, which close waits for
}

// start starts the next launcher in the background, unless one is
// started or starting, or ex has no host identity of its own (its
// program is not started through a launcher).
func (n *nextLauncher) start(ex *Exec) {
	n.mu.Lock()
	defer n.mu.Unlock()
	// Below Landlock ABI 6 nothing keeps an earlier exec's processes,
	// the sandbox's own host id, from signalling a launcher that waits
	// (a stopped one would hold the next exec, and init with it).
	if n.pending || n.closed || ex.HostUID == 0 || ABI() < 6 {
		return
	}
	if n.ch == nil {
		n.ch = make(chan *launcher, 1)
	}
	n.pending = true
	uid, gid, hostUID, hostGID := ex.UID, ex.GID, ex.HostUID, ex.HostGID
	ch := n.ch
	n.starting.Add(1)
	go func() {
		defer n.starting.Done()
		runtime.LockOSThread() // never unlocked: its groups are changed
		l, err := startLauncher(uid, gid, hostUID, hostGID, stdio, true)
		if err != nil {
			l = nil
		}
		ch <- l
	}()
}

// take is the launcher started for the next exec, waiting for it if it
// is still starting; nil if there is none.
func (n *nextLauncher) take() *launcher {
	n.mu.Lock()
	if !n.pending || n.closed {
		n.mu.Unlock()
		return nil
	}
	n.pending = false
	ch := n.ch
	n.mu.Unlock()
	return <-ch
}

// close ends the launcher waiting, once it has started, and starts no
// other: the sandbox is ending. It returns once no start is in flight,
// so that none is made after the sandbox's processes are killed.
func (n *nextLauncher) close() {
	n.mu.Lock()
	n.closed = true
	pending := n.pending
	n.pending = false
	ch := n.ch
	n.mu.Unlock()
	if pending {
		if l := <-ch; l != nil {
			l.drop()
		}
	}
	n.starting.Wait()
}

// dropAhead ends the launcher started ahead, if there is one.
func dropAhead() {
	if ahead != nil {
		ahead.kill()
		ahead = nil
	}
}

// kill ends a launcher that did not start a program, and reaps it:
// through its pidfd where there is one, which never names another
// process (in a live sandbox its reaper may have taken the exit, and
// the pid been reused).
func (l *launcher) kill() {
	l.signal()
	for {
		var err error
		if l.pidfd >= 0 {
			err = unix.Waitid(unix.P_PIDFD, l.pidfd, nil, unix.WEXITED, nil)
		} else {
			_, err = unix.Wait4(l.pid, nil, 0, nil)
		}
		if err != unix.EINTR {
			break
		}
	}
	l.close()
}

// drop ends a live sandbox's launcher that will start no program,
// leaving it to the sandbox's reaper: a wait here could take another
// process's exit, the launcher's pid reused once the reaper has it.
func (l *launcher) drop() {
	l.signal()
	l.close()
}

// signal kills the launcher: through its pidfd where there is one,
// which never names another process.
func (l *launcher) signal() {
	if l.pidfd >= 0 {
		unix.PidfdSendSignal(l.pidfd, unix.SIGKILL, nil, 0)
		return
	}
	unix.Kill(l.pid, unix.SIGKILL)
}

// close closes init's ends of the launcher's pipe and socket.
func (l *launcher) close() {
	l.specW.Close()
	unix.Close(l.sock)
	if l.pidfd >= 0 {
		unix.Close(l.pidfd)
	}
}

// startLauncher starts the launcher, from the calling (locked, root)
// thread, in a user namespace of its own that maps uid and gid alone, to
// hostUID and hostGID, with files as its standard streams. A live
// sandbox's launcher started ahead (next) may take a cgroup namespace
// of its own once it is in its exec's groups: it holds CAP_SYS_ADMIN in
// its user namespace until it confines itself.
func startLauncher(uid, gid, hostUID, hostGID int, files []uintptr, next bool) (*launcher, error) {
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
	caps := []uintptr{unix.CAP_SYS_CHROOT, unix.CAP_SETPCAP}
	if next {
		caps = append(caps, unix.CAP_SYS_ADMIN)
	}
	pidfd := -1
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
			AmbientCaps:                caps,
			// No Pdeathsig: the thread that starts it ends at once. The
			// pid namespace ends with init instead.
			Setpgid: true,
			PidFD:   &pidfd,
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
	return &launcher{pid: pid, pidfd: pidfd, specW: specW, sock: pair[0]}, nil
}

// launchFDs is how many descriptors the launcher has: 0-2, the spec,
// the socket, and the ruleset and root it is sent.
const launchFDs = 7

// sendRun sends the launcher the run's Landlock ruleset ll and the
// run's root (init's, now); to a live sandbox's launcher started ahead,
// also the exec's streams and the tasks files of its groups.
func (l *launcher) sendRun(ll int, streams []uintptr, groups []int) error {
	if len(groups) > maxLaunchGroups {
		return fmt.Errorf("an exec in %d groups: at most %d", len(groups), maxLaunchGroups)
	}
	runRoot, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the run's root: %w", err)
	}
	defer unix.Close(runRoot)
	m := launchRun{Op: "fds", Streams: streams != nil, Groups: len(groups)}
	fds := []int{ll, runRoot}
	for _, f := range streams {
		fds = append(fds, int(f))
	}
	fds = append(fds, groups...)
	b, _ := json.Marshal(m)
	if err := unix.Sendmsg(l.sock, b, unix.UnixRights(fds...), nil, 0); err != nil {
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
	if l != nil && l.sendRun(ll, nil, nil) != nil {
		l.kill() // gone
		l = nil
	}
	if l == nil {
		if l, err = startLauncher(ex.UID, ex.GID, ex.HostUID, ex.HostGID, files, false); err != nil {
			return 0, err
		}
		l.sendSpec(spec)
		if err := l.sendRun(ll, nil, nil); err != nil {
			l.kill()
			return 0, err
		}
	}
	return l.started(ex, xc)
}

// errLauncherGone says a live sandbox's launcher started ahead had ended
// before its exec came: the exec starts a launcher of its own.
var errLauncherGone = errors.New("the launcher started ahead has ended")

// startInNext starts ex's program, a live sandbox's exec, in l, the
// launcher its init started ahead (nextLauncher), from the calling
// (locked, root) thread, which has not moved: the launcher enters the
// exec's groups itself. files are the exec's streams, groups its
// groups' tasks files, ll its Landlock ruleset. It says errLauncherGone
// where l has ended (and was dropped).
func startInNext(l *launcher, ex *Exec, xc *execCtl, files []uintptr, groups []int, ll int) (int, error) {
	spec, err := json.Marshal(ex)
	if err != nil {
		l.drop()
		return 0, fmt.Errorf("the program's spec: %w", err)
	}
	l.sendSpec(spec)
	if err := l.sendRun(ll, files[:3], groups); err != nil {
		// Gone (EPIPE), or not to be reached: the exec starts its own.
		l.drop()
		return 0, errLauncherGone
	}
	return l.started(ex, xc)
}

// started waits for the launcher sent its run to execute ex's program
// (its socket's end), or to say why it could not, and returns its pid.
func (l *launcher) started(ex *Exec, xc *execCtl) (int, error) {
	defer unix.Close(l.sock)
	if l.pidfd >= 0 {
		defer unix.Close(l.pidfd)
	}
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
	streams, groups, err := takeRunFDs(initFD, rulesetFD, rootFD)
	if err != nil {
		return fail(fmt.Errorf("launcher: %w", err))
	}
	if streams != nil {
		// A live sandbox's launcher started ahead: into the exec's
		// groups (this thread, which executes the program; the others
		// end with the exec), then a cgroup namespace rooted there, as
		// an exec's confining thread of init would have made it; then
		// the exec's streams in place of init's.
		for _, fd := range groups {
			if _, err := unix.Write(fd, []byte("0")); err != nil {
				return fail(fmt.Errorf("launcher: enter the exec's cgroup: %w", err))
			}
			unix.Close(fd)
		}
		if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
			return fail(fmt.Errorf("launcher: cgroup namespace: %w", err))
		}
		for i, fd := range streams {
			if err := unix.Dup3(fd, i, 0); err != nil {
				return fail(fmt.Errorf("launcher: take the exec's streams: %w", err))
			}
			unix.Close(fd)
		}
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

// takeRunFDs waits for init's "fds" message on sock (launchRun) and puts
// the first two descriptors it carries at ruleset and root (close-on-
// exec). A live sandbox's launcher is also sent its exec's three streams
// and its groups' tasks files: it returns them (close-on-exec, above
// both places), nil where there were none.
func takeRunFDs(sock, ruleset, root int) (streams, groups []int, err error) {
	buf := make([]byte, 256)
	oob := make([]byte, unix.CmsgSpace((5+maxLaunchGroups)*4))
	for {
		n, oobn, flags, _, err := unix.Recvmsg(sock, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("wait for the run: %w", err)
		}
		fds := ReceivedFDs(oob[:oobn])
		var m launchRun
		want := -1
		if json.Unmarshal(buf[:n], &m) == nil && m.Op == "fds" && m.Groups >= 0 && m.Groups <= maxLaunchGroups && (m.Streams || m.Groups == 0) {
			want = 2 + m.Groups
			if m.Streams {
				want += 3
			}
		}
		if len(fds) != want || flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
			CloseFDs(fds)
			return nil, nil, fmt.Errorf("init sent %q and %d descriptors, not the run's ruleset and root", buf[:n], len(fds))
		}
		// Above both places first: a descriptor received may be at one.
		var high []int
		for _, fd := range fds {
			h, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, max(ruleset, root)+1)
			if err != nil {
				CloseFDs(fds)
				CloseFDs(high)
				return nil, nil, fmt.Errorf("place the run's descriptors: %w", err)
			}
			high = append(high, h)
		}
		CloseFDs(fds)
		for i, to := range []int{ruleset, root} {
			if err := unix.Dup3(high[i], to, unix.O_CLOEXEC); err != nil {
				CloseFDs(high)
				return nil, nil, fmt.Errorf("place the run's descriptors: %w", err)
			}
		}
		CloseFDs(high[:2])
		if !m.Streams {
			return nil, nil, nil
		}
		return high[2:5], high[5:], nil
	}
}
