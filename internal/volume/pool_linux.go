package volume

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// xfsFormatter is mkfs.xfs (xfsprogs).
func xfsFormatter() (string, error) { return formatter("mkfs.xfs", "xfsprogs") }

// Pool mounts on dir a filesystem that shares extents (XFS with
// reflinks), for volumes whose own directory's filesystem cannot (ext4,
// tmpfs): their images made under it are copied by Snapshot and
// MakeFrom at no cost in data. Its image is beside dir (Image), sparse,
// of size bytes (0: the bytes free now on the filesystem that holds it),
// mounted through a loop device that reads and writes the image directly
// (no second copy of its pages in memory) and gives back the blocks of
// what is deleted (discard: holes punched in the image).
//
// A pool is the host's, like the system's temporary directory, and
// outlives the process that made it: where dir holds one already (made
// by another process, or before a restart of this one) Pool uses it;
// where its image is there and not mounted (after the machine
// restarted), it is mounted again; where dir is the mount point of
// another filesystem, Pool refuses it. Two processes making it at once
// are one after the other (a lock beside it). On failure nothing it made
// is left.
func Pool(dir string, size int64) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: mounting a filesystem needs root", ErrNotSupported)
	}
	if size < 0 || size > 0 && size < MinPool {
		return fmt.Errorf("a volume pool of %d bytes: under %d, the least one is made with", size, MinPool)
	}
	// In a directory anyone may write to (the system's temporary one),
	// another user could have made the names first: a symbolic link, or
	// an image of theirs to be mounted with the workspaces in it. Each is
	// opened without following links and must be this user's alone.
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if err := ours(dir, true); err != nil {
		return err
	}
	lock, err := os.OpenFile(dir+".lock", os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := oursOpen(lock, false); err != nil {
		return err
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	if mounted(dir) {
		return isPool(dir)
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) > 0 {
		return fmt.Errorf("%s: not an empty directory, and no volume pool is mounted on it (%v)", dir, err)
	}
	img := Image(dir)
	if _, err := os.Lstat(img); err == nil {
		f, err := os.OpenFile(img, os.O_RDWR|unix.O_NOFOLLOW, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := oursOpen(f, false); err != nil {
			return err
		}
		return mountPool(f, dir)
	}
	if size == 0 {
		var st unix.Statfs_t
		if err := unix.Statfs(filepath.Dir(dir), &st); err != nil {
			return err
		}
		size = int64(st.Bavail) * int64(st.Bsize)
		if size < MinPool {
			return fmt.Errorf("a volume pool beside %s: %d bytes free there, under %d, the least one is made with", dir, size, MinPool)
		}
	}
	mk, err := xfsFormatter()
	if err != nil {
		return err
	}
	// Reflinks on; 4 KiB sectors, so that the loop device can read and
	// write the image directly; nothing discarded while it is made (the
	// image is sparse already).
	f, err := newImage(img, size&^4095, mk, "-q", "-f", "-K", "-m", "reflink=1", "-s", "size=4096")
	if err != nil {
		return err
	}
	defer f.Close()
	if err := mountPool(f, dir); err != nil {
		os.Remove(img)
		return err
	}
	return nil
}

// ours checks that path is this user's alone: not a symbolic link, a
// directory (dir) or a regular file, owned by this user, that no other
// may write to (nor read, for a file).
func ours(path string, dir bool) error {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_PATH, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	return oursOpen(f, dir)
}

func oursOpen(f *os.File, dir bool) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	kind, other := uint32(unix.S_IFREG), uint32(0o077)
	if dir {
		kind, other = unix.S_IFDIR, 0o022
	}
	if st.Mode&unix.S_IFMT != kind || int(st.Uid) != os.Geteuid() || st.Mode&other != 0 {
		return fmt.Errorf("%s: not a pool's (mode %#o, owner %d): another user's, or made by hand; refused", f.Name(), st.Mode, st.Uid)
	}
	return nil
}

// mountPool mounts the XFS image f on dir, giving back what is deleted;
// on failure nothing is left mounted.
func mountPool(f *os.File, dir string) error {
	if err := mountLoop(f, dir, "xfs", "discard", true); err != nil {
		return err
	}
	if err := isPool(dir); err != nil {
		unix.Unmount(dir, unix.MNT_DETACH)
		return err
	}
	return nil
}

// isPool says whether the filesystem mounted on dir is a pool: XFS,
// sharing extents.
func isPool(dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return err
	}
	if st.Type != unix.XFS_SUPER_MAGIC {
		return fmt.Errorf("%s: a filesystem of another kind (%#x) is mounted there, not a volume pool", dir, st.Type)
	}
	return Reflinks(dir)
}

// Reflinks says whether files in dir can share extents (FICLONE), by
// cloning one into another there; the error wraps ErrNoClone where the
// filesystem cannot.
func Reflinks(dir string) error {
	a, err := os.CreateTemp(dir, ".sandbox-reflink-")
	if err != nil {
		return err
	}
	defer os.Remove(a.Name())
	defer a.Close()
	b, err := os.CreateTemp(dir, ".sandbox-reflink-")
	if err != nil {
		return err
	}
	defer os.Remove(b.Name())
	defer b.Close()
	return clone(b, a)
}

// PoolOf is the pool dir's volumes are made in, where dir lies directly
// in one ("" where it does not): the parent of dir, when that is a
// mount point with its image beside it.
func PoolOf(dir string) string {
	p := filepath.Dir(dir)
	if _, err := os.Lstat(Image(p)); err != nil {
		return ""
	}
	if _, err := os.Lstat(p + ".lock"); err != nil {
		return ""
	}
	return p
}

// ReleasePool unmounts the pool on dir and removes its image and lock:
// everything in it is lost. A pool still in use is refused (EBUSY).
func ReleasePool(dir string) error {
	if mounted(dir) {
		if err := unix.Unmount(dir, 0); err != nil {
			return fmt.Errorf("unmount %s: %w", dir, err)
		}
	}
	return errors.Join(ignoreGone(os.Remove(Image(dir))), ignoreGone(os.Remove(dir+".lock")), ignoreGone(os.Remove(dir)))
}

func ignoreGone(err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}
