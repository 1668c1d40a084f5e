//go:build linux

package s1init

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/opensubstrate/sandbox/internal/confine"
	"github.com/opensubstrate/sandbox/internal/hostpath"
)

// Main runs this process as the S1 helper its arguments name, and reports
// whether it did; the caller exits with code. cmd/sandbox-s1 calls it, and
// so does every binary that may start S1 runs without that helper beside
// it (the CLI, test binaries).
func Main() (code int, ok bool) {
	if len(os.Args) < 2 {
		return 0, false
	}
	switch os.Args[1] {
	case InitArg:
		return runInit(), true
	case ProbeArg:
		return runProbe(), true
	case confine.MonitorJailArg:
		return confine.RunMonitorJail(), true
	case LaunchArg:
		return runLaunch(), true
	case UsernsArg:
		io.Copy(io.Discard, os.Stdin) // hold the namespace until the host closes stdin
		return 0, true
	}
	return 0, false
}

// runInit is pid 1 of the run. It runs on the process's main thread
// (lock_linux.go), which never takes the guest's credentials.
func runInit() int {
	// Nothing of init is the guest's to read: not dumpable, so its /proc
	// files belong to root and a ptrace-mode access needs CAP_SYS_PTRACE,
	// which the guest never has (Landlock refuses it across the domain's
	// boundary as well).
	unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	// The root is built, and the program starts, under the usual umask,
	// whatever the starter's was at the moment it forked: the modes of
	// the directories init makes for binds decide whether the program
	// may pass through them.
	unix.Umask(0o022)
	// Nothing init holds passes to the program: not its own descriptors
	// (spec, status, control), nor any its starter inherited without
	// close-on-exec (sandbox's caller's, for one). The program gets 0-2.
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		for fd := 3; fd < 1<<16; fd++ {
			unix.CloseOnExec(fd)
		}
	}
	// Forward the signals the host sends (init is in its own process
	// group, so a terminal's signals reach only sandbox, which forwards
	// them here) to the program's process group. Set up from the start,
	// beside building the root (its first call costs about a millisecond:
	// the runtime starts a thread for signals), and complete before the
	// program starts: a signal that comes before the program waits for
	// it, and never ends init by Go's default action.
	// Its own program, for the launcher (launch_linux.go), before the
	// host's root is pivoted away.
	if f, err := os.Open("/proc/self/exe"); err == nil {
		selfExe, _ = aboveLaunchFDs(f)
	}
	sigs := make(chan os.Signal, 8)
	notified := make(chan struct{})
	go func() {
		signal.Notify(sigs, unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2, EndSignal)
		close(notified)
	}()
	out := os.NewFile(4, "status")
	report := func(st Status) {
		if out != nil {
			json.NewEncoder(out).Encode(st)
			out.Close()
			out = nil
		}
	}
	// The base first, built before the run is known; then the run.
	in := os.NewFile(3, "spec")
	dec := json.NewDecoder(in)
	var base Base
	if err := dec.Decode(&base); err != nil {
		report(Status{Error: "init: read base: " + err.Error()})
		return 1
	}
	if err := buildBase(&base); err != nil {
		report(Status{Error: "init: build root: " + err.Error()})
		return 1
	}
	if base.Launcher != 0 {
		startAhead(base.Launcher)
	}
	// Its decoders for the run's types (reflection over every field, a
	// few tenths of a millisecond in a cold process) are built while it
	// waits, not once the run has come: the spec's, and the launcher's
	// Exec's, which it writes.
	json.Unmarshal([]byte(`{}`), new(Spec))
	json.Marshal(Exec{})
	var sp Spec
	if err := dec.Decode(&sp); err != nil {
		report(Status{Error: "init: read spec: " + err.Error()})
		return 1
	}
	in.Close()
	sp.Base = base
	if !sp.LauncherReady || sp.Session || sp.Exec.HostUID != base.Launcher || sp.Exec.HostGID != base.Launcher ||
		sp.Exec.UID != Nobody || sp.Exec.GID != Nobody {
		// Not this run's (its group, its identity; a live sandbox's
		// execs have streams of their own): nothing of it may outlive
		// the start.
		dropAhead()
	}
	if err := buildRun(&sp); err != nil {
		report(Status{Error: "init: build root: " + err.Error()})
		return 1
	}
	if sp.ProxyPort != 0 {
		if err := passListener(sp.ProxyPort); err != nil {
			report(Status{Error: "init: egress listener: " + err.Error()})
			return 1
		}
	}
	var xc *execCtl
	if sp.Exec.ExecControl {
		// The thread that starts the program holds its P through the
		// vfork until the program's exec is answered: the answering
		// goroutines need another.
		if runtime.GOMAXPROCS(0) < 2 {
			runtime.GOMAXPROCS(2)
		}
		fan, err := markExecMounts()
		if err != nil {
			report(Status{Error: "init: " + err.Error()})
			return 1
		}
		xc = newExecCtl(hostAsker())
		go xc.serveFanotify(fan)
		// memfds live on no mount of the run, out of fanotify's sight: the
		// run's pid namespace may not execute them at all.
		if memfdNoexec != nil {
			memfdNoexec.WriteString("2\n")
		}
	}
	if memfdNoexec != nil {
		memfdNoexec.Close()
		memfdNoexec = nil
	}
	<-notified
	if sp.Session {
		return runSession(&sp, xc, sigs, report)
	}
	pid, err := startConfined(&sp.Exec, xc, stdio, nil, nil)
	if hostRoot != nil {
		// One program per run: the copy of the host's mounts is not
		// needed again, and keeps their file systems busy while held.
		hostRoot.Close()
		hostRoot = nil
	}
	if err != nil {
		st := Status{Error: "init: " + err.Error()}
		var xe execError
		if errors.As(err, &xe) {
			st.ExecErrno = int(xe.errno)
		}
		report(st)
		return 1
	}
	go func() {
		for s := range sigs {
			if s == EndSignal {
				// The host ends the run (a deadline, a budget, an
				// interrupt not heeded): every process but init, at
				// once; init then commits what they wrote.
				unix.Kill(-1, unix.SIGKILL)
				continue
			}
			unix.Kill(-pid, s.(syscall.Signal))
		}
	}()
	st := Status{Started: true}
	for {
		var ws unix.WaitStatus
		wpid, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			st.Error = "init: wait: " + err.Error()
			break
		}
		if wpid == pid {
			if ws.Signaled() {
				st.Signal = int(ws.Signal())
			} else {
				st.Exited, st.Code = true, ws.ExitStatus()
			}
			break
		}
	}
	// The program is done: nothing it left behind outlives it.
	unix.Kill(-1, unix.SIGKILL)
	for {
		if _, err := unix.Wait4(-1, nil, 0, nil); err == unix.ECHILD {
			break
		}
	}
	st.Commits = commitOverlays(&sp)
	report(st)
	return 0
}

