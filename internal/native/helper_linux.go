//go:build linux

package native

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// Helper runs this process as one of the S1 helpers when argv asks for
// it, and reports whether it did; the caller then exits with code. Every
// binary that can host S1 runs (the CLI, and the test binaries of the
// packages that start S1 runs) calls it first thing in main or TestMain.
func Helper() (code int, ok bool) {
	if len(os.Args) < 2 {
		return 0, false
	}
	switch os.Args[1] {
	case InitArg:
		return runInit(), true
	case ExecArg:
		runtime.LockOSThread() // never unlocked: the restrictions go with this thread into exec
		return runExec(), true
	case ProbeArg:
		return runProbe(), true
	case UsernsArg:
		io.Copy(io.Discard, os.Stdin) // hold the namespace until the host closes stdin
		return 0, true
	}
	return 0, false
}

func readJSON(fd uintptr, v any) error {
	f := os.NewFile(fd, "spec")
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// runInit is pid 1 of the run.
func runInit() int {
	out := os.NewFile(4, "status")
	report := func(st status) {
		if out != nil {
			json.NewEncoder(out).Encode(st)
			out.Close()
			out = nil
		}
	}
	var sp spec
	if err := readJSON(3, &sp); err != nil {
		report(status{Error: "init: read spec: " + err.Error()})
		return 1
	}
	if err := buildRoot(&sp); err != nil {
		report(status{Error: "init: build root: " + err.Error()})
		return 1
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		report(status{Error: "init: " + err.Error()})
		return 1
	}
	proc, err := os.StartProcess("/proc/self/exe", []string{"sandbox-s1", ExecArg}, &os.ProcAttr{
		Dir:   "/",
		Env:   []string{},
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr, pr},
	})
	pr.Close()
	if err != nil {
		report(status{Error: "init: start exec helper: " + err.Error()})
		return 1
	}
	json.NewEncoder(pw).Encode(sp.Exec)
	pw.Close()

	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2)
	go func() {
		for s := range sigs {
			proc.Signal(s)
		}
	}()
	st := status{Started: true}
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			st.Error = "init: wait: " + err.Error()
			break
		}
		if pid == proc.Pid {
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
	st.Commit = commitOverlays(&sp)
	report(st)
	return 0
}

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

func buildRoot(sp *spec) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	root := sp.Root
	if err := unix.Mount("tmpfs", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=16m,mode=755"); err != nil {
		return fmt.Errorf("root tmpfs: %w", err)
	}
	for _, d := range sp.System {
		if err := mkTarget(root+d, false); err != nil {
			return err
		}
		if err := bindMount(d, root+d, true); err != nil {
			return err
		}
	}
	for _, l := range sp.Links {
		if err := os.Symlink(l.Target, filepath.Join(root, l.Name)); err != nil {
			return err
		}
	}
	// /tmp
	if err := os.MkdirAll(root+"/tmp", 0o755); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", root+"/tmp", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=1777", sp.TmpSize)); err != nil {
		return fmt.Errorf("/tmp: %w", err)
	}
	// /dev
	if err := buildDev(root); err != nil {
		return err
	}
	// storage grants, parents first
	binds := append([]bind{}, sp.Binds...)
	sort.Slice(binds, func(i, j int) bool { return len(binds[i].Path) < len(binds[j].Path) })
	if err := os.Mkdir(root+private, 0o700); err != nil {
		return err
	}
	for i, b := range binds {
		dst := root + b.Path
		if err := mkTarget(dst, b.File); err != nil {
			return fmt.Errorf("grant %s: %w", b.Path, err)
		}
		if b.RW && b.Quota > 0 {
			if err := overlay(root, i, b, dst); err != nil {
				return err
			}
			continue
		}
		if b.IDMap > 0 {
			if err := idmapMount(b.Host, dst, b.IDMap, !b.RW); err != nil {
				return err
			}
			continue
		}
		if err := bindMount(b.Host, dst, !b.RW); err != nil {
			return err
		}
	}
	// /proc, fresh for the run's pid namespace, with the host-wide knobs masked.
	if err := os.MkdirAll(root+"/proc", 0o555); err != nil {
		return err
	}
	if err := unix.Mount("proc", root+"/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("/proc: %w", err)
	}
	for _, p := range []string{"/proc/kcore", "/proc/sysrq-trigger", "/proc/kmsg", "/proc/timer_list"} {
		if _, err := os.Stat(root + p); err == nil {
			if err := unix.Mount(root+"/dev/null", root+p, "", unix.MS_BIND, ""); err != nil {
				return fmt.Errorf("mask %s: %w", p, err)
			}
		}
	}
	for _, p := range []string{"/proc/sys", "/proc/irq", "/proc/bus"} {
		if _, err := os.Stat(root + p); err == nil {
			if err := bindMount(root+p, root+p, true); err != nil {
				return err
			}
		}
	}
	for _, p := range []string{"/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-"} {
		if _, err := os.Stat(root + p); err == nil {
			if err := unix.Mount(root+"/dev/null", root+p, "", unix.MS_BIND, ""); err != nil {
				return fmt.Errorf("mask %s: %w", p, err)
			}
		}
	}
	if sp.Hostname != "" {
		unix.Sethostname([]byte(sp.Hostname))
	}
	loopbackUp()
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

