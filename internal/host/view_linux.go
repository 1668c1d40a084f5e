package host

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/hostpath"
	images "github.com/opensubstrate/sandbox/internal/image"
	"golang.org/x/sys/unix"
)

// openInRun reaches p as a native run will see it (an O_PATH descriptor,
// and the path, as the run sees it, that reached it), following every
// link on the way with the run's meaning (image.Resolve), not the host's:
//   - under a storage grant (the deepest), the host's object the grant
//     mounts, reached as the run's init reaches it (hostpath: no link on
//     the grant's own path), and beneath it nothing but a link the walk
//     follows itself;
//   - in a directory the run has of its own (runsOwn: /tmp, /proc, /dev,
//     the backend's binds), nothing: what the run will hold there is not
//     the host's to read, and the path is refused;
//   - elsewhere, the image root filesystem at rootDir, or without one the
//     host's system directories as the run binds them (a top-level link
//     such as /bin -> usr/bin is copied, so it is followed as a link);
//   - and the directories the grants are mounted in, which the run's
//     root makes where nothing else holds them; anything else is not
//     there.
//
// So a link a guest planted in a grant (tool -> /usr/bin/env, tool ->
// /tmp/x) leads where it will lead in the run (the image's env; the run's
// own /tmp, refused), never to the host's file of that name; and no host
// directory the run does not see is walked. Where look is not nil (a
// tenant's), a place under a grant is entered only where look lets the
// caller read it, else it is not there: the grants are authorized after
// the command is made.
func openInRun(rootDir, p string, g grant.Set, look func(string) error) (int, string, error) {
	return walkInRun(rootDir, p, g, look, nil)
}

// walkInRun is openInRun, telling step each path the walk reaches.
func walkInRun(rootDir, p string, g grant.Set, look func(string) error, step func(at string)) (int, string, error) {
	rfd := -1
	if rootDir != "" {
		var err error
		if rfd, err = unix.Open(rootDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
			return -1, "", err
		}
		defer unix.Close(rfd)
	}
	const (
		flags   = unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC
		beneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS
	)
	shut := map[string]bool{} // system directories others may not search
	return images.Resolve(p, func(at string, linked bool) (int, error) {
		if step != nil {
			step(at)
		}
		if s, ok := grantAt(g, at); ok {
			if look != nil && look(at) != nil {
				return -1, unix.ENOENT
			}
			o, err := hostpath.Open(s.Path)
			if err != nil {
				return -1, err
			}
			if at == s.Path {
				return o.Release(), nil
			}
			defer o.Close()
			// Beneath the grant's object: relative to it (a grant of
			// "/" included, whose paths start with no second slash).
			return unix.Openat2(o.FD(), strings.TrimPrefix(at, strings.TrimSuffix(s.Path, "/")+"/"), &unix.OpenHow{Flags: flags, Resolve: beneath})
		}
		for _, k := range runsOwn {
			if !grant.Within(k, at) {
				continue
			}
			if mountsIn(g, at) {
				// A directory made in the run's own (its /tmp) for a
				// grant's mount.
				return unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			}
			how := " is"
			if linked {
				how = ": its links lead"
			}
			return -1, &ProgramError{NotFound: true, Err: fmt.Errorf("%s%s into the run's own %s, not the host's: the host cannot read what the run will find there", p, how, k)}
		}
		var fd int
		var err error
		switch {
		case rfd >= 0:
			fd, err = images.OpenAt(rfd, at)
		case inSystemDirs(at):
			if look != nil && shut[filepath.Dir(at)] {
				// A tenant's: the run's user may not search there.
				return -1, unix.ENOENT
			}
			top := "/" + strings.SplitN(strings.TrimPrefix(at, "/"), "/", 2)[0]
			fd, err = unix.Openat2(unix.AT_FDCWD, top, &unix.OpenHow{Flags: flags})
			if err == nil && at != top {
				dfd := fd
				fd, err = unix.Openat2(dfd, strings.TrimPrefix(at, top+"/"), &unix.OpenHow{Flags: flags, Resolve: beneath})
				unix.Close(dfd)
			}
			if err == nil && look != nil {
				// The host reads the system directories as root; a
				// tenant is told only of what the run's user (neither
				// their owner nor in their group) could reach there: a
				// directory others may not search is entered no further,
				// a file others may not read is not there.
				var st unix.Stat_t
				if err = unix.Fstat(fd, &st); err != nil {
					unix.Close(fd)
					return -1, err
				}
				switch st.Mode & unix.S_IFMT {
				case unix.S_IFDIR:
					shut[at] = !othersMay(st.Mode)
				case unix.S_IFLNK:
				default:
					if !othersMay(st.Mode) {
						unix.Close(fd)
						return -1, unix.ENOENT
					}
				}
			}
		default:
			err = unix.ENOENT
		}
		if err == unix.ENOENT && mountsIn(g, at) {
			// A directory the run's root makes for a grant's mount.
			return unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		}
		return fd, err
	})
}