// startConfined starts the program from a new OS thread that it first
// confines: a child process inherits the credentials, no_new_privs bit,
// Landlock domain and seccomp filter of the thread that creates it. The
// thread is never released to other goroutines: when this goroutine ends,
// the Go runtime ends the thread with it. next, when not nil, is a live
// sandbox's launcher started ahead for this exec (nextLauncher).
func startConfined(ex *Exec, xc *execCtl, files []uintptr, cgroups []int, next *launcher) (int, error) {
	type result struct {
		pid int
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked
		pid, err := confineThreadAndStart(ex, xc, files, cgroups, next)
		ch <- result{pid, err}
	}()
	r := <-ch
	return r.pid, r.err
}

// stdio is the program's standard streams: init's own.
var stdio = []uintptr{0, 1, 2}

func confineThreadAndStart(ex *Exec, xc *execCtl, files []uintptr, cgroups []int, next *launcher) (int, error) {
	if next != nil {
		// The launcher started ahead (only for a host identity of the
		// exec's own) enters the exec's groups and cgroup namespace
		// itself; this thread builds its ruleset.
		ll, err := landlockRuleset(ex)
		if err != nil {
			next.drop()
			return 0, err
		}
		if _, err := os.Stat(ex.Dir); err != nil {
			ex.Dir = "/tmp"
		}
		pid, err := startInNext(next, ex, xc, files, cgroups, ll)
		unix.Close(ll)
		if err != errLauncherGone {
			return pid, err
		}
		// It had ended (killed while it waited): as without one.
	}
	// A live sandbox's exec has a group of its own for its CPU time: the
	// host passes the group's tasks files (cgroup v1), and writing 0 to
	// one moves the writing thread, which the program's processes then
	// inherit. The host opened them, so its credentials are the ones
	// the kernel checks.
	for _, fd := range cgroups {
		if _, err := unix.Write(fd, []byte("0")); err != nil {
			return 0, fmt.Errorf("enter the exec's cgroup: %w", err)
		}
	}
	// A cgroup namespace rooted at the run's own group (the host placed
	// init in it before sending the spec): the program sees "/" in
	// /proc/self/cgroup, not the host's hierarchy. On this thread, whose
	// namespaces the program inherits.
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
		return 0, fmt.Errorf("cgroup namespace: %w", err)
	}
	ll, err := landlockRuleset(ex)
	if err != nil {
		return 0, err
	}
	defer unix.Close(ll)
	if _, err := os.Stat(ex.Dir); err != nil {
		ex.Dir = "/tmp"
	}
	if ex.HostUID != 0 {
		// A host identity of its own: started through the launcher, in
		// a user namespace (launch_linux.go).
		return startInUserns(ex, xc, files, ll)
	}
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return 0, fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	if !ex.KeepUID {
		// Raw system calls change this thread only; Go's syscall.Set*id
		// would change every thread of init.
		if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); e != 0 {
			return 0, fmt.Errorf("setgroups: %w", e)
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(ex.GID), uintptr(ex.GID), uintptr(ex.GID)); e != 0 {
			return 0, fmt.Errorf("setresgid: %w", e)
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(ex.UID), uintptr(ex.UID), uintptr(ex.UID)); e != 0 {
			return 0, fmt.Errorf("setresuid: %w", e)
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return 0, fmt.Errorf("capset: %w", err)
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return 0, fmt.Errorf("clear ambient capabilities: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return 0, fmt.Errorf("no_new_privs: %w", err)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(ll), restrictFlags(ABI(), ex.Probe), 0); e != 0 {
		return 0, fmt.Errorf("landlock: %w", e)
	}
	if err := confine.LoadFilter(ex.Seccomp); err != nil {
		return 0, err
	}
	// This thread is the program's until it ends: out of its reach.
	if err := loadThreadGuard(); err != nil {
		return 0, err
	}
	if xc != nil && !ex.KernelExecOnly {
		// Stacked on the deny list: for execve and execveat the notifier
		// wins over its allow, and its denials win over the notifier.
		nfd, err := loadExecNotify()
		if err != nil {
			return 0, err
		}
		go xc.serveNotify(nfd)
	}
	if err := unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{}); err != nil {
		return 0, fmt.Errorf("setrlimit core: %w", err)
	}
	if ex.NoFile > 0 {
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: ex.NoFile, Max: ex.NoFile}); err != nil {
			return 0, fmt.Errorf("setrlimit nofile: %w", err)
		}
	}
	attr := &syscall.ProcAttr{
		Dir:   ex.Dir,
		Env:   ex.Env,
		Files: files,
		// No Pdeathsig: it fires when the creating thread ends, which this
		// one does at once. The pid namespace ends with init instead.
		Sys: &syscall.SysProcAttr{Setpgid: true},
	}
	pid, err := syscall.ForkExec(ex.Path, ex.Args, attr)
	if err != nil {
		e, _ := err.(syscall.Errno)
		return 0, execError{ex.Path, e, err}
	}
	return pid, nil
}

