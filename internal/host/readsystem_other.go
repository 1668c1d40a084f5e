//go:build !linux

package host

import "errors"

// readSystem is not supported here: a caller whose reads are checked
// reads nothing of the system directories.
func readSystem(path string, check func(string) error) ([]byte, error) {
	return nil, errors.New("reading a program for a caller whose reads are checked needs Linux")
}