// overlay mounts a quota'd rw grant: writes land in a tmpfs of the
// quota's size and are committed to the host directory when the run ends.
func overlay(root string, i int, b bind, dst string) error {
	layers := fmt.Sprintf("%s%s/%d", root, private, i)
	if err := os.MkdirAll(layers, 0o700); err != nil {
		return err
	}
	// The quota, in whole pages: tmpfs counts pages.
	size := (b.Quota + 4095) &^ 4095
	if err := unix.Mount("tmpfs", layers, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=700", size)); err != nil {
		return fmt.Errorf("quota tmpfs for %s: %w", b.Path, err)
	}
	for _, d := range []string{"upper", "work", "lower", "raw"} {
		if err := os.Mkdir(layers+"/"+d, 0o755); err != nil {
			return err
		}
	}
	// The raw host directory, visible only to init, for the commit.
	if err := unix.Mount(b.Host, layers+"/raw", "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s: %w", b.Host, err)
	}
	// The lower layer, id mapped like a plain grant, so that the guest
	// owns what it may write.
	if b.IDMap > 0 {
		if err := idmapMount(b.Host, layers+"/lower", b.IDMap, false); err != nil {
			return err
		}
		os.Chown(layers+"/upper", nobody, nobody)
		os.Chown(layers+"/work", nobody, nobody)
	} else if err := unix.Mount(b.Host, layers+"/lower", "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s: %w", b.Host, err)
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", layers+"/lower", layers+"/upper", layers+"/work")
	if err := unix.Mount("overlay", dst, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("overlay for %s: %w", b.Path, err)
	}
	return nil
}

// idmapMount mounts host at dst through the id mapping of the user
// namespace userns: the directory's owner appears as the guest's user, and
// what the guest creates is owned on disk by that owner.
func idmapMount(host, dst string, userns int, ro bool) error {
	tree, err := unix.OpenTree(unix.AT_FDCWD, host, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return fmt.Errorf("open_tree %s: %w", host, err)
	}
	defer unix.Close(tree)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV, Userns_fd: uint64(userns)}
	if ro {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
		return fmt.Errorf("idmap %s: %w", host, err)
	}
	if err := unix.MoveMount(tree, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount %s: %w", dst, err)
	}
	return nil
}

// commitOverlays applies each quota'd grant's upper layer to its host
// directory, after every process of the run has ended.
func commitOverlays(sp *spec) string {
	binds := append([]bind{}, sp.Binds...)
	sort.Slice(binds, func(i, j int) bool { return len(binds[i].Path) < len(binds[j].Path) })
	var errs []string
	for i, b := range binds {
		if !b.RW || b.Quota == 0 {
			continue
		}
		layers := fmt.Sprintf("%s/%d", private, i)
		if err := commit(layers+"/upper", layers+"/raw"); err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", b.Path, err))
		}
	}
	return strings.Join(errs, "; ")
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

// runExec is the last step before the program: on this locked thread it
// applies every restriction, then execs.
func runExec() int {
	var ex execSpec
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "sandbox: S1: "+format+"\n", args...)
		return 126
	}
	if err := readJSON(3, &ex); err != nil {
		return fail("read exec spec: %v", err)
	}
	rules := []landlock.Rule{
		landlock.RODirs(ex.ROPaths...).IgnoreIfMissing(),
		landlock.RWDirs(ex.RWPaths...).IgnoreIfMissing().WithRefer(),
		landlock.RWFiles(ex.RWFiles...).IgnoreIfMissing(),
		landlock.ROFiles(ex.ROFiles...).IgnoreIfMissing(),
	}
	llfd, llflags, err := landlock.V7.BestEffort().NewRulesetFD(rules...)
	if err != nil {
		return fail("landlock ruleset: %v", err)
	}
	if llfd < 0 {
		return fail("landlock is not available on this kernel")
	}
	for _, r := range []struct {
		res int
		v   uint64
	}{{unix.RLIMIT_CORE, 0}, {unix.RLIMIT_NOFILE, ex.NoFile}} {
		if r.v == 0 && r.res != unix.RLIMIT_CORE {
			continue
		}
		if err := unix.Setrlimit(r.res, &unix.Rlimit{Cur: r.v, Max: r.v}); err != nil {
			return fail("setrlimit %d: %v", r.res, err)
		}
	}
	// Drop every capability: the bounding set first (needs CAP_SETPCAP),
	// then the user, which clears the rest; in a user namespace, capset.
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fail("drop capability %d from the bounding set: %v", c, err)
		}
	}
	if ex.KeepUID {
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			return fail("capset: %v", err)
		}
	} else {
		if err := syscall.Setgroups([]int{}); err != nil {
			return fail("setgroups: %v", err)
		}
		if err := syscall.Setresgid(ex.GID, ex.GID, ex.GID); err != nil {
			return fail("setresgid %d: %v", ex.GID, err)
		}
		if err := syscall.Setresuid(ex.UID, ex.UID, ex.UID); err != nil {
			return fail("setresuid %d: %v", ex.UID, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fail("clear ambient capabilities: %v", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fail("no_new_privs: %v", err)
	}
	if err := llsys.LandlockRestrictSelf(llfd, llflags); err != nil {
		return fail("landlock: %v", err)
	}
	unix.Close(llfd)
	if err := loadFilter(); err != nil {
		return fail("%v", err)
	}
	if err := unix.Chdir(ex.Dir); err != nil {
		unix.Chdir("/tmp")
	}
	err = unix.Exec(ex.Path, ex.Args, ex.Env)
	fmt.Fprintf(os.Stderr, "sandbox: S1: exec %s: %v\n", ex.Path, err)
	if errors.Is(err, unix.ENOENT) {
		return 127
	}
	return 126
}