// execError is a program the kernel would not execute.
type execError struct {
	path  string
	errno syscall.Errno
	err   error
}

func (e execError) Error() string { return fmt.Sprintf("exec %s: %v", e.path, e.err) }
func (e execError) Unwrap() error { return e.err }

// mount flags that a read-only or remounted bind keeps from its source:
// in a user namespace a remount may not clear them.
func keptFlags(p string) uintptr {
	var s unix.Statfs_t
	if err := unix.Statfs(p, &s); err != nil {
		return 0
	}
	var f uintptr
	for _, m := range []struct{ st, ms int64 }{
		{unix.ST_RDONLY, unix.MS_RDONLY}, {unix.ST_NOSUID, unix.MS_NOSUID}, {unix.ST_NODEV, unix.MS_NODEV},
		{unix.ST_NOEXEC, unix.MS_NOEXEC}, {unix.ST_NOATIME, unix.MS_NOATIME}, {unix.ST_RELATIME, unix.MS_RELATIME},
		{unix.ST_NODIRATIME, unix.MS_NODIRATIME},
	} {
		if s.Flags&m.st != 0 {
			f |= uintptr(m.ms)
		}
	}
	return f
}

func bindMount(src, dst string, ro bool) error {
	if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s on %s: %w", src, dst, err)
	}
	flags := uintptr(unix.MS_BIND|unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV) | keptFlags(dst)
	if ro {
		flags |= unix.MS_RDONLY
	}
	if err := unix.Mount("", dst, "", flags, ""); err != nil {
		return fmt.Errorf("remount %s: %w", dst, err)
	}
	return nil
}

