//go:build !linux

package live

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

const dirFlags = unix.O_DIRECTORY

// openBeneath is Linux only (openat2).
func openBeneath(root string, rest string, flags int, mode uint32) (*os.File, error) {
	return nil, fmt.Errorf("host: a sandbox's files are reached with openat2, on Linux only")
}
