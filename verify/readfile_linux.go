package verify

import (
	"io/fs"

	"golang.org/x/sys/unix"
)

// readFile is os.ReadFile in five system calls (open, fstat, a read to
// the end and one that finds it, close) where os.ReadFile makes ten: it
// registers each file with the runtime's poller, which refuses a regular
// file, and sets and clears O_NONBLOCK around that. A run directory is
// eight such reads, and on a virtual machine the five extra calls a file
// cost more than parsing it. Errors are os.ReadFile's: *fs.PathError
// with the errno, so errors.Is(err, fs.ErrNotExist) holds as before.
func readFile(p string) ([]byte, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	for err == unix.EINTR {
		fd, err = unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	defer unix.Close(fd)
	size := 0
	var st unix.Stat_t
	if unix.Fstat(fd, &st) == nil && int64(int(st.Size)) == st.Size {
		size = int(st.Size)
	}
	// As os.ReadFile: a byte more than the size says, so that the read
	// to the end is one, and at least 512 (files in /proc say 0).
	data := make([]byte, 0, max(size+1, 512))
	for {
		n, err := unix.Read(fd, data[len(data):cap(data)])
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return nil, &fs.PathError{Op: "read", Path: p, Err: err}
		case n == 0:
			return data, nil
		}
		data = data[:len(data)+n]
		if len(data) == cap(data) {
			data = append(data, 0)[:len(data)]
		}
	}
}
