package host

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/opensubstrate/sandbox/internal/hostpath"
	"golang.org/x/sys/unix"
)

// readRegular reads the regular file at path for the operator,
// following its links: reached first (O_PATH), and read only once it is
// known to be a regular file (readReached, at most MaxRead bytes), so
// that a FIFO a guest planted (or a link to one) does not hold the host
// until something writes to it, nor a device act on its open.
func readRegular(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	return readReached(fd, path)
}

// readSystem reads path, in the system directories, for a caller whose
// reads check decides. Its links are followed (/bin/sh, python3 are the
// host's), but a system directory may also hold a directory an operator
// lets runs write (/opt/data), where a guest can plant a link to
// anything. So:
//   - no magic link is followed (/proc/PID/root/… would reach another
//     mount namespace's files, which /proc/self/fd then names as if
//     they were this one's);
//   - where the file reached lies outside the system directories, check
//     decides whether the caller may read it there, and a refusal reads
//     as "not there" (reachSystem);
//   - it is reached without being opened (O_PATH) until it is known to be
//     a regular file: a FIFO would block, a device could act on its open;
//   - at most MaxRead bytes are read.
func readSystem(path string, check func(string) error) ([]byte, error) {
	fd, err := reachSystem(path, check)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return readReached(fd, path)
}

// reachSystem reaches path, in the system directories, as an O_PATH
// descriptor: following its links but no magic link, and, where the
// file reached lies outside the system directories, only if check lets
// the caller read it there (readSystem). A file reached there that the
// caller may not read is as absent as one not there at all (check
// still logs the refusal): a link a guest planted must not tell it
// whether something is at its end.
func reachSystem(path string, check func(string) error) (int, error) {
	absent := &os.PathError{Op: "open", Path: path, Err: fs.ErrNotExist}
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_MAGICLINKS})
	if err != nil {
		return -1, absent
	}
	real, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil || real != path && !inSystemDirs(real) && check(real) != nil || !othersReach(fd, real) {
		unix.Close(fd)
		return -1, absent
	}
	return fd, nil
}

// othersReach says whether a user who is neither the owner nor in the
// group (a run's) could reach the file at fd, at real: every directory
// above it searchable by others, and the file readable by them (a
// directory: searchable). The host reads as root; a caller whose reads
// are checked is told only of what a run's user could read.
func othersReach(fd int, real string) bool {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || !othersMay(st.Mode) {
		return false
	}
	for d := filepath.Dir(real); d != "/" && d != "."; d = filepath.Dir(d) {
		if unix.Stat(d, &st) != nil || !othersMay(st.Mode) {
			return false
		}
	}
	return true
}

// othersMay says whether a user who is neither the owner nor in the
// group may use a file of this mode: read it, or search it where it is
// a directory.
func othersMay(mode uint32) bool {
	if mode&unix.S_IFMT == unix.S_IFDIR {
		return mode&unix.S_IXOTH != 0
	}
	return mode&unix.S_IROTH != 0
}

// statLooked is os.Stat for a caller that may learn only of what look
// lets it read: a file of the system directories reached as readSystem
// reaches it, any other without following a link (hostpath), as the
// reader reads them. Anything else is as if it were not there.
func statLooked(path string, look func(string) error) (fs.FileInfo, error) {
	absent := &fs.PathError{Op: "stat", Path: path, Err: fs.ErrNotExist}
	if look(path) != nil {
		return nil, absent
	}
	fd := -1
	if inSystemDirs(path) {
		var err error
		if fd, err = reachSystem(path, look); err != nil {
			return nil, absent
		}
		defer unix.Close(fd)
	} else {
		o, err := hostpath.Open(path)
		if err != nil {
			return nil, absent
		}
		defer o.Close()
		fd = o.FD()
	}
	fi, err := os.Stat(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		return nil, absent
	}
	return fi, nil
}