func mkTarget(p string, file bool) error {
	if !file {
		return os.MkdirAll(p, 0o755)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

// private is where init keeps overlay layers and the raw host directories
// of quota'd grants: root-only, outside every Landlock rule.
const private = "/.sandbox"

// memfdNoexec is vm.memfd_noexec of the run's pid namespace, opened
// before /proc/sys is made read-only.
var memfdNoexec *os.File

// buildBase mounts what every run has: the root tmpfs, the system
// directories read-only, a private /tmp, /dev and /proc; names the host
// and brings loopback up.
func buildBase(b *Base) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	if !b.UserNS && hasLoader(selfExe) {
		// A copy of the host's mount tree, in no namespace, for the
		// launcher's root until it takes the run's (launch_linux.go):
		// a dynamically linked helper's loader and libraries are the
		// host's.
		fd, err := unix.OpenTree(unix.AT_FDCWD, "/", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
		if err != nil {
			return fmt.Errorf("a copy of the host's mounts for the launcher: %w", err)
		}
		if hostRoot, err = aboveLaunchFDs(os.NewFile(uintptr(fd), "host-root")); err != nil {
			return err
		}
	}
	root := b.Root
	if err := unix.Mount("tmpfs", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=16m,mode=755"); err != nil {
		return fmt.Errorf("root tmpfs: %w", err)
	}
	for _, d := range b.System {
		if err := mkTarget(root+d, false); err != nil {
			return err
		}
		src := d
		if b.Image != "" {
			src = filepath.Join(b.Image, d)
		}
		if err := bindMount(src, root+d, true); err != nil {
			return err
		}
	}
	for _, l := range b.Links {
		if err := os.Symlink(l.Target, filepath.Join(root, l.Name)); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(root+"/tmp", 0o755); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", root+"/tmp", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=1777", b.TmpSize)); err != nil {
		return fmt.Errorf("/tmp: %w", err)
	}
	if err := buildDev(root); err != nil {
		return err
	}
	// /proc, fresh for the run's pid namespace, with the host-wide knobs masked.
	if err := os.MkdirAll(root+"/proc", 0o555); err != nil {
		return err
	}
	// hidepid=invisible: a process the reader may not ptrace-access is not
	// listed at all; for the guest, that is init.
	if err := unix.Mount("proc", root+"/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "hidepid=invisible"); err != nil {
		return fmt.Errorf("/proc: %w", err)
	}
	if err := os.Mkdir(root+private, 0o700); err != nil {
		return err
	}
	if err := maskProc(root); err != nil {
		return err
	}
	// Kept open across the read-only bind below, for exec control.
	memfdNoexec, _ = os.OpenFile(root+"/proc/sys/vm/memfd_noexec", os.O_WRONLY, 0)
	for _, p := range []string{"/proc/sys", "/proc/irq", "/proc/bus"} {
		if _, err := os.Stat(root + p); err == nil {
			if err := bindMount(root+p, root+p, true); err != nil {
				return err
			}
		}
	}
	if b.Hostname != "" {
		unix.Sethostname([]byte(b.Hostname))
	}
	loopbackUp()
	return nil
}

// MaskedProc are the files of /proc a run reads as empty, and
// MaskedProcDirs the directories it sees empty: host facts a confined
// program has no use for (docs/s1.md says why each).
var (
	MaskedProc = []string{
		"/proc/kcore", "/proc/sysrq-trigger", "/proc/kmsg", "/proc/timer_list", "/proc/timer_stats",
		"/proc/sched_debug", "/proc/latency_stats", "/proc/cmdline", "/proc/config.gz", "/proc/keys",
		"/proc/key-users", "/proc/partitions", "/proc/diskstats", "/proc/swaps",
	}
	MaskedProcDirs = []string{"/proc/acpi", "/proc/scsi", "/proc/asound", "/proc/driver"}
)

// maskProc hides host facts in the run's /proc: each masked file is an
// empty read-only file of the root's own tmpfs bound over it (not the
// host's /dev/null, whose mount would show the host's devtmpfs), each
// masked directory an empty read-only directory, and the boot id is the
// run's own.
func maskProc(root string) error {
	empty, emptyDir, bootID := root+private+"/empty", root+private+"/empty.d", root+private+"/boot_id"
	if err := os.WriteFile(empty, nil, 0o444); err != nil {
		return err
	}
	if err := os.Mkdir(emptyDir, 0o555); err != nil {
		return err
	}
	var id [16]byte
	if _, err := unix.Getrandom(id[:], 0); err != nil {
		return fmt.Errorf("boot id: %w", err)
	}
	id[6] = id[6]&0x0f | 0x40 // version 4
	id[8] = id[8]&0x3f | 0x80 // RFC 4122 variant
	uuid := fmt.Sprintf("%x-%x-%x-%x-%x\n", id[0:4], id[4:6], id[6:8], id[8:10], id[10:16])
	if err := os.WriteFile(bootID, []byte(uuid), 0o444); err != nil {
		return err
	}
	for _, m := range []struct {
		src   string
		paths []string
	}{{empty, MaskedProc}, {emptyDir, MaskedProcDirs}, {bootID, []string{"/proc/sys/kernel/random/boot_id"}}} {
		for _, p := range m.paths {
			if _, err := os.Lstat(root + p); err != nil {
				continue // not on this kernel
			}
			// One plain bind: the source is on the root tmpfs, read-only
			// once the root is (before the program starts), and root's.
			if err := unix.Mount(m.src, root+p, "", unix.MS_BIND, ""); err != nil {
				return fmt.Errorf("mask %s: %w", p, err)
			}
		}
	}
	return nil
}

// buildRun mounts the run's storage grants into the base, masks the
// host's password hashes (after the grants: a grant of /etc must not
// uncover them), pivots into the root and makes it read-only.
//
// Each grant is reached on the host without following any link
// (hostpath.Open), checked against the guard, and the object reached is
// what is mounted (open_tree of its descriptor), at a place in the root
// that is itself reached beneath the root without following links: what
// was checked is what the run sees, whatever an earlier run planted.
func buildRun(sp *Spec) error {
	root := sp.Base.Root
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the root: %w", err)
	}
	defer unix.Close(rfd)
	// storage grants, parents first
	binds := append([]Bind{}, sp.Binds...)
	sort.Slice(binds, func(i, j int) bool { return len(binds[i].Path) < len(binds[j].Path) })
	for i, b := range binds {
		if err := mountBind(sp, rfd, root, i, b); err != nil {
			return fmt.Errorf("grant %s: %w", b.Path, err)
		}
	}
	if sp.Exec.ExecControl {
		// Under exec control nothing the guest can write is executable
		// (/tmp here, writable grants as they are mounted; /dev/shm
		// always): what the kernel maps for an exec lies on a mount the
		// guest cannot change, so the bytes judged are the bytes run.
		attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOEXEC}
		if err := unix.MountSetattr(unix.AT_FDCWD, root+"/tmp", 0, &attr); err != nil {
			return fmt.Errorf("/tmp noexec: %w", err)
		}
	}
	if err := bindDevices(sp, root); err != nil {
		return err
	}
	for _, p := range []string{"/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-"} {
		fd, err := unix.Openat2(rfd, strings.TrimPrefix(p, "/"), &unix.OpenHow{Flags: unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: beneath})
		if err != nil {
			continue
		}
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
			err = unix.Mount(root+"/dev/null", fmt.Sprintf("/proc/self/fd/%d", fd), "", unix.MS_BIND, "")
		}
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("mask %s: %w", p, err)
		}
	}
	// Pivot into the new root and drop the old one.
	if err := unix.Chdir(root); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the old root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	// The root tmpfs itself is read-only: nothing is created at /.
	if err := unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("remount / read-only: %w", err)
	}
	return nil
}

