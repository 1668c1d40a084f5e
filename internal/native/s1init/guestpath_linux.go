//go:build linux

package s1init

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// guestOpen opens, for reading, the file that path names for the guest
// thread tid: resolved as the kernel resolves it for that thread, not for
// init. Relative paths start at its working directory, or at its
// descriptor dirfd; /proc/self and /proc/thread-self mean the guest; the
// magic links under /proc/PID (fd/N, cwd, root, exe) are followed by the
// kernel, so /proc/self/fd/9 and /dev/fd/9 are the guest's descriptor 9.
// With emptyPath and an empty path, the file is dirfd itself; with
// nofollow, a symbolic link as the last component is ELOOP. The run's
// root and mounts are init's too (one mount namespace, and the guest
// cannot chroot), so everything else resolves alike.
func guestOpen(tid, dirfd int, path string, emptyPath, nofollow bool) (int, error) {
	// /proc/TID names the thread too (hidden from listings, not from
	// lookups); its process is read only when /proc/self needs it.
	var start string
	switch {
	case path == "" && emptyPath:
		start, path = fmt.Sprintf("/proc/%d/fd/%d", tid, dirfd), ""
	case path == "":
		return -1, unix.ENOENT
	case strings.HasPrefix(path, "/"):
		start = "/"
	case dirfd == unix.AT_FDCWD:
		start = fmt.Sprintf("/proc/%d/cwd", tid)
	default:
		start = fmt.Sprintf("/proc/%d/fd/%d", tid, dirfd)
	}
	// The start is a magic link of the guest's, followed by the kernel.
	cur, err := unix.Open(start, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	names := strings.Split(path, "/")
	links := 0
	for len(names) > 0 {
		name := names[0]
		names = names[1:]
		if name == "" || name == "." {
			continue
		}
		next, err := unix.Openat(cur, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			unix.Close(cur)
			return -1, err
		}
		var st unix.Stat_t
		if err := unix.Fstat(next, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFLNK {
			unix.Close(cur)
			cur = next
			continue
		}
		if rest(names) == 0 && nofollow {
			unix.Close(next)
			unix.Close(cur)
			return -1, unix.ELOOP
		}
		if links++; links > 40 {
			unix.Close(next)
			unix.Close(cur)
			return -1, unix.ELOOP
		}
		proc, procRoot := procDir(cur)
		var target string
		switch {
		case procRoot && (name == "self" || name == "thread-self"):
			tgid, err := tgidOf(tid)
			if err != nil {
				unix.Close(next)
				unix.Close(cur)
				return -1, err
			}
			target = strconv.Itoa(tgid)
			if name == "thread-self" {
				target = fmt.Sprintf("%d/task/%d", tgid, tid)
			}
		case proc && !procRoot:
			// A magic link of /proc/PID: the kernel follows it.
			unix.Close(next)
			m, err := unix.Openat(cur, name, unix.O_PATH|unix.O_CLOEXEC, 0)
			unix.Close(cur)
			if err != nil {
				return -1, err
			}
			cur = m
			continue
		default:
			buf := make([]byte, 4096)
			n, err := unix.Readlinkat(next, "", buf)
			if err != nil {
				unix.Close(next)
				unix.Close(cur)
				return -1, err
			}
			target = string(buf[:n])
		}
		unix.Close(next)
		if strings.HasPrefix(target, "/") {
			unix.Close(cur)
			if cur, err = unix.Open("/", unix.O_PATH|unix.O_CLOEXEC, 0); err != nil {
				return -1, err
			}
		}
		names = append(strings.Split(target, "/"), names...)
	}
	// Reopen what was reached for reading: through the descriptor, the
	// same file, not its name again.
	fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(cur), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	unix.Close(cur)
	return fd, err
}

// rest counts the components left that are not empty or ".".
func rest(names []string) int {
	n := 0
	for _, s := range names {
		if s != "" && s != "." {
			n++
		}
	}
	return n
}

// procDir reports whether the directory open at fd is in procfs, and
// whether it is procfs's root.
func procDir(fd int) (inProc, root bool) {
	var sfs unix.Statfs_t
	if unix.Fstatfs(fd, &sfs) != nil || sfs.Type != unix.PROC_SUPER_MAGIC {
		return false, false
	}
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		return true, false
	}
	return true, st.Ino == 1 // PROC_ROOT_INO
}

// tgidOf is the process (thread group) of thread tid.
func tgidOf(tid int) (int, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", tid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Tgid:"); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, fmt.Errorf("no Tgid in /proc/%d/status", tid)
}
