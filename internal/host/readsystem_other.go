//go:build !linux

package host

import (
	"errors"
	"io/fs"
	"os"
)

// readSystem is not supported here: a caller whose reads are checked
// reads nothing of the system directories.
func readSystem(path string, check func(string) error) ([]byte, error) {
	return nil, errors.New("reading a program for a caller whose reads are checked needs Linux")
}

// statLooked finds nothing here for a caller whose reads are checked.
func statLooked(path string, look func(string) error) (fs.FileInfo, error) {
	return nil, &fs.PathError{Op: "stat", Path: path, Err: fs.ErrNotExist}
}

// readRegular reads the regular file at path (native runs, and the
// checks that keep a FIFO from holding the host, are Linux only).
func readRegular(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	return readOpened(f, path)
}
