//go:build !linux

package host

import (
	"io/fs"

	"github.com/opensubstrate/sandbox/internal/grant"
	images "github.com/opensubstrate/sandbox/internal/image"
)

// Native runs are Linux only: nothing is found as a run would see it.

func statInRun(rootDir, p string, g grant.Set) (fs.FileInfo, error) {
	return nil, images.ErrNotSupported
}

func readInRun(rootDir, p string, g grant.Set) ([]byte, error) {
	return nil, images.ErrNotSupported
}

func sameInRun(rootDir, p string, g grant.Set) error { return images.ErrNotSupported }