// grantAt is the deepest of g's storage grants at or above at.
func grantAt(g grant.Set, at string) (grant.Storage, bool) {
	var best grant.Storage
	ok := false
	for _, s := range g.Storage {
		if grant.Within(s.Path, at) && (!ok || len(s.Path) > len(best.Path)) {
			best, ok = s, true
		}
	}
	return best, ok
}

// mountsIn says whether at is the root or a directory above one of g's
// storage grants.
func mountsIn(g grant.Set, at string) bool {
	if at == "/" {
		return true
	}
	for _, s := range g.Storage {
		if strings.HasPrefix(s.Path, at+"/") {
			return true
		}
	}
	return false
}

// fileInRun opens p for reading as a native run will see it
// (openInRun).
func fileInRun(rootDir, p string, g grant.Set, look func(string) error) (*os.File, error) {
	fd, _, err := openInRun(rootDir, p, g, look)
	if err != nil {
		return nil, err
	}
	return images.Reopen(fd, p)
}

// statInRun is os.Stat of p as a native run will see it.
func statInRun(rootDir, p string, g grant.Set, look func(string) error) (fs.FileInfo, error) {
	f, err := fileInRun(rootDir, p, g, look)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Stat()
}

// readInRun reads p, a regular file, as a native run will see it: what
// is read is the file the run will execute at p.
func readInRun(rootDir, p string, g grant.Set, look func(string) error) ([]byte, error) {
	f, err := fileInRun(rootDir, p, g, look)
	if err != nil {
		return nil, err
	}
	return readOpened(f, p)
}

// sameInRun says whether the host's file at p (its links followed as the
// host follows them) is the one a native run will find there: where the
// links on the way lead elsewhere in the run, the bytes the host read
// are not the bytes that run.
func sameInRun(rootDir, p string, g grant.Set, look func(string) error) error {
	fd, at, err := openInRun(rootDir, p, g, look)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var run, host unix.Stat_t
	if err := unix.Fstat(fd, &run); err != nil {
		return err
	}
	if err := unix.Stat(p, &host); err != nil {
		return &os.PathError{Op: "stat", Path: p, Err: err}
	}
	if run.Dev != host.Dev || run.Ino != host.Ino {
		return &ProgramError{Err: fmt.Errorf("%s is not, in the run, the file the host reads there: its links lead the run to %s", p, filepath.Clean(at))}
	}
	return nil
}

// writableInRun names the writable storage grant where p, or a link on
// the way to it, lies in the run (""): there the run, or another run
// given the same directory, can replace the program between the host's
// read and the exec.
func writableInRun(rootDir, p string, g grant.Set) (string, error) {
	where := ""
	fd, _, err := walkInRun(rootDir, p, g, nil, func(at string) {
		if s, ok := grantAt(g, at); ok && s.Mode == grant.RW && where == "" {
			where = s.Path
		}
	})
	if err != nil {
		return "", err
	}
	unix.Close(fd)
	return where, nil
}