// beneath resolves inside the run's root, following nothing.
const beneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// mountBind mounts one grant: its host object, walked and checked, at its
// place in the root.
func mountBind(sp *Spec, rfd int, root string, i int, b Bind) error {
	if KernelDir(b.Path) != "" {
		return errors.New("the run's /proc, /dev and /sys are its own, not grantable")
	}
	obj, err := hostpath.Open(b.Host)
	if err != nil {
		return err
	}
	defer obj.Close()
	if !b.Internal {
		if err := sp.Guard.Check(obj, b.RW); err != nil {
			return err
		}
	}
	if obj.IsDir() == b.File {
		return fmt.Errorf("%s changed between the host's check and the mount (a directory is now a file, or the reverse)", b.Host)
	}
	dst, err := placeIn(rfd, b.Path, b.File)
	if err != nil {
		return err
	}
	defer unix.Close(dst)
	noexec := b.RW && sp.Exec.ExecControl
	if b.RW && b.Quota > 0 {
		return overlay(root, i, b, obj.FD(), dst, noexec, guestOwner(&sp.Exec))
	}
	return mountTree(obj.FD(), dst, !b.RW, noexec, b.IDMap)
}

// placeIn opens, beneath the root, the place a grant is mounted at,
// making what is missing (directories, or an empty file for a file
// grant). A link on the way is refused: inside a parent grant it would
// be the guest's.
func placeIn(rfd int, p string, file bool) (int, error) {
	names := strings.Split(strings.TrimPrefix(p, "/"), "/")
	cur, err := unix.Openat(rfd, ".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	at := ""
	for i, name := range names {
		at += "/" + name
		last := i == len(names)-1
		how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: beneath}
		fd, err := unix.Openat2(cur, name, how)
		if errors.Is(err, unix.ENOENT) {
			if last && file {
				if cfd, cerr := unix.Openat(cur, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644); cerr == nil {
					unix.Close(cfd)
				}
			} else {
				unix.Mkdirat(cur, name, 0o755)
			}
			fd, err = unix.Openat2(cur, name, how)
		}
		unix.Close(cur)
		if err != nil {
			return -1, fmt.Errorf("its place in the run, %s: %w", at, err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return -1, err
		}
		typ := st.Mode & unix.S_IFMT
		var bad string
		switch {
		case typ == unix.S_IFLNK:
			bad = "is a symbolic link"
		case (!last || !file) && typ != unix.S_IFDIR:
			bad = "is not a directory"
		case last && file && typ != unix.S_IFREG:
			bad = "is not a regular file"
		}
		if bad != "" {
			unix.Close(fd)
			return -1, fmt.Errorf("its place in the run, %s, %s", at, bad)
		}
		cur = fd
	}
	return cur, nil
}

// mountTree mounts a copy of the mount tree at the object src (an O_PATH
// descriptor) on the place dst: nosuid and nodev always, read-only or
// noexec when asked, id mapped through the user namespace at usernsPath
// when given.
func mountTree(src, dst int, ro, noexec bool, usernsPath string) error {
	tree, err := unix.OpenTree(src, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH|unix.AT_RECURSIVE)
	if err != nil {
		return fmt.Errorf("open_tree: %w", err)
	}
	defer unix.Close(tree)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if ro {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if noexec {
		attr.Attr_set |= unix.MOUNT_ATTR_NOEXEC
	}
	if usernsPath != "" {
		userns, err := unix.Open(usernsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open %s: %w", usernsPath, err)
		}
		defer unix.Close(userns)
		attr.Attr_set |= unix.MOUNT_ATTR_IDMAP
		attr.Userns_fd = uint64(userns)
	}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
		return fmt.Errorf("mount_setattr: %w", err)
	}
	if err := unix.MoveMount(tree, "", dst, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount: %w", err)
	}
	return nil
}

func buildDev(root string) error {
	dev := root + "/dev"
	if err := os.MkdirAll(dev, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "size=64k,mode=755"); err != nil {
		return fmt.Errorf("/dev: %w", err)
	}
	for _, n := range []string{"null", "zero", "full", "random", "urandom"} {
		if err := mkTarget(dev+"/"+n, true); err != nil {
			return err
		}
		if err := unix.Mount("/dev/"+n, dev+"/"+n, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("/dev/%s: %w", n, err)
		}
	}
	for name, target := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(target, dev+"/"+name); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dev+"/shm", 0o755); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", dev+"/shm", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=64m,mode=1777"); err != nil {
		return fmt.Errorf("/dev/shm: %w", err)
	}
	return nil
}

