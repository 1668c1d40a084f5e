//go:build !linux

package host

import (
	"io/fs"

	"github.com/opensubstrate/sandbox/internal/grant"
	images "github.com/opensubstrate/sandbox/internal/image"
)

// Native runs are Linux only: nothing is found as a run would see it.

func statInRun(rootDir, p string, g grant.Set, look func(string) error) (fs.FileInfo, error) {
	return nil, images.ErrNotSupported
}

func readInRun(rootDir, p string, g grant.Set, look func(string) error) ([]byte, error) {
	return nil, images.ErrNotSupported
}

func sameInRun(rootDir, p string, g grant.Set, look func(string) error) error {
	return images.ErrNotSupported
}

func writableInRun(rootDir, p string, g grant.Set) (string, error) { return "", images.ErrNotSupported }
