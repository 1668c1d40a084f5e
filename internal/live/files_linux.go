package live

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/hostpath"
)

// dirFlags open a directory to work beneath.
const dirFlags = unix.O_PATH | unix.O_DIRECTORY

// openBeneath opens rest beneath the grant's directory, following no link.
func openBeneath(root string, rest string, flags int, mode uint32) (*os.File, error) {
	o, err := hostpath.Open(root)
	if err != nil {
		return nil, err
	}
	defer o.Close()
	if rest == "" {
		rest = "."
	}
	fd, err := unix.Openat2(o.FD(), rest, &unix.OpenHow{
		Flags:   uint64(flags | unix.O_CLOEXEC), // RESOLVE_NO_SYMLINKS refuses a link anywhere, the last component too
		Mode:    uint64(mode),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	})
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) {
			return nil, fmt.Errorf("%w: %s: a symbolic link or another mount on the way (links in a sandbox's files are never followed)", grant.ErrDenied, filepath.Join(root, rest))
		}
		return nil, &os.PathError{Op: "open", Path: filepath.Join(root, rest), Err: err}
	}
	return os.NewFile(uintptr(fd), filepath.Join(root, rest)), nil
}