// bindDevices binds the run's device nodes into its /dev, each checked,
// once mounted, to be the character device the host named (what the
// run opens is what the cgroup allows), and shows the run the
// /proc/driver entries of its device's driver.
func bindDevices(sp *Spec, root string) error {
	for _, d := range sp.Devices {
		if filepath.Dir(d.Path) != "/dev" || strings.HasPrefix(filepath.Base(d.Path), ".") {
			return fmt.Errorf("device %s: a run's device nodes are directly beneath /dev", d.Path)
		}
		dst := root + d.Path
		if err := mkTarget(dst, true); err != nil {
			return fmt.Errorf("device %s: %w", d.Path, err)
		}
		if err := unix.Mount(d.Host, dst, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("device %s: bind %s: %w", d.Path, d.Host, err)
		}
		if err := unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NOEXEC, ""); err != nil {
			return fmt.Errorf("device %s: remount: %w", d.Path, err)
		}
		var st unix.Stat_t
		if err := unix.Stat(dst, &st); err != nil {
			return fmt.Errorf("device %s: %w", d.Path, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(st.Rdev) != d.Major || unix.Minor(st.Rdev) != d.Minor {
			return fmt.Errorf("device %s: %s is not the character device %d:%d the host named", d.Path, d.Host, d.Major, d.Minor)
		}
	}
	if sp.ProcDriver == "" {
		return nil
	}
	dir := root + "/proc/driver"
	if _, err := os.Lstat(dir); err != nil {
		return nil
	}
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("/proc/driver: %w", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("/proc/driver: %w", err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), sp.ProcDriver) {
			continue
		}
		src := root + private + "/empty"
		if e.IsDir() {
			src += ".d"
		}
		if err := unix.Mount(src, filepath.Join(dir, e.Name()), "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("mask /proc/driver/%s: %w", e.Name(), err)
		}
	}
	return nil
}

