package drain

import (
	"os"
	"syscall"
)

// maxPipe bounds what Now takes where a pipe's capacity cannot be read:
// the largest an unprivileged process may make one (pipe-max-size's
// default).
const maxPipe = 1 << 20

// Now passes to write, in pieces of at most len(buf) bytes, what f (a
// pipe the Go runtime polls, so non-blocking) holds now, until it is
// empty (EAGAIN) or ends, and at most its capacity: what was written
// before, never a writer still writing (a process left behind that
// writes without end cannot keep it reading). f must have no read
// deadline set.
func Now(f *os.File, buf []byte, write func([]byte)) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	left := maxPipe
	rc.Control(func(fd uintptr) {
		if n := pipeSize(fd); n > 0 {
			left = n
		}
	})
	for left > 0 {
		n := 0
		if err := rc.Read(func(fd uintptr) bool {
			n, _ = syscall.Read(int(fd), buf[:min(len(buf), left)])
			return true // never wait
		}); err != nil || n <= 0 {
			return
		}
		write(buf[:n])
		left -= n
	}
}
