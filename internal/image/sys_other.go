//go:build !linux

package image

import (
	"errors"
	"os"
)

// ErrNotSupported: images are unpacked and run on Linux only, where a
// path is resolved inside a root with openat2.
var ErrNotSupported = errors.New("image: images are imported and run on Linux only")

func openDir(string) (int, error) { return -1, ErrNotSupported }

func openDirInRoot(int, string) (int, error) { return -1, ErrNotSupported }

func syncDir(string) {}

// Open is Linux only.
func Open(root, p string) (*os.File, error) { return nil, ErrNotSupported }

// Walk is Linux only.
func Walk(root, p string, stop func(at string, linked bool) error) (*os.File, error) {
	return nil, ErrNotSupported
}

// Resolve is Linux only.
func Resolve(p string, open func(at string, linked bool) (int, error)) (int, string, error) {
	return -1, "", ErrNotSupported
}

// Reopen is Linux only.
func Reopen(fd int, name string) (*os.File, error) { return nil, ErrNotSupported }

// OpenAt is Linux only.
func OpenAt(dfd int, at string) (int, error) { return -1, ErrNotSupported }