// guestOwner is the guest's user and group as the host sees them: its own
// host identity, or nobody where it has none.
func guestOwner(ex *Exec) [2]int {
	if ex.HostUID != 0 {
		return [2]int{ex.HostUID, ex.HostGID}
	}
	return [2]int{Nobody, Nobody}
}

// overlay mounts a quota'd rw grant: writes land in a tmpfs of the
// quota's size and are committed to the host directory (src, the object
// walked and checked) when the run ends. It is mounted on dst.
func overlay(root string, i int, b Bind, src, dst int, noexec bool, owner [2]int) error {
	layers := fmt.Sprintf("%s%s/%d", root, private, i)
	if err := os.MkdirAll(layers, 0o700); err != nil {
		return err
	}
	// The quota, in whole pages: tmpfs counts pages.
	size := (b.Quota + 4095) &^ 4095
	if err := unix.Mount("tmpfs", layers, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=700", size)); err != nil {
		return fmt.Errorf("quota tmpfs: %w", err)
	}
	for _, d := range []string{"upper", "work", "lower", "raw", "merged", "kept"} {
		if err := os.Mkdir(layers+"/"+d, 0o755); err != nil {
			return err
		}
	}
	if b.Keep != "" {
		// Where the writes go if they cannot be committed: the host's
		// own directory, opened without following links.
		kfd, err := unix.Open(b.Keep, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("the directory to keep writes in: %w", err)
		}
		dfd, err := unix.Open(layers+"/kept", unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == nil {
			err = mountTree(kfd, dfd, false, false, "")
			unix.Close(dfd)
		}
		unix.Close(kfd)
		if err != nil {
			return fmt.Errorf("the directory to keep writes in: %w", err)
		}
	}
	// The raw host directory, visible only to init, for the commit; and
	// the lower layer, id mapped like a plain grant, so that the guest
	// owns what it may write.
	for _, l := range []struct {
		dir   string
		idmap string
	}{{"raw", ""}, {"lower", b.IDMap}} {
		fd, err := unix.Open(layers+"/"+l.dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		err = mountTree(src, fd, false, false, l.idmap)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("%s layer: %w", l.dir, err)
		}
	}
	if b.IDMap != "" {
		// The layers belong to the guest, as the lower layer's owner
		// appears to it.
		os.Chown(layers+"/upper", owner[0], owner[1])
		os.Chown(layers+"/work", owner[0], owner[1])
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", layers+"/lower", layers+"/upper", layers+"/work")
	flags := uintptr(unix.MS_NOSUID | unix.MS_NODEV)
	if noexec {
		flags |= unix.MS_NOEXEC
	}
	if err := unix.Mount("overlay", layers+"/merged", "overlay", flags, opts); err != nil {
		return fmt.Errorf("overlay: %w", err)
	}
	if err := unix.MoveMount(unix.AT_FDCWD, layers+"/merged", dst, "", unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("move the overlay into place: %w", err)
	}
	return nil
}

// commitOverlays applies each quota'd grant's upper layer to its host
// directory, after every process of the run has ended.
//
// Writes that cannot be committed (over the quota on the host's disk, a
// full disk, an error on the way) are never dropped: all of them are
// copied, whole, into the grant's Keep directory, and the report says
// where.
func commitOverlays(sp *Spec) []Commit {
	binds := append([]Bind{}, sp.Binds...)
	sort.Slice(binds, func(i, j int) bool { return len(binds[i].Path) < len(binds[j].Path) })
	var out []Commit
	for i, b := range binds {
		if !b.RW || b.Quota == 0 {
			continue
		}
		layers := fmt.Sprintf("%s/%d", private, i)
		c := Commit{Path: b.Path}
		var err error
		c.Entries, c.Bytes, err = commit(layers+"/upper", layers+"/raw", b.Quota)
		if err != nil {
			c.Error = err.Error()
			if b.Keep != "" {
				if _, _, kerr := commit(layers+"/upper", layers+"/kept", math.MaxInt64); kerr != nil {
					c.Error += "; keeping them aside failed too: " + kerr.Error()
				} else {
					c.Kept = b.Keep
				}
			}
		}
		out = append(out, c)
	}
	return out
}

// ctlFD is init's end of the control socket.
const ctlFD = 5

// passListener listens on 127.0.0.1:port in the run's network namespace
// and hands the socket to the host, which serves the egress proxy on it.
func passListener(port int) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return fmt.Errorf("bind 127.0.0.1:%d: %w", port, err)
	}
	if err := unix.Listen(fd, 128); err != nil {
		return err
	}
	msg, _ := json.Marshal(Ctl{Op: "listener"})
	return unix.Sendmsg(ctlFD, msg, unix.UnixRights(fd), nil, 0)
}

// loopbackUp brings the run's own loopback interface up, so that programs
// that talk to themselves over 127.0.0.1 work; the namespace has no other
// interface.
func loopbackUp() {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// EndSignal is the signal the host sends init to end a run now (its
// deadline passed, its budget is spent, an interrupt went unheeded):
// init kills every other process of the run, commits what they wrote to
// quota'd grants, reports, and exits. Never forwarded to the program.
const EndSignal = unix.SIGPWR
