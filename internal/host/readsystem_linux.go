package host

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// readSystem reads path, in the system directories, for a caller whose
// reads check decides. Its links are followed (/bin/sh, python3 are the
// host's), but a system directory may also hold a directory an operator
// lets runs write (/opt/data), where a guest can plant a link to
// anything. So:
//   - no magic link is followed (/proc/PID/root/… would reach another
//     mount namespace's files, which /proc/self/fd then names as if
//     they were this one's);
//   - where the file reached lies outside the system directories, check
//     decides whether the caller may read it there;
//   - it is reached without being opened (O_PATH) until it is known to be
//     a regular file: a FIFO would block, a device could act on its open;
//   - at most MaxRead bytes are read.
func readSystem(path string, check func(string) error) ([]byte, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_MAGICLINKS})
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	self := fmt.Sprintf("/proc/self/fd/%d", fd)
	real, err := os.Readlink(self)
	if err != nil {
		return nil, fmt.Errorf("where %s leads: %w", path, err)
	}
	if real != path && !inSystemDirs(real) {
		if err := check(real); err != nil {
			return nil, err
		}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, &ProgramError{Err: fmt.Errorf("%s is not a regular file", path)}
	}
	f, err := os.Open(self)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readBounded(f, path)
}
