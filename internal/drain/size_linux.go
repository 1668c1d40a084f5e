package drain

import "golang.org/x/sys/unix"

// pipeSize is the capacity of the pipe fd, 0 if it cannot be read.
func pipeSize(fd uintptr) int {
	n, err := unix.FcntlInt(fd, unix.F_GETPIPE_SZ, 0)
	if err != nil {
		return 0
	}
	return n
}
