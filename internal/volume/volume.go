package volume

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// ErrNotSupported is wrapped where no volume can be made on this host.
var ErrNotSupported = errors.New("a bounded workspace filesystem is not supported here")

// ErrNoClone is wrapped where a volume cannot be copied by sharing its
// image's extents (the filesystem the images lie on has no reflinks:
// ext4, tmpfs), so nothing was copied: the caller copies files instead.
var ErrNoClone = errors.New("the filesystem under the workspace images cannot share extents (reflinks: XFS, btrfs)")

// MinSize is the least a volume is made with: an ext4 filesystem with a
// journal needs a few MiB of its own.
const MinSize = 16 << 20

// MinPool is the least a pool (Pool) is made with: XFS needs some 300
// MiB of its own for its log and allocation groups.
const MinPool = 512 << 20

// PoolDir is where a service makes its pool (Pool) when it is asked to
// (sandbox serve --workspace-pool): sandbox-volumes in the system's
// temporary directory, beside the workspaces made without one, and
// where sandbox gc looks for what ended processes left in it.
func PoolDir() string { return filepath.Join(os.TempDir(), "sandbox-volumes") }

// Image is the image file of the volume mounted on dir.
func Image(dir string) string { return dir + ".img" }

// Usage is what a volume holds, as its filesystem says (statfs).
type Usage struct {
	Size, Used, Avail int64 // bytes
	Files, FilesFree  int64 // inodes
}

// Full says a writer would get ENOSPC now, or after less than 1 MiB (or
// a thousandth of the volume, if more), or on its next new file.
func (u Usage) Full() bool {
	margin := max(int64(1<<20), u.Size/1000)
	return u.Avail < margin || (u.Files > 0 && u.FilesFree == 0)
}

func checkSize(size int64) error {
	if size < MinSize {
		return fmt.Errorf("a workspace bound of %d bytes: under %d, the least a workspace filesystem is made with", size, MinSize)
	}
	return nil
}

// Owned checks that dir is a directory of this user's, not a symbolic
// link: one made by this host (a volume's mount point, a workspace),
// not planted by another user where anyone may write. Its mode is not
// checked: a sandbox may change its workspace's.
func Owned(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%s: not a directory of this host's (%v): refused", dir, fi.Mode())
	}
	return nil
}
