package image

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Open opens p, a path as a run sees it, in the root filesystem at
// root: every symlink on the way, absolute or relative, resolves inside
// root, as it will in the run (openat2 RESOLVE_IN_ROOT), never on the
// host. It opens without waiting (O_NONBLOCK, which a regular file's
// reads ignore): a FIFO in a root does not hold its opener.
func Open(root, p string) (*os.File, error) {
	dfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	fd, err := unix.Openat2(dfd, p, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NONBLOCK, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV})
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	return os.NewFile(uintptr(fd), filepath.Join(root, p)), nil
}

// Walk opens p, an absolute path as a run sees it, in the root
// filesystem at root, one name at a time, following the root's symlinks
// by hand as the run's kernel would (Resolve). Before each step it asks
// stop about the path reached (clean and absolute, as the run sees it;
// linked once a link has been followed on the way): a directory the run
// has of its own is not the root's, and the walk must not go on in the
// root's copy of it. stop's error ends the walk.
func Walk(root, p string, stop func(at string, linked bool) error) (*os.File, error) {
	dfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	fd, at, err := Resolve(p, func(at string, linked bool) (int, error) {
		if err := stop(at, linked); err != nil {
			return -1, err
		}
		return OpenAt(dfd, at)
	})
	if err != nil {
		return nil, err
	}
	return Reopen(fd, filepath.Join(root, at))
}

// OpenAt opens at, a clean absolute path with no link on the way, in
// the root filesystem open at dfd, as an O_PATH descriptor that does not
// follow a last link: what the run sees there. A top-level entry that is
// neither a directory nor a link is not in the run's root (Top binds the
// one and copies the other), so it is not there (ENOENT).
func OpenAt(dfd int, at string) (int, error) {
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_XDEV}
	fd, err := unix.Openat2(dfd, at, how)
	top := "/" + strings.SplitN(strings.TrimPrefix(at, "/"), "/", 2)[0]
	switch {
	case at == "/":
		return fd, err
	case err == nil && top != at, err != nil && err != unix.ENOTDIR:
		return fd, err
	}
	// at is top-level, or below one that is not a directory: is that
	// top-level entry in the run's root at all?
	tfd := fd
	if top != at {
		if tfd, err = unix.Openat2(dfd, top, how); err != nil {
			return -1, err
		}
	}
	var st unix.Stat_t
	if err := unix.Fstat(tfd, &st); err != nil {
		unix.Close(tfd)
		return -1, err
	}
	if t := st.Mode & unix.S_IFMT; t != unix.S_IFDIR && t != unix.S_IFLNK {
		unix.Close(tfd)
		return -1, unix.ENOENT
	}
	if top != at {
		unix.Close(tfd)
		return -1, unix.ENOTDIR
	}
	return fd, nil
}

// Resolve finds p, an absolute path as a run sees it, one name at a
// time, following symlinks by hand as the run's kernel would (absolute
// targets from the run's root, .. never above it, at most 40 links). open
// opens, as an O_PATH descriptor and without following a link, what the
// run sees at at: a clean absolute path with no link on the way (linked:
// a link has been followed to reach it); its error ends the walk. Resolve
// returns the descriptor of what p names (O_PATH, never a link) and the
// path, as the run sees it, that reached it.
func Resolve(p string, open func(at string, linked bool) (int, error)) (int, string, error) {
	cur, names, links := "/", strings.Split(p, "/"), 0
	fd := -1
	for len(names) > 0 {
		name := names[0]
		names = names[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			if fd >= 0 {
				unix.Close(fd)
				fd = -1
			}
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, name)
		var err error
		if fd >= 0 {
			unix.Close(fd)
		}
		// cur holds no link: only next's last name may be one.
		if fd, err = open(next, links > 0); err != nil {
			if _, ok := err.(unix.Errno); ok {
				err = &os.PathError{Op: "open", Path: p, Err: err}
			}
			return -1, "", err
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFLNK {
			if err != nil {
				unix.Close(fd)
				return -1, "", &os.PathError{Op: "stat", Path: p, Err: err}
			}
			if len(names) > 0 && st.Mode&unix.S_IFMT != unix.S_IFDIR {
				// A name, a "." or ".." or a trailing slash after a
				// file: the kernel's ENOTDIR, never the file itself.
				unix.Close(fd)
				return -1, "", &os.PathError{Op: "open", Path: p, Err: unix.ENOTDIR}
			}
			cur = next
			continue
		}
		if links++; links > 40 {
			unix.Close(fd)
			return -1, "", &os.PathError{Op: "open", Path: p, Err: unix.ELOOP}
		}
		buf := make([]byte, unix.PathMax)
		n, err := unix.Readlinkat(fd, "", buf)
		unix.Close(fd)
		fd = -1
		if err != nil {
			return -1, "", &os.PathError{Op: "readlink", Path: next, Err: err}
		}
		target := string(buf[:n])
		if strings.HasPrefix(target, "/") {
			cur = "/"
		}
		names = append(strings.Split(target, "/"), names...)
	}
	if fd < 0 {
		// Nothing was opened since the last link, or p names the root.
		var err error
		if fd, err = open(cur, links > 0); err != nil {
			if _, ok := err.(unix.Errno); ok {
				err = &os.PathError{Op: "open", Path: p, Err: err}
			}
			return -1, "", err
		}
	}
	return fd, cur, nil
}

// Reopen opens for reading the file that fd (O_PATH, closed here)
// reached, through the descriptor, never its name again: what was
// walked is what is read. It opens without waiting (O_NONBLOCK, which a
// regular file's reads ignore): a FIFO does not hold its opener.
func Reopen(fd int, name string) (*os.File, error) {
	defer unix.Close(fd)
	r, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", fd), unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	return os.NewFile(uintptr(r), name), nil
}

// Top is how a run's root is made from the root filesystem at root: the
// top-level directories it binds read-only (as the run sees them), and
// the top-level symlinks it copies. The kernel's own (/proc, /dev, /sys)
// and the run's private /tmp are the run's, never the image's.
func Top(root string) (dirs []string, links map[string]string, err error) {
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, nil, err
	}
	links = map[string]string{}
	for _, e := range ents {
		n := e.Name()
		if slices.Contains(RunsOwn, "/"+n) {
			continue
		}
		switch {
		case e.Type()&os.ModeSymlink != 0:
			t, err := os.Readlink(filepath.Join(root, n))
			if err != nil {
				return nil, nil, err
			}
			links[n] = t
		case e.IsDir():
			dirs = append(dirs, "/"+n)
		}
	}
	if len(dirs) == 0 {
		return nil, nil, fmt.Errorf("the root filesystem at %s has no directories", root)
	}
	return dirs, links, nil
}
